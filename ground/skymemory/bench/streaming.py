"""`skymemory bench streaming`: TTFT with the prefix streamed layer by layer, and fetch-or-recompute.

For one prompt (a cached prefix of --prefix-blocks blocks + a --suffix-token
suffix, random token ids) it measures the time to first token:

  recompute        the whole prompt computed (no cache)
  local            prefix KV from process RAM (LocalBlockStore), then the suffix forward
  sky-P            prefix fetched from a constellation under link profile P, then the forward
  sky-P-stream     the same, streamed: the forward starts at once and each layer waits for
                   its own prefix KV (skymemory.kv.transfer.streaming), one layer per request wave
  sky-P-stream-<N>MBps
                   the same with the waves after the first paced at N MB/s (--pace off,600)

and, for the streamed runs, how long the transfer took and which share of it
the model did not wait for (hidden under suffix compute). The first token of
every mode is compared with the recompute one.

It then fits this device's prefill time T(n) from measured forwards, measures
each link's rate and round trip, and prints the fetch / partial / recompute
decision of skymemory.kv.decide.costmodel for a table of prefix lengths.

With --transfer-only no forward runs (a CPU forward of seconds hides any
transfer): random blocks of the model's geometry are stored, and each round
times a plain fetch of the prefix (and its block checks, as a stream's and
KVCManager's) and one stream per --stream-windows and --waves entry (each round
in an order of its own, seeded: no mode always runs right after the same one),
whose reader only waits for each layer's bytes in order (what a GPU forward
waits for; its rebuild runs on the device): transfer time, its ratio to the
fetch's (the medians', and the median of each round's own ratio, which leaves
out what drifted between rounds), when layer 0 and every byte were in, when
the last layer was released (after the block checks), how often the reader
slept. `--waves doubling,uniform` sets a stream's waves as it asks them today
(each twice as wide as the one before) beside one wave per --wave-layers (the
"-uniform" modes).
`--layer-waits on,off` adds, beside each stream whose reader waits for every
layer (on), the same stream with no reader until its end (the "-nowait"
modes): the transfer alone, nothing else on the CPU while it runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

from skymemory.argtypes import input_file, nonnegative_int, output_dir
from skymemory.kv.model.cache_arg import cache_arg, cache_of

from .options import positive_int, seal_list
from .profiles import profiles_arg
from .report import command_line, regenerate

ASSUMED_ACCELERATOR = (0.004, 25e-6, 4e-9)  # T(n) = a + b n + c n^2: ~30 ms for 1k tokens (assumed, not measured)


def _first_token(out) -> int:
    return int(out.logits[0, -1].argmax())


def ttft_cached(manager, prompt, streaming: bool, wave_layers: int = 1, pace_Bps: float = 0.0) -> dict:
    import torch

    from skymemory.kv.transfer.streaming import get_cache_streaming

    with torch.no_grad():
        started = time.perf_counter()
        result = (get_cache_streaming(manager, prompt, wave_layers=wave_layers, pace_Bps=pace_Bps) if streaming
                  else manager.get_cache(prompt))
        suffix = result.input_ids[:, result.prefix_tokens:]
        out = manager.model(input_ids=suffix, **cache_arg(manager.model, result.cache), use_cache=True,
                            logits_to_keep=1)
        first = _first_token(out)
        ttft = time.perf_counter() - started
    row = {"ttft_s": ttft, "first_token": first, "cached_tokens": result.prefix_tokens,
           "retrieval_s": result.retrieval_s, "decode_s": result.decode_s}
    stream = getattr(result.cache, "stream", None)
    if stream is not None:
        stream.join(30)
        s = stream.stats
        row.update(transfer_s=s.transfer_s, exposed_s=s.exposed_s, hidden_share=s.hidden_share,
                   compute_s=ttft - s.exposed_s, first_layer_s=s.layer_ready_s[0], retransmits=s.retransmits,
                   first_wait_s=s.layer_wait_s[0], last_wait_s=s.layer_wait_s[-1], pace_MBps=s.pace_Bps / 1e6)
    return row


def ttft_recompute(model, prompt) -> dict:
    import torch

    with torch.no_grad():
        started = time.perf_counter()
        out = model(input_ids=torch.tensor([prompt], device=model.device), use_cache=True, logits_to_keep=1)
        first = _first_token(out)
        return {"ttft_s": time.perf_counter() - started, "first_token": first, "cache": cache_of(out)}


def measure_link(store, records, repeats: int = 3) -> tuple[float, float]:
    """(goodput bytes/s of fetching `records`, median NOOP round trip s to the first server).

    Fetched with a plain get's window: a streamed prefix gets that rate too, its window never
    costing a round trip (kv.transfer.streaming.stream_window).
    """
    times = []
    buffers = [bytearray(r.n_bytes) for r in records]
    for _ in range(repeats):
        jobs = store.block_jobs(records, buffers)
        started = time.perf_counter()
        store.fetch_jobs(jobs)
        times.append(time.perf_counter() - started)
    servers = store._servers(records[0], store.mission_ms())
    rtt = statistics.median(store._run(store.client.noop(servers[0])) for _ in range(5))
    fetch = statistics.median(times)
    # the rate the cost model scales with size: the first round trip is accounted separately
    return sum(r.n_bytes for r in records) / max(fetch - rtt, 0.1 * fetch), rtt


def run(args, log=print) -> dict:
    import torch

    from skymemory.kv.format import codec
    from skymemory.kv.decide.costmodel import LinkModel, PrefillModel, decide, format_table
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.model.models import load_model
    from skymemory.store.constellation import ConstellationBlockStore
    from skymemory.store.local import LocalBlockStore

    from .launch import LocalConstellation, free_port_offset

    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model, device="cpu", dtype=args.dtype)[:2]
    block = args.block_tokens
    rng = random.Random(args.seed)
    prompt = [1] + [rng.randrange(3, int(model.config.vocab_size)) for _ in range(args.prefix_blocks * block +
                                                                               args.suffix - 1)]
    # the constellations' run directories and the managers' indexes: temporary (results go to --out)
    work = tempfile.TemporaryDirectory(prefix="skymemory-bench-streaming-")
    index_root = Path(work.name) / "index"
    results: dict = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                                if k not in ("func", "profiles")},
                     "profiles": [p.name for p in args.profiles], "modes": {}}
    log(f"model {args.model} {args.dtype}, KV {args.kv}, prompt {len(prompt)} tokens "
        f"({args.prefix_blocks} x {block} cached + {args.suffix}), {torch.get_num_threads()} threads")

    ref = ttft_recompute(model, prompt)  # also the KV every store is filled from
    full_cache = ref.pop("cache")
    modes: dict[str, list[dict]] = {"recompute": [ref]}

    def manager_for(store, name):
        m = KVCManager(model, tokenizer, store, block_tokens=block, kv_dtype=args.kv,
                       index_dir=index_root / f"{name}-{time.time_ns()}", probe=False)
        added = m.add_blocks(prompt[: args.prefix_blocks * block], cache=full_cache)
        if added.error:  # every later step needs the prefix stored
            raise SystemExit(f"skymemory bench streaming: storing the prefix in {name} failed: {added.error}")
        return m

    local = manager_for(LocalBlockStore(chunk_bytes=args.chunk_bytes), "local")
    skies, links = [], {}
    n = args.planes * args.sats
    try:
        for profile in args.profiles:
            sky = LocalConstellation(planes=args.planes, sats=args.sats, profile=profile,
                                     run_dir=Path(work.name) / f"sky-{profile.name}", port_offset=free_port_offset(n),
                                     node=args.node, chunk_size=max(args.chunk_bytes, 6144),
                                     memory_budget=256 * 1024 * 1024)
            manifest = sky.start()
            skies.append(sky)
            servers = manifest.constellation().nearest(args.servers)
            # from the manifest: its key signs every command (the constellation is keyed by default)
            store = ConstellationBlockStore.from_manifest(manifest, servers, via=None, chunk_bytes=args.chunk_bytes)
            mgr = manager_for(store, profile.name)
            records = [e.record for e in mgr.index.longest_prefix(mgr.root, mgr.block_hashes(prompt,
                                                                                              args.prefix_blocks))]
            rate, rtt = measure_link(store, records)
            links[profile.name] = LinkModel(profile.name, rate, rtt)
            log(f"link {profile.name}: {rate / 1e6:.0f} MB/s, RTT {rtt * 1e3:.2f} ms ({profile.description})")
            skies[-1].store, skies[-1].mgr = store, mgr
        for r in range(args.repeats):  # interleave the modes so load changes hit all alike
            modes.setdefault("local", []).append(ttft_cached(local, prompt, streaming=False))
            for sky in skies:
                name = f"sky-{sky.profile.name}"
                modes.setdefault(name, []).append(ttft_cached(sky.mgr, prompt, streaming=False))
                for pace in args.pace:
                    modes.setdefault(name + "-stream" + _pace_suffix(pace), []).append(
                        ttft_cached(sky.mgr, prompt, streaming=True, wave_layers=args.wave_layers, pace_Bps=pace))
    finally:
        for sky in skies:
            if getattr(sky, "store", None) is not None:
                sky.store.close()
            sky.stop()

    summary = {}
    for name, rows in modes.items():
        s = {"ttft_ms": statistics.median(r["ttft_s"] for r in rows) * 1e3,
             "first_token_equal": all(r["first_token"] == ref["first_token"] for r in rows), "runs": len(rows)}
        if "hidden_share" in rows[0]:
            for key in ("transfer_s", "exposed_s", "compute_s", "first_layer_s", "first_wait_s", "last_wait_s"):
                s[key.replace("_s", "_ms")] = statistics.median(r[key] for r in rows) * 1e3
            s["hidden_shares"] = [r["hidden_share"] for r in rows]
            s["pace_MBps"] = statistics.median(r["pace_MBps"] for r in rows)
            s["hidden_share"] = statistics.median(r["hidden_share"] for r in rows)
            s["transfer_le_compute"] = s["transfer_ms"] <= s["compute_ms"]
        summary[name] = s
    local_ms = summary["local"]["ttft_ms"]
    for s in summary.values():
        s["vs_local"] = s["ttft_ms"] / local_ms
    results["modes"] = summary

    # ---- fetch or recompute -------------------------------------------------------------
    points = [(len(prompt), min(r["ttft_s"] for r in modes["recompute"]))]
    for length in args.fit_lengths:  # the least disturbed of two runs (shared machines)
        points.append((length, min(ttft_recompute(model, prompt[:length])["ttft_s"] for _ in range(2))))
    cpu = PrefillModel.fit(points, device=f"this host ({args.model} {args.dtype}, {torch.get_num_threads()} threads)")
    accel = PrefillModel(*ASSUMED_ACCELERATOR, device="assumed accelerator (~30 ms per 1k tokens)")
    bb = codec.block_bytes(codec.BlockGeometry.from_config(model.config, block), args.kv)
    layers = model.config.num_hidden_layers
    table = []
    for device in (cpu, accel):
        for name, link in links.items():
            for blocks in (1, 2, 4, 8, 16):
                d = decide(link, device, prompt_tokens=blocks * block + args.suffix, cached_blocks=blocks,
                           block_tokens=block, block_bytes=bb, layers=layers)
                table.append((device.device, blocks * block, args.suffix, d))
    results["prefill_points"] = points
    results["prefill_model"] = {"a_s": cpu.a, "b_s_per_token": cpu.b, "c_s_per_token2": cpu.c}
    results["links"] = {k: {"rate_MBps": v.rate_Bps / 1e6, "rtt_ms": v.rtt_s * 1e3} for k, v in links.items()}
    results["decisions"] = [dict(d.as_dict(), case=c) for c, _, _, d in table]
    results["decision_table"] = format_table(table)
    return results


def run_transfer(args, log=print) -> dict:
    """--transfer-only: fetch vs stream of one stored prefix per profile, the modes alternating each round."""
    import hashlib

    import torch

    from skymemory.kv.format import codec, rebuild
    from skymemory.kv.transfer.landing import LandingBuffers
    from skymemory.kv.model.models import load_model
    from skymemory.kv.decide.policy import LinkEstimate
    from skymemory.kv.transfer.streaming import PrefixStream
    from skymemory.store.constellation import ConstellationBlockStore

    from .launch import LocalConstellation, free_port_offset

    model = load_model(args.model, device="cpu", dtype=args.dtype)[0]  # for its geometry only
    geometry = codec.BlockGeometry.from_config(model.config, args.block_tokens)
    gen = torch.Generator().manual_seed(args.seed)
    shape = (geometry.kv_heads, geometry.tokens, geometry.head_dim)
    source = codec.source_dtype(args.kv)
    blocks = [(hashlib.sha256(b"bench-streaming-%d-%d" % (args.seed, b)).digest(),
               codec.encode_block([(torch.randn(shape, generator=gen).to(source),
                                    torch.randn(shape, generator=gen).to(source)) for _ in range(geometry.layers)],
                                  args.kv)) for b in range(args.prefix_blocks)]
    prefix_bytes = sum(len(p) for _, p in blocks)
    log(f"{args.prefix_blocks} blocks of {args.model}'s geometry ({args.kv}): {prefix_bytes / 1e6:.1f} MB")
    work = tempfile.TemporaryDirectory(prefix="skymemory-bench-streaming-")
    landing = LandingBuffers()
    rows: dict[str, list[dict]] = {}
    for profile in args.profiles:
        sky = LocalConstellation(planes=args.planes, sats=args.sats, profile=profile,
                                 run_dir=Path(work.name) / f"sky-{profile.name}",
                                 port_offset=free_port_offset(args.planes * args.sats), node=args.node,
                                 chunk_size=max(args.chunk_bytes, 6144), memory_budget=256 * 1024 * 1024)
        manifest = sky.start()
        store = None
        try:
            servers = manifest.constellation().nearest(args.servers)
            store = ConstellationBlockStore.from_manifest(manifest, servers, via=None, chunk_bytes=args.chunk_bytes)
            records = store.put_blocks(blocks)
            raw = torch.empty((len(records), codec.block_bytes(geometry, args.kv)), dtype=torch.uint8)
            link = LinkEstimate(profile.name)  # as a KVCManager's: fed by the fetches and the streams

            def time_fetch() -> None:
                started = time.perf_counter()  # KVCManager's fetch: the blocks landed, then checked
                landed = store.get_blocks_into(records, [raw[i].numpy() for i in range(len(records))])
                if landed.miss is not None:
                    raise landed.miss
                good, error = rebuild.check_blocks(raw, landed.block_crcs, geometry, args.kv,
                                                   authenticated=landed.sealed)
                if error is not None:
                    raise RuntimeError(f"block {good} of the fetched prefix does not check: {error}")
                link.observe(prefix_bytes, time.perf_counter() - started, landed.first_reply_s)
                t = store.last_transfer
                rows.setdefault(f"sky-{profile.name}", []).append(
                    {"transfer_s": time.perf_counter() - started, "retransmits": t.retransmits,
                     "window_bytes": t.window_bytes})

            def time_stream(window, waves: str, waits: str) -> None:
                sized = window == "link"  # None: a plain get's window; link: kv.transfer.streaming.stream_window
                stream = PrefixStream(store, records, geometry, args.kv, dtype=source, device="cpu",
                                      landing=landing, wave_layers=args.wave_layers, wave_doubling=waves == "doubling",
                                      window_bytes=None if sized else window, link=link if sized else None)
                stream.start()
                if waits == "on":  # a reader waiting for each layer in turn, as a forward does
                    for layer in range(geometry.layers - 1):
                        stream.wait_layer(layer)
                    stream.wait_chunks(stream.chunk_count)
                else:  # none until the end: nothing else on the CPU while the bytes come
                    stream.done.wait(600)
                bytes_in = time.perf_counter() - stream.stats.started
                stream.wait_layer(geometry.layers - 1)
                stream.close()
                st = stream.stats
                mode = (f"sky-{profile.name}-stream{_window_suffix(window)}"
                        f"{'' if waves == 'doubling' else '-uniform'}{'' if waits == 'on' else '-nowait'}")
                row = {"transfer_s": st.transfer_s, "retransmits": st.retransmits, "bytes_in_s": bytes_in,
                       "last_layer_s": st.layer_ready_s[-1], "window_bytes": store.last_transfer.window_bytes}
                if waits == "on":  # no reader waited for layer 0 otherwise
                    row["first_layer_s"] = st.layer_ready_s[0]
                    row["sleeps"] = st.sleeps
                rows.setdefault(mode, []).append(row)

            kinds = [()] + [(w, v, l) for w in args.stream_windows for v in args.waves for l in args.layer_waits]
            order = random.Random(args.seed)
            for _ in range(args.repeats):
                # each round in an order of its own (seeded): a mode that always ran right after the same one
                # would carry what that one left behind (a rotation keeps the cycle: the fetch, then the stream)
                for kind in order.sample(kinds, len(kinds)):
                    if kind:
                        time_stream(*kind)
                    else:
                        time_fetch()
        finally:
            if store is not None:
                store.close()
            sky.stop()
    return {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                       if k not in ("func", "profiles")},
            "profiles": [p.name for p in args.profiles], "prefix_bytes": prefix_bytes,
            "transfers": summarize_transfers(rows)}


def summarize_transfers(rows: dict[str, list[dict]]) -> dict[str, dict]:
    """Each mode's medians (ms) and its ratios to the fetch over the same profile, from every round's rows
    (`rows[mode][i]` timed in round i)."""
    summary = {}
    for name, runs in rows.items():
        fetch = rows[name.split("-stream")[0]]
        s = {k.replace("_s", "_ms"): statistics.median(r[k] for r in runs) * 1e3
             for k in runs[0] if k.endswith("_s")}
        s["vs_fetch"] = s["transfer_ms"] / (statistics.median(r["transfer_s"] for r in fetch) * 1e3)
        # each round times every mode once, so a round's stream and fetch ran side by side: the median of their
        # ratios leaves out what drifted between rounds (other work on a shared machine), which the ratio of the
        # two medians keeps
        s["vs_fetch_paired"] = statistics.median(r["transfer_s"] / f["transfer_s"] for r, f in zip(runs, fetch))
        s.update(runs=len(runs), retransmits=sum(r["retransmits"] for r in runs),
                 window_MiB=statistics.median(r["window_bytes"] for r in runs) / 2**20)
        if "sleeps" in runs[0]:  # how often the reader slept waiting for the bytes, per stream
            s["reader_sleeps"] = statistics.median(r["sleeps"] for r in runs)
        summary[name] = s
    return summary


def markdown_transfer(results: dict) -> str:
    lines = [f"{results['prefix_bytes'] / 1e6:.1f} MB prefix; medians of {results['config']['repeats']} rounds, "
             "the modes alternating in each; paired: the median of each round's stream ÷ that round's fetch", "",
             "| mode | window MiB | transfer ms | vs fetch | paired | layer 0 ready ms | all bytes in ms "
             "| last layer ready ms | reader sleeps | retransmits |", "| --- " + "| ---: " * 9 + "|"]
    for name, s in results["transfers"].items():
        first = f"{s['first_layer_ms']:.1f}" if "first_layer_ms" in s else ""
        extra = f"{first} | {s['bytes_in_ms']:.1f} | {s['last_layer_ms']:.1f}" if "bytes_in_ms" in s else " | | "
        sleeps = f"{s['reader_sleeps']:g}" if "reader_sleeps" in s else ""
        lines.append(f"| {name} | {s['window_MiB']:.0f} | {s['transfer_ms']:.1f} | {s['vs_fetch']:.2f} "
                     f"| {s['vs_fetch_paired']:.2f} | {extra} "
                     f"| {sleeps} | {s['retransmits']} |")
    return "\n".join(lines) + "\n"


def markdown(results: dict) -> str:
    lines = ["| mode | TTFT ms | vs local | pace MB/s | transfer ms | waited ms | hidden (runs) | layer 0 ready ms "
             "| waited layer 0 / last ms | same first token |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for name, s in results["modes"].items():
        runs = ", ".join(f"{h * 100:.0f}" for h in s.get("hidden_shares", []))
        extra = ("| | | | | | " if "hidden_share" not in s else
                 f"| {s['pace_MBps']:.0f} | {s['transfer_ms']:.1f} | {s['exposed_ms']:.1f} | "
                 f"{s['hidden_share'] * 100:.0f} % ({runs}) | "
                 f"{s['first_layer_ms']:.1f} | {s['first_wait_ms']:.1f} / {s['last_wait_ms']:.1f} ")
        lines.append(f"| {name} | {s['ttft_ms']:.1f} | {s['vs_local']:.3f} {extra}| {s['first_token_equal']} |")
    return "\n".join(lines) + "\n\nFetch or recompute (skymemory.kv.decide.costmodel):\n\n" + results["decision_table"]


def register(subparsers) -> None:
    p = subparsers.add_parser("streaming", help="TTFT with layerwise streaming of the prefix; fetch-or-recompute "
                                                "decisions", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="embedded-tinyllama", help="model spec (skymemory.kv.model.models), default "
                                                                 "embedded-tinyllama (22 layers, like TinyLlama)")
    p.add_argument("--dtype", choices=("fp32", "bf16", "fp16"), default="fp32")
    p.add_argument("--kv", choices=("fp16", "bf16", "fp32", "int8"), default="fp16", help="KV transport format")
    p.add_argument("--prefix-blocks", type=positive_int, default=8)
    p.add_argument("--block-tokens", type=positive_int, default=128)
    p.add_argument("--suffix", type=positive_int, default=32, help="suffix tokens (computed)")
    p.add_argument("--profiles", type=profiles_arg, default="none,laser")
    p.add_argument("--chunk-bytes", type=positive_int, default=6144)
    p.add_argument("--servers", type=positive_int, default=10)
    p.add_argument("--planes", type=positive_int, default=5)
    p.add_argument("--sats", type=positive_int, default=5)
    p.add_argument("--repeats", type=positive_int, default=3)
    p.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    p.add_argument("--seed", type=nonnegative_int, default=1)
    p.add_argument("--wave-layers", type=positive_int, default=1, help="layers per request wave when streaming")
    p.add_argument("--pace", type=_paces, default=[0.0],
                   help="request pacing of the streamed runs, one streamed mode each: 'off' (the default) or "
                        "MB/s; e.g. off,600 compares them side by side")
    p.add_argument("--fit-lengths", type=lambda t: [positive_int(x) for x in t.split(",")], default=[32, 128, 512],
                   help="prompt lengths timed to fit the prefill model (besides the whole prompt)")
    p.add_argument("--transfer-only", action="store_true",
                   help="time the transfers only (fetch vs stream, no forward): see above")
    p.add_argument("--stream-windows", type=_windows, default=[None],
                   help="with --transfer-only, one streamed mode each: 'get' (a plain get's window, the "
                        "default), 'link' (twice the measured rate x round trip, at least 8 MiB: what a "
                        "KVCManager streams with) or MiB in flight; e.g. link,get,8 compares them side by side")
    p.add_argument("--waves", type=_waves, default=["doubling"],
                   help="with --transfer-only, one streamed mode each: 'doubling' (each wave twice as wide as the "
                        "one before, what a stream asks) or 'uniform' (every wave --wave-layers wide)")
    p.add_argument("--layer-waits", type=seal_list, default=("on",), metavar="on|off|on,off",
                   help="with --transfer-only, one streamed mode each: 'on' (the default: a reader waits for each "
                        "layer in turn) or 'off' (no reader until the end: the '-nowait' modes)")
    p.add_argument("--node", type=input_file, default=None)
    p.add_argument("--out", type=output_dir, default="out/bench-streaming")
    p.set_defaults(func=_main)


def _pace_suffix(pace: float) -> str:
    return "" if pace == 0 else f"-{pace / 1e6:.0f}MBps"


def _waves(text: str) -> list[str]:
    """'doubling,uniform' -> ['doubling', 'uniform']."""
    waves = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in waves if w not in ("doubling", "uniform")]
    if not waves or bad:
        raise argparse.ArgumentTypeError(f"waves are 'doubling' and/or 'uniform', got {text!r}")
    return list(dict.fromkeys(waves))


def _window_suffix(window: int | str | None) -> str:
    if window is None or window == "link":
        return "" if window is None else "-link"
    return f"-{window / 2**20:g}MiB"


def _windows(text: str) -> list[int | str | None]:
    """'get,8,link' -> [None, 8 MiB, 'link'] (None: a plain get's window; link: sized from the measured link)."""
    windows: list[int | str | None] = []
    for item in (t.strip() for t in text.split(",")):
        if item in ("get", "link"):
            windows.append(None if item == "get" else item)
            continue
        try:
            mib = float(item)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--stream-windows: {item!r} is not get, link or a size in MiB") from None
        if not 0.0625 <= mib <= 4095:  # the C window is a uint32
            raise argparse.ArgumentTypeError(f"--stream-windows: {item} MiB is out of range [0.0625, 4095]")
        windows.append(int(mib * 2**20))
    if len(set(windows)) != len(windows):
        raise argparse.ArgumentTypeError(f"--stream-windows lists a value twice: {text}")
    return windows


def _paces(text: str) -> list[float]:
    """'off,800' -> [0.0, 800e6] (bytes per second; 0: unpaced)."""
    paces: list[float] = []
    for item in (t.strip() for t in text.split(",")):
        if item == "off":
            paces.append(0.0)
        else:
            try:
                mbps = float(item)
            except ValueError:
                raise argparse.ArgumentTypeError(f"--pace: {item!r} is not off or a rate in MB/s") from None
            if not 0 < mbps < 1e6:
                raise argparse.ArgumentTypeError(f"--pace: {item} MB/s is out of range (0, 1e6)")
            paces.append(mbps * 1e6)
    if len(set(paces)) != len(paces):
        raise argparse.ArgumentTypeError(f"--pace lists a value twice: {text}")
    return paces


def _main(args) -> int:
    if args.chunk_bytes > 60000:
        raise SystemExit("--chunk-bytes must be at most 60000")
    if args.servers > args.planes * args.sats:
        raise SystemExit(f"--servers {args.servers} exceeds the {args.planes * args.sats} satellites")
    if args.transfer_only:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        results = run_transfer(args)
        (out / "transfer.json").write_text(json.dumps(results, indent=1, default=str))
        table = markdown_transfer(results)
        (out / "transfer.md").write_text(regenerate(command_line()) + table)
        print(table)
        print(f"wrote {out / 'transfer.json'} and {out / 'transfer.md'}")
        return 0
    if len(set(args.fit_lengths)) < 2:  # with the whole prompt: three points for T(n) = a + b n + c n^2
        raise SystemExit("--fit-lengths needs two different lengths or more (the prefill fit has three terms)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run(args)
    (out / "streaming.json").write_text(json.dumps(results, indent=1, default=str))
    table = markdown(results)
    (out / "streaming.md").write_text(regenerate(command_line()) + table + "\n")
    print(table)
    print(f"wrote {out / 'streaming.json'} and {out / 'streaming.md'}")
    return 0
