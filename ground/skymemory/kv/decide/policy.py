"""Per request: fetch the cached prefix, part of it, recompute it, or split it (kv.decide.costmodel, measured here).

    policy = FetchPolicy("auto")                # or "fetch" / "recompute": forced
    link = LinkEstimate("sky")                   # fed by every transfer from one store
    link.observe(n_bytes, seconds, first_reply_s)
    decision = policy.decide(rates, link, prompt_tokens=..., cached_blocks=..., ...)
    decision = policy.decide(..., streaming=False, split=True)   # a caller that can recompute and load at once
    forwards = ForwardEstimate()                 # an engine's forward, learnt from the steps it ran
    forwards.observe(new_tokens, context_tokens, seconds)

`LinkEstimate` keeps the recent transfers of one store: the round trip (the
transport's time to its first reply) and the goodput of the rest. With no
transfer seen yet, "auto" fetches: that fetch is the measurement (a store is
not worth judging before anything came from it). Transfers older than
`max_age_s` are forgotten, so a store "auto" stopped fetching from is measured
again by a fetch a minute later: a link that was slow once is not judged slow
for ever. `DeviceRates` come from kv.decide.calibration; an engine that runs its own
forward (vLLM) gives `EngineRates` from a `ForwardEstimate` of its steps.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass

from .costmodel import NEAR_COPIES, Decision, LinkModel, PrefillModel, RebuildModel, decide

POLICIES = ("auto", "fetch", "recompute")
MIN_SECONDS = 1e-6
MAX_AGE_S = 60.0  # a link estimate older than this is measured again (one fetch)


def check_policy(policy: str) -> str:
    if policy not in POLICIES:
        raise ValueError(f"unknown fetch policy {policy!r}; choose one of {', '.join(POLICIES)}")
    return policy


class LinkEstimate:
    """Round trip and goodput of one store, from its last `window` complete transfers of the last `max_age_s`."""

    def __init__(self, name: str, window: int = 16, max_age_s: float = MAX_AGE_S, clock=time.monotonic) -> None:
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        self.name = name
        self.max_age_s = max_age_s
        self._clock = clock
        self._samples: deque[tuple[int, float, float, float]] = deque(maxlen=window)  # bytes, s, round trip, when
        self._lock = threading.Lock()

    def observe(self, n_bytes: int, seconds: float, first_reply_s: float | None = None) -> None:
        """One complete transfer of `n_bytes` that took `seconds`, its first reply after `first_reply_s`."""
        if n_bytes <= 0 or seconds <= 0:
            return
        rtt = min(first_reply_s or 0.0, seconds)
        with self._lock:
            self._samples.append((n_bytes, seconds, rtt, self._clock()))

    def _recent(self) -> list[tuple[int, float, float, float]]:
        oldest = self._clock() - self.max_age_s
        with self._lock:
            while self._samples and self._samples[0][3] < oldest:
                self._samples.popleft()
            return list(self._samples)

    @property
    def samples(self) -> int:
        return len(self._recent())

    def model(self) -> LinkModel | None:
        """The link as the cost model sees it, or None before any transfer (or when all are too old)."""
        samples = self._recent()
        if not samples:
            return None
        rtt = statistics.median(s[2] for s in samples)
        rate = statistics.median(n / max(seconds - rtt, MIN_SECONDS) for n, seconds, _, _ in samples)
        return LinkModel(self.name, rate, rtt)


class ForwardEstimate:
    """T(new, ctx) of an engine's forward (kv.decide.costmodel.PrefillModel), fitted from forwards it was seen to run.

    For an engine whose forward cannot be timed in isolation (vLLM runs its own), the steps it ran
    are the calibration: `observe(new, context, seconds)` for each step of one request. Prefill-sized
    steps and decode steps are kept apart (a serving engine runs far more of the second), and
    there is no model until prefills of `min_lengths` lengths (and three steps in all) were seen.
    """

    def __init__(self, window: int = 32, min_lengths: int = 2, prefill_tokens: int = 16) -> None:
        self.min_lengths = min_lengths
        self.prefill_tokens = prefill_tokens
        self._prefills: deque[tuple[int, int, float]] = deque(maxlen=window)
        self._decodes: deque[tuple[int, int, float]] = deque(maxlen=8)
        self._model: PrefillModel | None = None
        self._lock = threading.Lock()

    def observe(self, new_tokens: int, context_tokens: int, seconds: float) -> None:
        if new_tokens <= 0 or seconds <= 0:
            return
        with self._lock:
            (self._prefills if new_tokens >= self.prefill_tokens else self._decodes).append(
                (new_tokens, context_tokens, seconds))
            self._model = None

    def model(self, device: str = "engine") -> PrefillModel | None:
        with self._lock:
            rows = list(self._prefills) + list(self._decodes)
            if self._model is None and len({n for n, _, _ in self._prefills}) >= self.min_lengths and len(rows) >= 3:
                self._model = PrefillModel.fit(rows, device=device)
            return self._model


@dataclass(frozen=True)
class EngineRates:
    """What FetchPolicy.decide needs of a device, from an engine's own measurements (kv.decide.calibration's
    DeviceRates is the same for a transformers model it can time itself)."""

    prefill: PrefillModel
    rebuild: RebuildModel


class FetchPolicy:
    """How much of a cached prefix to fetch: `mode` "auto" decides from the rates, the others are forced."""

    def __init__(self, mode: str = "auto") -> None:
        self.mode = check_policy(mode)

    def decide(self, rates, link: LinkEstimate, *, prompt_tokens: int, cached_blocks: int, block_tokens: int,
               block_bytes: int, layers: int, streaming: bool, mode: str | None = None,
               split: bool = False, near: bool = False) -> Decision:
        """rates: kv.decide.calibration.DeviceRates, or None when the mode does not need them.

        near=True: a memory tier near the model holds every cached block (kv.transfer.tiers), so no
        link is crossed and the link's estimate does not matter (costmodel.NEAR_COPIES).

        split=True lets "auto" choose a split (recompute the first blocks while the rest load;
        kv.decide.costmodel), for a caller that runs one; split=False (an engine that loads a prefix and
        computes the rest, like vLLM) chooses among recompute, partial and fetch.
        """
        mode = check_policy(mode or self.mode)
        if mode != "auto":
            blocks = cached_blocks if mode == "fetch" else 0
            return _without_prediction(mode, blocks, cached_blocks, f"forced: policy {mode}", link)
        estimate = NEAR_COPIES if near else link.model()
        if estimate is None:
            return _without_prediction("fetch", cached_blocks, cached_blocks,
                                       f"no transfer measured in the last {link.max_age_s:.0f} s: "
                                       "this fetch measures the link", link)
        if rates is None:
            return _without_prediction("fetch", cached_blocks, cached_blocks,
                                       "this engine's compute rate is not measured yet: fetching", link)
        return decide(estimate, rates.prefill, prompt_tokens=prompt_tokens, cached_blocks=cached_blocks,
                      block_tokens=block_tokens, block_bytes=block_bytes, layers=layers, streaming=streaming,
                      rebuild=rates.rebuild, split=split)


def _without_prediction(action: str, blocks: int, cached: int, reason: str, link: LinkEstimate) -> Decision:
    if action == "fetch" and blocks == 0:
        action = "recompute"
    nan = float("nan")
    return Decision(action, blocks, cached, nan, nan, nan, {"link": link.name, "samples": link.samples}, reason)
