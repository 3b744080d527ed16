"""`skymemory model`: the language model behind the KV cache.

  skymemory model info   [--model M] [--block-tokens N]   architecture and block byte sizes (no weights needed)
  skymemory model bench  [--model M] [--prefill-tokens N] build/load time, weights-digest cost, prefill time
  skymemory model verify [--model M] [--block-tokens N] [--new-tokens N] [--prompts N]
                         greedy generation with vs without the cache, per KV format

Heavy imports (torch, transformers) happen inside the commands so that the
rest of the CLI stays fast.
"""

from __future__ import annotations

import argparse
import sys
import time

from skymemory.argtypes import KV_FORMATS, kv_format_list, positive_int
from skymemory.bench.options import token_list
from skymemory.cli.model_plan import register_plan
from skymemory.kv.model.cache_arg import cache_arg, cache_of

PAPER_BLOCK_MB = 2.9  # §5: "4x 128 token blocks of about 2.9MB each"


def _clear_errors(command):
    """Bad model names, missing files, ...: one line on stderr and exit status 2, not a traceback."""

    def run(args) -> int:
        try:
            return command(args)
        except (ValueError, OSError) as exc:
            first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            print(f"skymemory model {args.model_command}: error: {first_line}", file=sys.stderr)
            return 2

    return run


def register(subparsers) -> None:
    parser = subparsers.add_parser("model", help="inspect, benchmark and verify the model behind the KV cache")
    commands = parser.add_subparsers(dest="model_command", required=True, metavar="ACTION")

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model", default="default", help="hub id, local directory, 'default', embedded-tinyllama or embedded-tiny")
    common.add_argument("--device", default=None, help="cpu, cuda, cuda:0 (default: cuda if available)")
    common.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"], help="model dtype (default: fp16 on cuda, fp32 on cpu)")

    info = commands.add_parser("info", parents=[common], help="architecture, KV groups, block sizes and the link rate "
                                                              "at which fetching breaks even (Φkv)")
    info.add_argument("--block-tokens", type=positive_int, default=128)
    info.add_argument("--kv", default="fp16", choices=KV_FORMATS, help="KV format of the figures (default fp16)")
    info.add_argument("--prefill-tokens", type=token_list, default=(1024,),
                      help="prefix lengths at which Φkv is measured, comma-separated (default 1024)")
    info.add_argument("--no-measure", action="store_true",
                      help="describe the model from its configuration only: no weights built, no prefill timed")
    info.set_defaults(func=_clear_errors(_info))

    bench = commands.add_parser("bench", parents=[common], help="time building/loading, fingerprinting and prefill")
    bench.add_argument("--prefill-tokens", type=positive_int, default=1056)
    bench.add_argument("--quantize", choices=["qint8", "qint4", "hqq"], default=None)
    bench.add_argument("--block-tokens", type=positive_int, default=128)
    bench.add_argument("--kv", default="fp16", choices=KV_FORMATS, help="KV format for the cached-prefix measurement")
    bench.add_argument("--repeats", type=positive_int, default=3, help="timed calls per step, after a warm-up (default 3)")
    bench.set_defaults(func=_clear_errors(_bench))

    verify = commands.add_parser("verify", parents=[common], help="cached vs uncached greedy generation")
    verify.add_argument("--block-tokens", type=positive_int, default=128)
    verify.add_argument("--blocks", type=positive_int, default=4, help="cached blocks per prompt")
    verify.add_argument("--suffix-tokens", type=positive_int, default=16)
    verify.add_argument("--new-tokens", type=positive_int, default=16)
    verify.add_argument("--prompts", type=positive_int, default=4)
    verify.add_argument("--formats", type=kv_format_list, default="fp16,int8", help="comma-separated KV formats (fp16,bf16,fp32,int8)")
    verify.set_defaults(func=_clear_errors(_verify))

    register_plan(commands, common)


