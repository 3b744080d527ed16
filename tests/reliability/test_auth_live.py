"""Authenticated commands against running satellites: signed commands work (also
satellite to satellite: migration and eviction gossip), forged, unsigned and
replayed ones are refused and counted in auth_failures."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import subprocess
import threading

import pytest

from skymemory.launcher.cluster import Cluster
from skymemory.link.client import SkyMemoryClient
from skymemory.protocol import auth, wire
from skymemory.protocol.errors import ChunkNotFound, NakError, RequestTimeout

H = hashlib.sha256(b"auth-live").digest()
DATA = bytes(range(256)) * 8


@pytest.fixture(scope="module")
def keyed(node_built, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("auth")
    auth.write_key_files(tmp, [(p, s) for p in range(2) for s in range(3)])
    cl = Cluster(2, 3, keys=tmp).start_all()
    try:
        yield cl, auth.Signer.from_file(tmp / "constellation.keys")
    finally:
        assert all(code == 0 for code in cl.close().values())


def run(coro):
    return asyncio.run(coro)


def client(cl, signer=None, **kw):
    return SkyMemoryClient(cl.ground_addresses(), signer=signer, **{"timeout": 0.5, "retries": 3, "station_id": 1,
                                                                    **kw})


async def failures(c, sat) -> int:
    return (await c.stats(sat)).auth_failures


def test_signed_commands_work_including_satellite_to_satellite(keyed):
    cl, signer = keyed

    async def go():
        async with client(cl, signer) as c:
            await c.set_chunk((0, 0), H, 0, 2, DATA)
            await c.set_chunk((0, 1), H, 1, 2, DATA, gossip_radius=1)
            assert await c.get_chunk((0, 0), H, 0) == DATA
            # MIGRATE: (0,0) sends SET_CHUNK to (1,2), signed with the constellation key
            before = (await c.stats((1, 2))).migrated_in
            await c.migrate((0, 0), H, 0, 1, (1, 2))
            assert (await c.stats((1, 2))).migrated_in == before + 1
            assert await c.get_chunk((1, 2), H, 0) == DATA
            # EVICT radius 1 at (0,0): its gossip (signed by (0,0)) purges the neighbour (0,1)
            await c.evict_block((0, 0), H, radius=1)
            await asyncio.sleep(0.2)
            with pytest.raises(ChunkNotFound):
                await c.get_chunk((0, 1), H, 1)
            await c.set_param((0, 2), wire.SKYMEM_PARAM_LOSS_PPM, 0)
            return [await failures(c, s) for s in cl.satellites]

    assert run(go()) == [0] * len(cl.satellites)


def test_unsigned_and_forged_commands_are_refused_and_counted(keyed):
    cl, signer = keyed
    forger = auth.Signer(1, bytes(32))  # right key id, wrong key
    calls = [lambda c: c.set_chunk((1, 1), H, 0, 1, DATA),
             lambda c: c.evict_block((1, 1), H),
             lambda c: c.migrate((1, 1), H, 0, 1, (0, 0)),
             lambda c: c.set_param((1, 1), wire.SKYMEM_PARAM_LOSS_PPM, 500000),
             lambda c: c.get_chunk((1, 1), H, 0),  # reads too: they move the LRU order and the counters
             lambda c: c.stats((1, 1))]

    async def go():
        async with client(cl, signer) as good, client(cl, retries=0) as unsigned, client(cl, forger, retries=0) as forged:
            before = await good.stats((1, 1))
            for call in calls:  # the unsigned client hears nothing: no signed answer to an unauthenticated sender
                with pytest.raises(RequestTimeout):
                    await call(unsigned)
            for call in calls:  # nor does the forger: nothing signed comes back to echo its request ids
                with pytest.raises(RequestTimeout):
                    await call(forged)
            assert unsigned.counters["received"] == forged.counters["received"] == 0
            after = await good.stats((1, 1))
            return before, after

    before, after = run(go())
    assert after.auth_failures - before.auth_failures == 2 * len(calls)
    # nothing else moved: no command was taken (the good client's own STATS is the one more)
    assert after.cmd_count == before.cmd_count + 1 and after.chunks == before.chunks


def test_replayed_commands_are_dropped_and_counted(keyed):
    cl, signer = keyed
    sat = (1, 0)

    async def go():
        async with client(cl, signer) as c:
            c.capture = []
            await c.set_chunk(sat, H, 0, 1, DATA)
            signed_set = next(p for p in c.capture if p[:2] == b"\x18\x92" and p[6] & 0x7F == wire.SKYMEM_SET_CHUNK_CC)
            await c.evict_block(sat, H)
            signed_evict = next(p for p in c.capture if p[6] & 0x7F == wire.SKYMEM_EVICT_BLOCK_CC)
            before = await failures(c, sat)
            # an eavesdropper replays the captured SET: the evicted chunk must not come back
            addr = cl.ground_addresses()[sat]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.bind(("127.0.0.1", 0))
                s.sendto(signed_set, addr)
                await asyncio.sleep(0.3)
                with pytest.raises(ChunkNotFound):
                    await c.get_chunk(sat, H, 0)
                # set it again (fresh signature), then replay the old EVICT: the chunk must stay
                await c.set_chunk(sat, H, 0, 1, DATA)
                s.sendto(signed_evict, addr)
                s.sendto(signed_evict, addr)
                await asyncio.sleep(0.3)
            assert await c.get_chunk(sat, H, 0) == DATA
            return await failures(c, sat) - before

    assert run(go()) == 3


def test_control_mid_commands_refused_when_keyed(keyed):
    cl, signer = keyed
    sat = (0, 2)

    async def go():
        async with client(cl, signer) as c:
            before = await failures(c, sat)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(wire.encode_command(wire.SKYMEM_CMD_MID, wire.SKYMEM_RESET_COUNTERS_CC), cl.ground_addresses()[sat])
                await asyncio.sleep(0.3)
            return await failures(c, sat) - before

    assert run(go()) == 1  # counted, and not reset (the count would be 0 then)


def test_node_refuses_bad_key_files(node_built, tmp_path):
    """Each in one line naming the cause: an old file (one key for both directions) says to launch again, the
    ground's file (its masters) is not a satellite's, another satellite's keys are not this one's, a version 3 file
    (one ISL key shared by all) is refused, and so is a file missing a key of a link to a neighbour (1x2: (0,1))."""
    f = tmp_path / "k"
    sat = "skymem-keys 4 satellite 0 0\n"
    up_down = "up 1 " + "00" * 16 + "\ndown 1 " + "11" * 16 + "\n"
    keys = auth.GroundKeys.new()
    for text, msg in [("0 " + "00" * 16 + "\n1 " + "11" * 16 + "\n", "an old key file (one key for both directions, "
                       "no \"skymem-keys 4\" header): launch again to make per-link keys"),
                      ("skymem-keys 3 satellite 0 0\nisl 0 " + "00" * 16 + "\n", "a version 3 key file (one ISL key "
                       "shared by every satellite): launch again to make per-link keys"),
                      (keys.ground_text(), "the ground's key file (its master keys)"),
                      (keys.satellite_text(0, 1, 1, 2), "holds the keys of satellite (0,1), this is (0,0)"),
                      (sat + up_down, "lacks this satellite's ground keys (up/down) or the keys of its links"),
                      (sat + "link-in 0 1 " + "00" * 16 + "\n" + up_down, "or the keys of its links"),
                      (sat + "link-in 0 0 " + "00" * 16 + "\n", "a link from this satellite to itself"),
                      (sat + "link-in 0 1 00\n", "shorter than 16"),
                      (sat + "link-in 0 1 " + "00" * 16 + " junk\n", "unexpected"),
                      (sat, "holds no keys")]:
        f.write_text(text)
        r = subprocess.run([str(node_built), "--plane", "0", "--sat", "0", "--planes", "1", "--sats", "2",
                            "--auth-keys", str(f)], capture_output=True, text=True, timeout=10)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
    r = subprocess.run([str(node_built), "--plane", "0", "--sat", "0", "--planes", "1", "--sats", "1",
                        "--auth-keys", str(tmp_path / "missing")], capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "cannot open auth key file" in r.stderr


def test_a_floor_file_cut_short_is_not_taken_as_a_smaller_floor(node_built, tmp_path):
    """A floor file a crash cut short ("1063377" of "10633778123...\\n") would read as a far smaller mark and lower
    the replay floor: the node says it is unreadable and starts from the clock (skymem_floor_parse); one written
    whole is taken. Both runtimes read it with the core's parser; the cFS app's coverage test checks the rename."""
    from live import free_port_bases

    keys = tmp_path / "k"
    keys.write_text(auth.GroundKeys.new().satellite_text(0, 0, 1, 1))
    floor = tmp_path / "floor"
    for text, says in [("1063377", "unreadable: starting from the clock"), ("1063377\n", "replay floor kept in")]:
        floor.write_text(text)
        isl, ground = free_port_bases(1)
        proc = subprocess.Popen([str(node_built), "--plane", "0", "--sat", "0", "--planes", "1", "--sats", "1",
                                 "--isl-port-base", str(isl), "--ground-port-base", str(ground),
                                 "--auth-keys", str(keys), "--auth-floor", str(floor), "--log-level", "info"],
                                stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(30.0, proc.kill)  # bounds the read below: a kill ends the stream
        watchdog.start()
        try:
            lines = []
            for line in proc.stderr:  # up to the line saying authentication is on (it follows the floor's)
                lines.append(line)
                if "command authentication on" in line:
                    break
            log = "".join(lines)
            assert says in log, log
            if text.endswith("\n"):
                assert "unreadable" not in log, log
        finally:
            watchdog.cancel()
            proc.terminate()
            proc.wait(10)
            proc.stderr.close()
