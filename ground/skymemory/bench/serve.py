"""`skymemory bench serve`: a chat workload through vLLM's OpenAI server, with and without SkyMemory.

The workload (bench.chat): U users x T turns, a shared system prompt, each turn the user's history and a new
message, think time between turns, all seeded; each concurrency level has users of its own (the system prompt
is everyone's). It is replayed over HTTP (streamed completions: TTFT is the first token a client receives)
against `vllm serve`, at each --concurrency level in turn, on one server per mode:

  vllm           vLLM with its own prefix cache on and KV memory for about --kv-fraction of the workload's
                 working set (--num-gpu-blocks-override): what it cannot keep, it evicts and recomputes
  sky-<profile>  the same server with the SkyMemory connector (policy auto: it fetches only what beats
                 recomputing on this engine), on a constellation booted under that link profile
  sky-<profile>-host
                 the same with the connector's host tier (--host-tier-mib of this engine's memory in front
                 of the constellation, "host_tier_bytes": what it saved is loaded from there), on the first
                 profile's constellation. vLLM's own CPU offloading (--kv-offloading-size, or through its
                 MultiConnector) is refused by its CPU build: "CPU Offloading is currently only supported on
                 CUDA-alike and XPU GPUs" (docs/PERFORMANCE.md)

With --replicas N (N > 1) every mode runs N servers at once, each with a ground index of its own (as on N
hosts), behind a round-robin front (request i to server i mod N: a user's next turn lands on another server).
The sky modes find what another replica stored through the records in orbit (kv.index.orbit_records), and one more
mode measures without them:

  sky-<profile>-per-host
                 the same servers with "orbit_index" off: each replica finds only what it stored itself (on
                 the first profile's constellation)

Every mode's requests carry a cache salt of its own (a tenant: blocks sealed and hashed under it), so modes that
share a constellation never find each other's blocks.

Per mode and concurrency: TTFT p50 and p99, latency p50 (request to last token), output tokens/s (every reply
token over the level's wall time), hit rate (prompt tokens served from a cache, the engine's or the connector's,
over all prompt tokens), where a request's time went as the engine counts it (vLLM's own queue, prefill and
decode times from /metrics, means per request, and its preemptions), and each mode against vllm. TTFT is what a
client sees: on vLLM's CPU build a server with any KV connector (ours, or vLLM's own ExampleConnector) streams a
request's tokens in bursts, often all at its end, where the plain server streams them one by one
(docs/PERFORMANCE.md, "Serving"); the connector modes' TTFT then holds some of their decoding, and latency p50
compares whole requests. Every server answers a few short prompts first (its first-request costs, and the
forwards `auto` times). Outputs: serve.json (every request) and serve.md (the table; its first line says how to
make it again) under --out.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from skymemory.argtypes import KV_FORMATS, float_range, output_dir

from . import options
from .chat import ChatWorkload, Turn, replay
from .openai_server import REQUEST_TIMEOUT_S
from .report import write_results

TITLE = "skymemory bench serve"
NEEDS_VLLM = f"{TITLE} needs vLLM: `make vllm` makes .venv-vllm with it; run .venv-vllm/bin/skymemory bench serve"
WARMUP_TOKENS = (64, 96, 200)  # misses of three lengths: first-request costs, and the forwards `auto` times


def kv_blocks_for(workload: ChatWorkload, fraction: float, block_tokens: int) -> int:
    """The engine's KV blocks: `fraction` of the workload's working set, but never less than one longest request
    (a server that cannot hold one request does not start)."""
    working = math.ceil(workload.working_set_tokens() * fraction / block_tokens)
    one_request = math.ceil((workload.longest_prompt() + workload.reply_tokens) / block_tokens) + 1
    return max(working, one_request)


def satellite_budget(workloads: list[ChatWorkload], block_bytes: int, block_tokens: int, servers: int) -> int:
    """Bytes per satellite for every block the run may store (each turn's prompt, all levels), half as much
    again for uneven striping, at least 64 MiB."""
    blocks = sum(w.users * w.turns * (w.longest_prompt() // block_tokens) for w in workloads)
    return max(64 * 2**20, -(-blocks * block_bytes // servers) * 3 // 2 + 16 * 2**20)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), linear between the closest ranks."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


# where a request's time went, as the engine counts it (vLLM's /metrics, summed over a level's requests): waiting
# for a place in the batch (with the connector, its loads too), prefill, decode
ENGINE_TIMES = {"queue_s": "vllm:request_queue_time_seconds_sum",
                "prefill_s": "vllm:request_prefill_time_seconds_sum",
                "decode_s": "vllm:request_decode_time_seconds_sum",
                "preemptions": "vllm:num_preemptions_total"}


def engine_times(servers) -> dict[str, float]:
    """ENGINE_TIMES' running sums over every server of a mode."""
    return {key: sum(server.metric(name) for server in servers) for key, name in ENGINE_TIMES.items()}


def cell(mode: str, concurrency: int, turns: list[Turn], wall_s: float, engine: dict[str, float]) -> dict:
    """One mode at one concurrency; engine: ENGINE_TIMES' sums over the level (after minus before)."""
    ttft = [t.ttft_s for t in turns]
    prompt = sum(t.prompt_tokens for t in turns)
    per_request = {f"engine_{key}_mean": value / len(turns) for key, value in engine.items() if key != "preemptions"}
    return {"mode": mode, "concurrency": concurrency, "requests": len(turns), "wall_s": wall_s,
            **per_request, "preemptions": int(engine["preemptions"]),
            "ttft_p50_s": statistics.median(ttft), "ttft_p99_s": percentile(ttft, 99),
            "latency_p50_s": statistics.median(t.total_s for t in turns),
            "output_tokens_per_s": sum(t.reply_tokens for t in turns) / wall_s,
            "hit_rate": sum(t.cached_tokens for t in turns) / prompt if prompt else 0.0,
            "prompt_tokens": prompt}


def comparisons(cells: list[dict]) -> list[dict]:
    """Each SkyMemory mode against vllm at the same concurrency."""
    plain = {c["concurrency"]: c for c in cells if c["mode"] == "vllm"}
    out = []
    for c in cells:
        base = plain.get(c["concurrency"])
        if c["mode"] != "vllm" and base is not None:
            out.append({"mode": c["mode"], "concurrency": c["concurrency"],
                        "ttft_p50_vs_vllm": c["ttft_p50_s"] / base["ttft_p50_s"],
                        "ttft_p99_vs_vllm": c["ttft_p99_s"] / base["ttft_p99_s"],
                        "throughput_vs_vllm": c["output_tokens_per_s"] / base["output_tokens_per_s"]})
    return out


def warm(server, vocab: int, salt: str, log) -> None:
    from .chat import FIRST_ID

    for n in WARMUP_TOKENS:
        ids = [FIRST_ID + (7 * i + n) % (vocab - FIRST_ID) for i in range(n)]
        server.stream(ids, max_tokens=1, salt=salt)
    log(f"  warmed up ({len(WARMUP_TOKENS)} short prompts)")


def mode_salt(mode: str) -> str:
    """The cache salt (tenant) of every request of a mode: modes sharing a constellation find none of each
    other's blocks, in orbit or not."""
    return f"bench-serve-{mode}"


def run(args, log) -> dict:
    from skymemory.kv.format import codec
    from skymemory.kv.model.models import load_config

    from .launch import boot_per_profile
    from .openai_server import BLOCK_TOKENS, OpenAIServer, RoundRobin
    from .vllm import served_model, set_engine_environment

    set_engine_environment(args)
    started = time.perf_counter()
    spec, config = load_config(args.model)
    workloads = [ChatWorkload(users=args.users, turns=args.turns, system_tokens=args.system_tokens,
                              message_tokens=args.message_tokens, reply_tokens=args.reply_tokens,
                              think_s=args.think_s, seed=k, vocab=config.vocab_size)
                 for k, _ in enumerate(args.concurrency)]
    blocks = args.kv_blocks or kv_blocks_for(workloads[0], args.kv_fraction, BLOCK_TOKENS)
    max_len = -(-(workloads[0].longest_prompt() + args.reply_tokens) // BLOCK_TOKENS) * BLOCK_TOKENS
    if max_len > blocks * BLOCK_TOKENS:
        raise ValueError(f"--kv-blocks {blocks} hold {blocks * BLOCK_TOKENS} tokens, less than one conversation's "
                         f"last turn ({max_len})")
    block_bytes = codec.block_bytes(codec.BlockGeometry.from_config(config, BLOCK_TOKENS), args.kv)
    log(f"{args.users} users x {args.turns} turns per level, concurrency {', '.join(map(str, args.concurrency))}; "
        f"working set {workloads[0].working_set_tokens()} tokens per level; the engine holds {blocks} blocks "
        f"({blocks * BLOCK_TOKENS} tokens)")
    cells: list[dict] = []
    requests: list[dict] = []
    with contextlib.ExitStack() as stack:
        work_dir = Path(args.work_dir) if args.work_dir else Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="skymemory-bench-serve-")))
        # the first profile's constellation also serves the host-tier and per-host modes
        shared = 1 + bool(args.host_tier_mib) + (args.replicas > 1)
        budget = satellite_budget(workloads, block_bytes, BLOCK_TOKENS, args.servers) * shared
        skies = boot_per_profile(args.profiles, planes=args.planes, sats=args.sats, work_dir=work_dir, stack=stack,
                                 log=log, node=args.node, chunk_size=args.chunk_size, memory_budget=budget)
        model = served_model(spec, work_dir, log)
        modes = [("vllm", None, 0, False)] + [(f"sky-{p.name}", sky, 0, True) for p, sky in skies]
        first, first_sky = skies[0]
        if args.host_tier_mib:
            modes.append((f"sky-{first.name}-host", first_sky, args.host_tier_mib << 20, True))
        if args.replicas > 1:
            modes.append((f"sky-{first.name}-per-host", first_sky, 0, False))
        for mode, sky, tier_bytes, orbit in modes:
            salt = mode_salt(mode)
            log(f"{mode}: {args.replicas} x vllm serve{' with the SkyMemory connector' if sky else ''} ...")
            with contextlib.ExitStack() as replicas:
                servers = []
                for r in range(args.replicas):  # every replica's process starts at once ...
                    connector = None if sky is None else {
                        "manifest": str(sky.manifest_path), "model": spec, "policy": "auto", "kv_format": args.kv,
                        "servers": args.servers, "host_tier_bytes": tier_bytes, "orbit_index": orbit,
                        # an index of its own per mode and replica: each starts from an empty cache, as the plain
                        # one does, and knows only what it stored (or finds in orbit)
                        "index_dir": str(work_dir / f"index-{mode}-{r}")}
                    servers.append(OpenAIServer(model, work_dir / f"{mode}-{r}.log", connector=connector,
                                                prefix_caching=True, kv_blocks=blocks, max_model_len=max_len,
                                                request_timeout_s=args.request_timeout_s))
                    replicas.push(servers[-1])  # stopped on the way out, started or not
                for server in servers:  # ... and each is waited for in turn
                    server.__enter__()
                for server in servers:
                    warm(server, config.vocab_size, salt, log)
                front = RoundRobin(servers)

                def send(ids: list[int], max_tokens: int):
                    return front.stream(ids, max_tokens, salt)

                for workload, concurrency in zip(workloads, args.concurrency):
                    log(f"  concurrency {concurrency} ...")
                    before = engine_times(servers)
                    turns, wall = replay(workload, send, concurrency, say=log)
                    after = engine_times(servers)
                    cells.append(cell(mode, concurrency, turns, wall, {k: after[k] - before[k] for k in after}))
                    requests += [{"mode": mode, "concurrency": concurrency, **asdict(t)} for t in turns]
                    c = cells[-1]
                    log(f"  {mode} at {concurrency}: TTFT p50 {c['ttft_p50_s'] * 1e3:.0f} ms, p99 "
                        f"{c['ttft_p99_s'] * 1e3:.0f} ms, {c['output_tokens_per_s']:.1f} tokens/s, hit rate "
                        f"{c['hit_rate']:.0%}; per request in the engine: queue {c['engine_queue_s_mean']:.1f} s, "
                        f"prefill {c['engine_prefill_s_mean']:.1f} s, decode {c['engine_decode_s_mean']:.1f} s")
    from .vllm import environment

    return {"benchmark": "serve", "created_unix": time.time(), "wall_s": time.perf_counter() - started,
            "config": {"model": spec, "users": args.users, "turns": args.turns, "system_tokens": args.system_tokens,
                       "message_tokens": args.message_tokens, "reply_tokens": args.reply_tokens,
                       "think_s": args.think_s, "concurrency": list(args.concurrency), "kv_blocks": blocks,
                       "kv_fraction": args.kv_fraction, "working_set_tokens": workloads[0].working_set_tokens(),
                       "max_model_len": max_len, "profiles": [p.name for p in args.profiles], "kv": args.kv,
                       "host_tier_mib": args.host_tier_mib, "replicas": args.replicas,
                       "request_timeout_s": args.request_timeout_s,
                       "servers": args.servers, "planes": args.planes, "sats": args.sats,
                       "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU")},
            "environment": environment(), "cells": cells, "comparisons": comparisons(cells), "requests": requests}


