"""The routing threshold t: pinned, or planned from the measured link (the paper's short-term routing, §3.4.3).

"At initialization or upon a policy update, the scheduler profiles current compute capacity and egress
bandwidth, then searches for the optimal threshold": the compute side is the measured PrefillProfile
(`skymemory model plan --save-profile`), the bandwidth is the link rate the probe measures (route.probe), and
the search is kv.decide.disaggregation.plan. Here the update is every probe: a background thread measures
every `probe_s` seconds and plans again; when t moves it says so in one log line and keeps the move in a
history (GET /router). A probe that fails keeps the last t (and is logged).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

from skymemory.kv.decide.disaggregation import Deployment, LengthDistribution, Plan, PrefillProfile, plan

log = logging.getLogger(__name__)

HISTORY = 256  # moves of t kept for GET /router


class Threshold:
    """`value`: the current t in tokens (an uncached increment longer than it is offloaded)."""

    def __init__(self, *, pinned: int | None = None, profile: PrefillProfile | None = None,
                 lengths: LengthDistribution | None = None, deployment: Deployment | None = None,
                 probe=None, probe_s: float = 5.0, clock=time.time) -> None:
        """pinned: t fixed (no planning, no probing). Otherwise profile, lengths and a probe (route.probe.LinkProbe,
        or anything with measure() -> bytes/s or None) plan it; deployment: Deployment() by default."""
        if pinned is None and (profile is None or lengths is None or probe is None):
            raise ValueError("a threshold is pinned, or planned from a profile, a length distribution and a probe")
        if pinned is not None and (isinstance(pinned, bool) or not isinstance(pinned, int) or pinned < 0):
            raise ValueError(f"a pinned threshold is a whole number of tokens >= 0, got {pinned!r}")
        if not probe_s > 0:
            raise ValueError(f"probe_s must be > 0, got {probe_s}")
        self.pinned = pinned
        self.profile, self.lengths = profile, lengths
        self.deployment = deployment or Deployment()
        self.probe, self.probe_s, self._clock = probe, probe_s, clock
        self.value: int | None = pinned
        self.link_Bps: float | None = None
        self.plan: Plan | None = None
        self.probes = self.probe_failures = 0
        self.last_error: str | None = None
        self.history: deque[tuple[float, float | None, int]] = deque(maxlen=HISTORY)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if pinned is not None:
            self.history.append((clock(), None, pinned))

    def start(self) -> None:
        """Plan once now (the first probe must succeed: raises what it raised), then again every probe_s."""
        if self.pinned is not None:
            return
        self.update(strict=True)
        self._thread = threading.Thread(target=self._loop, name="router-threshold", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.probe_s):
            self.update()

    def update(self, strict: bool = False) -> int | None:
        """One probe and one plan; t after it. A failed probe keeps t (strict: raises)."""
        try:
            rate = self.probe.measure()
        except Exception as exc:  # noqa: BLE001 - a probe that fails keeps the last t; the next may succeed
            with self._lock:
                self.probe_failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            if strict:
                raise
            log.warning("router: link probe failed (%s): threshold stays %s tokens", self.last_error, self.value)
            return self.value
        with self._lock:
            self.probes += 1
        if rate is None or not rate > 0:
            return self.value
        planned = plan(self.profile, self.lengths, rate, self.deployment)
        t = int(round(planned.threshold))
        with self._lock:
            before = self.value
            self.value, self.link_Bps, self.plan = t, rate, planned
            if t != before:
                self.history.append((self._clock(), rate, t))
        if t != before:
            log.info("threshold t: %s -> %d tokens (link %.1f MB/s)", "none" if before is None else before, t,
                     rate / 1e6)
        return t

    def snapshot(self) -> dict:
        """What GET /router says of t."""
        with self._lock:
            return {"threshold": self.value, "pinned": self.pinned is not None, "link_Bps": self.link_Bps,
                    "probe_s": None if self.pinned is not None else self.probe_s, "probes": self.probes,
                    "probe_failures": self.probe_failures, "last_probe_error": self.last_error,
                    "plan": self.plan.as_dict() if self.plan is not None else None,
                    "history": [{"time": when, "link_Bps": rate, "threshold": t} for when, rate, t in self.history]}

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)  # a probe in flight is bounded by the store's own timeouts
            self._thread = None
