"""Time to first token (TTFT) with and without SkyMemory, hardware in the loop.

For each shared-prefix length, each measured round runs one prompt (shared
prefix + one of several suffixes) in every mode, side by side:

  nocache        the model computes the whole prompt
  device-ram     the prefix KV is already in the model's own memory (the GPU's on
                 CUDA, RAM for a CPU model): no transfer, no rebuild, the limit of any
                 cache (results saved before it had this name call it gpu-ram)
  local          the prefix KV comes from the host tier in front of the store
                 (kv.transfer.tiers: one slab allocated up front, pinned when the model is on
                 CUDA, holding every prefix of the run; the far store a LocalBlockStore):
                 what a serving host keeps in its RAM, loaded at the host->device copy
                 rate, then rebuilt. The no-network limit of a cache outside the device
  device-tier    (CUDA models only: on a CPU the device is the host) the prefix's
                 encoded blocks already in device memory (the device tier): no host
                 copy, only the rebuild
  sky-<profile>  the prefix KV comes from a real constellation of satellite
                 processes (ConstellationBlockStore) under a link profile
  sky-<profile>-stream
                 the same KV streamed layer by layer while the suffix is computed
                 (--streaming on|both; skymemory.kv.transfer.streaming): "retrieval" is then
                 the whole transfer, overlapped with the prefill, and "waited" the
                 part of it the model waited for
  sky-<profile>@relay
                 (--route direct,relay) the same KV fetched through the satellite
                 overhead the ground station and on over the ISLs (skymemory.store.routes);
                 plain sky-<profile> is the --route given first, each row records its route
  sky-<profile>-auto
                 what KVCManager does by default: fetch the prefix, nothing, or split
                 it (recompute its first blocks while the rest is fetched: "split 3+5/8"),
                 as decided from the rates measured on this host (skymemory.kv.decide.policy);
                 the decision is recorded per run, a split's own forward as "recompute"
  sky-<profile>-unsealed...
                 (--seal on,off) each sky mode again over a store that keeps content in the
                 clear (ConstellationBlockStore.from_manifest(seal=False)) on the same
                 constellation; the plain names are sealed (AES-128-GCM per chunk under the
                 ground's key, as every store seals by default). Their blocks are named apart
                 (kv.format.codec.layout_name), so the two never share a block. The sealed and
                 unsealed modes take turns going first, round by round, so load that drifts
                 hits both alike; the result's "seal_comparison" (and the table under the
                 markdown) gives sealed / unsealed TTFT per mode and prefix length

The local, device-tier, sky and stream modes always fetch (policy "fetch"), so that
the cost of fetching is measured whatever it is worth; the auto mode shows the decision.
The tiers are filled as the stores are (write-through), outside every timed section.

TTFT = wall time from the prompt string to the first generated token id:
tokenise + get_cache (lookup, retrieval, KV rebuild) + forward over the
uncached suffix + argmax. Then greedy decoding continues to `gen_tokens`
tokens; the time from the string to the last token is the paper's metric
(Table 3: 30-token generation). Every cached run's tokens are compared with
the no-cache run of the same round, and with the device-ram run of that round,
and both results are recorded: device-ram holds the no-cache run's own prefix KV,
so where it differs from no cache the cause is computing the prompt in two
forwards (prefix, then suffix: other kernel shapes, other rounding), not any
cache, and a mode that generates device-ram's tokens differs only by that.

The first round of each prefix length fills the stores from the no-cache
run's KV (the fill is outside every timed section). A warm-up on a short
prompt runs every path once before anything is measured. The auto modes'
device rates are measured (or read and checked) before the warm-up; the
forwards the rounds time are compared with them between rounds, never inside
one (RateWatch: rates measured again there are logged and recorded in
"rates_measured_again").
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from skymemory.kv.model.cache_arg import cache_arg, cache_of
from skymemory.store.routes import DEFAULT_ROUTE, check_route, via_for_route

from .profiles import PROFILES, LinkProfile, profile_of_manifest
from .workload import Prompt, build_workload

Log = Callable[[str], None]
STREAMING_CHOICES = ("off", "on", "both")
# The mode whose prefix KV is already in the model's own memory, named for the device's memory whatever the
# device is ("gpu-ram" was wrong on a CPU-only run); readers of saved results take the old name too.
DEVICE_RAM = "device-ram"
DEVICE_RAM_NAMES = (DEVICE_RAM, "gpu-ram")
SEAL_CHOICES = ("on", "off")
UNSEALED = "-unsealed"  # after sky-<profile> in the name of a mode whose store keeps content in the clear


@dataclass
class TTFTConfig:
    model: str = "embedded-tinyllama"
    device: str | None = None
    dtype: str | None = None
    quantize: str | None = None
    kv_dtype: str = "fp16"
    prefix_tokens: tuple[int, ...] = (256, 512, 1024)
    suffix_tokens: int = 32
    suffixes: int = 2
    repeats: int = 3
    gen_tokens: int = 30
    gen_repeats: int = 1  # rounds (from the first) that continue to gen_tokens tokens
    profiles: tuple[LinkProfile, ...] = (PROFILES["none"], PROFILES["laser"], PROFILES["rf"])
    planes: int = 19
    sats: int = 5
    servers: int = 10  # satellites a block is striped over (the paper used 10 LOS satellites)
    chunk_size: int = 6144
    manifest: Path | None = None  # attach to a running constellation instead of booting one
    node: Path | None = None
    work_dir: Path | None = None  # constellation run dirs (default: a temporary directory)
    warmup: bool = True
    streaming: str = "off"  # sky modes: "off" fetch then compute, "on" streamed, "both" side by side
    routes: tuple[str, ...] = (DEFAULT_ROUTE,)  # how the ground reaches the servers (store.routes); the first names sky-<profile>
    seal: tuple[str, ...] = ("on",)  # sky modes sealed ("on", plain names) and/or in the clear ("off", -unsealed)
    events: Path | None = None  # a JSON-lines file the run appends its progress to (for a live view)

    def check(self) -> None:
        if not self.prefix_tokens or any(p < 1 for p in self.prefix_tokens):
            raise ValueError("prefix lengths must be >= 1 token")
        if self.suffix_tokens < 1:
            raise ValueError("suffix must be >= 1 token")
        if self.repeats < 1 or self.gen_repeats < 0 or self.gen_tokens < 1:
            raise ValueError("repeats >= 1, gen_repeats >= 0, gen_tokens >= 1")
        if not 1 <= self.servers <= self.planes * self.sats:
            raise ValueError(f"servers must be 1..{self.planes * self.sats}")
        if self.manifest is None and not self.profiles:
            raise ValueError("no link profile")
        if self.streaming not in STREAMING_CHOICES:
            raise ValueError(f"streaming must be one of {', '.join(STREAMING_CHOICES)}")
        if not self.routes or len(set(self.routes)) != len(self.routes):
            raise ValueError(f"routes must be distinct and at least one, got {self.routes}")
        for route in self.routes:
            check_route(route)
        if not self.seal or len(set(self.seal)) != len(self.seal) or any(s not in SEAL_CHOICES for s in self.seal):
            raise ValueError(f"seal must be on, off or both (on,off), got {','.join(self.seal) or 'nothing'}")


@dataclass
class Measurement:
    """One measured run of one prompt in one mode."""

    prefix_tokens: int
    mode: str  # "nocache", DEVICE_RAM, "local", "device-tier" or "sky-<profile>..."
    round: int
    suffix_index: int
    prompt_tokens: int
    ttft_s: float
    first_token: int
    cached_tokens: int = 0
    expected_cached_tokens: int = 0
    lookup_s: float = 0.0  # tokenise + block hashes + index lookup
    retrieval_s: float = 0.0
    rebuild_s: float = 0.0  # KV bytes -> DynamicCache
    prefill_s: float = 0.0  # forward over the uncached tokens + argmax
    bytes_retrieved: int = 0
    gen_total_s: float | None = None  # string -> gen_tokens tokens
    tokens: list[int] = field(default_factory=list)
    miss_reason: str | None = None  # why the cache covered less than the whole usable prefix
    sources: dict | None = None  # cached modes: blocks per origin, device / host (kv.transfer.tiers) / store
    stream_waited_s: float | None = None  # streamed: time the forward waited for prefix layers
    decision: str | None = None  # fetch-or-recompute decision ("fetch 8/8", "split 3+5/8", "recompute 0/8", ...)
    recomputed_tokens: int = 0  # a split: prefix tokens computed inside get_cache, while the rest was retrieved
    recompute_s: float = 0.0  # ... and how long that forward took (it overlaps retrieval_s)
    route: str | None = None  # sky modes: direct, relay or auto (store.routes)
    seal: str | None = None  # sky modes: "on" content sealed, "off" in the clear (a -unsealed mode)
    first_token_equal: bool | None = None  # vs the no-cache run of the same round
    tokens_equal: bool | None = None
    tokens_equal_device_ram: bool | None = None  # first token and tokens vs the device-ram run of the same round


# ---------------------------------------------------------------------------- model side


# torch is imported inside the functions that need it, so `skymemory --help` stays fast.


def _argmax_last(logits) -> int:
    return int(logits[0, -1].argmax())


def _continue_greedy(model, cache, first: int, total: int) -> list[int]:
    """Greedy decoding after the first token, the way generate(do_sample=False) does it."""
    import torch

    tokens = [first]
    next_ids = torch.tensor([[first]], dtype=torch.long, device=model.device)
    while len(tokens) < total:
        out = model(input_ids=next_ids, **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
        tokens.append(_argmax_last(out.logits))
        next_ids[0, 0] = tokens[-1]
    return tokens


def _first_then_rest(model, out, started: float, gen_tokens: int | None):
    """(first token, TTFT, tokens, time to gen_tokens tokens or None) after the prompt's forward `out`."""
    first = _argmax_last(out.logits)
    ttft = time.perf_counter() - started
    if not gen_tokens:
        return first, ttft, [first], None
    tokens = _continue_greedy(model, cache_of(out), first, gen_tokens)
    return first, ttft, tokens, time.perf_counter() - started


