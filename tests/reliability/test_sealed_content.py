"""Sealed named objects against a captured satellite (issue 34: "Trust what comes back"), on real nodes.

The attacker is a satellite that holds a chunk of the object -- one of its homes (the metadata) or of its
servers (a data chunk) -- and serves whatever bytes it likes for it: random bytes, metadata in the clear
describing its own data, or bytes the ground sealed that it recorded on the link (another object's metadata,
an older version's chunk). What it cannot do is seal: the content keys are the ground's alone (content.keys,
never given to a satellite). A running node's store cannot be edited from outside, so `rewrite_held` makes the
holder's store hold those bytes with a SET_CHUNK the test harness signs with the ground's link key: it stands
for the holder's own rewrite and for nothing else (no content key is used), and every rewrite is read back by
the ground before the test goes on, so the attack is known to be in place. A captured satellite can no longer
do this to a chunk another satellite holds: since issue 53 (R1) a migration SET_CHUNK, which is all one
satellite may send another, never replaces a chunk held with other bytes (NAK CONFLICT): the last test of the
captured satellite below, (2,2) holding satellites/2-2.keys of a default (keyed, sealed) launch, tries that.

What must hold: a `skymemory get` of an object whose metadata or a chunk was rewritten returns
nothing the attacker wrote: it exits 1 with one line naming the satellite(s) whose bytes did not
open, and writes no output file (and nothing to stdout); a copy of the metadata at an honest home
that opens is used (the attacker can drop or delay, not alter). And a put of a text file carries
none of its text on the link (every UDP datagram to or from the constellation captured on `lo`) nor
leaves any at rest (every chunk read back raw).

One 3x3 constellation serves the module. Every wait is bounded (WAIT_S) and waits for an event,
never a duration.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random
import re
import select
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol import auth, wire
from skymemory.protocol.errors import ChunkNotFound
from skymemory.protocol.stripes import Stripes
from skymemory.store.contract import BlockMiss
from skymemory.store.objects import ObjectStore, key_of, meta_hash

from live import REPO, launch, stop

CAPTURED = (2, 2)
SERVERS = 5
WAIT_S = 30.0  # bound on waiting for a datagram's effect: it is on its way, not a measurement
WINDOW = 16  # no 16-byte run of a file's text may travel or rest in the clear


@pytest.fixture(scope="module")
def sky(node_built, tmp_path_factory):
    path = launch(tmp_path_factory.mktemp("sealed"), 3, 3)
    try:
        yield path
    finally:
        r = stop(path)
        assert r.returncode == 0, r.stderr


# ---- the parties ----------------------------------------------------------------------------------
def ground_client(m: Manifest) -> SkyMemoryClient:
    """A client of the ground's, signing with its key: what the harness reads, sets and evicts with."""
    return SkyMemoryClient(m.ground_addresses(), signer=auth.signer_for_manifest(m), bind=(m.ground_host, 0),
                           timeout=0.5, retries=20)


def ground_read(m: Manifest, sat, block: bytes, chunk_id: int) -> bytes | None:
    """The chunk as `sat` holds it, raw (a signed GET_CHUNK from the ground, nothing opened); None when not held."""
    async def go():
        async with ground_client(m) as c:
            try:
                return await c.get_chunk(sat, block, chunk_id)
            except ChunkNotFound:
                return None

    return asyncio.run(go())


def ground_set(m: Manifest, sat, block: bytes, chunk_id: int, chunk_count: int, data: bytes, **desc) -> None:
    """A SET_CHUNK from the ground (signed with its link key), ACKed; desc: created_ms, gossip_radius."""
    async def go():
        async with ground_client(m) as c:
            await c.set_chunk(sat, block, chunk_id, chunk_count, data, **desc)

    asyncio.run(go())


def ground_evict(m: Manifest, sat, block: bytes) -> None:
    """The ground's EVICT_BLOCK of `block` at `sat` (signed with its link key), ACKed."""
    async def go():
        async with ground_client(m) as c:
            await c.evict_block(sat, block)

    asyncio.run(go())


