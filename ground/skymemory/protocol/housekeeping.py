"""Receiving both apps' housekeeping where it is sent: TO_LAB's destination on cFS, --tlm-dest natively.

`HousekeepingListener(manifest)` binds one UDP socket per telemetry destination
the manifest lists (tlm_host:tlm_port; on one host each cFS instance has its own
address). `run()` then, until a deadline:

* optionally sends TO_LAB's enable-output command to every cFS instance's CI_LAB
  (again every 2 s until that instance's telemetry arrives: CI_LAB reads its
  socket twice a second and a datagram can be lost);
* optionally asks every satellite for SKYMEM and ISL_ROUTER housekeeping once a
  second, through its command port (CI_LAB on cFS, the ground port natively);
* records every packet: SKYMEM / ISL_ROUTER housekeeping per satellite (first
  and last counters, and whether it came in on that satellite's own address),
  anything else (cFE housekeeping, events) counted by message ID.

`Report.complete` says whether every satellite's housekeeping of both apps
arrived at least twice; `Report.counters_moved` lists satellites whose command
or error counters changed between their first and last housekeeping.
"""

from __future__ import annotations

import selectors
import socket
import time
from collections import Counter
from dataclasses import dataclass, field

from skymemory.orbit.manifest import Manifest
from skymemory.protocol import lab_apps, wire
from skymemory.protocol.errors import WireError

Sat = tuple[int, int]
APPS = ("SKYMEM", "ISL_ROUTER")
_HK_MID = {wire.SKYMEM_HK_TLM_MID: "SKYMEM", wire.ISL_ROUTER_HK_TLM_MID: "ISL_ROUTER"}
# cFS takes the 8-byte requests through CI_LAB (TO_LAB sends the answer to its own destination); a native node
# answers its sender only a request padded to the answer's length (wire.encode_hk_request)
_SEND_HK_CFS = (wire.encode_command(wire.SKYMEM_SEND_HK_MID, 0), wire.encode_command(wire.ISL_ROUTER_SEND_HK_MID, 0))
_SEND_HK_NODE = (wire.encode_hk_request(wire.SKYMEM_SEND_HK_MID), wire.encode_hk_request(wire.ISL_ROUTER_SEND_HK_MID))


@dataclass
class SatTelemetry:
    """What arrived from one satellite, per app: packet count, first and last (cmd_count, err_count)."""
    count: Counter = field(default_factory=Counter)
    first: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    misdelivered: int = 0  # housekeeping of this satellite that came in on another satellite's address


@dataclass
class Report:
    sats: dict[Sat, SatTelemetry]
    other: Counter  # message id -> packets (cFE housekeeping, events, ...)
    packets: list[bytes]
    seconds: float

    @property
    def complete(self) -> bool:
        return all(t.count[a] >= 2 for t in self.sats.values() for a in APPS)

    @property
    def counters_moved(self) -> list[Sat]:
        return sorted(s for s, t in self.sats.items() if any(t.first.get(a) != t.last.get(a) for a in APPS))

    @property
    def misdelivered(self) -> list[Sat]:
        return sorted(s for s, t in self.sats.items() if t.misdelivered)


def _counters(mid: int, packet: bytes) -> tuple[Sat, tuple[int, int]]:
    if mid == wire.SKYMEM_HK_TLM_MID:
        hk = wire.decode_hk(packet)[2]
    else:
        hk = wire.decode_router_hk(packet)[2]
    return (hk.plane, hk.sat), (hk.cmd_count, hk.err_count)


class HousekeepingListener:
    def __init__(self, manifest: Manifest) -> None:
        self.m = manifest
        self.dests: dict[tuple[str, int], list[Sat]] = {}
        for e in manifest.satellites:
            if e.tlm_host:
                self.dests.setdefault((e.tlm_host, e.tlm_port), []).append((e.plane, e.sat))
        if not self.dests:
            raise ValueError("this constellation sends no telemetry: launch it with --runtime cfs, or with "
                             "--tlm-address for native nodes")
        self.selector = selectors.DefaultSelector()
        self.cmd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            for dest, sats in self.dests.items():
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                try:
                    s.bind(dest)
                except OSError as exc:
                    s.close()
                    raise OSError(f"cannot listen on {dest[0]}:{dest[1]} (telemetry of {sats[0]}): "
                                  f"{exc.strerror}") from None
                s.setblocking(False)
                self.selector.register(s, selectors.EVENT_READ, sats)
        except OSError:
            self.close()
            raise

    def close(self) -> None:
        for key in list(self.selector.get_map().values()):
            self.selector.unregister(key.fileobj)
            key.fileobj.close()
        self.selector.close()
        self.cmd.close()

    def __enter__(self) -> "HousekeepingListener":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _send(self, packet: bytes, address: tuple[str, int]) -> None:
        try:
            self.cmd.sendto(packet, address)
        except OSError:
            pass  # an unreachable satellite shows as missing housekeeping in the report

    def run(self, duration_s: float, enable_output: bool = False, request_hk: bool = False,
            until_complete: bool = False) -> Report:
        sats = {(e.plane, e.sat): SatTelemetry() for e in self.m.satellites if e.tlm_host}
        report = Report(sats, Counter(), [], 0.0)
        commands = self.m.command_addresses()
        cfs_sats = [e for e in self.m.satellites if e.command_port and e.tlm_host]
        on_cfs = {(e.plane, e.sat) for e in self.m.satellites if e.command_port}
        heard: set[Sat] = set()
        t0 = time.monotonic()
        deadline = t0 + duration_s
        next_enable = next_request = t0
        while time.monotonic() < deadline and not (until_complete and report.complete):
            now = time.monotonic()
            if enable_output and now >= next_enable:
                for e in cfs_sats:
                    if (e.plane, e.sat) not in heard:
                        self._send(lab_apps.to_lab_enable_output(e.tlm_host), (e.host, e.command_port))
                next_enable = now + 2.0
            if request_hk and now >= next_request:
                for s in sats:
                    for packet in _SEND_HK_CFS if s in on_cfs else _SEND_HK_NODE:
                        self._send(packet, commands[s])
                next_request = now + 1.0
            for key, _ in self.selector.select(timeout=max(0.0, min(0.2, deadline - time.monotonic()))):
                while True:
                    try:
                        packet = key.fileobj.recv(65535)
                    except BlockingIOError:
                        break
                    heard.update(key.data)
                    self._record(report, packet, key.data)
        report.seconds = time.monotonic() - t0
        return report

    @staticmethod
    def _record(report: Report, packet: bytes, on_address_of: list[Sat]) -> None:
        report.packets.append(packet)
        mid = int.from_bytes(packet[:2], "big") if len(packet) >= 2 else -1
        app = _HK_MID.get(mid)
        if app is None:
            report.other[mid] += 1
            return
        try:
            sat, counters = _counters(mid, packet)
        except WireError:
            report.other[mid] += 1
            return
        t = report.sats.get(sat)
        if t is None:
            report.other[mid] += 1
            return
        t.count[app] += 1
        t.first.setdefault(app, counters)
        t.last[app] = counters
        if sat not in on_address_of:
            t.misdelivered += 1
