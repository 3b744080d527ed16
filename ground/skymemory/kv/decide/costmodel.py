"""Fetch, recompute, or both at once: how to get a cached prefix onto the device, from measured rates.

A request of N prompt tokens has k cached blocks of B tokens. Fetching the
first m blocks (0 <= m <= k) leaves N - m*B tokens to compute with m*B tokens
of context; the rest of the cached prefix is recomputed. Time to first token:

  compute(m)  = T(N - m*B, m*B)        the forward over the uncached tokens, fitted on this device:
                T(new, ctx) = a + b*new + c*(new^2 + 2*new*ctx) + d*ctx + e*[ctx > 0]
                (fixed cost, per-token work, attention over what is new and what came before,
                 reading the context, the fixed cost of a forward over a cache; T(n, 0) is a
                 plain prefill). e matters on a launch-bound GPU: a short suffix over a cache
                 runs the cache's update and mask kernels in every layer and can cost as much
                 as a whole prefill; without e the fit splits that step between a and d and
                 predicts such a suffix cheaper than it is. The fit minimises relative error:
                 a 5 ms suffix point counts as much as a 2 s prefill.
  transfer(m) = rtt + m * block_bytes / rate                      (0 when m = 0)
  rebuild(m)  = r0 + m * block_bytes / r                          bytes -> cache on the device (0 when m = 0)
  TTFT(m)     = transfer(m) + rebuild(m) + compute(m)             without streaming
  TTFT(m)     = max(transfer(m) + (rebuild(m) + compute(m)) / L,  with layerwise streaming over L layers:
                    rtt + wire(m) / L + rebuild(m) + compute(m))  layer l waits for its KV, the forward
                                                                  waits at least for the first layer's share
m = 0 is "recompute", m = k "fetch", anything between "partial" (fetch the
first m blocks, compute the rest after them: what an engine that loads a
prefix and computes the rest, like vLLM, can do).

The split (Cake, "Compute Or Load KV Cache? Why Not Both?", 2024): the device
recomputes blocks [0, s) from the start of the prefix while blocks [s, k) are
fetched and rebuilt at the same time; the two halves are joined (one more
device copy of the k blocks, at the rebuild rate) and the forward runs over the
uncached suffix with the whole prefix as context:

  compute leg = T(s*B, 0)
  load leg    = transfer(k - s) + rebuild(k - s)
  TTFT(s)     = max(compute leg, load leg) + k * block_bytes / r + T(N - k*B, k*B)     1 <= s <= k-1

It is costed without streaming (KVCManager runs it on its non-streaming path),
and offered only to callers that can execute it (`decide(split=True)`); a caller
that cannot picks among recompute, partial and fetch. Either way the least
predicted TTFT wins. This is the Prefill-as-a-Service argument (seed 003, eq. 1):
the KV of a prefix is worth moving when the link moves it faster than the device
recomputes it (KV throughput S_kv/T_prefill); the split takes the best of both
when neither is much faster. On a CPU host prefill is slow and fetching wins;
on a GPU a small model's prefill is launch-bound (tens of ms whatever the
length) and recomputing often wins; long prefixes of big models favour
fetching again.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class LinkModel:
    name: str
    rate_Bps: float  # retrieval goodput, bytes/s
    rtt_s: float  # ground round trip to the satellites holding the blocks

    def __post_init__(self) -> None:
        if self.rate_Bps <= 0 or self.rtt_s < 0:
            raise ValueError("rate must be > 0 and rtt >= 0")


# A prefix every block of which a memory tier near the model holds (kv.transfer.tiers): nothing crosses a
# link. What remains, the copy to the device and the relayout, is the rebuild's cost (calibrated
# from a host buffer, so a device-tier hit is priced a copy too high: on the safe side).
NEAR_COPIES = LinkModel("tiers", float("inf"), 0.0)


@dataclass(frozen=True)
class RebuildModel:
    """Seconds to turn landed bytes into a cache on the device: fixed_s + bytes / rate_Bps."""

    fixed_s: float
    rate_Bps: float

    def __post_init__(self) -> None:
        if self.rate_Bps <= 0 or self.fixed_s < 0:
            raise ValueError("rebuild rate must be > 0 and its fixed cost >= 0")

    def seconds(self, n_bytes: int) -> float:
        return self.fixed_s + n_bytes / self.rate_Bps if n_bytes > 0 else 0.0


FREE_REBUILD = RebuildModel(0.0, float("inf"))  # for callers that account for the rebuild elsewhere


def _nnls(features: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Least squares with coefficients >= 0: the best of the unconstrained fits on every subset of columns."""
    n = features.shape[1]
    best, best_residual = np.zeros(n), float(np.sum(targets ** 2))
    for size in range(1, n + 1):
        for columns in itertools.combinations(range(n), size):
            coef, *_ = np.linalg.lstsq(features[:, columns], targets, rcond=None)
            if np.any(coef < 0):
                continue
            residual = float(np.sum((features[:, columns] @ coef - targets) ** 2))
            if residual < best_residual - 1e-18:
                best = np.zeros(n)
                best[list(columns)] = coef
                best_residual = residual
    return best