def _info(args) -> int:
    """One model in detail; several (comma-separated) side by side, one row each."""
    specs = [spec.strip() for spec in args.model.split(",") if spec.strip()]
    if len(specs) > 1:
        return _info_table(args, specs)
    from skymemory.kv.format import codec
    from skymemory.kv.model import models
    from skymemory.kv.hf.report import block_size_table

    spec, config = models.load_config(specs[0])
    params = models.parameter_count(config)
    print(f"model               {spec}")
    print(f"architecture        {config.model_type}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"{config.num_attention_heads} heads, vocab {config.vocab_size}")
    print(f"parameters          {params / 1e9:.3f} B")
    model, layout, why = _layout(args, spec, config)
    if layout is None or layout.dense:
        geometry = codec.BlockGeometry.from_config(config, args.block_tokens)
        print(f"KV per token        {2 * geometry.layers * geometry.kv_heads * geometry.head_dim} values "
              f"({geometry.layers} full-attention layers, {geometry.kv_heads} KV heads x {geometry.head_dim})")
        print(f"block               {args.block_tokens} tokens, header {codec.HEADER_BYTES} bytes, layer-major")
        print(f"{'format':8} {'block bytes':>12} {'MB':>8} {'per layer':>10} {'vs paper 2.9 MB':>16}")
        for fmt, size in block_size_table(config, args.block_tokens):
            print(f"{fmt:8} {size:12,d} {size / 1e6:8.3f} {codec.layer_bytes(geometry, fmt):10,d} "
                  f"{size / 1e6 / PAPER_BLOCK_MB:15.2f}x")
        print(f"6 KB chunks/block   fp16 {-(-codec.block_bytes(geometry, 'fp16') // 6144)}, "
              f"int8 {-(-codec.block_bytes(geometry, 'int8') // 6144)}")
    if layout is not None:
        _print_groups(args, layout)
    _print_throughput(args, spec, model, layout, why)
    return 0


def _layout(args, spec: str, config):
    """(model or None, its kv.format.groups.CacheLayout or None, why not measured or None): the model is built when the
    figures are measured; otherwise the layout comes from the configuration on the meta device."""
    from skymemory.kv.model import models
    from skymemory.kv.format.groups import CacheLayout

    if args.no_measure:
        try:
            return None, CacheLayout.of_config(config), "--no-measure"
        except ValueError as exc:
            return None, None, str(exc)
    from skymemory.kv.model.device import pick_device

    device = pick_device(args.device)
    if spec in models.EMBEDDED and models.EMBEDDED[spec].on_device_only and device.type != "cuda":
        return None, CacheLayout.of_config(config), f"{spec} is built on a CUDA device only: pass --device cuda"
    model, _ = models.load_model(spec, args.device, args.dtype)
    return model, CacheLayout.of_model(model), None


def _print_groups(args, layout) -> None:
    from skymemory.kv.decide import throughput
    from skymemory.kv.format.groups import group_name

    per_token = throughput.kv_bytes_per_token(layout, args.kv, args.block_tokens)
    state = throughput.state_bytes_per_group(layout)
    print(f"KV groups ({args.kv}): {'dense (full attention, one K/V shape)' if layout.dense else 'grouped'}")
    print(f"  {'group':14} {'layers':>6} {'KV bytes/token':>15} {'state bytes (one snapshot)':>27}")
    for group in layout.groups():
        key = (group["kind"], group["window"])
        kv = f"{per_token[key]:,.0f}" if key in per_token else "-"
        snapshot = f"{state[key]:,d}" if key in state else "-"
        print(f"  {group_name(*key):14} {group['layers']:6d} {kv:>15} {snapshot:>27}")
    plain, with_state = throughput.block_sizes(layout, args.block_tokens, args.kv)
    tail = "" if with_state == plain else \
        f"; the block that ends a stored prompt also carries the state: {with_state:,d}"
    print(f"  block of {args.block_tokens} tokens: {plain:,d} bytes{tail}")


def _print_throughput(args, spec: str, model, layout, why: str | None) -> None:
    from skymemory.kv.decide import throughput

    if layout is None or model is None:
        print(f"break-even link rate (Φkv): not measured ({why})")
        return
    rows = throughput.measure(model, layout, list(args.prefill_tokens), block_tokens=args.block_tokens,
                              kv_format=args.kv)
    print(f"break-even link rate Φkv = KV bytes a prefix fetches ÷ its prefill time on {model.device} "
          f"({model.dtype}); a faster link makes fetching win:")
    print(f"  {'prefix tokens':>13} {'fetches MB':>11} {'prefill s':>10} {'Φkv MB/s':>10} {'Φkv Gbit/s':>11}")
    for row in rows:
        print(f"  {row.tokens:13,d} {row.fetch_bytes / 1e6:11.2f} {row.prefill_s:10.3f} {row.phi_Bps / 1e6:10.1f} "
              f"{row.phi_Bps * 8 / 1e9:11.3f}")


def _info_table(args, specs: list[str]) -> int:
    """Several models side by side: KV bytes per token, state per snapshot, and Φkv at the first prefix length."""
    from skymemory.kv.model import models
    from skymemory.kv.decide import throughput

    tokens = args.prefill_tokens[0]
    print(f"{'model':30} {'groups':34} {'KV B/token':>10} {'state B':>11} {f'fetch@{tokens} MB':>14} "
          f"{'prefill s':>9} {'Φkv Gbit/s':>10}")
    for spec in specs:
        spec, config = models.load_config(spec)
        model, layout, why = _layout(args, spec, config)
        if layout is None:
            print(f"{spec:30} not described: {why}")
            continue
        groups = layout.in_words()
        per_token = sum(throughput.kv_bytes_per_token(layout, args.kv, args.block_tokens).values())
        fetch = throughput.prefix_fetch_bytes(layout, tokens, args.block_tokens, args.kv)
        prefill = phi = "-"
        if model is not None:
            row = throughput.measure(model, layout, [tokens], block_tokens=args.block_tokens, kv_format=args.kv)[0]
            prefill, phi = f"{row.prefill_s:.3f}", f"{row.phi_Bps * 8 / 1e9:.3f}"
            del model
        print(f"{spec:30} {groups:34} {per_token:10,.0f} {layout.state_bytes():11,d} {fetch / 1e6:14.2f} "
              f"{prefill:>9} {phi:>10}")
    return 0


def _timed(run, repeats: int, device) -> float:
    """Median seconds of `repeats` calls after a warm-up call of the same shape (synchronised on a GPU)."""
    import statistics

    from skymemory.kv.model.device import timings

    return statistics.median(timings(run, repeats, device))


def _bench(args) -> int:
    import resource

    import torch

    from skymemory.kv.naming import blocks
    from skymemory.kv.model import models
    from skymemory.kv.model.device import dtype_name, pick_device, pick_dtype
    from skymemory.kv.format.rebuild import to_cache

    spec = models.resolve_spec(args.model)
    device = pick_device(args.device)
    dtype = pick_dtype(device, args.dtype)
    print(f"model {spec} on {device} in {dtype_name(dtype)}, torch threads {torch.get_num_threads()}; "
          f"each time: median of {args.repeats} after a warm-up call of the same shape")
    if spec in models.EMBEDDED and not models.EMBEDDED[spec].on_device_only:
        started = time.perf_counter()
        model, info = models.build_embedded(spec, use_disk_cache=False)
        print(f"build from seed (no disk cache)   {time.perf_counter() - started:8.2f} s")
        del model
        started = time.perf_counter()
        model, info = models.build_embedded(spec)
        print(f"load ({info['source']})   {time.perf_counter() - started:8.2f} s")
        started = time.perf_counter()
        models.cast_parameters(model, dtype)
        model = model.to(device)
        print(f"convert to {dtype_name(dtype)}                  {time.perf_counter() - started:8.2f} s")
    else:
        started = time.perf_counter()
        model, _ = models.load_model(spec, device, dtype)
        print(f"load / build on {device}            {time.perf_counter() - started:8.2f} s")
    if args.quantize:
        started = time.perf_counter()
        models.quantize_weights(model, args.quantize)
        print(f"quantize {args.quantize}                     {time.perf_counter() - started:8.2f} s")
    n_bytes = sum(t.numel() * t.element_size() for _, t in blocks._named_state(model))
    started = time.perf_counter()
    blocks.weights_digest(model, use_cache=False)
    digest_s = time.perf_counter() - started
    print(f"weights digest SHA-256 ({n_bytes / 1e9:.2f} GB)  {digest_s:8.2f} s  ({n_bytes / 1e9 / digest_s:.2f} GB/s)")
    started = time.perf_counter()
    blocks.weights_digest(model)
    print(f"weights digest, cached            {time.perf_counter() - started:8.4f} s")
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 259, (1, args.prefill_tokens), generator=generator).to(device)
    ids[0, 0] = 1
    with torch.no_grad():
        prefill_s = _timed(lambda: model(input_ids=ids, use_cache=True), args.repeats, device)
        cache = cache_of(model(input_ids=ids, use_cache=True))
        held = [(layer.keys, layer.values) for layer in cache.layers]
        decode_s = _timed(lambda: model(input_ids=ids[:, -1:], **cache_arg(model, to_cache(held, model.config)),
                                        use_cache=True), args.repeats, device)
    print(f"prefill {args.prefill_tokens} tokens               {prefill_s:8.3f} s  ({args.prefill_tokens / prefill_s:.1f} tokens/s)")
    print(f"one decode step after prefill     {decode_s:8.4f} s")
    _bench_cached_prefix(args, model, ids, cache, prefill_s, device)
    print(f"peak RSS                          {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:8.2f} GB")
    return 0


