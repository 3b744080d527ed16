"""Per request: fetch the cached prefix, fetch part of it, or recompute it (kv.costmodel, measured here).

    policy = FetchPolicy("auto")                # or "fetch" / "recompute": forced
    link = LinkEstimate("sky")                   # fed by every transfer from one store
    link.observe(n_bytes, seconds, first_reply_s)
    decision = policy.decide(rates, link, prompt_tokens=..., cached_blocks=..., ...)

`LinkEstimate` keeps the recent transfers of one store: the round trip (the
transport's time to its first reply) and the goodput of the rest. With no
transfer seen yet, "auto" fetches: that fetch is the measurement (a store is
not worth judging before anything came from it). `DeviceRates` come from
kv.calibration.
"""

from __future__ import annotations

import statistics
import threading
from collections import deque

from .costmodel import Decision, LinkModel, decide

POLICIES = ("auto", "fetch", "recompute")
MIN_SECONDS = 1e-6


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown fetch policy {policy!r}; choose one of {', '.join(POLICIES)}")
    return policy


class LinkEstimate:
    """Round trip and goodput of one store, from its last `window` complete transfers."""

    def __init__(self, name: str, window: int = 16) -> None:
        self.name = name
        self._samples: deque[tuple[int, float, float]] = deque(maxlen=window)  # bytes, seconds, round trip
        self._lock = threading.Lock()

    def observe(self, n_bytes: int, seconds: float, first_reply_s: float | None = None) -> None:
        """One complete transfer of `n_bytes` that took `seconds`, its first reply after `first_reply_s`."""
        if n_bytes <= 0 or seconds <= 0:
            return
        rtt = min(first_reply_s or 0.0, seconds)
        with self._lock:
            self._samples.append((n_bytes, seconds, rtt))

    @property
    def samples(self) -> int:
        return len(self._samples)

    def model(self) -> LinkModel | None:
        """The link as the cost model sees it, or None before any transfer."""
        with self._lock:
            samples = list(self._samples)
        if not samples:
            return None
        rtt = statistics.median(s[2] for s in samples)
        rate = statistics.median(n / max(seconds - rtt, MIN_SECONDS) for n, seconds, _ in samples)
        return LinkModel(self.name, rate, rtt)


class FetchPolicy:
    """How much of a cached prefix to fetch: `mode` "auto" decides from the rates, the others are forced."""

    def __init__(self, mode: str = "auto") -> None:
        self.mode = check_policy(mode)

    def decide(self, rates, link: LinkEstimate, *, prompt_tokens: int, cached_blocks: int, block_tokens: int,
               block_bytes: int, layers: int, streaming: bool, mode: str | None = None) -> Decision:
        """rates: kv.calibration.DeviceRates, or None when the mode does not need them."""
        mode = check_policy(mode or self.mode)
        if mode != "auto":
            blocks = cached_blocks if mode == "fetch" else 0
            return _without_prediction(mode, blocks, cached_blocks, f"forced: policy {mode}", link)
        estimate = link.model()
        if estimate is None:
            return _without_prediction("fetch", cached_blocks, cached_blocks,
                                       "no transfer measured yet: this fetch measures the link", link)
        return decide(estimate, rates.prefill, prompt_tokens=prompt_tokens, cached_blocks=cached_blocks,
                      block_tokens=block_tokens, block_bytes=block_bytes, layers=layers, streaming=streaming,
                      rebuild=rates.rebuild)


def _without_prediction(action: str, blocks: int, cached: int, reason: str, link: LinkEstimate) -> Decision:
    if action == "fetch" and blocks == 0:
        action = "recompute"
    nan = float("nan")
    return Decision(action, blocks, cached, nan, nan, nan, {"link": link.name, "samples": link.samples}, reason)