@dataclass(frozen=True)
class PrefillModel:
    """T(new, ctx) = a + b*new + c*(new^2 + 2*new*ctx) + d*ctx + e*[ctx > 0] seconds on this device
    (see the module doc)."""

    a: float
    b: float
    c: float
    device: str = "cpu"
    d: float = 0.0
    e: float = 0.0

    def forward_s(self, new_tokens: int, context_tokens: int = 0) -> float:
        """One forward over `new_tokens` with `context_tokens` already in the cache."""
        if new_tokens <= 0:
            return 0.0
        return (self.a + self.b * new_tokens + self.c * (new_tokens ** 2 + 2 * new_tokens * context_tokens)
                + self.d * context_tokens + (self.e if context_tokens > 0 else 0.0))

    def t(self, n: float) -> float:
        """A plain prefill of n tokens."""
        return self.forward_s(n, 0)

    def compute_s(self, total_tokens: int, cached_tokens: int) -> float:
        """The forward over tokens cached_tokens..total_tokens (with the cached ones as context)."""
        return self.forward_s(total_tokens - max(0, cached_tokens), max(0, cached_tokens))

    @classmethod
    def fit(cls, points, device: str = "cpu") -> "PrefillModel":
        """Non-negative least squares of the relative error over (tokens, seconds) prefills and
        (new, context, seconds) forwards.

        Relative, because the points span two or three orders of magnitude (a 16-token prefill to
        a 2,048-token one on a CPU) and the decision needs the short suffix as right as the long
        prefill. Without any forward over a context, d and e are not identifiable and stay 0.
        """
        rows = [(p[0], 0, p[1]) if len(p) == 2 else tuple(p) for p in points]
        if len(rows) < 3:
            raise ValueError("need forward timings at three lengths or more")
        new = np.array([r[0] for r in rows], dtype=float)
        ctx = np.array([r[1] for r in rows], dtype=float)
        seconds = np.array([r[2] for r in rows], dtype=float)
        if np.any(seconds <= 0):
            raise ValueError("forward timings must be > 0 s")
        columns = [np.ones_like(new), new, new * new + 2 * new * ctx]
        if np.any(ctx > 0):
            columns += [ctx, (ctx > 0).astype(float)]
        coef = _nnls(np.stack(columns, axis=1) / seconds[:, None], np.ones_like(seconds))
        a, b, c = (float(x) for x in coef[:3])
        d, e = (float(coef[3]), float(coef[4])) if len(coef) > 3 else (0.0, 0.0)
        if b == 0.0 and c == 0.0:  # degenerate fit: linear through the largest prefill
            b = float(seconds.max() / new.max())
        return cls(a, b, c, device, d, e)