def run_nocache(model, tokenizer, prompt: Prompt, gen_tokens: int | None):
    """(Measurement fields, cache over the whole prompt) computing everything."""
    import torch

    with torch.no_grad():
        started = time.perf_counter()
        ids = torch.tensor([tokenizer(prompt.text).input_ids], dtype=torch.long, device=model.device)
        tokenised = time.perf_counter()
        out = model(input_ids=ids, use_cache=True, logits_to_keep=1)
        first, ttft, tokens, gen_total = _first_then_rest(model, out, started, gen_tokens)
    fields = dict(ttft_s=ttft, first_token=first, prompt_tokens=ids.shape[1], lookup_s=tokenised - started,
                  prefill_s=ttft - (tokenised - started), gen_total_s=gen_total, tokens=tokens)
    return fields, cache_of(out)


def run_in_memory(model, tokenizer, prompt: Prompt, held: list, gen_tokens: int | None) -> dict:
    """Measurement fields with the prefix KV already in the model's memory (`held`: per layer K, V)."""
    import torch

    from skymemory.kv.format.rebuild import to_cache

    cached = held[0][0].shape[-2]
    with torch.no_grad():
        started = time.perf_counter()
        ids = torch.tensor([tokenizer(prompt.text).input_ids], dtype=torch.long, device=model.device)
        cache = to_cache(held, model.config)  # the tensors themselves: forward appends to new ones
        got_cache = time.perf_counter()
        out = model(input_ids=ids[:, cached:], **cache_arg(model, cache), use_cache=True, logits_to_keep=1)
        first, ttft, tokens, gen_total = _first_then_rest(model, out, started, gen_tokens)
    return dict(ttft_s=ttft, first_token=first, prompt_tokens=ids.shape[1], cached_tokens=cached,
                lookup_s=got_cache - started, prefill_s=ttft - (got_cache - started), gen_total_s=gen_total,
                tokens=tokens)


