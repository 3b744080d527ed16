"""An attacker on the link against a default (keyed) launch, with real sockets (issue 25: M1, M2, M3, L2;
issue 35: N1-N4, N6, the M3 residual, and what one satellite's key file reaches).

Each test launches nothing of its own: one 2x2 constellation per runtime, started by the launcher
with authentication on (the default), serves them all. The attacker holds no key, or (issue 35) the key
file of one satellite, (1,1), as whoever captured it would. It sends datagrams
from its own UDP socket on loopback, built with the project's codec (`skymemory.protocol.wire`),
and replays datagrams the real ground station sent. The ground station here is a raw socket too,
signing with the constellation's ground key, so every reply it gets, and every reply the attacker
gets, is seen as it arrives. Every test asserts the defended outcome and accepts any of the defences
the issue allows; today's behaviour fails each one, for the reason of its finding.

Every wait is bounded, and what a test waits for is an event, never a duration: a satellite reads
its ground port in order, so a signed STATS answered after an attack datagram (`Observer.settled`)
proves the datagram was handled. Stations use ids no other client of these tests uses, so one test's
replay window or learnt address never meets another's.

Runtimes: the native node always; the cFS app where SKYMEM_CFS_EXE names a cFS build's exe/cpu1
(docs/CFS.md), skipped with the reason otherwise.
"""

from __future__ import annotations

import asyncio
import os
import random
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from skymemory.launcher import cfs, cfs_limits, nodes, processes
from skymemory.launcher.health import wait_healthy
from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol import auth, wire
from skymemory.protocol.errors import ChunkNotFound

from live import free_first_cpuid, launch, stop

EXE = os.environ.get("SKYMEM_CFS_EXE")
OBSERVER = 9  # the station id of the test's own signed client (reads STATS)
WAIT_S = 30.0  # bound on waiting for a datagram's effect: the datagrams are on their way, not a measurement