@dataclass(frozen=True)
class Decision:
    action: str  # "fetch", "split", "partial" or "recompute"
    fetch_blocks: int  # blocks to load: [split_at, split_at + fetch_blocks) of the cached prefix
    cached_blocks: int
    predicted_s: float
    recompute_s: float
    fetch_all_s: float
    inputs: dict
    reason: str = "predicted"  # "predicted", or why the prediction was not used ("forced: ...", "no link ...")
    split_at: int = 0  # "split": blocks [0, split_at) are recomputed on the device while the rest load
    compute_leg_s: float = 0.0  # "split": predicted prefill of the first split_at blocks (0 otherwise)
    load_leg_s: float = 0.0  # "split": predicted transfer + rebuild of the loaded blocks (0 otherwise)

    def as_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        """'fetch 8/8', 'split 3+5/8' (3 recomputed, 5 loaded), 'partial 3/8', 'recompute 0/8' (+ why, when
        it is not a prediction)."""
        if self.action == "split":
            text = f"split {self.split_at}+{self.fetch_blocks}/{self.cached_blocks}"
        else:
            text = f"{self.action} {self.fetch_blocks}/{self.cached_blocks}"
        return text if self.reason == "predicted" else f"{text} ({self.reason})"


def predict(link: LinkModel, prefill: PrefillModel, *, prompt_tokens: int, block_tokens: int, block_bytes: int,
            fetch_blocks: int, layers: int, streaming: bool = True, rebuild: RebuildModel = FREE_REBUILD) -> float:
    """Predicted TTFT (s) when the first `fetch_blocks` blocks are fetched and the rest computed."""
    cached = fetch_blocks * block_tokens
    compute = prefill.compute_s(prompt_tokens, cached)
    if fetch_blocks == 0:
        return compute
    n_bytes = fetch_blocks * block_bytes
    wire = n_bytes / link.rate_Bps
    transfer = link.rtt_s + wire
    local = rebuild.seconds(n_bytes) + compute
    if not streaming:
        return transfer + local
    return max(transfer + local / layers, link.rtt_s + wire / layers + local)


def predict_split(link: LinkModel, prefill: PrefillModel, *, prompt_tokens: int, block_tokens: int,
                  block_bytes: int, cached_blocks: int, split_at: int,
                  rebuild: RebuildModel = FREE_REBUILD) -> tuple[float, float, float]:
    """(TTFT, compute leg, load leg) in seconds when blocks [0, split_at) are recomputed while the rest load."""
    if not 0 < split_at < cached_blocks:
        raise ValueError(f"a split point must lie inside the cached prefix (1..{cached_blocks - 1}), got {split_at}")
    compute_leg = prefill.forward_s(split_at * block_tokens, 0)
    n_bytes = (cached_blocks - split_at) * block_bytes
    load_leg = link.rtt_s + n_bytes / link.rate_Bps + rebuild.seconds(n_bytes)
    join = cached_blocks * block_bytes / rebuild.rate_Bps  # computed K/V and loaded K/V into one tensor per layer
    suffix = prefill.compute_s(prompt_tokens, cached_blocks * block_tokens)
    return max(compute_leg, load_leg) + join + suffix, compute_leg, load_leg


