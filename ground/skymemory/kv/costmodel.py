"""Fetch or recompute: which part of a cached prefix is worth fetching, from measured rates.

A request of N prompt tokens has k cached blocks of B tokens. Fetching the
first m blocks (0 <= m <= k) leaves N - m*B tokens to compute with m*B tokens
of context; the rest of the cached prefix is recomputed. Time to first token:

  compute(m)  = a + T(N) - T(m*B)                   (prefill T(n) = a + b*n + c*n^2, fitted on this device)
  transfer(m) = rtt + m * block_bytes / rate         (0 when m = 0)
  TTFT(m)     = transfer(m) + compute(m)             without streaming
  TTFT(m)     = max(transfer(m) + compute(m) / L,    with layerwise streaming over L layers: layer l
                    rtt + wire(m) / L + compute(m))  waits for its KV, the forward waits at least for
                                                     the first layer's share
The model picks the m with the least predicted TTFT: m = 0 is "recompute",
m = k "fetch", anything between "partial". This is the Prefill-as-a-Service
argument (seed 003, eq. 1): the KV of a prefix is worth moving when the link
moves it faster than the device recomputes it (KV throughput S_kv/T_prefill);
prefill grows near-quadratically with length while KV grows linearly, so long
prefixes favour fetching and short ones over slow links favour recomputing.
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class PrefillModel:
    """T(n) = a + b*n + c*n^2 seconds for a prefill of n tokens on this device."""

    a: float
    b: float
    c: float
    device: str = "cpu"

    def t(self, n: float) -> float:
        return self.a + self.b * n + self.c * n * n if n > 0 else 0.0

    def compute_s(self, total_tokens: int, cached_tokens: int) -> float:
        """The forward over tokens cached_tokens..total_tokens (with the cached ones as context)."""
        if cached_tokens <= 0:
            return self.t(total_tokens)
        return self.a + self.t(total_tokens) - self.t(cached_tokens)  # one forward: its fixed cost once

    @classmethod
    def fit(cls, points: list[tuple[int, float]], device: str = "cpu") -> "PrefillModel":
        """Least squares over (tokens, seconds); coefficients kept >= 0 so T grows with n."""
        if len(points) < 3:
            raise ValueError("need prefill timings at three lengths or more")
        n = np.array([p[0] for p in points], dtype=float)
        t = np.array([p[1] for p in points], dtype=float)
        coef, *_ = np.linalg.lstsq(np.stack([np.ones_like(n), n, n * n], axis=1), t, rcond=None)
        a, b, c = (max(0.0, float(x)) for x in coef)
        if c == 0.0 and b == 0.0:  # degenerate fit: fall back to linear through the largest point
            b = float(t.max() / n.max())
        return cls(a, b, c, device)


@dataclass(frozen=True)
class Decision:
    action: str  # "fetch", "partial" or "recompute"
    fetch_blocks: int
    cached_blocks: int
    predicted_s: float
    recompute_s: float
    fetch_all_s: float
    inputs: dict

    def as_dict(self) -> dict:
        return asdict(self)


def predict(link: LinkModel, prefill: PrefillModel, *, prompt_tokens: int, block_tokens: int, block_bytes: int,
            fetch_blocks: int, layers: int, streaming: bool = True) -> float:
    """Predicted TTFT (s) when the first `fetch_blocks` blocks are fetched and the rest computed."""
    cached = fetch_blocks * block_tokens
    compute = prefill.compute_s(prompt_tokens, cached)
    if fetch_blocks == 0:
        return compute
    wire = fetch_blocks * block_bytes / link.rate_Bps
    transfer = link.rtt_s + wire
    if not streaming:
        return transfer + compute
    return max(transfer + compute / layers, link.rtt_s + wire / layers + compute)


def decide(link: LinkModel, prefill: PrefillModel, *, prompt_tokens: int, cached_blocks: int, block_tokens: int,
           block_bytes: int, layers: int, streaming: bool = True) -> Decision:
    if cached_blocks < 0 or cached_blocks * block_tokens > prompt_tokens:
        raise ValueError("cached blocks must fit in the prompt")
    times = [predict(link, prefill, prompt_tokens=prompt_tokens, block_tokens=block_tokens, block_bytes=block_bytes,
                     fetch_blocks=m, layers=layers, streaming=streaming) for m in range(cached_blocks + 1)]
    best = min(range(len(times)), key=lambda m: (times[m], -m))  # ties: fetch more (saves device compute)
    action = "recompute" if best == 0 else "fetch" if best == cached_blocks else "partial"
    inputs = {"link": link.name, "rate_MBps": link.rate_Bps / 1e6, "rtt_ms": link.rtt_s * 1e3,
              "prefill_a_ms": prefill.a * 1e3, "prefill_b_us_per_token": prefill.b * 1e6,
              "prefill_c_ns_per_token2": prefill.c * 1e9, "device": prefill.device, "prompt_tokens": prompt_tokens,
              "block_tokens": block_tokens, "block_bytes": block_bytes, "layers": layers, "streaming": streaming}
    return Decision(action, best, cached_blocks, times[best], times[0], times[-1], inputs)


def measure_prefill(model, lengths=(16, 128, 512, 1024), repeats: int = 2, vocab: int | None = None) -> PrefillModel:
    """Time forward passes of `lengths` tokens on the model's device and fit T(n)."""
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
        choice = d.action if d.action != "partial" else f"partial ({d.fetch_blocks}/{d.cached_blocks} blocks)"
        out.append(f"| {label} | {i['link']} | {i['rate_MBps']:.0f} | {i['rtt_ms']:.1f} | {prefix} | {suffix} | "
                   f"{d.recompute_s * 1e3:.1f} | {d.fetch_all_s * 1e3:.1f} | {d.predicted_s * 1e3:.1f} | {choice} |")
    return "\n".join(out)
