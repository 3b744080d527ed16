"""`skymemory bench vllm`: time to first token (TTFT) through vLLM, with and without the SkyMemory connector.

For each shared-prefix length, prompts are the prefix followed by a different
suffix per request (token ids drawn from fixed seeds, so every mode sees the
same prompts; a suffix stays inside one 128-token block, so a request's cached
blocks are exactly the prefix's). Side by side in one run:

  vllm               plain engine, prefix caching off: every request computes the whole prompt
  vllm-prefix-cache  plain engine, prefix caching on, the prefix computed once before: the
                     engine's own memory, the ceiling of any cache
  sky-<profile>      engine with the SkyMemory connector (skymemory.integrations.vllm), its own
                     prefix caching off, on a constellation booted under that link profile: the
                     prefix stored by a first request, then every measured request fetches it
                     (per-request policy "fetch")
  sky-<profile>-auto the same engine, per-request policy "auto": the connector decides from
                     rates it measured on this engine whether fetching beats computing
  sky-<profile>-unsealed, sky-<profile>-unsealed-auto
                     (--seal on,off) the same on a second connector engine whose connector keeps
                     content in the clear (kv_connector_extra_config "seal": false), on the same
                     constellation (its blocks are named apart from the sealed ones: neither is
                     taken for the other); the plain names are sealed, the connector's default.
                     A closing table gives sealed / unsealed TTFT per prefix length

One engine is alive at a time (vllm, then vllm-prefix-cache, then one
connector engine per constellation and --seal setting: with on,off the first
profile runs its sealed engine first, the next its unsealed one first, and so
on; engines cannot take turns request by request). The connector engine first runs
requests that miss (two short prompts, then each prefix's storing request:
prompts of several lengths), so it has timed its own forward before `auto`
decides; its fetch and auto requests then alternate, so a noisy moment hits
both. Every engine keeps one CPU from its compute threads
(VLLM_CPU_NUM_OF_RESERVED_CPU=1 unless set), so every mode computes alike.

A model with recurrent layers (Mamba-2, gated delta-net: kv.format.groups) needs vLLM's prefix caching on
for the connector (vLLM keeps their state at block boundaries only then), and on vLLM's CPU build steps of
at most one block (max_num_batched_tokens = 128: its Mamba-2 kernel returns no state inside a longer prefill
step). So for such a model the vllm-prefix-cache and sky engines run with both, and the sky engine empties
its own prefix cache (LLM.reset_prefix_cache) before each measured request: what it loads comes from orbit.
The vllm mode keeps prefix caching off and vLLM's default steps, as a user without SkyMemory runs it.

TTFT = wall time of `llm.generate` of one token-id prompt with max_tokens=1,
one warm-up request per cell, then --repeats measured ones: median [min-max].
Each mode also generates --new-tokens tokens greedily for one fixed prompt per
prefix length; the tokens are compared with the vllm mode's. Every request's
num_cached_tokens and the connector's decision (RequestOutput.kv_transfer_params)
are recorded. Outputs: vllm.json (every request, the config, versions) and
vllm.md (the table; its first line says how to regenerate it) under --out.

vLLM is imported only inside functions: the bench CLI imports this module to
build its parser in environments without vLLM.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from skymemory.argtypes import KV_FORMATS, int_range, output_dir

from . import options
from .report import command_line, write_results
from .ttft import UNSEALED, sealed_twin, sky_mode_name

Log = Callable[[str], None]

TITLE = "skymemory bench vllm"
NEEDS_VLLM = f"{TITLE} needs vLLM: `make vllm` makes .venv-vllm with it; run .venv-vllm/bin/skymemory bench vllm"
BLOCK_TOKENS = 128  # the engine's block size = SkyMemory's block (the connector requires it)
FIRST_ID = 3  # token ids 0-2 are special (pad, bos, eos) in the embedded models' tokenizer
MIN_MODEL_LEN = 4096
# The engine's first prompts: misses of two lengths, each under a block (nothing to save). With the storing
# requests they are the timed forwards the connector's `auto` needs: three or more, of two lengths or more.
ENGINE_WARMUP_TOKENS = (64, 96)
INDEX_WAIT_S = 60.0  # the connector's saver must add a block of the stored prefix at least this often

# Which suffix a request gets: request k of prefix length p is the same prompt in every mode.
FILL, TOKENS, WARMUP, FIRST_MEASURED = 0, 1, 2, 3


# ---------------------------------------------------------------------------- prompts


def draw_ids(seed: str, n: int, vocab: int) -> list[int]:
    """n token ids in FIRST_ID..vocab-1, the same for the same seed in every run."""
    rng = random.Random(seed)
    return [rng.randrange(FIRST_ID, vocab) for _ in range(n)]


def prompt_ids(prefix_tokens: int, request: int, suffix_tokens: int, vocab: int) -> list[int]:
    """The shared prefix of `prefix_tokens` tokens, then request `request`'s own suffix."""
    return (draw_ids(f"prefix {prefix_tokens}", prefix_tokens, vocab)
            + draw_ids(f"suffix {prefix_tokens}/{request}", suffix_tokens, vocab))