def decide(link: LinkModel, prefill: PrefillModel, *, prompt_tokens: int, cached_blocks: int, block_tokens: int,
           block_bytes: int, layers: int, streaming: bool = True, rebuild: RebuildModel = FREE_REBUILD,
           split: bool = False) -> Decision:
    """The least predicted TTFT among recompute, fetch, and either split (split=True) or partial (split=False)."""
    if cached_blocks < 0 or cached_blocks * block_tokens > prompt_tokens:
        raise ValueError("cached blocks must fit in the prompt")
    if split and streaming:
        raise ValueError("a split is costed and run without streaming: pass streaming=False with split=True")
    args = dict(prompt_tokens=prompt_tokens, block_tokens=block_tokens, block_bytes=block_bytes)

    def fetched(m: int) -> float:
        return predict(link, prefill, fetch_blocks=m, layers=layers, streaming=streaming, rebuild=rebuild, **args)

    # candidates: (predicted s, blocks the device recomputes, action, split_at, blocks loaded, compute leg, load leg)
    candidates = [(fetched(0), cached_blocks, "recompute", 0, 0, 0.0, 0.0)]
    for m in range(1, cached_blocks):
        if split:
            total, compute_leg, load_leg = predict_split(link, prefill, cached_blocks=cached_blocks, split_at=m,
                                                         rebuild=rebuild, **args)
            candidates.append((total, m, "split", m, cached_blocks - m, compute_leg, load_leg))
        else:
            candidates.append((fetched(m), cached_blocks - m, "partial", 0, m, 0.0, 0.0))
    if cached_blocks > 0:
        candidates.append((fetched(cached_blocks), 0, "fetch", 0, cached_blocks, 0.0, 0.0))
    best = min(candidates, key=lambda c: c[:2])  # ties: the device recomputes less
    predicted, _, action, split_at, loaded, compute_leg, load_leg = best
    rate_MBps = link.rate_Bps / 1e6 if link.rate_Bps != float("inf") else None  # None: no link (JSON has no inf)
    inputs = {"link": link.name, "rate_MBps": rate_MBps, "rtt_ms": link.rtt_s * 1e3,
              "prefill_a_ms": prefill.a * 1e3, "prefill_b_us_per_token": prefill.b * 1e6,
              "prefill_c_ns_per_token2": prefill.c * 1e9, "prefill_d_us_per_context_token": prefill.d * 1e6,
              "prefill_e_ms_over_a_cache": prefill.e * 1e3,
              "rebuild_fixed_ms": rebuild.fixed_s * 1e3, "rebuild_GBps": rebuild.rate_Bps / 1e9,
              "device": prefill.device, "prompt_tokens": prompt_tokens, "block_tokens": block_tokens,
              "block_bytes": block_bytes, "layers": layers, "streaming": streaming, "split": split}
    return Decision(action, loaded, cached_blocks, predicted, candidates[0][0], candidates[-1][0], inputs,
                    split_at=split_at, compute_leg_s=compute_leg, load_leg_s=load_leg)


def measure_prefill(model, lengths=(16, 128, 512, 1024), repeats: int = 2, vocab: int | None = None) -> PrefillModel:
    """Time forward passes of `lengths` tokens on the model's device and fit T(n) (no context term)."""
    import torch

    vocab = vocab or int(model.config.vocab_size)
    points = []
    gen = torch.Generator().manual_seed(0)
    for n in lengths:
        ids = torch.randint(3, vocab, (1, n), generator=gen).to(model.device)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            with torch.no_grad():
                model(input_ids=ids, use_cache=True)
            times.append(time.perf_counter() - started)
        points.append((n, min(times)))  # the least disturbed run (shared machines)
    return PrefillModel.fit(points, device=str(model.device))


def format_table(rows: list[tuple[str, int, int, Decision]]) -> str:
    """rows: (case label, prefix tokens, suffix tokens, decision) -> markdown."""
    out = ["| case | link | rate MB/s | RTT ms | prefix tok | suffix tok | recompute ms | fetch-all ms | "
           "best ms | decision |",
           "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for label, prefix, suffix, d in rows:
        i = d.inputs
        choice = d.action if d.action in ("fetch", "recompute") else f"{d.action} ({d.describe().split()[1]} blocks)"
        out.append(f"| {label} | {i['link']} | {i['rate_MBps']:.0f} | {i['rtt_ms']:.1f} | {prefix} | {suffix} | "
                   f"{d.recompute_s * 1e3:.1f} | {d.fetch_all_s * 1e3:.1f} | {d.predicted_s * 1e3:.1f} | {choice} |")
    return "\n".join(out)