def hold_prefix(cache, tokens: int) -> list:
    """Copies of the first `tokens` of a cache's K and V per layer, for run_in_memory."""
    return [(layer.keys[:, :, :tokens].clone(), layer.values[:, :, :tokens].clone()) for layer in cache.layers]


def run_cached(manager, prompt: Prompt, gen_tokens: int | None, streaming: bool = False) -> dict:
    """Measurement fields with the prefix KV from `manager`'s store (streamed layer by layer if asked)."""
    import torch
    from transformers import DynamicCache

    from skymemory.kv.transfer.streaming import StreamFailed, evict_after_failure

    model = manager.model
    stream_fields: dict = {}
    with torch.no_grad():
        started = time.perf_counter()
        result = manager.get_cache(prompt.text, streaming=streaming)
        got_cache = time.perf_counter()
        suffix = result.input_ids[:, result.prefix_tokens:]
        stream = getattr(result.cache, "stream", None)
        try:
            out = model(input_ids=suffix, **cache_arg(model, result.cache), use_cache=True, logits_to_keep=1)
        except StreamFailed as exc:  # as generate_streaming does: evict, then the whole prompt uncached
            evict_after_failure(manager, result, exc)  # the result now says nothing was loaded
            out = model(input_ids=result.input_ids, **cache_arg(model, DynamicCache(config=model.config)),
                        use_cache=True, logits_to_keep=1)
            stream = None
        if stream is not None:  # the forward has waited for the last layer: the transfer is over
            stream_fields = dict(retrieval_s=stream.stats.transfer_s or 0.0, stream_waited_s=stream.stats.exposed_s)
        first, ttft, tokens, gen_total = _first_then_rest(model, out, started, gen_tokens)
    return {**dict(ttft_s=ttft, first_token=first, prompt_tokens=result.input_ids.shape[1],
                   cached_tokens=result.prefix_tokens, lookup_s=result.lookup_s, retrieval_s=result.retrieval_s,
                   rebuild_s=result.decode_s, prefill_s=ttft - (got_cache - started),
                   bytes_retrieved=result.bytes_retrieved, gen_total_s=gen_total, tokens=tokens,
                   sources=result.sources or None,
                   miss_reason=result.miss_reason, recomputed_tokens=result.recomputed_tokens,
                   recompute_s=result.recompute_s,
                   decision=result.describe() if result.decision is not None else None), **stream_fields}


def describe_rates(rates) -> str:
    """Device rates as the log shows them: the fit's prefill of 1,024 tokens and the rebuild; for rates that
    failed their checks (kv.decide.calibration: used unsaved) what failed, not figures from a fit that is off."""
    if getattr(rates, "problem", None):
        return f"rates that failed their checks, used unsaved: {rates.problem}"
    return (f"prefill of 1,024 tokens {rates.prefill.t(1024) * 1e3:.0f} ms, "
            f"rebuild {rates.rebuild.rate_Bps / 1e9:.1f} GB/s + {rates.rebuild.fixed_s * 1e3:.2f} ms")