def markdown(result: dict) -> str:
    cfg, env = result["config"], result["environment"]
    lines = [
        f"Model {cfg['model']} served by `vllm serve` (vLLM {env['vllm']}, torch {env['torch']}) on {env['cpu']} "
        f"({env['cpu_count']} CPUs), fp32, 128-token blocks, prefix caching on, KV memory {cfg['kv_blocks']} "
        f"blocks ({cfg['kv_blocks'] * 128} tokens) against a working set of {cfg['working_set_tokens']} tokens per "
        f"level. Workload: {cfg['users']} users x {cfg['turns']} turns per concurrency level, a "
        f"{cfg['system_tokens']}-token system prompt, {cfg['message_tokens']}-token messages, "
        f"{cfg['reply_tokens']}-token greedy replies, {cfg['think_s']} s mean think time. SkyMemory: policy auto, "
        f"KV {cfg['kv']}, blocks striped over {cfg['servers']} satellites of a {cfg['planes']}x{cfg['sats']} "
        f"constellation per link profile. "
        + (f"{cfg['replicas']} servers per mode, each with a ground index of its own, behind a round-robin front; "
           f"-per-host: without the records in orbit. " if cfg.get("replicas", 1) > 1 else "")
        + f"Wall time {result['wall_s']:.0f} s.",
        "",
        "| mode | concurrency | requests | TTFT p50 ms | TTFT p99 ms | latency p50 ms | output tokens/s | hit rate "
        "| engine queue / prefill / decode s | preemptions |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in result["cells"]:
        engine = (f"{c['engine_queue_s_mean']:.1f} / {c['engine_prefill_s_mean']:.1f} / {c['engine_decode_s_mean']:.1f}"
                  if "engine_queue_s_mean" in c else "-")
        lines.append(f"| {c['mode']} | {c['concurrency']} | {c['requests']} | {c['ttft_p50_s'] * 1e3:.0f} | "
                     f"{c['ttft_p99_s'] * 1e3:.0f} | {c['latency_p50_s'] * 1e3:.0f} | "
                     f"{c['output_tokens_per_s']:.1f} | {c['hit_rate']:.0%} | {engine} | {c.get('preemptions', '-')} |")
    if result["comparisons"]:
        lines += ["", "| mode | concurrency | TTFT p50 vs vllm | TTFT p99 vs vllm | throughput vs vllm |",
                  "|---|---:|---:|---:|---:|"]
        for c in result["comparisons"]:
            lines.append(f"| {c['mode']} | {c['concurrency']} | {c['ttft_p50_vs_vllm']:.2f}x | "
                         f"{c['ttft_p99_vs_vllm']:.2f}x | {c['throughput_vs_vllm']:.2f}x |")
    return "\n".join(lines)


def concurrency_list(text: str) -> tuple[int, ...]:
    values = options.token_list(text)
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"concurrency levels repeat: {text}")
    return values


