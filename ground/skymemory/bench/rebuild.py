"""`skymemory bench rebuild`: landed KV bytes -> a cache on the model's device, beside the copy limits.

For each prefix length and KV format, the prefix's blocks (the model's geometry,
random KV encoded by kv.format.codec) lie back to back in one host buffer, as a store
lands them (pinned when the device is CUDA), with each block's CRC32C as the
transport reports it. Timed after a warm-up, `--repeats` times each, side by
side in one run:

  rebuild        what KVCManager.get_cache does once the bytes are in: check every
                 block (header, CRC algebra), copy to the device, relayout every layer
                 into the model's dtype, build the DynamicCache (kv.format.rebuild)
  memcpy         the same bytes copied host -> host into a reused buffer: touching them once
  host->device   the same bytes, pinned host -> device, one copy (CUDA only): the DMA floor

"first rebuild" is the cell's first call, before the timed ones. On a CPU host the
first cells of a process are slower: until the process frees a large block,
glibc gives every layer's tensors freshly mapped pages, and their page faults
cost more than the copy (1,024 TinyLlama tokens: ~10 ms, then ~2.4 ms).

Only the model's configuration is needed (no weights), so big architectures
(embedded-llama3-8b) can be measured wherever their KV fits:

    skymemory bench rebuild --device cuda --prefix-tokens 512,1024,2048,4096 --kv fp16,int8
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from skymemory.argtypes import output_dir

from .options import positive_int, token_list
from .report import run_and_write


def measure(config, *, device, dtype, prefix_tokens: int, kv_format: str, block_tokens: int, repeats: int,
            block: bytes | None = None) -> dict:
    """One cell: rebuild / memcpy / host->device times for `prefix_tokens` of KV in `kv_format`."""
    import torch

    from skymemory.kv.format import codec, rebuild
    from skymemory.kv.decide.calibration import synthetic_prefix
    from skymemory.kv.model.device import timings

    geometry = codec.BlockGeometry.from_config(config, block_tokens)
    blocks = max(1, prefix_tokens // block_tokens)
    host, crc = synthetic_prefix(geometry, kv_format, blocks, pin=device.type == "cuda", block=block)
    n_bytes = host.numel()

    def rebuild_once():
        good, error = rebuild.check_blocks(host, [crc] * blocks, geometry, kv_format)
        assert error is None and good == blocks, error
        cache, _ = rebuild.prefix_cache(host, geometry, kv_format, dtype, device, config)
        return cache

    first = timings(lambda: rebuild_once().get_seq_length() == blocks * block_tokens or _wrong_length(), 1, device,
                    warm_up=False)[0]
    target = torch.empty_like(host)
    cells = {"rebuild": timings(rebuild_once, repeats, device),
             "memcpy": timings(lambda: target.copy_(host), repeats, device)}
    if device.type == "cuda":
        on_device = torch.empty(host.shape, dtype=torch.uint8, device=device)
        cells["host->device"] = timings(lambda: on_device.copy_(host, non_blocking=True), repeats, device)
    row = {"prefix_tokens": blocks * block_tokens, "kv": kv_format, "blocks": blocks, "bytes": n_bytes,
           "device": str(device), "dtype": str(dtype), "first_rebuild_ms": first * 1e3}
    for name, times in cells.items():
        median = statistics.median(times)
        row[name] = {"median_ms": median * 1e3, "min_ms": min(times) * 1e3, "max_ms": max(times) * 1e3,
                     "GBps": n_bytes / median / 1e9, "runs": len(times)}
    return row


def _wrong_length():
    raise AssertionError("the rebuilt cache does not cover the prefix")


def markdown(rows: list[dict]) -> str:
    steps = [s for s in ("rebuild", "memcpy", "host->device") if any(s in r for r in rows)]
    head = ("| prefix tokens | KV | MB | first rebuild ms | " + " | ".join(f"{s} ms (GB/s)" for s in steps)
            + " | rebuild / memcpy |")
    lines = [head, "|---:|---|---:|---:|" + "---:|" * len(steps) + "---:|"]
    for r in rows:
        cells = " | ".join(f"{r[s]['median_ms']:.2f} ({r[s]['GBps']:.1f})" if s in r else "-" for s in steps)
        lines.append(f"| {r['prefix_tokens']} | {r['kv']} | {r['bytes'] / 1e6:.1f} | {r['first_rebuild_ms']:.2f} | "
                     f"{cells} | {r['rebuild']['median_ms'] / r['memcpy']['median_ms']:.1f}x |")
    return "\n".join(lines)


def run(args, log=print) -> dict:
    import torch

    from skymemory.kv.format import codec
    from skymemory.kv.decide.calibration import synthetic_prefix
    from skymemory.kv.model.device import dtype_name, pick_device, pick_dtype
    from skymemory.kv.model.models import load_config

    device = pick_device(args.device)
    dtype = pick_dtype(device, args.dtype)
    if args.threads:
        torch.set_num_threads(args.threads)
    spec, config = load_config(args.model)
    geometry = codec.BlockGeometry.from_config(config, args.block_tokens)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    log(f"{spec}: {geometry.layers} layers, {geometry.kv_heads} KV heads x {geometry.head_dim}; model dtype "
        f"{dtype_name(dtype)} on {device} ({where}); median of {args.repeats} after a warm-up")
    rows = []
    for kv_format in args.kv:
        block = bytes(synthetic_prefix(geometry, kv_format, 1)[0][0].numpy())  # encoded once per format
        for tokens in args.prefix_tokens:
            row = measure(config, device=device, dtype=dtype, prefix_tokens=tokens, kv_format=kv_format,
                          block_tokens=args.block_tokens, repeats=args.repeats, block=block)
            rows.append(row)
            log(f"  {row['prefix_tokens']:6d} tokens {kv_format}: {row['bytes'] / 1e6:7.1f} MB  rebuild "
                f"{row['rebuild']['median_ms']:8.2f} ms ({row['rebuild']['GBps']:.1f} GB/s)  memcpy "
                f"{row['memcpy']['median_ms']:.2f} ms" + (f"  host->device {row['host->device']['median_ms']:.2f} ms"
                                                          if "host->device" in row else ""))
    return {"benchmark": "rebuild", "model": spec, "device": str(device), "device_name": where,
            "dtype": dtype_name(dtype), "torch": torch.__version__, "rows": rows}


def register(subparsers) -> None:
    from skymemory.argtypes import kv_format_list

    parser = subparsers.add_parser("rebuild", help="landed KV bytes -> cache on the device, beside memcpy and "
                                                  "host->device", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded-tinyllama",
                        help="whose geometry (config only, no weights): embedded-tinyllama (default), "
                             "embedded-llama3-8b, embedded-tiny, a local directory or hub id")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:0 (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=["fp32", "fp16", "bf16"],
                        help="model dtype the cache is built in (default: fp16 on cuda, fp32 on cpu)")
    parser.add_argument("--prefix-tokens", type=token_list, default=(512, 1024, 2048, 4096),
                        help="prefix lengths, comma-separated (default 512,1024,2048,4096)")
    parser.add_argument("--kv", type=kv_format_list, default=["fp16", "int8"], help="KV formats (default fp16,int8)")
    parser.add_argument("--block-tokens", type=positive_int, default=128)
    parser.add_argument("--repeats", type=positive_int, default=20)
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--out", type=output_dir, default=Path("out/bench-rebuild"), help="output directory")
    parser.set_defaults(func=_main)


def _main(args) -> int:
    return run_and_write(args, "rebuild", run, lambda result: markdown(result["rows"]))
