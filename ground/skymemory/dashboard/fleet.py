"""Per-satellite health from the satellites' own STATS: up or down, memory, chunks, rates, MIGRATE and evictions.

The telemetry poller hands every STATS reply to `Fleet.record`. From those
samples the fleet answers, at any time `now` (a `time.monotonic()` value,
passed in so the rules are tested without waiting):

* **up or down**: a satellite is up while its last reply is younger than
  `STALE_AFTER_S`. With the poll and push periods on top, the page marks a
  satellite that stopped answering within `SHOWN_STALE_WITHIN_S` (2 s) of
  its last answer; `tests/test_dashboard.py` checks the arithmetic.
* **rates**: request and error rates are counter differences over the last
  `RATE_WINDOW_S` of samples. Every STATS the dashboard itself sends is a
  command the satellite counts (`cmd_count`), so those are subtracted: each
  sample carries how many requests the poller had sent to that satellite.
* **activity**: each rise of `migrated_out`, `migrated_in`, `lru_evictions`
  or `blocks_purged` between two samples is an `Activity` item; the items of
  the last `ACTIVITY_WINDOW_S` give, per plane, the satellites chunks are
  leaving and the ones they arrive at (MIGRATE moves chunks along a plane).

Counters that go down (a restarted node, RESET_COUNTERS) start the samples
afresh instead of producing negative rates.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

Sat = tuple[int, int]

POLL_PERIOD_S = 0.25  # the poller asks every satellite this often
PUSH_PERIOD_S = 0.25  # the server pushes a snapshot to each page this often
STALE_AFTER_S = 1.0  # no reply for this long: the satellite is shown down
SHOWN_STALE_WITHIN_S = 2.0  # the promise: a silent satellite is shown down this soon after its last answer
RATE_WINDOW_S = 2.0
ACTIVITY_WINDOW_S = 4.0
ACTIVITY_KINDS = ("migrated_out", "migrated_in", "lru_evictions", "blocks_purged")


@dataclass(frozen=True)
class Sample:
    t: float  # monotonic receive time
    counters: dict  # the STATS fields
    own_requests: int  # STATS requests the poller had sent to this satellite up to the answered one


@dataclass(frozen=True)
class Activity:
    t: float
    sat: Sat
    kind: str  # one of ACTIVITY_KINDS
    count: int


@dataclass
class SatelliteTrack:
    """What the dashboard knows about one satellite."""

    sat: Sat
    samples: deque = field(default_factory=deque)  # recent samples, oldest first

    @property
    def latest(self) -> Sample | None:
        return self.samples[-1] if self.samples else None

    def state(self, now: float) -> str:
        """'waiting' (never answered), 'up', or 'down' (silent for more than STALE_AFTER_S)."""
        if not self.samples:
            return "waiting"
        return "up" if now - self.samples[-1].t <= STALE_AFTER_S else "down"

    def rate(self, name: str) -> float:
        """Per-second rise of a counter over the kept samples (requests: without the dashboard's own)."""
        if len(self.samples) < 2:
            return 0.0
        first, last = self.samples[0], self.samples[-1]
        dt = last.t - first.t
        if dt <= 0:
            return 0.0
        rise = last.counters[name] - first.counters[name]
        if name == "cmd_count":
            rise -= last.own_requests - first.own_requests
        return max(rise, 0) / dt

    def add(self, sample: Sample) -> list[tuple[str, int]]:
        """Keep a sample; returns the (kind, count) rises of the activity counters since the previous one."""
        previous = self.latest
        if previous is not None and _restarted(previous.counters, sample.counters):
            self.samples.clear()
            previous = None
        self.samples.append(sample)
        while len(self.samples) > 2 and sample.t - self.samples[1].t >= RATE_WINDOW_S:
            self.samples.popleft()
        if previous is None:
            return []
        return [(kind, sample.counters[kind] - previous.counters[kind]) for kind in ACTIVITY_KINDS
                if sample.counters[kind] > previous.counters[kind]]


def _restarted(before: dict, after: dict) -> bool:
    return after["uptime_s"] < before["uptime_s"] or any(
        after[name] < before[name] for name in ("cmd_count", "rx_packets", *ACTIVITY_KINDS))


class Fleet:
    """Every satellite of one constellation, and what they did lately."""

    def __init__(self, planes: int, sats: int) -> None:
        self.planes, self.sats = planes, sats
        self.tracks = {(p, s): SatelliteTrack((p, s)) for p in range(planes) for s in range(sats)}
        self.activity: deque[Activity] = deque(maxlen=500)

    def record(self, sat: Sat, t: float, counters: dict, own_requests: int) -> None:
        track = self.tracks.get(sat)
        if track is None:  # not of this grid (a stale reply after a manifest change)
            return
        for kind, count in track.add(Sample(t, counters, own_requests)):
            self.activity.append(Activity(t, sat, kind, count))

    def recent_activity(self, now: float) -> list[Activity]:
        return [a for a in self.activity if now - a.t <= ACTIVITY_WINDOW_S]

    def flows(self, now: float) -> list[dict]:
        """Per plane, the satellites chunks left and the ones they arrived at, in the last ACTIVITY_WINDOW_S."""
        planes: dict[int, dict] = {}
        for a in self.recent_activity(now):
            if a.kind not in ("migrated_out", "migrated_in"):
                continue
            side = "from" if a.kind == "migrated_out" else "to"
            plane = planes.setdefault(a.sat[0], {"plane": a.sat[0], "from": {}, "to": {}})
            plane[side][a.sat[1]] = plane[side].get(a.sat[1], 0) + a.count
        return [{"plane": p["plane"], "from": sorted(p["from"].items()), "to": sorted(p["to"].items())}
                for _, p in sorted(planes.items())]

    def snapshot(self, now: float) -> dict:
        cells = []
        recent: dict[Sat, dict] = {}
        for a in self.recent_activity(now):
            recent.setdefault(a.sat, {}).setdefault(a.kind, 0)
            recent[a.sat][a.kind] += a.count
        for (p, s), track in self.tracks.items():
            latest = track.latest
            cell = {"plane": p, "sat": s, "state": track.state(now),
                    "age_s": None if latest is None else round(now - latest.t, 2)}
            if latest is not None:
                c = latest.counters
                cell.update(chunks=c["chunks"], bytes_used=c["bytes_used"], bytes_budget=c["bytes_budget"],
                            req_rate=round(track.rate("cmd_count"), 2), err_rate=round(track.rate("err_count"), 2),
                            uptime_s=c["uptime_s"], migrated_out=c["migrated_out"], migrated_in=c["migrated_in"],
                            lru_evictions=c["lru_evictions"], blocks_purged=c["blocks_purged"],
                            recent=recent.get((p, s), {}))
            cells.append(cell)
        feed = [{"age_s": round(now - a.t, 1), "plane": a.sat[0], "sat": a.sat[1], "kind": a.kind, "count": a.count}
                for a in reversed(self.activity)][:14]
        return {"cells": cells, "flows": self.flows(now), "feed": feed}