def max_model_len(prefix_tokens: tuple[int, ...], suffix_tokens: int, new_tokens: int) -> int:
    """The longest prompt plus its generation, rounded up to whole blocks, at least MIN_MODEL_LEN."""
    longest = max(prefix_tokens) + suffix_tokens + new_tokens
    return max(MIN_MODEL_LEN, -(-longest // BLOCK_TOKENS) * BLOCK_TOKENS)


# ---------------------------------------------------------------------------- requests


@dataclass
class Request:
    """One request through an engine: its prompt, its wall time, what the engine said of its cache."""

    prefix_tokens: int  # 0: the engine's warm-up prompt
    mode: str  # vllm, vllm-prefix-cache, sky-<profile>, sky-<profile>-auto
    kind: str  # engine-warm-up, fill (stores / computes the prefix), warm-up, ttft (measured), tokens
    request: int  # which suffix (FILL, TOKENS, WARMUP, FIRST_MEASURED + repeat)
    prompt_tokens: int
    seconds: float  # wall time of llm.generate: TTFT when max_tokens is 1
    tokens: list[int]
    cached_tokens: int  # RequestOutput.num_cached_tokens: the engine's prefix cache + the connector's loads
    expected_cached_tokens: int
    policy: str | None = None  # the connector policy the request asked for
    decision: str | None = None  # the connector's, from RequestOutput.kv_transfer_params
    cached_blocks: int | None = None
    fetched_blocks: int | None = None


@dataclass
class Runner:
    """Runs requests through one engine and records each."""

    llm: object  # vllm.LLM
    vocab: int
    suffix_tokens: int
    requests: list[Request]
    log: Log
    # a recurrent model's connector engine: its own prefix cache emptied before each request that should load
    # from orbit (warm-up, ttft, tokens), or it would answer from memory
    forget_local: bool = False
    block_tokens: int = BLOCK_TOKENS  # the engine's block (vLLM may raise a recurrent model's: measure_sky)

    def prompt(self, prefix_tokens: int, request: int) -> list[int]:
        return prompt_ids(prefix_tokens, request, self.suffix_tokens, self.vocab)

    def __call__(self, mode: str, kind: str, prefix_tokens: int, request: int, ids: list[int] | None = None, *,
                 max_tokens: int = 1, policy: str | None = None, expected: int | None = None) -> Request:
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        ids = ids if ids is not None else self.prompt(prefix_tokens, request)
        extra = {"kv_transfer_params": {"skymemory_policy": policy}} if policy else None
        params = SamplingParams(max_tokens=max_tokens, temperature=0, extra_args=extra)
        if self.forget_local and kind in ("warm-up", "ttft", "tokens") and not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM did not empty its prefix cache (reset_prefix_cache): a request would be "
                               "answered from the engine's memory, not from orbit")
        started = time.perf_counter()
        (out,) = self.llm.generate([TokensPrompt(prompt_token_ids=ids)], params, use_tqdm=False)
        seconds = time.perf_counter() - started
        said = (out.kv_transfer_params or {}).get("skymemory") or {}
        fetched = said.get("fetched_blocks")
        if expected is None:  # auto: whatever it decided to fetch
            expected = (fetched or 0) * self.block_tokens
        q = Request(prefix_tokens, mode, kind, request, len(ids), seconds, list(out.outputs[0].token_ids),
                    out.num_cached_tokens or 0, expected, policy, said.get("decision"), said.get("cached_blocks"),
                    fetched)
        self.requests.append(q)
        self.log(_line(q))
        return q


def _line(q: Request) -> str:
    text = (f"  {q.mode:20s} prefix {q.prefix_tokens:5d}  {q.kind:14s} {q.seconds * 1e3:9.1f} ms  "
            f"cached {q.cached_tokens}")
    if q.cached_tokens != q.expected_cached_tokens:
        text += f" (expected {q.expected_cached_tokens})"
    if q.kind == "tokens":
        text += f"  tokens {q.tokens}"
    if q.decision and q.policy == "auto":
        text += f"  [{q.decision}]"
    return text


def on_engine(measure: Callable[[object], None], model: str, max_len: int, log: Log, *, prefix_caching: bool,
              transfer=None, step_tokens: int | None = None) -> None:
    """measure(llm) on a fresh vLLM engine, then the engine shut down and freed before the next one starts
    (one at a time: each holds its KV cache space, and each is measured alone). step_tokens: the engine's
    max_num_batched_tokens (None: vLLM's default)."""
    from vllm import LLM

    started = time.perf_counter()
    steps = {"max_num_batched_tokens": step_tokens} if step_tokens else {}
    llm = LLM(model=model, block_size=BLOCK_TOKENS, enable_prefix_caching=prefix_caching, max_model_len=max_len,
              dtype="float32", enforce_eager=True, seed=0, kv_transfer_config=transfer, **steps)
    log(f"  engine ready in {time.perf_counter() - started:.1f} s")
    try:
        measure(llm)
    finally:
        llm.llm_engine.engine_core.shutdown()
        del llm
        gc.collect()


def warm_engine(run: Runner, mode: str) -> None:
    """Short prompts that miss every cache: the engine's first-request costs land outside every cell."""
    for k, tokens in enumerate(ENGINE_WARMUP_TOKENS):
        run(mode, "engine-warm-up", 0, k, draw_ids(f"engine warm-up {tokens}", tokens, run.vocab), expected=0)


# ---------------------------------------------------------------------------- the modes


def measure_plain(run: Runner, args, *, prefix_caching: bool) -> None:
    """Mode vllm (prefix_caching False) or vllm-prefix-cache: every prefix length on one plain engine."""
    mode = "vllm-prefix-cache" if prefix_caching else "vllm"
    warm_engine(run, mode)
    for prefix in args.prefix_tokens:
        expected = prefix if prefix_caching else 0
        if prefix_caching:  # the prefix computed once: the engine's own cache holds it from now on
            run(mode, "fill", prefix, FILL, expected=0)
        run(mode, "warm-up", prefix, WARMUP, expected=expected)
        for r in range(args.repeats):
            run(mode, "ttft", prefix, FIRST_MEASURED + r, expected=expected)
        run(mode, "tokens", prefix, TOKENS, max_tokens=args.new_tokens, expected=expected)


def measure_sky(run: Runner, args, profile_name: str, index_dir: Path, root: bytes | None, log: Log,
                seal: str = "on") -> None:
    """Modes sky-<profile> (forced fetch) and sky-<profile>-auto, alternating, on one connector engine
    (sky-<profile>-unsealed and sky-<profile>-unsealed-auto where its connector does not seal: `seal` "off")."""
    fetch, auto = sky_mode_name(profile_name, seal), sky_mode_name(profile_name, seal, kind="auto")
    warm_engine(run, fetch)
    # Each storing request misses and runs alone, so it is also a timed forward of its length: with the
    # warm-up's, the forwards that `auto` needs before it can decide.
    # vLLM may raise a recurrent model's block until an attention page holds a state page: its blocks are then of
    # that many tokens (the connector follows the engine)
    block = run.block_tokens = run.llm.llm_engine.vllm_config.cache_config.block_size
    if block != BLOCK_TOKENS:
        log(f"  vLLM raised this model's block to {block} tokens (an attention page as large as a state page)")
    for prefix in args.prefix_tokens:
        before = indexed_blocks(index_dir)
        run(fetch, "fill", prefix, FILL, policy="fetch", expected=0)
        wait_for_prefix(index_dir, root, run.prompt(prefix, FILL)[:prefix], log, before, block)
    for prefix in args.prefix_tokens:
        run(fetch, "warm-up", prefix, WARMUP, policy="fetch", expected=prefix)
        run(auto, "warm-up", prefix, WARMUP, policy="auto")
        for r in range(args.repeats):
            run(fetch, "ttft", prefix, FIRST_MEASURED + r, policy="fetch", expected=prefix)
            run(auto, "ttft", prefix, FIRST_MEASURED + r, policy="auto")
        run(fetch, "tokens", prefix, TOKENS, max_tokens=args.new_tokens, policy="fetch", expected=prefix)
        run(auto, "tokens", prefix, TOKENS, max_tokens=args.new_tokens, policy="auto")


def indexed_blocks(index_dir: Path) -> int:
    """How many blocks the ground index holds."""
    from skymemory.kv.index.radix import RadixIndex

    index = RadixIndex(index_dir)
    try:
        return len(index)
    finally:
        index.close()


def wait_for_prefix(index_dir: Path, root: bytes | None, prefix: list[int], log: Log, before: int = 0,
                    block_tokens: int = BLOCK_TOKENS) -> None:
    """Until the ground index has every block of `prefix` (the connector saves on a thread of its own). root None:
    a model whose blocks vLLM names by its layout on the engine (a recurrent one), known only there: until the
    index holds as many blocks (of `block_tokens`) more than `before` (every prefix length is a prompt of its own)."""
    from skymemory.kv.naming.blocks import chain_hashes, split_blocks
    from skymemory.kv.index.radix import RadixIndex

    hashes = chain_hashes(root or bytes(32), split_blocks(prefix, block_tokens))
    index = RadixIndex(index_dir)

    def stored() -> int:
        return len(index) - before if root is None else len(index.longest_prefix(root, hashes))

    started = time.perf_counter()
    try:
        have, deadline = 0, time.monotonic() + INDEX_WAIT_S
        while (now := stored()) < len(hashes):
            if now > have:  # progress: the saver is working through the blocks
                have, deadline = now, time.monotonic() + INDEX_WAIT_S
            if time.monotonic() > deadline:
                # the index's size tells a saver that stalled from blocks named under another root
                raise RuntimeError(f"the connector stored {now} of the {len(hashes)} blocks of the {len(prefix)}-token "
                                   f"prefix, and none more in {INDEX_WAIT_S:.0f} s; the ground index holds "
                                   f"{len(index)} blocks in all (see the engine's warnings above)")
            time.sleep(0.1)
    finally:
        index.close()
    log(f"  the ground index has the {len(hashes)} blocks of the {len(prefix)}-token prefix "
        f"({time.perf_counter() - started:.1f} s after the request)")


def connector_extra(args, spec: str, manifest: Path, index_dir: Path, seal: str = "on") -> dict:
    """The connector's kv_connector_extra_config for this run (integrations.vllm.config)."""
    return {"manifest": str(manifest), "model": spec, "index_dir": str(index_dir), "policy": "auto",
            "kv_format": args.kv, "servers": args.servers, "route": "auto", "seal": seal == "on"}


def connector_config(args, spec: str, manifest: Path, index_dir: Path, seal: str = "on"):
    from vllm.config import KVTransferConfig

    return KVTransferConfig(
        kv_connector="SkyMemoryConnector", kv_connector_module_path="skymemory.integrations.vllm",
        kv_role="kv_both", kv_load_failure_policy="recompute",
        kv_connector_extra_config=connector_extra(args, spec, manifest, index_dir, seal))


# ---------------------------------------------------------------------------- the run


def set_engine_environment(args) -> None:
    """What vLLM reads from the environment, set before it is imported (its engine processes inherit it)."""
    os.environ["HF_HUB_OFFLINE"] = "1"  # the model is a local folder; nothing is fetched
    if args.kvcache_gib is not None:
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(args.kvcache_gib)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    # embedded-tinyllama's config says 2,048 positions (TinyLlama's) and a 2,048-token prefix with its suffix
    # goes past them; its rotary embedding has no such limit
    os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    # vLLM keeps CPUs away from its worker's OpenMP threads: one for the scheduler, and one more when a KV
    # connector is configured (for the connector's own threads). On a small host that gives the connector
    # engine more compute threads than the plain one (2 CPUs: 2 against 1); one reserved CPU everywhere
    # gives every mode the same compute.
    os.environ.setdefault("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # stdout carries the table only
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")


def served_model(spec: str, work_dir: Path, log: Log) -> str:
    """What vLLM loads: an embedded model written out as a folder, anything else as given."""
    from skymemory.kv.model.models import EMBEDDED, save_model_dir

    if spec not in EMBEDDED:
        return spec
    started = time.perf_counter()
    directory = save_model_dir(spec, work_dir / "model" / spec)
    log(f"{spec} written to {directory} for vLLM in {time.perf_counter() - started:.1f} s")
    return str(directory)


def chain_root(spec: str, kv_format: str, log: Log, sealed: bool = True) -> bytes:
    """The root of the block hashes the connector gives this model's blocks (as KVCManager names them), on a
    connector that seals (its "seal" setting, the default) or not: sealed and plain blocks are named apart."""
    from skymemory.kv.naming.identity import model_identity

    started = time.perf_counter()
    root = model_identity(spec, "fp32").root(kv_format=kv_format, block_tokens=BLOCK_TOKENS, sealed=sealed)
    log(f"{spec}'s block names (kv.naming.identity, {'sealed' if sealed else 'unsealed'}) in "
        f"{time.perf_counter() - started:.1f} s")
    return root


def seal_order(seals, k: int) -> tuple[str, ...]:
    """The --seal settings in the order profile number `k` runs its connector engines: as given for the first
    profile, the other way round for the next, and so on."""
    return tuple(seals) if k % 2 == 0 else tuple(seals)[::-1]


def boot_constellations(args, spec: str, work_dir: Path, stack: contextlib.ExitStack, log: Log) -> list:
    """One constellation per link profile (bench.launch), each stopped when `stack` closes."""
    from .launch import boot_per_profile
    from .ttft import TTFTConfig, satellite_budget

    # every prefix's blocks striped over --servers satellites, with room to spare (as bench ttft sizes it)
    # (once per --seal setting: sealed and unsealed blocks are named apart, so each prefix is stored twice)
    budget = satellite_budget(TTFTConfig(model=spec, kv_dtype=args.kv, prefix_tokens=args.prefix_tokens,
                                         servers=args.servers, seal=tuple(args.seal)))
    return boot_per_profile(args.profiles, planes=args.planes, sats=args.sats, work_dir=work_dir, stack=stack,
                            log=log, node=args.node, chunk_size=args.chunk_size, memory_budget=budget)


def run(args, log: Log) -> dict:
    """The whole benchmark; returns the JSON-ready result."""
    set_engine_environment(args)
    from skymemory.kv.model.models import load_config

    started = time.perf_counter()
    from skymemory.kv.format.groups import LINEAR, layer_kinds

    spec, config = load_config(args.model)
    max_len = max_model_len(args.prefix_tokens, args.suffix_tokens, args.new_tokens)
    recurrent = any(kind == LINEAR for kind, _ in layer_kinds(config, spec))  # (module docstring)
    if recurrent:
        log(f"{spec} has recurrent layers: its prefix-caching and connector engines run with prefix caching on "
            f"and steps of {BLOCK_TOKENS} tokens; the connector engine empties its own cache before each measured "
            "request")
    requests: list[Request] = []
    with contextlib.ExitStack() as stack:
        work_dir = Path(args.work_dir) if args.work_dir else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="skymemory-bench-vllm-")))
        skies = boot_constellations(args, spec, work_dir, stack, log)
        model = served_model(spec, work_dir, log)
        # a recurrent model's blocks are named by its layout on vLLM, known in the engine only: waited for by count
        roots = {seal: None if recurrent else chain_root(spec, args.kv, log, sealed=seal == "on") for seal in args.seal}

        def runner(llm, forget_local: bool = False) -> Runner:
            return Runner(llm, config.vocab_size, args.suffix_tokens, requests, log, forget_local)

        cached_steps = BLOCK_TOKENS if recurrent else None  # an engine with prefix caching on (docstring)
        for caching in (False, True):
            log(f"vLLM engine, prefix caching {'on' if caching else 'off'}, max_model_len {max_len} ...")
            on_engine(lambda llm: measure_plain(runner(llm), args, prefix_caching=caching), model, max_len, log,
                      prefix_caching=caching, step_tokens=cached_steps if caching else None)
        for k, (profile, sky) in enumerate(skies):
            index_dir = sky.manifest_path.parent / "index"
            for seal in seal_order(args.seal, k):
                log(f"vLLM engine with the SkyMemory connector ({'sealed' if seal == 'on' else 'unsealed'}) on the "
                    f"{profile.name} constellation ...")
                on_engine(lambda llm: measure_sky(runner(llm, forget_local=recurrent), args, profile.name, index_dir,
                                                  roots[seal], log, seal),
                          model, max_len, log, prefix_caching=recurrent, step_tokens=cached_steps,
                          transfer=connector_config(args, spec, sky.manifest_path, index_dir, seal))
    rows = summarise(requests)
    return {
        "benchmark": "vllm",
        "created_unix": time.time(),
        "wall_s": time.perf_counter() - started,
        "config": {**config_dict(args), "model": spec, "max_model_len": max_len, "block_tokens": BLOCK_TOKENS,
                   "recurrent": recurrent,
                   "engine_dtype": "float32", "VLLM_CPU_KVCACHE_SPACE": os.environ["VLLM_CPU_KVCACHE_SPACE"],
                   "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"]},
        "environment": environment(),
        "profiles": {p.name: p.as_dict() for p, _ in skies},
        "requests": [asdict(q) for q in requests],
        "summary": rows,
        "comparisons": comparisons(rows, [p.name for p, _ in skies], args.seal),
        "seal_comparison": seal_comparison(rows),  # empty unless --seal on,off
    }