def register(subparsers) -> None:
    """`skymemory bench serve` (found by skymemory/cli/bench.py)."""
    parser = subparsers.add_parser(
        "serve", help="a chat workload through vLLM's OpenAI server at several concurrencies, with and without "
                      "SkyMemory", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded-tinyllama",
                        help="embedded-tinyllama (default; written out as a folder for vLLM), embedded-small, a "
                             "local model directory or a hub id already on disk")
    g = parser.add_argument_group("workload")
    g.add_argument("--users", type=options.positive_int, default=16, help="users per concurrency level (default 16)")
    g.add_argument("--turns", type=options.positive_int, default=4, help="turns per user (default 4)")
    g.add_argument("--system-tokens", type=options.positive_int, default=512,
                   help="the shared system prompt, tokens (default 512)")
    g.add_argument("--message-tokens", type=options.positive_int, default=64,
                   help="each user message, tokens (default 64)")
    g.add_argument("--reply-tokens", type=options.positive_int, default=32,
                   help="each reply, greedy tokens (default 32)")
    g.add_argument("--think-s", type=float_range(0, 600), default=0.5,
                   help="mean think time between turns, seconds (default 0.5)")
    g.add_argument("--concurrency", type=concurrency_list, default=(1, 4, 16),
                   help="conversations at once, one level after the other (default 1,4,16)")
    parser.add_argument("--kv-fraction", type=float_range(0, 1, open_minimum=True), default=0.25,
                        help="the engine's KV memory as a share of one level's working set (default 0.25)")
    parser.add_argument("--kv-blocks", type=options.positive_int, default=None,
                        help="the engine's KV memory in 128-token blocks (default: from --kv-fraction)")
    parser.add_argument("--profiles", type=options.profile_list, default=options.profile_list("laser,rf"),
                        help="link profiles for the SkyMemory modes, comma-separated (default laser,rf)")
    parser.add_argument("--host-tier-mib", type=options.nonnegative_int, default=1024,
                        help="the sky-<first profile>-host mode's host tier, MiB (default 1024; 0: no such mode)")
    parser.add_argument("--replicas", type=options.positive_int, default=1,
                        help="servers per mode at once, each with a ground index of its own, behind a round-robin "
                             "front (default 1); above 1, a sky-<first profile>-per-host mode runs them without "
                             "the records in orbit")
    parser.add_argument("--kv", choices=KV_FORMATS, default="fp16", help="KV format on the constellation "
                                                                         "(default fp16)")
    parser.add_argument("--kvcache-gib", type=options.positive_int, default=None,
                        help="vLLM's CPU KV space, GiB (VLLM_CPU_KVCACHE_SPACE), at least what --kv-blocks need")
    parser.add_argument("--request-timeout-s", type=float_range(1, 86400), default=REQUEST_TIMEOUT_S,
                        help="the longest a client waits for the next byte of an answer, s (default "
                             f"{REQUEST_TIMEOUT_S:.0f}); at 16 users plain vLLM's slowest first tokens come near it")
    parser.add_argument("--out", type=output_dir, default=Path("docs/results/serve"),
                        help="output directory (default docs/results/serve)")
    options.add_constellation_args(parser, 19, 5)
    parser.set_defaults(func=_main)


def _main(args) -> int:
    from .vllm import main_through_vllm

    return main_through_vllm(args, TITLE, NEEDS_VLLM, run, _write)


def _write(args, result: dict) -> int:
    write_results(args.out, "serve", result, markdown(result))
    return 0