def rewrite_held(m: Manifest, sat, block: bytes, chunk_id: int, chunk_count: int, data: bytes) -> None:
    """`sat`'s store holds `data` as chunk `chunk_id` of `block` from now on: what `sat` serves once it is captured
    and rewrites its own store (the chunk otherwise as it was set: creation time and gossip radius kept when
    held). Nothing can edit a running node's store, so this is the ground's SET_CHUNK from the test harness
    (ground_set), standing for that rewrite only: the bytes are the attacker's (no content key touches them).
    Returns once the ground reads them back there."""
    async def held_desc():
        async with ground_client(m) as c:
            try:
                return (await c.get_chunk_desc(sat, block, chunk_id))[0]
            except ChunkNotFound:
                return None

    desc = asyncio.run(held_desc())
    kept = {} if desc is None else {"created_ms": desc.created_ms, "gossip_radius": desc.gossip_radius}
    ground_set(m, sat, block, chunk_id, chunk_count, data, **kept)
    assert ground_read(m, sat, block, chunk_id) == data, f"{sat} does not hold the rewritten bytes"


class CapturedSatellite:
    """Whoever holds satellites/2-2.keys: signs what (2,2) may send another satellite -- a migration's SET_CHUNK
    -- with the key of its link to a neighbour, which checks it, signs it again for its next link and so on to
    the target (skymem_link.h): the most a captured satellite can still put into another's store, and only where
    that chunk is not held with other bytes (R1 of issue 53)."""

    def __init__(self, m: Manifest, sat=CAPTURED) -> None:
        self.m, self.sat = m, sat
        lines = [line.split() for line in (Path(m.run_dir) / "satellites" / f"{sat[0]}-{sat[1]}.keys").read_text()
                 .splitlines()]
        first_hop = next(parts for parts in lines if parts[:1] == ["link-out"])
        self.first_hop = (int(first_hop[1]), int(first_hop[2]))
        self.signer = auth.Signer(auth.link_id(*sat), bytes.fromhex(first_hop[3]), satellite=True)
        # the attacker holds this one satellite's keys, and nothing of the ground's
        assert not any(parts and parts[0] == "master" for parts in lines)
        self.isl_port = next(e.isl_port for e in m.satellites if (e.plane, e.sat) == sat)

    def migrate(self, target, block: bytes, chunk_id: int, chunk_count: int, data: bytes, request_id: int) -> None:
        """Send one migration SET_CHUNK of `data` for chunk `chunk_id` of `block` to `target` (signed afresh);
        the answer goes to this satellite's ISL port, hop by hop."""
        hop = next(e for e in self.m.satellites if (e.plane, e.sat) == self.first_hop)
        route = wire.RouteHeader(target[0], target[1], self.sat[0], self.sat[1], request_id=request_id,
                                 flags=wire.SKYMEM_RF_MIGRATION)
        desc = wire.make_desc(block, chunk_id, chunk_count, int(time.time() * 1000), data)
        packet = wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, data))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.bind((self.m.ground_host, 0))
            s.sendto(self.signer.sign(packet), (hop.host, hop.isl_port))