def environment() -> dict:
    import torch
    import transformers
    import vllm

    from skymemory.kv.model.device import cpu_name

    return {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__,
            "python": platform.python_version(), "cpu": cpu_name(), "cpu_count": os.cpu_count()}


def config_dict(args) -> dict:
    return {"model": args.model, "prefix_tokens": list(args.prefix_tokens), "suffix_tokens": args.suffix_tokens,
            "new_tokens": args.new_tokens, "profiles": [p.name for p in args.profiles], "repeats": args.repeats,
            "servers": args.servers, "kv": args.kv, "planes": args.planes, "sats": args.sats,
            "chunk_size": args.chunk_size, "seal": list(args.seal)}


# ---------------------------------------------------------------------------- summary and output


def _stats(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarise(requests: list[Request]) -> list[dict]:
    """Per (prefix length, mode): TTFT median / min / max, cached tokens, tokens vs the vllm mode, decisions."""
    cells: dict[tuple[int, str], list[Request]] = {}
    for q in requests:
        if q.kind in ("ttft", "tokens"):
            cells.setdefault((q.prefix_tokens, q.mode), []).append(q)
    reference = {q.prefix_tokens: q.tokens for q in requests if q.mode == "vllm" and q.kind == "tokens"}
    rows = []
    for (prefix, mode), runs in cells.items():
        timed = [q for q in runs if q.kind == "ttft"]
        (generated,) = [q for q in runs if q.kind == "tokens"]
        rows.append({
            "prefix_tokens": prefix, "mode": mode, "ttft_s": _stats([q.seconds for q in timed]),
            "cached_tokens": sorted({q.cached_tokens for q in timed}),
            "cached_as_expected": all(q.cached_tokens == q.expected_cached_tokens for q in runs),
            "tokens": generated.tokens,
            "tokens_equal": None if mode == "vllm" else generated.tokens == reference[prefix],
            "decisions": sorted({q.decision for q in runs if q.decision}),
            "seal": None if not mode.startswith("sky-") else ("off" if UNSEALED in mode else "on"),
        })
    base = {r["prefix_tokens"]: r["ttft_s"]["median"] for r in rows if r["mode"] == "vllm"}
    for r in rows:
        r["speedup_vs_vllm"] = base[r["prefix_tokens"]] / r["ttft_s"]["median"]
    order = list(dict.fromkeys(q.mode for q in requests))  # the modes in the order they ran
    rows.sort(key=lambda r: (r["prefix_tokens"], order.index(r["mode"])))
    return rows


def comparisons(rows: list[dict], profiles: list[str], seals=("on",)) -> list[dict]:
    """Per prefix length, profile and seal setting: sky's speedup over vllm, and auto against the better of the
    two."""
    median = {(r["prefix_tokens"], r["mode"]): r["ttft_s"]["median"] for r in rows}
    out = []
    for prefix in sorted({r["prefix_tokens"] for r in rows}):
        plain = median[(prefix, "vllm")]
        for name in profiles:
            for seal in seals:
                mode = sky_mode_name(name, seal)
                sky, auto = median[(prefix, mode)], median[(prefix, sky_mode_name(name, seal, kind="auto"))]
                out.append({"prefix_tokens": prefix, "profile": name, "seal": seal, "mode": mode,
                            "sky_speedup_vs_vllm": plain / sky, "auto_vs_best": auto / min(plain, sky)})
    return out


def seal_comparison(rows: list[dict]) -> list[dict]:
    """Each unsealed connector mode beside its sealed twin (same run, same constellation), per prefix length:
    TTFT medians and sealed / unsealed. Empty unless the run measured both."""
    sealed = {(r["prefix_tokens"], r["mode"]): r for r in rows if r.get("seal") == "on"}
    out = []
    for r in rows:
        twin = sealed.get((r["prefix_tokens"], sealed_twin(r["mode"]))) if r.get("seal") == "off" else None
        if twin is not None:
            out.append({"prefix_tokens": r["prefix_tokens"], "mode": twin["mode"], "unsealed_mode": r["mode"],
                        "unsealed_ttft_s": r["ttft_s"]["median"], "sealed_ttft_s": twin["ttft_s"]["median"],
                        "sealed_vs_unsealed": twin["ttft_s"]["median"] / r["ttft_s"]["median"],
                        "runs": min(r["ttft_s"]["n"], twin["ttft_s"]["n"])})
    return out


def seal_table(comparison: list[dict]) -> str:
    """The markdown of seal_comparison; "" if there is none."""
    if not comparison:
        return ""
    lines = ["Sealed / unsealed TTFT per prefix length (same run, same constellation, medians; each on its own "
             "connector engine):", "",
             "| prefix tokens | mode | unsealed TTFT ms | sealed TTFT ms | sealed / unsealed | requests |",
             "|---:|---|---:|---:|---:|---:|"]
    for c in comparison:
        lines.append(f"| {c['prefix_tokens']} | {c['mode']} | {c['unsealed_ttft_s'] * 1e3:.1f} | "
                     f"{c['sealed_ttft_s'] * 1e3:.1f} | {c['sealed_vs_unsealed']:.3f}x | {c['runs']} |")
    return "\n".join(lines)


def _ms(cell: dict) -> str:
    return f"{cell['median'] * 1e3:.0f} [{cell['min'] * 1e3:.0f}-{cell['max'] * 1e3:.0f}]"


def _cached(row: dict) -> str:
    text = "/".join(str(c) for c in row["cached_tokens"])
    return text if row["cached_as_expected"] else f"{text} (NOT as expected)"


def _equal(row: dict) -> str:
    return "reference" if row["tokens_equal"] is None else ("yes" if row["tokens_equal"] else "NO")


def markdown(result: dict) -> str:
    cfg, env = result["config"], result["environment"]
    lines = [
        f"Model {cfg['model']} served by vLLM {env['vllm']} (torch {env['torch']}, transformers "
        f"{env['transformers']}) on {env['cpu']} ({env['cpu_count']} CPUs), {cfg['engine_dtype']}, "
        f"{cfg['block_tokens']}-token blocks, max_model_len {cfg['max_model_len']}, "
        f"VLLM_CPU_KVCACHE_SPACE {cfg['VLLM_CPU_KVCACHE_SPACE']} GiB, VLLM_CPU_NUM_OF_RESERVED_CPU "
        f"{cfg['VLLM_CPU_NUM_OF_RESERVED_CPU']}. Connector: KV {cfg['kv']}, blocks striped "
        f"over {cfg['servers']} satellites of a {cfg['planes']}x{cfg['sats']} constellation per link profile. "
        f"Prompts: the shared prefix + a {cfg['suffix_tokens']}-token suffix of their own; TTFT = one "
        f"llm.generate with max_tokens=1, {cfg['repeats']} measured requests per cell after one warm-up; "
        f"tokens: {cfg['new_tokens']} greedy tokens of one prompt, compared with the vllm mode's. "
        f"Wall time {result['wall_s']:.0f} s.",
        "",
        "| prefix tokens | mode | TTFT ms median [min-max] | vs vllm (x faster) | cached tokens | tokens equal "
        "| decision |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    for r in result["summary"]:
        decision = ", ".join(r["decisions"]) if r["mode"].endswith("-auto") and r["decisions"] else "-"
        lines.append(f"| {r['prefix_tokens']} | {r['mode']} | {_ms(r['ttft_s'])} | {r['speedup_vs_vllm']:.2f}x | "
                     f"{_cached(r)} | {_equal(r)} | {decision} |")
    lines.append("")
    for c in result["comparisons"]:
        lines.append(f"- prefix {c['prefix_tokens']}, {c['profile']}: {c.get('mode') or 'sky-' + c['profile']} is "
                     f"{c['sky_speedup_vs_vllm']:.2f}x as fast as vllm; auto's TTFT is "
                     f"{c['auto_vs_best']:.2f}x the better of the two")
    sealed = seal_table(result.get("seal_comparison") or [])
    if sealed:
        lines += ["", sealed]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- command line


def prefix_list(text: str) -> tuple[int, ...]:
    """'512,1024' -> (512, 1024): token counts, each a whole number of blocks."""
    values = options.token_list(text)
    partial = [str(v) for v in values if v % BLOCK_TOKENS]
    if partial:
        raise argparse.ArgumentTypeError(f"prefix lengths must be multiples of {BLOCK_TOKENS} tokens (whole "
                                         f"blocks), got {', '.join(partial)}")
    return values


def register(subparsers) -> None:
    """`skymemory bench vllm` (found by skymemory/cli/bench.py)."""
    parser = subparsers.add_parser(
        "vllm", help="time to first token through vLLM: no cache, its own prefix cache, the SkyMemory connector",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded-tinyllama",
                        help="embedded-tinyllama (default; written out as a folder for vLLM), embedded-small, a "
                             "local model directory or a hub id already on disk")
    parser.add_argument("--prefix-tokens", type=prefix_list, default=(512, 1024, 2048),
                        help="shared prefix lengths, comma-separated multiples of 128 (default 512,1024,2048)")
    parser.add_argument("--suffix-tokens", type=int_range(1, BLOCK_TOKENS - 1), default=32,
                        help=f"each request's own suffix, 1..{BLOCK_TOKENS - 1} tokens: inside one block, so "
                             "the cached blocks are the prefix's (default 32)")
    parser.add_argument("--new-tokens", type=options.positive_int, default=16,
                        help="greedy tokens generated per mode and prefix length to compare (default 16)")
    parser.add_argument("--profiles", type=options.profile_list, default=options.profile_list("none,laser,rf"),
                        help="link profiles, comma-separated (default none,laser,rf); each boots its own "
                             "constellation and runs its own connector engine")
    parser.add_argument("--repeats", type=options.positive_int, default=3,
                        help="measured requests per cell, after one warm-up (default 3)")
    parser.add_argument("--kv", choices=KV_FORMATS, default="fp16", help="KV format on the constellation "
                                                                         "(default fp16)")
    parser.add_argument("--kvcache-gib", type=int_range(1, 4096), default=None,
                        help="vLLM's CPU KV cache, GiB (VLLM_CPU_KVCACHE_SPACE; default: that variable, else 2)")
    parser.add_argument("--out", type=output_dir, default=Path("out/bench-vllm"),
                        help="output directory (default out/bench-vllm)")
    options.add_constellation_args(parser, 19, 5)
    options.add_seal_arg(parser, "the connector engine runs sealed (sky-<profile>...) and, on an engine of its own, "
                                 "in the clear (sky-<profile>-unsealed...: kv_connector_extra_config \"seal\": "
                                 "false) on the same constellation, with a closing table of sealed / unsealed TTFT")
    parser.set_defaults(func=_main)


def main_through_vllm(args, title: str, needs_vllm: str, run, write) -> int:
    """A vLLM benchmark's command: --servers checked against the grid, vLLM and the node found, run(args, log)
    with timed progress on stderr, errors in one line; `write(args, result)` writes its figures and gives the
    exit status."""
    if args.servers > args.planes * args.sats:
        print(f"{title}: --servers {args.servers} is more than the {args.planes}x{args.sats} satellites",
              file=sys.stderr)
        return 2
    if importlib.util.find_spec("vllm") is None:
        print(needs_vllm, file=sys.stderr)
        return 1
    from skymemory.launcher.nodes import find_node

    try:
        find_node(args.node)
    except FileNotFoundError as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()

    def log(message: str) -> None:  # one write per line: clients' threads may report progress too
        sys.stderr.write(f"[{time.monotonic() - started:7.1f} s] {message}\n")
        sys.stderr.flush()

    try:
        result = run(args, log)
    except KeyboardInterrupt:
        log("interrupted; engines and constellations stopped")
        return 130
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"{title}: {exc}", file=sys.stderr)
        return 1
    result["command"] = command_line()
    return write(args, result)


def _main(args) -> int:
    return main_through_vllm(args, TITLE, NEEDS_VLLM, run, _write)


def _write(args, result: dict) -> int:
    write_results(args.out, "vllm", result, markdown(result))
    differ = [r for r in result["summary"] if r["tokens_equal"] is False]
    short = [r for r in result["summary"] if not r["cached_as_expected"]]
    if differ:
        print(f"{TITLE}: generated tokens differ from the vllm mode's in {len(differ)} cell(s)", file=sys.stderr)
    if short:
        print(f"{TITLE}: cached tokens not as expected in {len(short)} cell(s)", file=sys.stderr)
    return 0
