"""Follows the JSON-lines event file of a running `skymemory bench ttft` / `skymemory demo` (`--events FILE`).

The benchmark appends one JSON object per line and flushes it at once
(skymemory.bench.ttft.EventFile): "start" (config), "constellation"
(profile, manifest), "log" (message), "measurement" (one Measurement),
"done" (summary), each with "time". `BenchEvents.poll()` reads whatever
complete lines were added since the last call; it copes with a file that
does not exist yet, a line still being written, and a file that was
truncated or replaced (it starts over). Several runs may share a file: each
"start" begins a new run, and the dashboard shows the latest one.

From the events it keeps the run's configuration, the constellations it
booted (the newest manifest is where the dashboard attaches when no
--manifest was given), the last log lines, every measurement (the TTFT
panel) and the cache outcome of each cached run (the hits and misses).
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path

UNCACHED_MODES = ("nocache", "device-ram", "gpu-ram")  # runs that never ask a cache (gpu-ram: device-ram's old name)
_KEPT_FIELDS = ("prefix_tokens", "mode", "round", "ttft_s", "cached_tokens", "expected_cached_tokens", "decision",
                "tokens_equal", "retrieval_s", "gen_total_s", "miss_reason")


def cache_outcome(m: dict) -> str | None:
    """'hit' (the whole cacheable prefix came from the cache), 'partial', 'miss', or None for uncached modes."""
    if m.get("mode") in UNCACHED_MODES or not m.get("expected_cached_tokens"):
        return None
    cached = m.get("cached_tokens") or 0
    if cached >= m["expected_cached_tokens"]:
        return "hit"
    return "partial" if cached > 0 else "miss"


class BenchEvents:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0
        self._inode: tuple[int, int] | None = None
        self._partial = b""
        self._reset_run()
        self.constellations: list[dict] = []  # the constellations the current run announced

    def _reset_run(self) -> None:
        self.state = "waiting"  # waiting (no run yet), running, done
        self.config: dict = {}
        self.started: float | None = None
        self.finished: float | None = None
        self.logs: deque[dict] = deque(maxlen=8)
        self.measurements: list[dict] = []

    @property
    def manifest(self) -> Path | None:
        """The manifest of the newest constellation the benchmark announced."""
        return Path(self.constellations[-1]["manifest"]) if self.constellations else None

    def poll(self) -> int:
        """Read the lines appended since the last call; returns how many events were applied."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                identity = (st.st_dev, st.st_ino)
                if identity != self._inode or st.st_size < self._offset:  # a new or truncated file: start over
                    self._inode, self._offset, self._partial = identity, 0, b""
                    self._reset_run()
                    self.constellations = []
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return 0
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()  # an unterminated last line is still being written
        applied = 0
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a damaged line costs that event only
            if isinstance(event, dict):
                self._apply(event)
                applied += 1
        return applied

    def _apply(self, event: dict) -> None:
        kind, when = event.get("event"), event.get("time")
        if kind == "start":  # a new run: the previous run's constellation is gone or not its concern
            self._reset_run()
            self.constellations = []
            self.state, self.started = "running", when
            self.config = event.get("config") or {}
        elif kind == "constellation":
            self.constellations.append({"profile": event.get("profile"), "manifest": event.get("manifest")})
        elif kind == "log":
            self.logs.append({"time": when, "message": str(event.get("message", ""))})
        elif kind == "measurement":
            self.measurements.append({k: event.get(k) for k in _KEPT_FIELDS})
        elif kind == "done":
            self.state, self.finished = "done", when

    def outcomes(self) -> dict[str, int]:
        counts = {"hit": 0, "partial": 0, "miss": 0}
        for m in self.measurements:
            outcome = cache_outcome(m)
            if outcome is not None:
                counts[outcome] += 1
        return counts

    def snapshot(self) -> dict:
        return {
            "file": str(self.path), "state": self.state, "started": self.started, "finished": self.finished,
            "config": {k: self.config.get(k) for k in ("model", "prefix_tokens", "repeats", "servers", "planes",
                                                        "sats") if k in self.config},
            "constellation": self.constellations[-1] if self.constellations else None,
            "logs": list(self.logs), "measurements": self.measurements, "outcomes": self.outcomes(),
        }