def skymemory(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    """The CLI; stdout as bytes (an object's bytes go there without -o), stderr as text."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    env.pop("SKYMEM_TRACEBACK", None)
    r = subprocess.run([sys.executable, "-m", "skymemory", *argv], capture_output=True, env=env, timeout=120, cwd=cwd)
    r.stderr = r.stderr.decode(errors="replace")
    return r


def put(sky: Path, tmp: Path, name: str, data: bytes, *extra: str) -> None:
    (tmp / name).write_bytes(data)
    r = skymemory("put", name, "--servers", str(SERVERS), "--manifest", str(sky), *extra, cwd=tmp)
    assert r.returncode == 0, r.stderr


def sats_named(line: str) -> set[tuple[int, int]]:
    return {(int(p), int(s)) for p, s in re.findall(r"\((\d+), (\d+)\)", line)}


def assert_refused(sky: Path, tmp: Path, name: str, reason: str, names: set) -> str:
    """`skymemory get name` fails in one line (reason, naming `names`), writes no file and nothing to stdout."""
    out = tmp / f"{name}.out"
    r = skymemory("get", name, "-o", str(out), "--manifest", str(sky), cwd=tmp)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"skymemory get: miss ({reason}): "), lines
    assert names <= sats_named(lines[0]), (names, lines)
    assert "verified" not in r.stderr and "Traceback" not in r.stderr
    assert not out.exists(), "a failed get wrote a file"
    to_stdout = skymemory("get", name, "--manifest", str(sky), cwd=tmp)
    assert to_stdout.returncode == 1 and to_stdout.stdout == b"", "a failed get wrote bytes to stdout"
    return lines[0]


# ---- a captured satellite -------------------------------------------------------------------------
@pytest.mark.parametrize("forgery", ["the-issue", "altered", "swapped"])
def test_metadata_rewritten_at_every_home_and_a_chunk_fail_in_one_line_naming_them(sky, tmp_path, forgery):
    """The issue's attack and two more: every home serves rewritten metadata for the object, and one server a
    rewritten data chunk. the-issue: metadata in the clear describing the attacker's own 3,000 bytes, held by
    (2,2) (which the get of issue 34 returned, "SHA-256 verified"); altered: the genuine sealed copy with one
    bit flipped; swapped: another object's genuine sealed metadata. None opens as this object's: one line
    naming the homes, nothing returned."""
    m = Manifest.load(sky)
    name, other = f"victim-{forgery}.bin", f"bystander-{forgery}.bin"
    data = os.urandom(20_000)
    put(sky, tmp_path, name, data)
    put(sky, tmp_path, other, os.urandom(1_000))
    kv = ObjectStore(m, SERVERS)
    key = key_of(name)
    meta = kv.meta(key)
    homes, servers, block = [tuple(h) for h in meta["homes"]], [tuple(s) for s in meta["servers"]], meta["block"]

    evil = (b"attacker's bytes " * 177)[:3000]
    assert len(evil) == 3000
    if forgery == "the-issue":
        forged = {"v": 1, "name": name, "key": key.hex(), "size": len(evil), "sha256": hashlib.sha256(evil).hexdigest(),
                  "chunk_bytes": m.chunk_size, "chunk_count": 1, "servers": [list(CAPTURED)],
                  "created_ms": int(time.time() * 1000)}
        rewrite_held(m, CAPTURED, key, 0, 1, evil)  # the data its metadata points at (block = key, as before)
        copies = {h: json.dumps(forged).encode() for h in homes}
    elif forgery == "altered":
        copies = {}
        for h in homes:
            genuine = bytearray(ground_read(m, h, meta_hash(key), 0))
            genuine[len(genuine) // 2] ^= 0x01
            copies[h] = bytes(genuine)
    else:
        other_key = key_of(other)
        other_home = tuple(kv.meta(other_key)["answered_by"])
        swapped = ground_read(m, other_home, meta_hash(other_key), 0)  # sealed by the ground, for `other`
        copies = {h: swapped for h in homes}
    for h, copy in copies.items():
        rewrite_held(m, h, meta_hash(key), 0, 1, copy)
    chunk = ground_read(m, servers[1], bytes.fromhex(block), 1)  # and one data chunk of the real object
    rewrite_held(m, servers[1], bytes.fromhex(block), 1, meta["chunk_count"], os.urandom(len(chunk)))

    line = assert_refused(sky, tmp_path, name, "unsealed" if forgery == "the-issue" else "seal", set(homes))
    if forgery == "the-issue":  # in the clear: an object from before sealing, or a forgery; never used
        assert "put it again" in line and "in the clear" in line, line
    else:
        assert "does not open" in line, line
    with pytest.raises(BlockMiss) as miss:  # the API says the same, and names the homes as well
        ObjectStore(m, SERVERS).get(key)
    assert miss.value.reason == ("unsealed" if forgery == "the-issue" else "seal")
    assert set(homes) <= sats_named(str(miss.value))


def test_a_rewritten_chunk_fails_naming_its_satellite_while_an_honest_home_answers(sky, tmp_path):
    """One home serves rewritten metadata (a copy that does not open: another home's does) and one server a
    rewritten data chunk of an uncoded object: the get fails in one line naming the chunk's satellite."""
    m = Manifest.load(sky)
    name = "victim-chunk.bin"
    put(sky, tmp_path, name, os.urandom(30_000), "--parity", "0")
    meta = ObjectStore(m, SERVERS).meta(key_of(name))
    homes, servers, block = [tuple(h) for h in meta["homes"]], [tuple(s) for s in meta["servers"]], meta["block"]
    rewrite_held(m, homes[0], meta_hash(key_of(name)), 0, 1, os.urandom(300))
    held_by = servers[2 % len(servers)]
    chunk = ground_read(m, held_by, bytes.fromhex(block), 2)
    rewrite_held(m, held_by, bytes.fromhex(block), 2, meta["chunk_count"], os.urandom(len(chunk)))
    line = assert_refused(sky, tmp_path, name, "seal", {held_by})
    assert f"from satellite {held_by} do not open" in line, line
    assert "nothing of them is used" in line


def test_a_rewritten_chunk_of_a_coded_object_is_rebuilt_around_naming_its_satellite(sky, tmp_path):
    """The same rewrite of a coded object (the default, stripes of 3 + 2 over 5 satellites): the chunk does not
    open, is not used, and is rebuilt from the rest of its stripe; the get returns the object and warns naming
    the satellite."""
    m = Manifest.load(sky)
    name = "victim-coded.bin"
    data = os.urandom(30_000)
    put(sky, tmp_path, name, data)
    meta = ObjectStore(m, SERVERS).meta(key_of(name))
    assert meta["parity"] == 2
    servers, block = [tuple(s) for s in meta["servers"]], bytes.fromhex(meta["block"])
    held_by = servers[1]
    chunk = ground_read(m, held_by, block, 1)
    rewrite_held(m, held_by, block, 1, meta["chunk_count"], os.urandom(len(chunk)))
    r = skymemory("get", name, "-o", "copy.bin", "--manifest", str(sky), cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "copy.bin").read_bytes() == data, r.stderr
    warning = next(line for line in r.stderr.splitlines() if "do not open" in line)
    assert sats_named(warning) == {held_by} and "rebuilt from the rest of their stripes" in warning, r.stderr


def test_metadata_rewritten_at_one_home_is_not_used_and_the_others_serve(sky, tmp_path):
    """Only one home's copy rewritten (the captured satellite is that home): the get uses another home's
    copy, returns the object, and warns naming the home whose copy did not open."""
    m = Manifest.load(sky)
    name = "victim-one-home.bin"
    data = os.urandom(25_000)
    put(sky, tmp_path, name, data)
    homes = ObjectStore(m, SERVERS).homes(key_of(name))
    rewrite_held(m, homes[0], meta_hash(key_of(name)), 0, 1, os.urandom(400))
    r = skymemory("get", name, "-o", "copy.bin", "--manifest", str(sky), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "copy.bin").read_bytes() == data
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 2 and "sealed and verified" in lines[0] and sats_named(lines[0]) & set(homes[1:]), lines
    assert lines[1].startswith("skymemory get: warning:") and sats_named(lines[1]) == {homes[0]}, lines


def test_a_new_version_evicts_the_old_and_an_old_chunk_does_not_open_as_the_new(sky, tmp_path):
    """A put of a name already stored writes a new version (a new data block) and evicts the old version's
    data; the old version's chunk, recorded on the link and served by the satellite holding the new version's
    chunk in its place, does not open as it."""
    m = Manifest.load(sky)
    name = "versioned.bin"
    kv = ObjectStore(m, SERVERS)
    put(sky, tmp_path, name, os.urandom(20_000), "--parity", "0")  # uncoded: the one chunk decides
    first = kv.meta(key_of(name))
    old_block = bytes.fromhex(first["block"])
    old_servers = [tuple(s) for s in first["servers"]]
    recorded = ground_read(m, old_servers[0], old_block, 0)
    new = os.urandom(20_000)
    put(sky, tmp_path, name, new, "--parity", "0")
    second = kv.meta(key_of(name))
    assert second["version"] != first["version"] and second["block"] != first["block"]
    assert all(ground_read(m, s, old_block, i) is None for i, s in enumerate(old_servers[:first["chunk_count"]])), \
        "the old version's data was not evicted"
    assert kv.get(key_of(name))[0] == new
    block, servers = bytes.fromhex(second["block"]), [tuple(s) for s in second["servers"]]
    rewrite_held(m, servers[0], block, 0, second["chunk_count"], recorded)
    assert_refused(sky, tmp_path, name, "seal", {servers[0]})


def replies_in(payloads: list[bytes], request_id: int) -> list[wire.Reply]:
    """The SkyMemory replies among captured datagrams that echo `request_id`."""
    found = []
    for p in list(payloads):
        if int.from_bytes(p[:2], "big") != wire.SKYMEM_REPLY_TLM_MID:
            continue
        try:
            reply = wire.decode_reply(p)
        except wire.WireError:
            continue
        if reply.route.request_id == request_id:
            found.append(reply)
    return found


def test_a_captured_satellites_migration_does_not_replace_a_chunk_another_holds(sky):
    """What this module's attacker did before issue 53 (R1): holding (2,2)'s key file, rewrite a chunk another
    satellite holds with a migration SET_CHUNK, relayed hop by hop. (0,0), no neighbour of (2,2), holds chunk 0
    of a block, set by the ground. The captured satellite's SET_CHUNK of other bytes for it is answered NAK
    CONFLICT (to (2,2)'s ISL port: every datagram to it captured on `lo`) and (0,0) keeps the ground's bytes;
    its SET_CHUNK of chunk 1, which (0,0) does not hold, is ACKed and taken -- a migration still moves a chunk
    into an empty place -- so the path was open. Resent, signed afresh, until both are answered."""
    m = Manifest.load(sky)
    attacker = CapturedSatellite(m)
    far = (0, 0)
    assert far not in (CAPTURED, attacker.first_hop)
    block, genuine, planted, fresh = os.urandom(32), b"genuine " * 64, b"replant " * 64, b"moved in " * 20
    ground_set(m, far, block, 0, 2, genuine)
    try:
        capture = LoopbackCapture({attacker.isl_port})
    except (OSError, AttributeError) as exc:  # not root (CAP_NET_RAW), or not Linux
        pytest.skip(f"capturing on lo needs an AF_PACKET socket: {exc} (test_link_attacks_53_live's "
                    "test_r1_... checks the bytes kept)")
    held_rid, fresh_rid = (random.getrandbits(31) << 1 | 1 for _ in range(2))
    with capture:
        deadline = time.monotonic() + WAIT_S
        while not (replies_in(capture.payloads, held_rid) and replies_in(capture.payloads, fresh_rid)):
            assert time.monotonic() < deadline, "(0,0) answered not both of the captured satellite's SET_CHUNKs"
            attacker.migrate(far, block, 0, 2, planted, held_rid)
            attacker.migrate(far, block, 1, 2, fresh, fresh_rid)
            resend = time.monotonic() + 2.0  # lost on a loaded machine: sent again, the outcome is the same
            while time.monotonic() < min(resend, deadline) and not (
                    replies_in(capture.payloads, held_rid) and replies_in(capture.payloads, fresh_rid)):
                time.sleep(0.02)
    refused = replies_in(capture.payloads, held_rid)[0]
    assert (refused.kind, refused.status, refused.cc, refused.chunk_id, refused.block_hash) == \
        (wire.SKYMEM_REPLY_NAK, wire.SKYMEM_NAK_CONFLICT, wire.SKYMEM_SET_CHUNK_CC, 0, block), refused
    assert (refused.route.dst_plane, refused.route.dst_sat) == CAPTURED, refused.route
    assert replies_in(capture.payloads, fresh_rid)[0].kind == wire.SKYMEM_REPLY_ACK
    assert ground_read(m, far, block, 0) == genuine, "a captured satellite's migration replaced a chunk (0,0) held"
    assert ground_read(m, far, block, 1) == fresh


# ---- sealed by default, --no-seal as before ------------------------------------------------------
def test_no_seal_is_as_before_and_a_sealed_get_refuses_it_in_one_line(sky, tmp_path):
    m = Manifest.load(sky)
    data = os.urandom(10_000)
    put(sky, tmp_path, "clear.bin", data, "--no-seal")
    meta = ObjectStore(m, SERVERS, seal=False).meta(key_of("clear.bin"))
    assert meta["v"] == 1 and meta["block"] == key_of("clear.bin").hex()
    line = assert_refused(sky, tmp_path, "clear.bin", "unsealed", {tuple(h) for h in meta["homes"]})
    assert "stored before sealing" in line and "put it again" in line
    r = skymemory("get", "clear.bin", "-o", "copy.bin", "--no-seal", "--manifest", str(sky), cwd=tmp_path)
    assert r.returncode == 0 and (tmp_path / "copy.bin").read_bytes() == data, r.stderr
    assert "unsealed (--no-seal)" in r.stderr and "sealed and verified" not in r.stderr

    put(sky, tmp_path, "sealed.bin", data)  # and the other way round
    r = skymemory("get", "sealed.bin", "-o", "other.bin", "--no-seal", "--manifest", str(sky), cwd=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 1 and len(lines) == 1 and "get it without --no-seal" in lines[0], r.stderr
    assert not (tmp_path / "other.bin").exists()


# ---- nothing of a text file on the link or at rest -----------------------------------------------
def text_file(n_lines: int = 3000) -> bytes:
    rng = random.Random(34)
    words = ("satellite ground orbit memory cache block chunk plane link sealed key value store object "
             "the a of to and in is on for with").split()
    return "".join(f"{i:05d} " + " ".join(rng.choice(words) for _ in range(12)) + ".\n"
                   for i in range(n_lines)).encode()


def windows(text: bytes) -> set[bytes]:
    return {text[i:i + WINDOW] for i in range(len(text) - WINDOW + 1)}


def leaks(payload: bytes, secret: set[bytes]) -> bool:
    return any(payload[i:i + WINDOW] in secret for i in range(len(payload) - WINDOW + 1))


class LoopbackCapture:
    """Every UDP payload on `lo` to or from `ports` while the with-block runs (an AF_PACKET socket: root)."""

    def __init__(self, ports: set[int]) -> None:
        self.ports = ports
        self.payloads: list[bytes] = []
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))  # ETH_P_ALL
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, 33, 1 << 26)  # SO_RCVBUFFORCE: nothing dropped
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 26)
        self.sock.bind(("lo", 0))
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="capture", daemon=True)

    def _take(self, frame: bytes) -> None:
        if len(frame) < 14 + 20 or frame[12:14] != b"\x08\x00":  # Ethernet (lo's), IPv4
            return
        ip = frame[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17 or len(ip) < ihl + 8:  # UDP
            return
        src, dst = struct.unpack_from(">HH", ip, ihl)
        if src in self.ports or dst in self.ports:
            self.payloads.append(bytes(ip[ihl + 8:]))

    def _run(self) -> None:
        while True:
            ready = select.select([self.sock], [], [], 0.05)[0]
            if ready:
                self._take(self.sock.recv(1 << 16))
            elif self.stop.is_set():  # stopped, and nothing left to read
                return

    def __enter__(self) -> "LoopbackCapture":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(WAIT_S)
        self.sock.close()


def test_a_put_of_a_text_file_carries_none_of_its_text_on_the_link(sky, tmp_path):
    m = Manifest.load(sky)
    text = text_file()
    secret = windows(text)
    ports = {e.ground_port for e in m.satellites} | {e.isl_port for e in m.satellites}
    try:
        capture = LoopbackCapture(ports)
    except (OSError, AttributeError) as exc:  # not root (CAP_NET_RAW), or not Linux
        pytest.skip(f"capturing on lo needs an AF_PACKET socket: {exc} (test_..._at_rest checks the chunks)")
    with capture:
        put(sky, tmp_path, "notes.txt", text)
    meta = ObjectStore(m, SERVERS).meta(key_of("notes.txt"))
    assert len(capture.payloads) >= meta["chunk_count"] + len(meta["homes"]), len(capture.payloads)
    leaked = [p for p in capture.payloads if leaks(p, secret)]
    assert not leaked, f"{len(leaked)} of {len(capture.payloads)} datagrams carry text of the file"

    # the capture sees a put's text when there is text to see: the same file --no-seal
    with LoopbackCapture(ports) as clear:
        put(sky, tmp_path, "notes-clear.txt", text, "--no-seal")
    assert sum(leaks(p, secret) for p in clear.payloads) >= meta["chunk_count"], "the capture saw no chunk"


def test_a_put_of_a_text_file_leaves_none_of_its_text_at_rest(sky, tmp_path):
    """Every chunk the satellites hold of it (data on its servers, metadata on its homes), read back raw."""
    m = Manifest.load(sky)
    text = text_file(1500)
    secret = windows(text) | windows(b"notes-at-rest.txt")
    put(sky, tmp_path, "notes-at-rest.txt", text)
    meta = ObjectStore(m, SERVERS).meta(key_of("notes-at-rest.txt"))
    block, servers = bytes.fromhex(meta["block"]), [tuple(s) for s in meta["servers"]]
    held = [ground_read(m, servers[i % len(servers)], block, i) for i in range(meta["chunk_count"])]
    held += [ground_read(m, tuple(h), meta_hash(key_of("notes-at-rest.txt")), 0) for h in meta["homes"]]
    assert all(c is not None for c in held)
    assert not any(leaks(c, secret) for c in held), "a satellite holds text of the file (or its name) in the clear"
    # the data's chunks carry the text, the parity's (stripes of 3 + 2) a whole chunk each; every one sealed
    layout = Stripes(SERVERS - meta["parity"], meta["parity"], -(-len(text) // (meta["chunk_bytes"] - 32)))
    assert meta["chunk_count"] == layout.wire_chunks
    parity_chunks = layout.wire_chunks - layout.data_chunks
    assert sum(len(c) for c in held[:meta["chunk_count"]]) == (len(text) + 32 * layout.data_chunks
                                                               + meta["chunk_bytes"] * parity_chunks)