def _bench_cached_prefix(args, model, ids, cache, prefill_s: float, device) -> None:
    """First-token time when the prompt's full blocks come from an in-process store (no network)."""
    import tempfile

    import torch

    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.format.rebuild import to_cache
    from skymemory.kv.store import MemoryBlockStore
    from skymemory.kv.model.tokenizer import build_byte_tokenizer

    prompt = ids[0].tolist()
    with tempfile.TemporaryDirectory() as index_dir:
        manager = KVCManager(model, build_byte_tokenizer(), MemoryBlockStore(), block_tokens=args.block_tokens,
                             kv_dtype=args.kv, index_dir=index_dir, policy="fetch")
        # the blocks come from the prefill's cache (the decode step's extra token lies past the last block)
        added = manager.add_blocks(prompt, cache=cache)
        print(f"store {added.blocks_stored} blocks of {args.block_tokens} ({args.kv}, {added.bytes_stored / 1e6:.1f} MB)  "
              f"encode {added.encode_s:.2f} s")
        results = []

        def get():
            results.append(manager.get_cache(prompt))

        got_s = _timed(get, args.repeats, device)
        result = results[-1]
        suffix = ids[:, result.prefix_tokens :]
        prefix = [(layer.keys, layer.values) for layer in result.cache.layers]
        with torch.no_grad():  # a fresh cache over the same tensors each call: the forward appends to it
            suffix_s = _timed(lambda: model(input_ids=suffix, **cache_arg(model, to_cache(prefix, model.config)),
                                            use_cache=True), args.repeats, device)
    print(f"get_cache {result.prefix_tokens} tokens            {got_s:8.4f} s  (lookup {result.lookup_s:.4f}, "
          f"retrieval {result.retrieval_s:.4f}, check + rebuild {result.decode_s:.4f})")
    print(f"prefill the {suffix.shape[1]} uncached tokens        {suffix_s:8.4f} s")
    print(f"first-token time: full prefill {prefill_s:.3f} s vs cached prefix {got_s + suffix_s:.3f} s "
          f"({prefill_s / (got_s + suffix_s):.1f}x)")


