"""Asks every satellite for its STATS a few times a second; the replies are decoded with ccsdspy, a batch at a time.

One UDP socket, bound where the manifest says the ground client binds. Every
`period_s` the poller

1. sends one data-plane STATS request to every satellite's own ground port
   (the same request `skymemory status` sends, so it works on every runtime
   the launcher starts: native nodes, cFS, network namespaces, ssh hosts,
   containers);
2. `REPLY_WAIT_S` later, decodes the STATS replies that arrived in one go
   with the ccsdspy definition of skymemory.protocol.telemetry (a poll round is a
   stream of identical packets: what ccsdspy is for) and hands each
   satellite's fields to `on_stats(sat, received_at, fields, own_requests)`.

It never waits on a reply: a satellite that stops answering simply stops
producing samples, and the fleet marks it down. A reply is accepted only if
it is a well-formed STATS reply to a request of ours still remembered (at
most `REQUEST_MEMORY_S` old) and comes from the satellite that was asked; on a
keyed constellation (the manifest names its key) the requests are signed and a
reply must carry a valid tag of that key (its trailer is taken off for ccsdspy).

The requests carry their own ground-station id (`DASHBOARD_STATION`): a
satellite remembers one return address per station, so sharing station 0
with a running benchmark would send the benchmark's replies here.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import socket
import time
from typing import Callable

from skymemory.orbit.manifest import Manifest
from skymemory.protocol import auth, telemetry, wire
from skymemory.protocol.errors import WireError

from .fleet import POLL_PERIOD_S

Sat = tuple[int, int]
DASHBOARD_STATION = 0x0DA5
REQUEST_MEMORY_S = 3.0
REPLY_WAIT_S = 0.1  # replies are decoded this long after a round is sent (loopback: < 1 ms; RF profile: 70 ms)
_STATS_REPLY_LEN = (wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN + wire.SKYMEM_REPLY_HDR_LEN
                    + wire.SKYMEM_STATS_LEN)
_KIND_OFFSET = wire.SKYMEM_TLM_HDR_LEN + wire.SKYMEM_ROUTE_HDR_LEN
_REPLY_MID = wire.SKYMEM_REPLY_TLM_MID.to_bytes(2, "big")

OnStats = Callable[[Sat, float, dict, int], None]


class _MixedSources(logging.Filter):
    """ccsdspy checks that sequence counts run in order; a poll round holds one packet of each satellite,
    each with its own counter, so those warnings say nothing and are dropped (other warnings pass)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(("Sequence count", "Missing packets"))


_MIXED_SOURCES = _MixedSources()


class _Inbox(asyncio.DatagramProtocol):
    """Keeps every datagram that looks like a STATS reply, with its receive time."""

    def __init__(self, signer: auth.Signer | None = None) -> None:
        self.packets: list[tuple[float, bytes]] = []
        self.ignored = 0
        self.signer = signer
        self.want_len = _STATS_REPLY_LEN + (auth.TRAILER_LEN if signer else 0)

    def datagram_received(self, data: bytes, addr) -> None:
        if (len(data) == self.want_len and data[:2] == _REPLY_MID and data[_KIND_OFFSET] == wire.SKYMEM_REPLY_STATS
                and (self.signer is None or self.signer.reply_ok(data))):
            self.packets.append((time.monotonic(), auth.strip_trailer(data) if self.signer else data))
        else:
            self.ignored += 1

    def error_received(self, exc: Exception) -> None:  # ICMP port unreachable from a dead node: it just goes quiet
        self.ignored += 1


class StatsPoller:
    def __init__(self, manifest: Manifest, on_stats: OnStats, *, period_s: float = POLL_PERIOD_S) -> None:
        self.addresses = manifest.ground_addresses()
        self.bind = (manifest.ground_host, 0)
        self.signer = auth.signer_for_manifest(manifest)
        self.on_stats = on_stats
        self.period_s = period_s
        self.sent: dict[Sat, int] = {s: 0 for s in self.addresses}  # requests sent per satellite so far
        self.replies = 0
        self._asked: dict[int, tuple[Sat, float, int]] = {}  # request id -> (satellite, sent at, its number)
        self._ids = itertools.count(random.SystemRandom().randrange(1, 2**31))  # not the seedable module's

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.bind(self.bind)
        transport, inbox = await loop.create_datagram_endpoint(lambda: _Inbox(self.signer), sock=sock)
        reply_wait_s = min(REPLY_WAIT_S, self.period_s / 2)
        try:
            while not stop.is_set():
                self._ask_everyone(transport)
                if await _stopped_within(stop, reply_wait_s):
                    break
                self._take(inbox)
                await _stopped_within(stop, self.period_s - reply_wait_s)
        finally:
            transport.close()

    def _ask_everyone(self, transport: asyncio.DatagramTransport) -> None:
        now = time.monotonic()
        for rid in [r for r, (_, at, _) in self._asked.items() if now - at > REQUEST_MEMORY_S]:
            del self._asked[rid]
        for sat, address in self.addresses.items():
            rid = next(self._ids) & 0xFFFFFFFF or 1
            route = wire.RouteHeader(dst_plane=sat[0], dst_sat=sat[1], src_plane=wire.SKYMEM_GROUND_PLANE,
                                     src_sat=DASHBOARD_STATION, via_plane=sat[0], via_sat=sat[1], request_id=rid)
            self.sent[sat] += 1
            self._asked[rid] = (sat, now, self.sent[sat])
            request = wire.encode_data_command(wire.SKYMEM_STATS_CC, route)
            try:
                transport.sendto(self.signer.sign(request) if self.signer else request, address)
            except OSError:  # an unreachable host: that satellite goes quiet, the others are still asked
                pass

    def _take(self, inbox: _Inbox) -> None:
        """Decode the replies that arrived since the last tick (ccsdspy, one batch) and pass them on."""
        packets, inbox.packets = inbox.packets, []
        if not packets:
            return
        ccsdspy_log = logging.getLogger("ccsdspy")
        ccsdspy_log.addFilter(_MIXED_SOURCES)
        try:
            fields = telemetry.decode_stats_replies(b"".join(p for _, p in packets))
        except WireError:  # cannot happen for packets the inbox accepted; never let it stop the poller
            return
        finally:
            ccsdspy_log.removeFilter(_MIXED_SOURCES)
        for i, (received_at, _) in enumerate(packets):
            asked = self._asked.pop(int(fields["ROUTE_REQUEST_ID"][i]), None)
            sat = (int(fields["STATS_PLANE"][i]), int(fields["STATS_SAT"][i]))
            if asked is None or asked[0] != sat:
                continue  # not ours, too old, or from another satellite than the one asked
            counters = {name: int(fields[f"STATS_{name.upper()}"][i]) for name in wire.STATS_FIELDS}
            self.replies += 1
            self.on_stats(sat, received_at, counters, asked[2])


async def _stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds`; True when `stop` was set meanwhile."""
    try:
        await asyncio.wait_for(stop.wait(), max(seconds, 0.0))
        return True
    except asyncio.TimeoutError:
        return False