class RateWatch:
    """The forwards the run times, shown to the deciding managers' rates between rounds, never inside one.

    KVCManager.observe_forward measures the rates again (seconds, a minute on a slow CPU) when forwards
    disagree with them. Reported as each run ended, that happened between two modes' runs of one round,
    once per deciding manager (one per profile), and on a prefix length's first round, whose shapes run
    for the first time (on CUDA 10-50x slower than warm). Here a round's forwards are kept and, before the
    next round, shown to one deciding manager (none of a first round); rates it measures again are handed
    to the others, logged and recorded (`measured_again`); at most once a run: forwards that disagree with
    fresh rates are this benchmark's against the calibration's, which measuring again does not mend.
    """

    def __init__(self, managers: list, log: Log) -> None:
        self.managers = list({id(m): m for m in managers if m.policy.mode == "auto"}.values())
        self.log = log
        self.forwards: list[tuple[int, int, float]] = []
        self.measured_again: list[dict] = []

    def observe(self, new_tokens: int, context_tokens: int, seconds: float) -> None:
        """A forward the round timed (kept until the round is over)."""
        self.forwards.append((new_tokens, context_tokens, seconds))

    def between_rounds(self, prefix_tokens: int, rnd: int) -> dict | None:
        """After round `rnd` of `prefix_tokens`, with another round to come: what was measured again, or None."""
        forwards, self.forwards = self.forwards, []
        if rnd == 0 or not self.managers or self.measured_again:
            return None
        watcher = self.managers[0]
        before = watcher._device_rates
        started = time.perf_counter()
        for forward in forwards:
            watcher.observe_forward(*forward)
            if watcher._device_rates is not before:  # measured again: the rest were timed under the old rates
                break
        rates = watcher._device_rates
        if rates is before:
            return None
        for manager in self.managers[1:]:
            manager._device_rates = rates
        again = {"prefix_tokens": prefix_tokens, "after_round": rnd, "seconds": time.perf_counter() - started}
        self.measured_again.append(again)
        self.log(f"  rates measured again after round {rnd} of prefix {prefix_tokens} (the run's forwards disagreed; "
                 f"{again['seconds']:.1f} s, between rounds, not timed; later rounds decide with them): "
                 f"{describe_rates(rates)}")
        return again


# ---------------------------------------------------------------------------- stores


@dataclass
class CachedMode:
    name: str  # "local", "device-tier", "sky-<profile>", "sky-<profile>-stream" or "sky-<profile>-auto"
    manager: object  # KVCManager
    profile: LinkProfile | None
    store: object
    streaming: bool = False
    route: str | None = None  # sky modes: how the ground reaches the servers
    seal: str | None = None  # sky modes: "on" (sealed) or "off" (in the clear)


def sky_mode_name(profile: str, seal: str = "on", route_index: int = 0, route: str = DEFAULT_ROUTE,
                  kind: str = "") -> str:
    """sky-<profile>[-unsealed][@<route> unless the first][-stream|-auto]."""
    return (f"sky-{profile}" + ("" if seal == "on" else UNSEALED) + ("" if route_index == 0 else f"@{route}")
            + (f"-{kind}" if kind else ""))


def sealed_twin(mode: str) -> str:
    """The sealed mode an unsealed one (sky-<profile>-unsealed...) is measured against."""
    return mode.replace(UNSEALED, "", 1)


def round_order(modes: list, rnd: int) -> list:
    """The cached modes in the order round `rnd` runs them: as built in even rounds; in odd rounds each
    profile's seal settings in the other order (its unsealed modes first when built sealed first), so load
    that drifts during a run hits sealed and unsealed alike."""
    if rnd % 2 == 0:
        return list(modes)
    groups: dict[str | None, int] = {}  # each profile's modes stay where they were, the tiers first
    seals: dict[str | None, list[str]] = {}
    for mode in modes:
        name = mode.profile.name if mode.profile is not None else None
        groups.setdefault(name, len(groups))
        if mode.seal is not None and mode.seal not in seals.setdefault(name, []):
            seals[name].append(mode.seal)

    def key(item):
        k, mode = item
        name = mode.profile.name if mode.profile is not None else None
        order = seals.get(name, [])
        return groups[name], (order[::-1].index(mode.seal) if mode.seal in order else 0), k

    return [mode for _, mode in sorted(enumerate(modes), key=key)]


def _environment(model, model_info: dict, cfg: TTFTConfig) -> dict:
    import torch

    from skymemory.kv.model.device import cpu_name
    from skymemory.protocol import native

    return {
        "native_codec": native.AVAILABLE, "cpu": cpu_name(), "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(), "device": str(model.device), "model_dtype": str(model.dtype),
        "model": cfg.model, "model_name": getattr(model.config, "name_or_path", ""),
        "layers": model.config.num_hidden_layers, "kv_heads": model.config.num_key_value_heads,
        "params": sum(p.numel() for p in model.parameters()), **model_info,
    }