def _verify(args) -> int:
    import random
    import tempfile

    from skymemory.kv.model import models
    from skymemory.kv.hf.manager import KVCManager
    from skymemory.kv.hf.report import compare_generation
    from skymemory.kv.store import MemoryBlockStore

    formats = args.formats
    model, tokenizer = models.load_model(args.model, args.device, args.dtype)
    vocab = min(len(tokenizer), model.config.vocab_size)
    rng = random.Random(0)
    prompts = []
    for _ in range(args.prompts):
        n = args.blocks * args.block_tokens + args.suffix_tokens
        prompts.append([tokenizer.bos_token_id] + [rng.randrange(3, vocab) for _ in range(n - 1)])
    print(f"model {models.resolve_spec(args.model)} dtype {model.dtype}, {args.prompts} prompts of "
          f"{args.blocks} x {args.block_tokens} cached + {args.suffix_tokens} tokens, {args.new_tokens} new tokens")
    print(f"{'KV':5} {'identical':>9} {'token agreement':>16} {'min agree':>9} {'max |dlogit|':>13} {'block bytes':>12} {'get s':>7}")
    for fmt in formats:
        with tempfile.TemporaryDirectory() as index_dir:
            # verify checks the cached path itself: always fetch, whatever recomputing would cost here
            manager = KVCManager(model, tokenizer, MemoryBlockStore(), block_tokens=args.block_tokens,
                                 kv_dtype=fmt, index_dir=index_dir, policy="fetch")
            identical = agree = 0
            min_agree, max_diff, block_bytes, get_s = args.new_tokens, 0.0, 0, 0.0
            for prompt in prompts:
                added = manager.add_blocks(prompt[: args.blocks * args.block_tokens])
                block_bytes = added.bytes_stored // max(1, added.blocks_stored)
                result = compare_generation(manager, prompt, args.new_tokens)
                if result.prefix_tokens != args.blocks * args.block_tokens:
                    print(f"error: expected a {args.blocks}-block prefix, got {result.prefix_tokens} tokens")
                    return 1
                started = time.perf_counter()
                manager.get_cache(prompt)
                get_s += time.perf_counter() - started
                identical += result.identical
                agree += result.agree
                min_agree = min(min_agree, result.agree)
                max_diff = max(max_diff, result.max_abs_logit_diff)
        total = args.prompts * args.new_tokens
        print(f"{fmt:5} {identical:>4}/{args.prompts:<4} {agree:>8}/{total:<7} {min_agree:>9} {max_diff:13.3g} "
              f"{block_bytes:12,d} {get_s / args.prompts:7.3f}")
    return 0
