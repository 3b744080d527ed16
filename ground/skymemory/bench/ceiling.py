"""The compute ceiling of any prefix cache: how fast can a cached TTFT be on this machine?

A cached TTFT is at least one forward pass over the uncached suffix; the
uncached one is a forward pass over the whole prompt. This measures both (plus
one decode step and the suffix alone), with no cache store and no network, and
prints the best TTFT speedup any KV cache could give here:

    skymemory bench ceiling --prefix-tokens 1024 --suffix-tokens 32 --repeats 2
"""

from __future__ import annotations

import statistics
import sys
import time

from skymemory.kv.model.cache_arg import cache_arg, cache_of

STEPS = ("whole_prompt", "suffix_after_prefix", "one_decode_step", "suffix_alone")


def measure(model, prefix_tokens: int, suffix_tokens: int, repeats: int) -> dict[str, list[float]]:
    """Seconds per forward pass of each kind, `repeats` times each (after one small warm-up pass)."""
    import torch

    n = prefix_tokens + suffix_tokens
    ids = torch.randint(3, 250, (1, n), generator=torch.Generator().manual_seed(0)).to(model.device)
    times: dict[str, list[float]] = {k: [] for k in STEPS}

    def timed(key: str, **kw):
        started = time.perf_counter()
        out = model(use_cache=True, logits_to_keep=1, **kw)
        out.logits[0, -1].argmax().item()  # the first token is available (synchronises on a GPU)
        times[key].append(time.perf_counter() - started)
        return out

    with torch.no_grad():
        model(input_ids=ids[:, :16], logits_to_keep=1)
        prefix_cache = cache_of(model(input_ids=ids[:, :prefix_tokens], use_cache=True, logits_to_keep=1))
        for _ in range(repeats):
            timed("whole_prompt", input_ids=ids)
            extra = prefix_cache.get_seq_length() - prefix_tokens
            if extra > 0:
                prefix_cache.crop(-extra)  # back to the prefix only
            out = timed("suffix_after_prefix", input_ids=ids[:, prefix_tokens:], **cache_arg(model, prefix_cache))
            timed("one_decode_step", input_ids=ids[:, :1], **cache_arg(model, cache_of(out)))
            timed("suffix_alone", input_ids=ids[:, prefix_tokens:])
    return times


def register(subparsers) -> None:
    from . import options

    parser = subparsers.add_parser(
        "ceiling", help="the best TTFT speedup any prefix cache can give on this machine (compute only)",
        description=__doc__, formatter_class=__import__("argparse").RawDescriptionHelpFormatter)
    parser.add_argument("--prefix-tokens", type=options.positive_int, default=1024)
    parser.add_argument("--suffix-tokens", type=options.positive_int, default=32)
    parser.add_argument("--repeats", type=options.positive_int, default=2)
    options.add_model_args(parser, "embedded-tinyllama")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    from skymemory.kv.model.models import load_model

    model, _ = load_model(args.model, args.device, args.dtype, quantize=args.quantize)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and args.prefix_tokens + args.suffix_tokens > limit:
        print(f"skymemory bench ceiling: {args.prefix_tokens + args.suffix_tokens} tokens exceed the model's "
              f"{limit} positions", file=sys.stderr)
        return 2
    times = measure(model, args.prefix_tokens, args.suffix_tokens, args.repeats)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.model} on {model.device} ({model.dtype}); prefix {args.prefix_tokens} + suffix "
          f"{args.suffix_tokens} tokens; {args.repeats} repeats (seconds, median [all])")
    for key in STEPS:
        print(f"  {key:20s} {med[key]:8.3f}  {[round(t, 3) for t in times[key]]}")
    print(f"best possible TTFT speedup of a prefix cache: {med['whole_prompt'] / med['suffix_after_prefix']:.2f}x")
    return 0