def stored_bytes(cfg: TTFTConfig, block_tokens: int = 128) -> int:
    """Bytes of every block the run stores: each prefix length's own blocks and the warm-up's."""
    from skymemory.kv.format import codec
    from skymemory.kv.model.models import load_config

    _spec, config = load_config(cfg.model)
    block = codec.block_bytes(codec.BlockGeometry.from_config(config, block_tokens), cfg.kv_dtype)
    return (1 + sum(prefix // block_tokens for prefix in cfg.prefix_tokens)) * block


def satellite_budget(cfg: TTFTConfig, block_tokens: int = 128) -> int:
    """Memory budget per satellite that holds every prefix the run stores (and more), at least 64 MiB.

    Each prefix length stores its own blocks (once per --seal setting: sealed and unsealed blocks
    are named apart), striped over `servers` satellites; the budget
    leaves half as much again for uneven striping, so that no block is evicted mid-run
    (Llama-3-8B at 16K tokens is 2.1 GB of fp16 KV).
    """
    stored = stored_bytes(cfg, block_tokens) * len(cfg.seal)  # sealed and unsealed: each block stored twice
    per_satellite = -(-stored // cfg.servers) * 3 // 2 + 16 * 1024 * 1024
    return max(64 * 1024 * 1024, per_satellite)


def _expected_cached(prompt_tokens: int, block_tokens: int, prefix_tokens: int) -> int:
    """Tokens the cache should cover: the full blocks inside the shared prefix (one token always computed)."""
    return min(prefix_tokens, prompt_tokens - 1) // block_tokens * block_tokens


def _summ(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarise(measurements: list[Measurement]) -> list[dict]:
    """Per (prefix length, mode): median / min / max of every timing, token checks, ratios."""
    cells: dict[tuple[int, str], list[Measurement]] = {}
    for m in measurements:
        cells.setdefault((m.prefix_tokens, m.mode), []).append(m)
    rows = []
    for (prefix, mode), runs in cells.items():
        gens = [m.gen_total_s for m in runs if m.gen_total_s is not None]
        rows.append({
            "prefix_tokens": prefix, "mode": mode, "runs": len(runs),
            "prompt_tokens": runs[0].prompt_tokens,
            "ttft_s": _summ([m.ttft_s for m in runs]),
            "lookup_s": _summ([m.lookup_s for m in runs]),
            "retrieval_s": _summ([m.retrieval_s for m in runs]),
            "rebuild_s": _summ([m.rebuild_s for m in runs]),
            "prefill_s": _summ([m.prefill_s for m in runs]),
            "recompute_s": _summ([m.recompute_s for m in runs if m.recomputed_tokens]),  # splits only
            "stream_waited_s": _summ([m.stream_waited_s for m in runs if m.stream_waited_s is not None]),
            "gen_total_s": _summ(gens),
            "cached_tokens": sorted({m.cached_tokens for m in runs}),
            "expected_cached_tokens": runs[0].expected_cached_tokens,
            "bytes_retrieved": max(m.bytes_retrieved for m in runs),
            "first_token_equal": all(m.first_token_equal is not False for m in runs),
            "tokens_equal": all(m.tokens_equal is not False for m in runs),
            "tokens_compared": sum(1 for m in runs if m.tokens_equal is not None),
            "tokens_equal_device_ram": all(m.tokens_equal_device_ram is not False for m in runs),
            "tokens_compared_device_ram": sum(1 for m in runs if m.tokens_equal_device_ram is not None),
            "decisions": sorted({m.decision for m in runs if m.decision is not None}),
            "route": runs[0].route,
            "seal": runs[0].seal,
        })
    by_key = {(r["prefix_tokens"], r["mode"]): r for r in rows}
    for r in rows:
        base = by_key.get((r["prefix_tokens"], "nocache"))
        local = by_key.get((r["prefix_tokens"], "local"))
        in_memory = by_key.get((r["prefix_tokens"], DEVICE_RAM))
        r["speedup_vs_nocache"] = base["ttft_s"]["median"] / r["ttft_s"]["median"] if base else None
        r["ratio_vs_local"] = r["ttft_s"]["median"] / local["ttft_s"]["median"] if local else None
        r["ratio_vs_device_ram"] = r["ttft_s"]["median"] / in_memory["ttft_s"]["median"] if in_memory else None
        if base and base["gen_total_s"] and r["gen_total_s"]:
            r["gen_speedup"] = base["gen_total_s"]["median"] / r["gen_total_s"]["median"]
        else:
            r["gen_speedup"] = None
    first_seen = list(dict.fromkeys(m.mode for m in measurements))  # nocache, local, sky-<profile> in run order
    rows.sort(key=lambda r: (r["prefix_tokens"], first_seen.index(r["mode"])))
    return rows


def seal_comparison(summary: list[dict]) -> list[dict]:
    """Each unsealed sky mode beside its sealed twin (same run, same constellation), per prefix length:
    TTFT and retrieval medians, and sealed / unsealed TTFT. Empty unless the run measured both."""
    sealed = {(r["prefix_tokens"], r["mode"]): r for r in summary if r.get("seal") == "on"}
    out = []
    for r in summary:
        twin = sealed.get((r["prefix_tokens"], sealed_twin(r["mode"]))) if r.get("seal") == "off" else None
        if twin is None:
            continue
        out.append({"prefix_tokens": r["prefix_tokens"], "mode": twin["mode"], "unsealed_mode": r["mode"],
                    "route": twin.get("route"),
                    "unsealed_ttft_s": r["ttft_s"]["median"], "sealed_ttft_s": twin["ttft_s"]["median"],
                    "unsealed_retrieval_s": r["retrieval_s"]["median"] if r["retrieval_s"] else None,
                    "sealed_retrieval_s": twin["retrieval_s"]["median"] if twin["retrieval_s"] else None,
                    "sealed_vs_unsealed": twin["ttft_s"]["median"] / r["ttft_s"]["median"],
                    "runs": min(r["runs"], twin["runs"])})
    return out


def seal_table(comparison: list[dict]) -> str:
    """The markdown of seal_comparison: sealed / unsealed TTFT per mode (profile) and prefix length; "" if none."""
    if not comparison:
        return ""
    lines = ["Sealed / unsealed TTFT per profile and prefix length (same run, same constellation, medians; "
             "sealed and unsealed took turns going first, round by round):", "",
             "| prefix tokens | mode | route | unsealed TTFT ms | sealed TTFT ms | sealed / unsealed | "
             "unsealed retrieval ms | sealed retrieval ms | runs |",
             "|---:|---|---|---:|---:|---:|---:|---:|---:|"]

    def ms(seconds: float | None) -> str:
        return "-" if seconds is None else f"{seconds * 1e3:.1f}"

    for c in comparison:
        lines.append(f"| {c['prefix_tokens']} | {c['mode']} | {c['route'] or '-'} | {ms(c['unsealed_ttft_s'])} | "
                     f"{ms(c['sealed_ttft_s'])} | {c['sealed_vs_unsealed']:.3f}x | "
                     f"{ms(c['unsealed_retrieval_s'])} | {ms(c['sealed_retrieval_s'])} | {c['runs']} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the run


class EventFile:
    """The run's progress as JSON lines, one object per event, flushed at once (for a live view to follow).

    Events: {"event": "start", "config"}, {"event": "constellation", "profile", "manifest"},
    {"event": "log", "message"}, {"event": "measurement", **Measurement}, {"event": "done", "summary"};
    each with "time" (Unix seconds). Appended: several runs can share one file.
    """

    def __init__(self, path: Path | None) -> None:
        self._file = open(path, "a", buffering=1, encoding="utf-8") if path is not None else None  # noqa: SIM115

    def write(self, event: str, **fields) -> None:
        if self._file is not None:
            import json

            self._file.write(json.dumps({"event": event, "time": time.time(), **fields}, default=str) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def run(cfg: TTFTConfig, log: Log = lambda s: None) -> dict:
    """Run the benchmark; returns the JSON-ready result (config, environment, measurements, summary)."""
    cfg.check()
    events = EventFile(cfg.events)
    try:
        events.write("start", config=_config_dict(cfg))

        def logged(message: str) -> None:
            log(message)
            events.write("log", message=message)

        result = _run(cfg, logged, events)
        events.write("done", summary=result["summary"])
        return result
    finally:
        events.close()


def _run(cfg: TTFTConfig, log: Log, events: EventFile) -> dict:
    from skymemory.kv.format.groups import CacheLayout
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.model.models import load_model
    from skymemory.kv.index.radix import RadixIndex
    from skymemory.orbit.manifest import Manifest
    from skymemory.protocol import native
    from skymemory.store.constellation import ConstellationBlockStore
    from skymemory.store.local import LocalBlockStore

    from .launch import boot_per_profile

    started_all = time.perf_counter()
    if not native.AVAILABLE:
        log("WARNING: skymemory._native is not built, so the client checks every chunk's CRC32C in pure Python "
            "(~300x slower than C; it dominates retrieval). Build it: `pip install -e .` or "
            "`cd ground && python skymemory/_cffi_build.py`")
    with contextlib.ExitStack() as stack:
        work_dir = Path(cfg.work_dir) if cfg.work_dir else Path(stack.enter_context(
            tempfile.TemporaryDirectory(prefix="skymemory-ttft-")))

        # ---- constellations first (seconds), then the model (may take a minute)
        # (profile, manifest, where that constellation's KV index is kept: beside the manifest of a
        # constellation this run booted, so a live view can show its blocks; in memory when attached)
        skies: list[tuple[LinkProfile, Manifest, Path | None]] = []
        if cfg.manifest is not None:
            manifest = Manifest.load(cfg.manifest)
            profile = profile_of_manifest(manifest.link)
            log(f"attached to the {manifest.planes}x{manifest.sats} constellation of {cfg.manifest} "
                f"({profile.description})")
            skies.append((profile, manifest, None))
            events.write("constellation", profile=profile.name, manifest=str(cfg.manifest))
        else:
            booted = boot_per_profile(
                cfg.profiles, planes=cfg.planes, sats=cfg.sats, work_dir=work_dir, stack=stack, log=log, node=cfg.node,
                chunk_size=cfg.chunk_size, memory_budget=satellite_budget(cfg),
                booted=lambda profile, sky: events.write("constellation", profile=profile.name,
                                                         manifest=str(sky.manifest_path)))
            skies += [(profile, sky.manifest, sky.manifest_path.parent) for profile, sky in booted]

        log(f"loading model {cfg.model} ...")
        t = time.perf_counter()
        model, tokenizer = load_model(cfg.model, cfg.device, cfg.dtype, quantize=cfg.quantize)
        model_info = {"load_s": time.perf_counter() - t, "quantize": cfg.quantize, "kv_dtype": cfg.kv_dtype}
        log(f"  {cfg.model} on {model.device} ({model.dtype}, {model.config.num_hidden_layers} layers) "
            f"ready in {model_info['load_s']:.1f} s")

        modes: list[CachedMode] = []
        layout = CacheLayout.of_model(model)
        if not layout.dense:
            log(f"  its cache keeps {layout.in_words()} layers (kv.format.groups): "
                f"the local, device-tier and {DEVICE_RAM} modes hold dense prefixes only and are left out")
        # the tiers hold every block of the run (pinned once, here, outside the timed sections), each over
        # its own store and index so that filling the stores writes through to each tier
        tier_bytes = stored_bytes(cfg)
        local = LocalBlockStore(chunk_bytes=cfg.chunk_size)
        if layout.dense:
            modes.append(CachedMode("local", KVCManager(model, tokenizer, local, kv_dtype=cfg.kv_dtype,
                                                        policy="fetch", index=RadixIndex(),
                                                        host_tier_bytes=tier_bytes), None, local))
        if model.device.type == "cuda" and layout.dense:
            near = LocalBlockStore(chunk_bytes=cfg.chunk_size)
            modes.append(CachedMode("device-tier", KVCManager(model, tokenizer, near, kv_dtype=cfg.kv_dtype,
                                                              policy="fetch", index=RadixIndex(),
                                                              device_tier_bytes=tier_bytes), None, near))
        servers_used = {}
        for profile, manifest, index_dir in skies:
            constellation = manifest.constellation()
            servers = constellation.nearest(min(cfg.servers, manifest.planes * manifest.sats))
            servers_used[profile.name] = [list(s) for s in servers]
            # Direct: the ground host talks to each line-of-sight server over its own ground link (paper §2:
            # 10-20 satellites in view at once). Relay: everything goes up the overhead satellite's link.
            # Sealed (the default) and, with --seal off, in the clear: stores of their own on the same
            # satellites, whose blocks are named apart (kv.format.codec.layout_name)
            for seal in cfg.seal:
                for k, route in enumerate(cfg.routes):
                    name = sky_mode_name(profile.name, seal, k, route)
                    store = ConstellationBlockStore.from_manifest(manifest, servers, via=via_for_route(route, manifest),
                                                                  seal=seal == "on", client_options={"timeout": 2.0})
                    stack.callback(store.close)
                    # the first route of the first seal setting keeps its index beside the manifest (live view);
                    # the others their own in memory
                    index = RadixIndex(index_dir if k == 0 and seal == cfg.seal[0] else None)
                    manager = KVCManager(model, tokenizer, store, kv_dtype=cfg.kv_dtype, index=index, policy="fetch")
                    if cfg.streaming in ("off", "both"):
                        modes.append(CachedMode(name, manager, profile, store, route=route, seal=seal))
                    if cfg.streaming in ("on", "both"):  # the same store and index, the prefix streamed
                        modes.append(CachedMode(sky_mode_name(profile.name, seal, k, route, "stream"), manager,
                                                profile, store, streaming=True, route=route, seal=seal))
                    if k == 0:  # the same store, index and link measurements, deciding by itself what to fetch
                        deciding = KVCManager(model, tokenizer, store, kv_dtype=cfg.kv_dtype, index=index,
                                              policy="auto")
                        deciding.link = manager.link
                        modes.append(CachedMode(sky_mode_name(profile.name, seal, kind="auto"), deciding, profile,
                                                store, route=route, seal=seal))
        block_tokens = modes[0].manager.block_tokens
        if any(mode.manager.policy.mode == "auto" for mode in modes):
            t = time.perf_counter()
            rates = modes[-1].manager.device_rates()  # before any timed round: measured or checked here
            log(f"fetch-or-recompute rates of {cfg.model} on {model.device} in {time.perf_counter() - t:.1f} s "
                f"(measured once, kept on disk, checked again at load): {describe_rates(rates)}")
            for mode in modes:
                if mode.manager.policy.mode == "auto":
                    mode.manager._device_rates = rates

        def fill(prompt: Prompt, cache) -> None:
            filled = set()
            for mode in modes:
                if id(mode.store) in filled:  # streamed and auto modes share their store with the fetched one
                    continue
                filled.add(id(mode.store))
                t = time.perf_counter()
                added = mode.manager.add_blocks(prompt.text, cache=cache)
                if added.error:
                    raise RuntimeError(f"storing KV blocks in {mode.name} failed: {added.error}")
                log(f"  stored {added.blocks_stored} new blocks ({added.bytes_stored / 1e6:.1f} MB, "
                    f"{added.blocks_cached_before} already cached) in {mode.name} in {time.perf_counter() - t:.2f} s")

        if cfg.warmup:
            log("warm-up (not measured): a short prompt through every path")
            warm = build_workload(tokenizer, block_tokens, 8, 1).prompts[0]
            _, cache = run_nocache(model, tokenizer, warm, 2)
            fill(warm, cache)
            if layout.dense:
                run_in_memory(model, tokenizer, warm, hold_prefix(cache, block_tokens), 2)
            for mode in modes:
                run_cached(mode.manager, warm, 2, mode.streaming)

        measurements: list[Measurement] = []
        watch = RateWatch([mode.manager for mode in modes], log)
        for prefix_tokens in cfg.prefix_tokens:
            workload = build_workload(tokenizer, prefix_tokens, cfg.suffix_tokens, cfg.suffixes)
            held = None  # the prefix KV kept in the model's memory (the device-ram mode)
            for rnd in range(cfg.repeats):
                prompt = workload.prompts[rnd % len(workload.prompts)]
                gen = cfg.gen_tokens if rnd < cfg.gen_repeats else None
                expected = _expected_cached(prompt.n_tokens, block_tokens, prefix_tokens)
                fields, cache = run_nocache(model, tokenizer, prompt, gen)
                watch.observe(fields["prompt_tokens"], 0, fields["prefill_s"])
                ref = Measurement(prefix_tokens, "nocache", rnd, prompt.suffix_index, **fields,
                                  expected_cached_tokens=expected)
                measurements.append(ref)
                events.write("measurement", **asdict(ref))
                log(_line(ref, gen))
                if rnd == 0:
                    fill(prompt, cache)
                    held = hold_prefix(cache, expected) if expected and layout.dense else None
                del cache
                in_memory = None  # this round's device-ram run, the second reference for the cached modes
                if held is not None:
                    m = in_memory = Measurement(prefix_tokens, DEVICE_RAM, rnd, prompt.suffix_index,
                                                **run_in_memory(model, tokenizer, prompt, held, gen),
                                                expected_cached_tokens=expected)
                    _compare(m, ref, gen)
                    measurements.append(m)
                    events.write("measurement", **asdict(m))
                    log(_line(m, gen))
                for mode in round_order(modes, rnd):  # sealed and unsealed take turns going first
                    fields = run_cached(mode.manager, prompt, gen, mode.streaming)
                    if not mode.streaming:  # a streamed forward also waits for the link: not the device's rate
                        watch.observe(fields["prompt_tokens"] - fields["cached_tokens"], fields["cached_tokens"],
                                      fields["prefill_s"])
                    m = Measurement(prefix_tokens, mode.name, rnd, prompt.suffix_index, **fields,
                                    expected_cached_tokens=expected, route=mode.route, seal=mode.seal)
                    miss = m.miss_reason
                    _compare(m, ref, gen, in_memory)
                    measurements.append(m)
                    events.write("measurement", **asdict(m))
                    log(_line(m, gen) + (f"  [miss: {miss}]" if miss and m.cached_tokens < expected else ""))
                if (prefix_tokens, rnd) != (cfg.prefix_tokens[-1], cfg.repeats - 1):  # another round follows
                    watch.between_rounds(prefix_tokens, rnd)
            del held

        summary = summarise(measurements)
        return {
            "benchmark": "ttft",
            "created_unix": time.time(),
            "wall_s": time.perf_counter() - started_all,
            "config": _config_dict(cfg),
            "environment": _environment(model, model_info, cfg),
            "block_tokens": block_tokens,
            "servers": servers_used,
            "profiles": {p.name: p.as_dict() for p, _, _ in skies},
            "measurements": [asdict(m) for m in measurements],
            "rates_measured_again": watch.measured_again,  # between rounds (RateWatch), never inside one
            "summary": summary,
            "seal_comparison": seal_comparison(summary),  # empty unless --seal on,off
        }


def _same_tokens(m: Measurement, ref: Measurement, gen: int | None) -> tuple[bool, bool]:
    """(first token equal, every generated token equal) of two runs of one prompt."""
    first = m.first_token == ref.first_token
    return first, (m.tokens == ref.tokens[: len(m.tokens)] if gen else first)


def _compare(m: Measurement, ref: Measurement, gen: int | None, in_memory: Measurement | None = None) -> None:
    """Record whether a cached run generated what the no-cache run `ref` of its round did, and (given) what
    that round's device-ram run `in_memory` did: equal to device-ram but not to no cache is the two-forward
    arithmetic, not the cache (the module's docstring)."""
    m.first_token_equal, m.tokens_equal = _same_tokens(m, ref, gen)
    if in_memory is not None:
        m.tokens_equal_device_ram = all(_same_tokens(m, in_memory, gen))


def _line(m: Measurement, gen: int | None) -> str:
    text = f"  prefix {m.prefix_tokens:5d}  round {m.round}  {m.mode:10s} TTFT {m.ttft_s * 1000:9.1f} ms"
    if m.mode == DEVICE_RAM:
        text += f" (cache {m.lookup_s * 1000:.1f} + prefill {m.prefill_s * 1000:.1f}; {m.cached_tokens} tokens held)"
    elif m.mode != "nocache":
        if m.stream_waited_s is not None:
            text += (f" (lookup {m.lookup_s * 1000:.1f} + streamed prefill {m.prefill_s * 1000:.1f}, of it waited "
                     f"{m.stream_waited_s * 1000:.1f} for a {m.retrieval_s * 1000:.1f} ms transfer; "
                     f"{m.cached_tokens} tokens cached)")
        elif m.recomputed_tokens:  # a split: the first tokens computed while the rest was retrieved
            text += (f" (lookup {m.lookup_s * 1000:.1f} + retrieval {m.retrieval_s * 1000:.1f} alongside recompute "
                     f"{m.recompute_s * 1000:.1f} of {m.recomputed_tokens} tokens + rebuild {m.rebuild_s * 1000:.1f} + "
                     f"prefill {m.prefill_s * 1000:.1f}; {m.cached_tokens} tokens cached)")
        else:
            text += (f" (lookup {m.lookup_s * 1000:.1f} + retrieval {m.retrieval_s * 1000:.1f} + rebuild "
                     f"{m.rebuild_s * 1000:.1f} + prefill {m.prefill_s * 1000:.1f}; {m.cached_tokens} tokens cached)")
        if m.sources and (m.sources.get("device") or m.sources.get("host")):  # a tier served some blocks
            text += " [blocks from " + ", ".join(f"{where} {n}" for where, n in m.sources.items() if n) + "]"
        if m.decision is not None and m.mode.endswith("-auto"):
            text += f" [{m.decision}]"
    if gen and m.gen_total_s is not None:
        text += f"  {gen} tokens in {m.gen_total_s:.2f} s"
    if m.tokens_equal is not None:
        text += "  tokens equal" if m.tokens_equal else "  TOKENS DIFFER"
        if not m.tokens_equal and m.tokens_equal_device_ram is not None:
            text += f" ({'equal' if m.tokens_equal_device_ram else 'DIFFER'} to {DEVICE_RAM}'s)"
    return text


def _config_dict(cfg: TTFTConfig) -> dict:
    d = asdict(cfg)
    d["profiles"] = [p.name for p in cfg.profiles]
    d["prefix_tokens"] = list(cfg.prefix_tokens)
    d["seal"] = list(cfg.seal)
    for key in ("manifest", "node", "work_dir", "events"):
        d[key] = str(d[key]) if d[key] is not None else None
    return d