# ---- the constellation, per runtime ---------------------------------------------------------------
class Sky:
    """A launched, keyed constellation: its manifest, the ground key's signer, the nodes we restarted."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.m = Manifest.load(path)
        self.signer = auth.signer_for_manifest(self.m)
        assert self.signer is not None, "the default launch runs without authentication"
        self.restarted: list[subprocess.Popen] = []

    def address(self, sat) -> tuple[str, int]:
        return self.m.ground_addresses()[sat]

    def restart(self, sat, wait: bool = True) -> None:
        """Kill one satellite (SIGKILL: no goodbye, nothing flushed) and start it again as the launcher did:
        the same command line, working directory and environment, its log appended, pid file and manifest
        updated so `stop` ends the new process. Returns once it answers a signed NOOP (`wait`)."""
        entry = next(e for e in self.m.satellites if (e.plane, e.sat) == sat)
        pid = entry.pid
        argv = processes.cmdline(pid)
        assert argv, f"satellite {sat} (pid {pid}) is not running"
        cwd = os.readlink(f"/proc/{pid}/cwd")
        environ = Path(f"/proc/{pid}/environ").read_bytes().decode().split("\0")
        env = dict(kv.split("=", 1) for kv in environ if "=" in kv)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + WAIT_S
        while processes.alive(pid) and not processes.is_zombie(pid):
            assert time.monotonic() < deadline, f"satellite {sat} (pid {pid}) survived SIGKILL"
            time.sleep(0.01)
        if self.m.runtime == "cfs":  # cFE's reset area would collide with the new instance's
            assert not cfs.remove_shared_memory({pid})
        name = nodes.sat_name(*sat)
        with open(Path(self.m.run_dir) / "logs" / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.restarted.append(proc)
        (Path(self.m.run_dir) / "pids" / f"{name}.pid").write_text(f"{proc.pid}\n")
        entry.pid = proc.pid
        self.m.save(self.path)
        if not wait:
            return
        healthy = wait_healthy({sat: self.address(sat)}, self.m.ground_host, WAIT_S, quiet=True, signer=self.signer)
        assert healthy == {sat}, f"satellite {sat} did not answer after its restart"


def launched_sky(request, tmp_path_factory, planes: int, sats: int, label: str):
    """A keyed planes x sats constellation on request.param's runtime (native, or cFS when SKYMEM_CFS_EXE names
    a build; skipped otherwise), stopped and its restarted nodes reaped at the end."""
    if request.param == "native":
        request.getfixturevalue("node_built")  # skips where skymem_node is not built
        extra: tuple[str, ...] = ()
    else:
        if not EXE or not (Path(EXE) / "core-cpu1").is_file():
            pytest.skip("set SKYMEM_CFS_EXE to a cFS build's exe/cpu1 directory with the SkyMemory apps")
        problem = cfs_limits.problem(planes * sats, cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
        if problem:
            pytest.skip(problem)
        extra = ("--runtime", "cfs", "--cfs-exe", EXE, "--cfs-first-cpuid", free_first_cpuid(planes * sats))
    s = Sky(launch(tmp_path_factory.mktemp(f"{label}-{request.param}"), planes, sats, *extra))
    try:
        yield s
    finally:
        r = stop(s.path)
        for proc in s.restarted:  # ours to reap once `stop` has ended them
            proc.wait(timeout=30)
        assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module", params=["native", "cfs"])
def sky(request, tmp_path_factory):
    yield from launched_sky(request, tmp_path_factory, 2, 2, "attacks")


# ---- the parties ----------------------------------------------------------------------------------
def is_signed(packet: bytes) -> bool:
    """A reply that carries the authentication trailer (the route's AUTH flag): something the attacker
    could not have made. Housekeeping has no route header and is never signed."""
    at = wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_FLAGS
    return (int.from_bytes(packet[:2], "big") == wire.SKYMEM_REPLY_TLM_MID and len(packet) > at
            and bool(packet[at] & wire.SKYMEM_RF_AUTH))


def request_id_of(packet: bytes) -> int | None:
    """The request id a reply echoes (None for anything that is not a reply)."""
    if int.from_bytes(packet[:2], "big") != wire.SKYMEM_REPLY_TLM_MID or len(packet) < 36:
        return None
    return int.from_bytes(packet[wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_REQUEST_ID:][:4], "big")


class Party:
    """A UDP socket on the ground host: the real station (signing with the ground key) or the attacker."""

    def __init__(self, sky: Sky, station: int, signer: auth.Signer | None) -> None:
        self.sky, self.station, self.signer = sky, station, signer
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        self.sock.bind((sky.m.ground_host, 0))
        self.received: list[bytes] = []  # everything that ever came to this socket

    def command(self, cc: int, dst, body: bytes = b"", *, via=None, seq: int | None = None,
                request_id: int | None = None) -> bytes:
        """A data-plane command from this station (signed if it holds the key); `via` as the client sets it."""
        v = dst if via is None else via
        route = wire.RouteHeader(dst[0], dst[1], wire.SKYMEM_GROUND_PLANE, self.station, v[0], v[1],
                                 request_id=random.getrandbits(32) | 1 if request_id is None else request_id)
        packet = wire.encode_data_command(cc, route, body)
        return packet if self.signer is None else self.signer.sign(packet, seq)

    def send(self, packet: bytes, sat) -> None:
        self.sock.sendto(packet, self.sky.address(sat))

    def drain(self) -> list[bytes]:
        """What has arrived and not been read yet (nothing waits)."""
        got = []
        while select.select([self.sock], [], [], 0)[0]:
            got.append(self.sock.recv(65536))
        self.received += got
        return got

    def close(self) -> None:
        self.sock.close()


def request_id_of_command(request: bytes) -> int:
    return int.from_bytes(request[wire.SKYMEM_CMD_HDR_LEN + wire.SKYMEM_ROUTE_REQUEST_ID:][:4], "big")


def reply_to(request: bytes, *parties: Party, timeout: float = WAIT_S) -> tuple[Party, bytes] | None:
    """The first reply echoing `request`'s request id at any of `parties` (and which one got it), or None
    once `timeout` passed without one."""
    rid = request_id_of_command(request)
    deadline = time.monotonic() + timeout
    while True:  # at least one look, also with timeout 0
        left = max(0.0, deadline - time.monotonic())
        ready_socks = select.select([p.sock for p in parties], [], [], left)[0]
        if not ready_socks and left == 0.0:
            return None
        for ready in ready_socks:
            party = next(p for p in parties if p.sock is ready)
            data = ready.recv(65536)
            party.received.append(data)
            if request_id_of(data) == rid:
                return party, data


class Observer:
    """The test's own signed client (station OBSERVER): reads a satellite's STATS."""

    def __init__(self, sky: Sky) -> None:
        self.sky = sky

    def stats(self, sat) -> wire.Stats:
        async def go():
            async with SkyMemoryClient(self.sky.m.ground_addresses(), signer=self.sky.signer, station_id=OBSERVER,
                                       bind=(self.sky.m.ground_host, 0), timeout=0.5, retries=20) as c:
                return await c.stats(sat)

        return asyncio.run(go())

    def settled(self, sat) -> wire.Stats:
        """STATS of `sat`, asked after everything already sent to its ground port: when it is answered,
        the satellite has read (and handled) every datagram sent there before it."""
        return self.stats(sat)

    def auth_failures_reach(self, sats, at_least: int) -> int:
        """Sum of auth_failures over `sats` once it reached `at_least`; bounded (the datagrams are on
        their way), it returns the sum it saw last when the bound passed."""
        deadline = time.monotonic() + WAIT_S
        while True:
            n = sum(self.stats(s).auth_failures for s in sats)
            if n >= at_least or time.monotonic() > deadline:
                return n
            time.sleep(0.02)


# ---- M1 -------------------------------------------------------------------------------------------
def test_m1_an_unsigned_intact_packet_does_not_move_the_station(sky):
    """M1. Station 3 talks to (0,0) straight up its ground link, so (0,0) knows where it is. From
    another socket the attacker sends (0,0) an unsigned STATS with a 1-byte body and source
    (GROUND, 3): intact (right message id, length, checksum) but unparseable. Then the station asks
    (0,1), signed, with its reply to come down through (0,0). That reply must reach the station, and
    the attacker must get no reply for it (today: (0,0) learnt the attacker's socket as station 3 from
    the unsigned packet, before any tag check, and the signed reply goes to the attacker)."""
    station = Party(sky, 3, sky.signer)
    attacker = Party(sky, 3, None)
    observer = Observer(sky)
    try:
        hello = station.command(wire.SKYMEM_STATS_CC, (0, 0))
        station.send(hello, (0, 0))
        got = reply_to(hello, station)
        assert got is not None, "(0,0) did not answer the station's signed STATS"

        attack = attacker.command(wire.SKYMEM_STATS_CC, (0, 0), b"\x00", via=(wire.SKYMEM_NO_SAT, wire.SKYMEM_NO_SAT))
        attacker.send(attack, (0, 0))
        observer.settled((0, 0))  # (0,0) has handled the attack datagram
        attacker.drain()  # whatever it answered the attacker's own packet (L2 checks that, not this test)

        ask = station.command(wire.SKYMEM_STATS_CC, (0, 1), via=(0, 0))
        station.send(ask, (0, 1))  # up (0,1)'s link, down (0,0)'s: the reply is routed via (0,0)
        got = reply_to(ask, station, attacker)
        assert got is not None, "no reply to the station's signed STATS of (0,1) via (0,0) reached anyone"
        who, packet = got
        assert who is station, ("an unsigned, intact packet moved station 3's address at (0,0): the next signed "
                                f"reply for it went to the attacker's socket (signed: {is_signed(packet)})")
        assert sky.signer.reply_ok(packet)
    finally:
        station.close()
        attacker.close()


# ---- M2 -------------------------------------------------------------------------------------------
def test_m2_a_command_captured_for_one_satellite_does_not_work_at_another(sky):
    """M2. Station 4 talks to (0,0) (which learns its address), then sends a signed NOOP to (1,1) up
    (1,1)'s own link. The attacker captures that NOOP and replays it, byte for byte, into (0,0)'s
    ground port. The replay must be refused somewhere and counted (at (0,0), or at (1,1) if (0,0) only
    relays it), and must not re-point station 4 at (0,0): the station's next signed request whose
    reply comes down through (0,0) gets it, and the attacker gets nothing (today: (0,0) accepted the
    replay as fresh, with no auth failure, learnt the attacker's socket as station 4 and sent the next
    reply relayed via (0,0) to the attacker)."""
    station = Party(sky, 4, sky.signer)
    attacker = Party(sky, 4, None)
    observer = Observer(sky)
    try:
        hello = station.command(wire.SKYMEM_STATS_CC, (0, 0))
        station.send(hello, (0, 0))
        assert reply_to(hello, station) is not None, "(0,0) did not answer the station's signed STATS"
        captured = station.command(wire.SKYMEM_NOOP_CC, (1, 1))
        station.send(captured, (1, 1))
        got = reply_to(captured, station)
        assert got is not None and wire.decode_reply(got[1]).kind == wire.SKYMEM_REPLY_ACK, \
            "(1,1) did not take the station's signed NOOP"

        before = {s: observer.stats(s).auth_failures for s in ((0, 0), (1, 1))}
        attacker.send(captured, (0, 0))  # the replay, into another satellite's ground port
        seen = observer.auth_failures_reach([(0, 0), (1, 1)], sum(before.values()) + 1)
        assert seen >= sum(before.values()) + 1, "the replayed NOOP was counted as an auth failure nowhere"
        observer.settled((0, 0))
        attacker.drain()

        ask = station.command(wire.SKYMEM_STATS_CC, (1, 1), via=(0, 0))
        station.send(ask, (1, 1))  # the reply comes down through (0,0)
        got = reply_to(ask, station, attacker)
        after = {s: observer.stats(s).auth_failures for s in ((0, 0), (1, 1))}
        assert got is not None, "no reply to the station's signed STATS of (1,1) via (0,0) reached anyone"
        who, packet = got
        assert who is station, ("a NOOP captured for (1,1), replayed into (0,0)'s ground port, was taken there "
                                f"(auth failures (0,0): {before[(0, 0)]} -> {after[(0, 0)]}) and re-pointed "
                                "station 4: the next reply relayed via (0,0) went to the attacker")
        assert sky.signer.reply_ok(packet)
    finally:
        station.close()
        attacker.close()


# ---- M3 -------------------------------------------------------------------------------------------
SAT3 = (1, 0)


def _seq_ahead(lead_s: float) -> int:
    """A sequence number `lead_s` seconds ahead of this machine's clock (the satellites share it)."""
    return (time.time_ns() // 1000 + int(lead_s * 1e6)) // auth.SEQ_US


def _outcome(station: Party, observer: Observer, packet: bytes, failures_before: int) -> str:
    """What the satellite made of a SET_PARAM: "ACK" (taken), "NAK ..." or "dropped" (counted, no answer)."""
    got = reply_to(packet, station, timeout=0)  # an answer may be there already
    deadline = time.monotonic() + WAIT_S
    while got is None:
        if observer.stats(SAT3).auth_failures > failures_before:  # refused silently (a replay is not answered)
            got = reply_to(packet, station, timeout=0)
            return "dropped" if got is None else _kind(got[1])
        assert time.monotonic() < deadline, "the SET_PARAM was neither answered nor counted"
        got = reply_to(packet, station, timeout=0.05)
    return _kind(got[1])


def _kind(packet: bytes) -> str:
    r = wire.decode_reply(packet)
    return r.kind_name if r.kind != wire.SKYMEM_REPLY_NAK else f"NAK {wire.nak_name(r.status)}"


def test_m3_a_command_signed_far_ahead_is_refused_and_stays_refused_after_a_restart(sky):
    """M3. Station 5 signs SET_PARAM MEMORY_BUDGET_KB with a sequence 5 s ahead of the satellite's clock
    (far beyond the ~1 s a signer may run ahead) and sends it to (1,0): it must be refused (not
    ACKed, the budget unchanged). The satellite is then restarted and the same datagram replayed:
    refused again (today: taken before the restart, and taken again after it: the native node's replay
    floor after a restart is its start time, 5 s behind the sequence)."""
    station = Party(sky, 5, sky.signer)
    observer = Observer(sky)
    try:
        budget = observer.stats(SAT3).bytes_budget
        wanted_kb = budget // 1024 // 2 + 3  # a budget nothing else sets
        packet = station.command(wire.SKYMEM_SET_PARAM_CC, SAT3,
                                 wire.encode_set_param(wire.SKYMEM_PARAM_MEMORY_BUDGET_KB, wanted_kb),
                                 seq=_seq_ahead(5.0))
        failures = observer.stats(SAT3).auth_failures
        station.send(packet, SAT3)
        first = _outcome(station, observer, packet, failures)
        set_to = observer.stats(SAT3).bytes_budget
        assert first != "ACK" and set_to != wanted_kb * 1024, \
            (f"a SET_PARAM signed 5 s ahead of the satellite's clock was taken ({first}; "
             f"budget now {set_to // 1024} KiB)")

        sky.restart(SAT3)
        default = observer.stats(SAT3).bytes_budget
        failures = observer.stats(SAT3).auth_failures
        station.send(packet, SAT3)
        again = _outcome(station, observer, packet, failures)
        now = observer.stats(SAT3).bytes_budget
        assert again != "ACK" and now == default, \
            f"the same SET_PARAM replayed after a restart was taken ({again}; budget {now // 1024} KiB)"
    finally:
        station.close()


def _answers_from(sky: Sky, sat, first_seq: int) -> int:
    """Once `sat` answers a signed STATS (station 8) signed at `first_seq` or later (resent, signed afresh,
    until it does; bounded): the sequence of this machine's clock when the answer came."""
    prober = Party(sky, 8, sky.signer)
    try:
        deadline = time.monotonic() + WAIT_S
        seq = first_seq
        while True:
            assert time.monotonic() < deadline, f"{sat} did not answer a signed STATS after its restart"
            seq = max(seq + 1, _seq_ahead(0))
            ask = prober.command(wire.SKYMEM_STATS_CC, sat, seq=seq)
            prober.send(ask, sat)
            if reply_to(ask, prober, timeout=0.1) is not None:
                return _seq_ahead(0)
    finally:
        prober.close()


def test_m3_a_command_taken_before_a_restart_is_refused_after_it(sky):
    """M3, the restart itself. Station 6 runs 0.8 s ahead, within what a fast signer may, and sends a
    SET_PARAM MEMORY_BUDGET_KB to (1,0) (taken, or refused if the satellite allows less lead: either is
    fine). (1,0) is killed and started again, and the same datagram replayed: it must be refused, the
    restarted node keeping its default budget (today: the floor after a restart is the start time, so
    when the node is back before the sequence's time, the replay sets the budget again).

    Whether the replay is refused does not depend on timing; whether today's node would have taken it
    does: only if it was back (answering a STATS signed just after the SET_PARAM) before the clock
    reached the sequence. An attempt where it was not is tried again, a few times."""
    lead_s = 0.8
    station = Party(sky, 6, sky.signer)
    observer = Observer(sky)
    try:
        for _ in range(5):
            budget = observer.stats(SAT3).bytes_budget
            wanted_kb = budget // 1024 // 2 + 5
            seq = _seq_ahead(lead_s)
            packet = station.command(wire.SKYMEM_SET_PARAM_CC, SAT3,
                                     wire.encode_set_param(wire.SKYMEM_PARAM_MEMORY_BUDGET_KB, wanted_kb), seq=seq)
            failures = observer.stats(SAT3).auth_failures
            station.send(packet, SAT3)
            first = _outcome(station, observer, packet, failures)

            sky.restart(SAT3, wait=False)
            back_at = _answers_from(sky, SAT3, seq + 1)
            default = observer.stats(SAT3).bytes_budget
            failures = observer.stats(SAT3).auth_failures
            station.send(packet, SAT3)
            again = _outcome(station, observer, packet, failures)
            now = observer.stats(SAT3).bytes_budget
            assert again != "ACK" and now == default, \
                (f"a SET_PARAM signed {lead_s} s ahead (first: {first}), replayed after (1,0) restarted, was taken "
                 f"again ({again}; budget {default // 1024} -> {now // 1024} KiB)")
            if back_at < seq:
                return  # refused although the node was back before the sequence's time: the floor held
    finally:
        station.close()


# ---- L2 -------------------------------------------------------------------------------------------
def test_l2_unauthenticated_senders_get_no_signed_reply_and_no_amplification(sky):
    """L2. The attacker floods (0,1) from its own socket with what anyone can send: unsigned data
    commands (STATS, GET_CHUNK, NOOP) with request ids of its choosing, intact-but-malformed ones, and
    SEND_HK for both apps. Nothing that comes back may be signed (no signing oracle), and the bytes
    that come back may not outnumber the bytes sent, housekeeping included (no amplifier). Either no
    answer or an unsigned NAK at a bounded rate passes (today: every unsigned command gets a NAK
    signed with the ground key, echoing the attacker's request id, and each 8-byte SEND_HK brings
    back a much larger housekeeping packet)."""
    target = (0, 1)
    attacker = Party(sky, 7, None)
    observer = Observer(sky)
    rng = random.Random(25)
    block = bytes(range(32))
    kinds = [lambda: attacker.command(wire.SKYMEM_STATS_CC, target, request_id=rng.getrandbits(32)),
             lambda: attacker.command(wire.SKYMEM_NOOP_CC, target, request_id=rng.getrandbits(32)),
             lambda: attacker.command(wire.SKYMEM_GET_CHUNK_CC, target, wire.chunk_ref(block, 0),
                                      request_id=rng.getrandbits(32)),
             lambda: attacker.command(wire.SKYMEM_STATS_CC, target, b"\x00", request_id=rng.getrandbits(32))]
    hk = [wire.encode_command(wire.SKYMEM_SEND_HK_MID, 0), wire.encode_command(wire.ISL_ROUTER_SEND_HK_MID, 0)]
    sent_cmd = sent_hk = 0
    try:
        for burst in range(20):  # bursts the satellite's socket buffer holds, each read before the next
            for i in range(50):
                packet = kinds[i % len(kinds)]()
                attacker.send(packet, target)
                sent_cmd += len(packet)
                packet = hk[i % 2]
                attacker.send(packet, target)
                sent_hk += len(packet)
            observer.settled(target)
            attacker.drain()
        back = attacker.received
        signed = [p for p in back if is_signed(p)]
        oracle = [p for p in signed if sky.signer.reply_ok(p)]
        back_hk = sum(len(p) for p in back if request_id_of(p) is None)
        back_cmd = sum(len(p) for p in back) - back_hk
        problems = []  # all of them, so one run shows every way the flood was answered
        if signed:
            problems.append(f"{len(signed)} of {len(back)} answers to unauthenticated packets were signed "
                            f"({len(oracle)} verify with the ground key, echoing the attacker's request ids)")
        if back_hk > sent_hk:
            problems.append(f"SEND_HK amplifies: {sent_hk} bytes sent, {back_hk} bytes of housekeeping back")
        if back_cmd > sent_cmd:
            problems.append(f"unsigned commands amplify: {sent_cmd} bytes sent, {back_cmd} bytes back")
        assert not problems, "; ".join(problems)
    finally:
        attacker.close()


# ---- issue 35: what one satellite's key file reaches -----------------------------------------------
CAPTURED, NEIGHBOUR, FAR = (1, 1), (1, 0), (0, 0)  # on the 2x2 torus (0,0) is no neighbour of (1,1)


class Captured:
    """Whoever holds satellites/1-1.keys of the run, as whoever captured satellite (1,1) would: its link keys
    (link-out: what it signs for each neighbour) and its own UP/DOWN keys, nothing of the ground's. It sends
    from its own socket into a neighbour's ISL port, as (1,1) would over the link."""

    def __init__(self, sky: Sky) -> None:
        self.sky = sky
        lines = [line.split() for line in (Path(sky.m.run_dir) / "satellites" / "1-1.keys").read_text().splitlines()]
        assert not any(parts and parts[0] in ("master", "link-master") for parts in lines)
        self.link_out = {(int(p[1]), int(p[2])): bytes.fromhex(p[3]) for p in lines if p[:1] == ["link-out"]}
        assert NEIGHBOUR in self.link_out and FAR not in self.link_out
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind((sky.m.ground_host, 0))

    def signer(self, neighbour=NEIGHBOUR) -> auth.Signer:
        return auth.Signer(auth.link_id(*CAPTURED), self.link_out[neighbour], satellite=True)

    def command(self, cc: int, dst, body: bytes = b"", *, src=CAPTURED, flags: int = 0, seq: int | None = None,
                request_id: int | None = None) -> bytes:
        """A data command from `src` (the captured satellite itself, or a claimed ground station), signed with
        the key of the link (1,1) -> NEIGHBOUR."""
        route = wire.RouteHeader(dst[0], dst[1], src[0], src[1], request_id=random.getrandbits(32) | 1
                                 if request_id is None else request_id, flags=flags)
        return self.signer().sign(wire.encode_data_command(cc, route, body), seq)

    def send(self, packet: bytes, into=NEIGHBOUR) -> None:
        e = next(e for e in self.sky.m.satellites if (e.plane, e.sat) == into)
        self.sock.sendto(packet, (e.host, e.isl_port))

    def close(self) -> None:
        self.sock.close()


def refusals(observer: Observer) -> int:
    """Packets refused or dropped anywhere in the 2x2 (auth_failures + dropped, every satellite)."""
    return sum(s.auth_failures + s.dropped for s in (observer.stats(sat) for sat in ((0, 0), (0, 1), (1, 0), (1, 1))))


def refusals_reach(observer: Observer, at_least: int) -> int:
    deadline = time.monotonic() + WAIT_S
    while True:
        n = refusals(observer)
        if n >= at_least or time.monotonic() > deadline:
            return n
        time.sleep(0.02)


def test_n2_one_satellites_key_file_commands_no_satellite(sky):
    """N2. Holding (1,1)'s key file, the attacker sends what only the ground may send -- RESET_COUNTERS and a
    SET_PARAM that shrinks the budget -- signed with the key of its link to (1,0): to (1,0) itself, on to
    (0,0) through it, claiming a ground station as source, and straight into (0,0)'s ISL port (it holds no key
    of a link to (0,0)). Every one must be refused and counted, and no satellite's counters or budget change
    (before per-link keys, the one ISL key every satellite shared made each of them carried out anywhere)."""
    observer = Observer(sky)
    attacker = Captured(sky)
    try:
        # a NOOP from the ground first, so each satellite's cmd_count is above what a reset leaves
        station = Party(sky, 10, sky.signer)
        for sat in ((0, 0), (1, 0)):
            ask = station.command(wire.SKYMEM_NOOP_CC, sat)
            station.send(ask, sat)
            assert reply_to(ask, station) is not None, f"{sat} did not take the station's signed NOOP"
        station.close()
        before = {sat: observer.stats(sat) for sat in ((0, 0), (1, 0))}
        tiny = wire.encode_set_param(wire.SKYMEM_PARAM_MEMORY_BUDGET_KB, 16)
        ground = (wire.SKYMEM_GROUND_PLANE, 1)
        # (destination, claimed source, the ISL port it goes into); the relayed ones claiming the ground first:
        # (1,0) refuses them (a link key is no ground key), and on cFS that is counted in ISL_ROUTER's
        # housekeeping, not in STATS -- the ones after them on the same path are, so once those are counted the
        # earlier ones have been handled too
        paths = [(NEIGHBOUR, CAPTURED, NEIGHBOUR), (NEIGHBOUR, ground, NEIGHBOUR), (FAR, ground, NEIGHBOUR),
                 (FAR, CAPTURED, NEIGHBOUR), (FAR, CAPTURED, FAR)]
        attacks = [(attacker.command(cc, dst, body, src=src), into) for dst, src, into in paths
                   for cc, body in ((wire.SKYMEM_RESET_COUNTERS_CC, b""), (wire.SKYMEM_SET_PARAM_CC, tiny))]
        in_stats = len(attacks) - (2 if sky.m.runtime == "cfs" else 0)
        counted = refusals(observer)
        for packet, into in attacks:
            attacker.send(packet, into)
        seen = refusals_reach(observer, counted + in_stats)
        after = {sat: observer.stats(sat) for sat in ((0, 0), (1, 0))}
        changed = [f"{sat}: cmd_count {before[sat].cmd_count} -> {after[sat].cmd_count}, budget "
                   f"{before[sat].bytes_budget // 1024} -> {after[sat].bytes_budget // 1024} KiB"
                   for sat in before if after[sat].cmd_count < before[sat].cmd_count
                   or after[sat].bytes_budget != before[sat].bytes_budget]
        assert not changed, "one satellite's link key commanded satellites: " + "; ".join(changed)
        assert seen >= counted + in_stats, \
            f"{len(attacks)} forged ground commands, {seen - counted} refusals counted (expected {in_stats})"
    finally:
        attacker.close()


def test_n1_a_forged_packet_does_not_steer_a_relayed_reply(sky):
    """N1. The station asks (0,1) for its STATS through (0,0), a relay (`--route relay`: up (0,0)'s ground link,
    which remembers where request R's answers go), and the attacker, who saw R on the link, sends (0,0)'s ground
    port packets carrying R, the station's id and (0,1) as destination, with no trailer and with a bad tag. The
    reply must reach the station, and the attacker get nothing (before: the relay took the last such packet's
    sender as where R's replies go)."""
    station = Party(sky, 11, sky.signer)
    attacker = Party(sky, 11, None)
    try:
        ask = station.command(wire.SKYMEM_STATS_CC, (0, 1), via=(0, 0))
        rid = request_id_of_command(ask)
        forged = attacker.command(wire.SKYMEM_STATS_CC, (0, 1), via=(0, 0), request_id=rid)
        bad_tag = sky.signer.sign(forged)[:-1] + b"\x00"
        station.send(ask, (0, 0))
        for packet in (forged, bad_tag):
            attacker.send(packet, (0, 0))
        got = reply_to(ask, station, attacker)
        assert got is not None, "no reply to the station's STATS of (0,1) relayed by (0,0) reached anyone"
        assert got[0] is station, "a forged packet carrying the station's request id steered its reply to the attacker"
        assert sky.signer.reply_ok(got[1])
        Observer(sky).settled((0, 0))
        assert not [p for p in attacker.drain() + attacker.received if request_id_of(p) == rid]
    finally:
        station.close()
        attacker.close()


def test_n3_a_flood_signed_ahead_on_one_link_does_not_deafen_a_satellite_to_its_ground(sky):
    """N3. Holding (1,1)'s key file, the attacker sends (1,0) 600 NOOPs signed with its link key, from made-up
    sources, 0.98 s ahead of the clock. Right after, the ground's signed STATS must be answered (before: they
    recycled the replay windows and raised the floor, and the ground's commands were refused for a second)."""
    attacker = Captured(sky)
    station = Party(sky, 12, sky.signer)
    try:
        for i in range(600):
            src = (random.randrange(0, 0x7FFF), random.randrange(0, 0xFFFE))
            attacker.send(attacker.command(wire.SKYMEM_NOOP_CC, NEIGHBOUR, src=src, seq=_seq_ahead(0.98)))
            if i % 50 == 49:
                time.sleep(0.001)  # bursts the node's socket buffer holds
        ask = station.command(wire.SKYMEM_STATS_CC, NEIGHBOUR)
        station.send(ask, NEIGHBOUR)
        got = reply_to(ask, station)
        assert got is not None and sky.signer.reply_ok(got[1]), \
            "after a flood of link-signed NOOPs from made-up sources, (1,0) refused the ground's signed STATS"
    finally:
        attacker.close()
        station.close()


def test_n4_an_unsigned_packet_claiming_a_satellite_is_not_relayed_from_a_ground_port(sky):
    """N4. A migration SET_CHUNK with no trailer, claiming (0,1) as its source and (1,1) as its destination, sent
    into (0,0)'s ground port: it must not reach (1,1) (before: relayed over ISL). Proof that it was handled: a
    signed STATS sent to (0,0)'s ground port after it is answered."""
    attacker = Party(sky, 13, None)
    block = random.randbytes(32)
    data = b"planted by nobody"
    try:
        route = wire.RouteHeader(1, 1, 0, 1, request_id=random.getrandbits(32) | 1, flags=wire.SKYMEM_RF_MIGRATION)
        desc = wire.make_desc(block, 0, 1, int(time.time() * 1000), data)
        attacker.send(wire.encode_data_command(wire.SKYMEM_SET_CHUNK_CC, route, wire.set_chunk_body(desc, data)),
                      (0, 0))
        Observer(sky).settled((0, 0))
        async def read():
            async with SkyMemoryClient(sky.m.ground_addresses(), signer=sky.signer, bind=(sky.m.ground_host, 0),
                                       timeout=0.5, retries=20) as c:
                try:
                    return await c.get_chunk((1, 1), block, 0)
                except ChunkNotFound:
                    return None
        assert asyncio.run(read()) is None, "an unsigned packet claiming a satellite was relayed from a ground port"
    finally:
        attacker.close()


def test_m3_residual_a_command_refused_as_too_far_ahead_stays_refused_when_its_time_comes(sky):
    """M3, residual. Station 14 signs SET_PARAM 5 s ahead (beyond the ~1 s a signer may lead) and sends it to
    (1,0): refused. Once the clock has passed that sequence the same datagram comes again: refused again, the
    budget unchanged (before: taken then, as a fresh command). The satellite is settled first (a STATS answered):
    a datagram that waited in its queue behind others is judged by the clock when it is read."""
    station = Party(sky, 14, sky.signer)
    observer = Observer(sky)
    try:
        budget = observer.settled(SAT3).bytes_budget
        wanted_kb = budget // 1024 // 2 + 7
        seq = _seq_ahead(5.0)
        packet = station.command(wire.SKYMEM_SET_PARAM_CC, SAT3,
                                 wire.encode_set_param(wire.SKYMEM_PARAM_MEMORY_BUDGET_KB, wanted_kb), seq=seq)
        failures = observer.stats(SAT3).auth_failures
        station.send(packet, SAT3)
        first = _outcome(station, observer, packet, failures)
        assert first != "ACK", "a SET_PARAM signed 5 s ahead was taken"
        while _seq_ahead(0) <= seq + 1:  # its time comes (the satellites share this machine's clock)
            time.sleep(0.05)
        failures = observer.stats(SAT3).auth_failures
        station.send(packet, SAT3)
        again = _outcome(station, observer, packet, failures)
        now = observer.stats(SAT3).bytes_budget
        assert again != "ACK" and now == budget, \
            f"the SET_PARAM refused as too far ahead was taken once its time came ({again}; {now // 1024} KiB)"
    finally:
        station.close()


def test_n6_a_short_hk_request_is_not_amplified_toward_the_telemetry_host(node_built, tmp_path):
    """N6. Native nodes launched with --tlm-address send housekeeping to the telemetry host whoever asks. An
    8-byte SEND_HK must bring nothing there (before: 104 bytes, 13x, aimed by anyone at that host); the same
    request padded to the answer's length (wire.encode_hk_request) brings one housekeeping packet."""
    tlm = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tlm.bind(("127.0.93.1", 0))
    path = launch(tmp_path, 1, 2, "--tlm-address", "127.0.93.1", "--tlm-port", str(tlm.getsockname()[1]))
    try:
        sky = Sky(path)
        attacker = Party(sky, 15, None)
        try:
            for mid in (wire.SKYMEM_SEND_HK_MID, wire.ISL_ROUTER_SEND_HK_MID):
                attacker.send(wire.encode_command(mid, 0), (0, 0))
            Observer(sky).settled((0, 0))
            assert not select.select([tlm], [], [], 0)[0], "an 8-byte SEND_HK sent housekeeping to the telemetry host"
            attacker.send(wire.encode_hk_request(wire.SKYMEM_SEND_HK_MID), (0, 0))
            assert select.select([tlm], [], [], WAIT_S)[0], "a padded SEND_HK brought no housekeeping"
            assert int.from_bytes(tlm.recv(65536)[:2], "big") == wire.SKYMEM_HK_TLM_MID
        finally:
            attacker.close()
    finally:
        tlm.close()
        r = stop(path)
        assert r.returncode == 0, r.stderr
