#!/usr/bin/env python3
"""Does computing a prompt in two forwards change a model's output? No SkyMemory involved.

For each prompt of `bench ttft`'s workload (a shared prefix + a suffix), three ways to the
last position's logits and a greedy continuation:

  (a) one forward over the whole prompt (what bench ttft's nocache mode does)
  (b) a forward over the prefix, then the suffix over that forward's KV
  (c) the suffix over the prefix KV held from (a) (what the device-ram mode does)

and how far apart they are (max |logit difference|, greedy tokens equal or not), with the gap
between the top two logits of (a). Where (c) differs from (a), the difference is the arithmetic
of the split (kernels at other shapes), not any cache: bench ttft's "= device-ram" rows rest on
that. BENCHMARKS.md ("HQQ tokens with a cache") has figures.

    tools/split_forward_check.py --model embedded-tinyllama --quantize hqq [--device cuda] [--out DIR]

prints a markdown table (and writes it to DIR/split_forward.md with --out; tools/cuda_bench.sh's
split step).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import torch

from skymemory.bench.ttft import _continue_greedy, hold_prefix
from skymemory.bench.workload import build_workload
from skymemory.kv.model.cache_arg import cache_arg, cache_of
from skymemory.kv.model.models import load_model
from skymemory.kv.format.rebuild import to_cache


def _first_difference(x: list[int], y: list[int]) -> str:
    where = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), None)
    return "equal" if where is None else f"differ from token {where}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded-tinyllama")
    p.add_argument("--device", default=None, help="cpu, cuda (default: cuda if available)")
    p.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"])
    p.add_argument("--quantize", default=None, choices=["qint8", "qint4", "hqq"])
    p.add_argument("--prefix-tokens", type=int, default=256)
    p.add_argument("--suffix-tokens", type=int, default=32)
    p.add_argument("--gen-tokens", type=int, default=30)
    p.add_argument("--out", type=Path, default=None, help="also write the table to OUT/split_forward.md")
    args = p.parse_args()

    model, tokenizer = load_model(args.model, args.device, args.dtype, quantize=args.quantize)
    pairs = (("a", "b"), ("a", "c"), ("b", "c"))
    lines = [f"Regenerate: `{shlex.join(['tools/split_forward_check.py', *sys.argv[1:]])}`", "",
             f"{args.model} on {model.device} ({model.dtype}), quantize {args.quantize}: (a) one forward over "
             f"{args.prefix_tokens} + {args.suffix_tokens} tokens, (b) the prefix then the suffix over its KV, (c) "
             f"the suffix over the prefix KV held from (a) (bench ttft's device-ram); greedy {args.gen_tokens} "
             "tokens from each.", "",
             "| suffix | top-2 logit gap of (a) | " + " | ".join(f"({x}) vs ({y})" for x, y in pairs) + " |",
             "|---:|---:|" + "---|" * len(pairs)]
    prefix = args.prefix_tokens
    for prompt in build_workload(tokenizer, prefix, args.suffix_tokens, 2).prompts:
        ids = torch.tensor([tokenizer(prompt.text).input_ids], device=model.device)
        with torch.no_grad():
            whole = model(input_ids=ids, use_cache=True)
            held = hold_prefix(cache_of(whole), prefix)  # before the continuation below appends to it
            first = model(input_ids=ids[:, :prefix], use_cache=True)
            split = model(input_ids=ids[:, prefix:], **cache_arg(model, cache_of(first)), use_cache=True)
            kept = model(input_ids=ids[:, prefix:], **cache_arg(model, to_cache(held, model.config)), use_cache=True)
            logits = {name: out.logits[0, -1].float() for name, out in (("a", whole), ("b", split), ("c", kept))}
            tokens = {name: _continue_greedy(model, cache_of(out), int(logits[name].argmax()), args.gen_tokens)
                      for name, out in (("a", whole), ("b", split), ("c", kept))}
        top = logits["a"].topk(2).values
        lines.append(f"| {prompt.suffix_index} | {float(top[0] - top[1]):.3g} | "
                     + " | ".join(f"max logit diff {float((logits[x] - logits[y]).abs().max()):.3g}, tokens "
                                  f"{_first_difference(tokens[x], tokens[y])}" for x, y in pairs) + " |")
    table = "\n".join(lines) + "\n"
    print(table, end="")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "split_forward.md").write_text(table)


if __name__ == "__main__":
    main()
