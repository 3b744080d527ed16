"""How fast this host computes and rebuilds, measured once per model / device / dtype and kept on disk.

The fetch-or-recompute decision (kv.policy, kv.costmodel) needs two device
rates:

* compute: forwards of growing prompts (16, 32, 64, ... tokens, until one takes
  longer than `budget_s` -- three lengths at least -- or the model's length
  limit), and a 32-token forward over each of those prompts as context; fitted
  to T(new, ctx).
* rebuild: landed bytes -> a cache on the device (check, copy to the device,
  relayout), for 1 and 4 synthetic blocks; fitted to fixed + bytes / rate.

Both are measured after a warm-up (on CUDA of every shape: the first call of
a shape can cost 10-50x a warm one) and the fastest of `repeats` runs is kept
(shared machines). About 15 s on a 2-core CPU with TinyLlama, seconds on a GPU.
The result is saved as JSON under $SKYMEMORY_CACHE/calibration/, keyed by
everything that changes the timings: model architecture and quantisation,
device (GPU name, the multiprocessors this process sees and the CUDA MPS
thread percentage; or CPU model and torch threads), dtype, torch version, KV
format and block size. A saved file is checked when it is read: the largest
prefill that took <= 0.3 s (and its suffix point; else the smallest prefill)
is timed again, and when it is more than 2x off either way everything is
measured again, with a warning (a file written during a loaded run is not
trusted for ever). KVCManager also compares the forwards its callers time
(observe_forward) with these rates.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from skymemory.protocol import native

from . import codec, rebuild
from .cache_arg import cache_arg, cache_of
from .costmodel import PrefillModel, RebuildModel
from .device import cpu_name, timings
from .models import cache_dir

log = logging.getLogger(__name__)

FORMAT = 1  # bump when what is measured changes: old files are then measured again
SUFFIX_TOKENS = 32
MAX_TOKENS = 16384


@dataclass(frozen=True)
class DeviceRates:
    """What calibrate() measured (and the key it is filed under)."""

    prefill: PrefillModel
    rebuild: RebuildModel
    points: list  # (new tokens, context tokens, seconds) of every timed forward
    key: dict
    measured_s: float  # how long the calibration took

    def as_dict(self) -> dict:
        return {"format": FORMAT, "prefill": asdict(self.prefill), "rebuild": asdict(self.rebuild),
                "points": self.points, "key": self.key, "measured_s": self.measured_s}

    @classmethod
    def from_dict(cls, data: dict) -> "DeviceRates":
        """Read back; the compute model is fitted again from the saved points (a fit that improved since the
        file was written applies to it too)."""
        prefill = PrefillModel(**data["prefill"])
        if len(data["points"]) >= 3:
            prefill = PrefillModel.fit(data["points"], device=prefill.device)
        return cls(prefill, RebuildModel(**data["rebuild"]), data["points"], data["key"], data["measured_s"])


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (sm {'.'.join(map(str, torch.cuda.get_device_capability(device)))})"
    return f"{cpu_name()}, {torch.get_num_threads()} torch threads, {os.cpu_count()} cpus"


def _device_share(device: torch.device) -> dict:
    """How much of a GPU this process has: under CUDA MPS the device name is the same whatever the cap, so
    the multiprocessor count it sees and the MPS thread percentage (MPS may or may not lower the count) go
    into the key too. Nothing on a CPU (its threads are in the device name)."""
    if device.type != "cuda":
        return {}
    return {"multiprocessors": torch.cuda.get_device_properties(device).multi_processor_count,
            "mps_thread_percentage": os.environ.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE")}


def calibration_key(model, kv_format: str, block_tokens: int) -> dict:
    config = model.config.to_dict()
    for field in ("transformers_version", "_name_or_path", "name_or_path"):
        config.pop(field, None)
    architecture = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return {"model": getattr(model.config, "name_or_path", "") or type(model).__name__,
            "architecture": architecture, "quantization": getattr(model, "skymemory_quantization", None),
            "device": _device_name(model.device), "dtype": str(model.dtype), "torch": torch.__version__,
            "kv_format": kv_format, "block_tokens": block_tokens, **_device_share(model.device)}


def _path(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "calibration" / f"{digest}.json"


def _calibration_ids(model, max_tokens: int = MAX_TOKENS) -> torch.Tensor:
    """The random prompt every timed forward takes its tokens from (the same for a re-check)."""
    limit = min(max_tokens, int(getattr(model.config, "max_position_embeddings", max_tokens) or max_tokens))
    gen = torch.Generator().manual_seed(0)
    return torch.randint(3, int(model.config.vocab_size), (1, limit), generator=gen).to(model.device)


def _time_forward(model, ids: torch.Tensor, new: int, context: int, repeats: int) -> float:
    """Seconds of the fastest of `repeats` forwards over `new` tokens of `ids` after `context` of them in a cache
    (context 0: a plain prefill). On CUDA each shape is warmed up first: its first call can cost 10-50x."""
    device = model.device
    warm_each_shape = device.type == "cuda"  # a CPU's first call of a shape is not slower: min of repeats will do
    with torch.no_grad():
        if context == 0:
            prompt = ids[:, :new]
            return min(timings(lambda: model(input_ids=prompt, use_cache=True), repeats, device,
                               warm_up=warm_each_shape))
        context_cache = cache_of(model(input_ids=ids[:, :context], use_cache=True))
        kept = [(layer.keys, layer.values) for layer in context_cache.layers]
        suffix = ids[:, context:context + new]

        def over_context():
            model(input_ids=suffix, **cache_arg(model, rebuild.to_cache(kept, model.config)), use_cache=True)

        return min(timings(over_context, repeats, device, warm_up=warm_each_shape))


def _measure_compute(model, budget_s: float, repeats: int, max_tokens: int) -> list[tuple[int, int, float]]:
    ids = _calibration_ids(model, max_tokens)
    points: list[tuple[int, int, float]] = []
    with torch.no_grad():
        model(input_ids=ids[:, :16], use_cache=True)  # warm-up: kernels, allocator
    n = 16
    while n + SUFFIX_TOKENS <= ids.shape[1]:
        seconds = _time_forward(model, ids, n, 0, repeats)
        points.append((n, 0, seconds))
        if n >= 2 * SUFFIX_TOKENS:  # a suffix over this prompt as context
            points.append((SUFFIX_TOKENS, n, _time_forward(model, ids, SUFFIX_TOKENS, n, repeats)))
        if seconds > budget_s and sum(1 for p in points if p[1] == 0) >= 3:  # three lengths: a, b and c
            break
        n *= 2
    return points


RECHECK_S = 0.3  # a re-check at load times cached points that took no longer than this
DISAGREE = 2.0  # a time this many times off (either way) means the rates are wrong for this host now


def disagrees(expected_s: float, measured_s: float) -> bool:
    """Is `measured_s` more than DISAGREE times off `expected_s`, either way?"""
    if expected_s <= 0 or measured_s <= 0:
        return False
    return max(expected_s / measured_s, measured_s / expected_s) > DISAGREE


def _ms(seconds: float) -> str:
    """'9,100', '15', '0.0012': milliseconds as a warning shows them."""
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.2g}"


def recheck(model, rates: "DeviceRates", *, repeats: int = 2) -> str | None:
    """Re-time the largest cached prefill that took <= RECHECK_S and its suffix point when that is cheap too
    (none that cheap, a big model on a CPU: the smallest prefill alone); None when they agree with the saved
    times within DISAGREE, else what disagreed."""
    prefills = [p for p in rates.points if p[1] == 0]
    if not prefills:
        return None
    cheap = [p for p in prefills if p[2] <= RECHECK_S]
    checked = max(cheap, key=lambda p: p[0]) if cheap else min(prefills, key=lambda p: p[0])
    suffix = [p for p in rates.points if p[1] == checked[0] and p[2] <= RECHECK_S]
    ids = _calibration_ids(model)
    for new, context, cached_s in [checked] + suffix[:1]:
        if new + context > ids.shape[1]:
            continue
        measured = _time_forward(model, ids, new, context, repeats)
        if disagrees(cached_s, measured):
            what = f"prefill of {new:,} tokens" if context == 0 else f"{new}-token forward over {context:,} tokens"
            return f"cached {what} {_ms(cached_s)} ms, measured now {_ms(measured)} ms"
    return None


def synthetic_prefix(geometry: codec.BlockGeometry, kv_format: str, blocks: int, *, pin: bool = False,
                     block: bytes | None = None) -> tuple[torch.Tensor, int]:
    """`blocks` copies of one encoded block of random KV, landed as a store lands them ([blocks, block_bytes]
    host tensor, pinned if asked), and the block's CRC32C. For timing: the content does not matter."""
    if block is None:
        g = geometry
        gen = torch.Generator().manual_seed(1)
        block = codec.encode_block([(torch.randn(g.kv_heads, g.tokens, g.head_dim, generator=gen),
                                     torch.randn(g.kv_heads, g.tokens, g.head_dim, generator=gen))
                                    for _ in range(g.layers)], kv_format)
    host = torch.empty((blocks, len(block)), dtype=torch.uint8, pin_memory=pin)
    host.copy_(torch.frombuffer(bytearray(block), dtype=torch.uint8).expand(blocks, -1))
    return host, native.crc32c(block)


def _measure_rebuild(model, kv_format: str, block_tokens: int, repeats: int) -> RebuildModel:
    """Check + copy to the device + relayout of 1 and 4 synthetic blocks of this model's geometry."""
    geometry = codec.BlockGeometry.from_config(model.config, block_tokens)
    sizes, times = [], []
    for blocks in (1, 4):
        host, crc = synthetic_prefix(geometry, kv_format, blocks, pin=model.device.type == "cuda")

        def run():
            rebuild.check_blocks(host, [crc] * blocks, geometry, kv_format)
            rebuild.prefix_cache(host, geometry, kv_format, model.dtype, model.device, model.config)

        sizes.append(host.numel())
        times.append(min(timings(run, repeats, model.device)))
    rate = (sizes[1] - sizes[0]) / max(times[1] - times[0], 1e-9)
    return RebuildModel(max(0.0, times[0] - sizes[0] / rate), rate)


def calibrate(model, *, kv_format: str = "fp16", block_tokens: int = 128, budget_s: float = 1.0,
              repeats: int = 2, max_tokens: int = MAX_TOKENS) -> DeviceRates:
    """Measure the compute and rebuild rates of `model` on its device."""
    started = time.perf_counter()
    points = _measure_compute(model, budget_s, repeats, max_tokens)
    prefill = PrefillModel.fit(points, device=str(model.device))
    rebuild_model = _measure_rebuild(model, kv_format, block_tokens, repeats)
    return DeviceRates(prefill, rebuild_model, [list(p) for p in points],
                       calibration_key(model, kv_format, block_tokens), time.perf_counter() - started)


def load_or_calibrate(model, *, kv_format: str = "fp16", block_tokens: int = 128, refresh: bool = False,
                      **options) -> DeviceRates:
    """The saved rates for this model/device/dtype, or measure (and save) them now."""
    key = calibration_key(model, kv_format, block_tokens)
    path = _path(key)
    if not refresh and path.is_file():
        cached = None
        try:
            data = json.loads(path.read_text())
            if data.get("format") == FORMAT and data.get("key") == key:
                cached = DeviceRates.from_dict(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable calibration %s: %s", path, exc)
        if cached is not None:
            # a file measured on a loaded machine (or before a change the key cannot see) is not trusted
            # blindly: one cheap point is timed again
            wrong = recheck(model, cached, repeats=options.get("repeats", 2))
            if wrong is None:
                return cached
            log.warning("calibration %s: %s: re-measuring", path, wrong)
    log.info("calibrating compute and rebuild rates of %s on %s (once; saved in %s)", key["model"],
             key["device"], path)
    rates = calibrate(model, kv_format=kv_format, block_tokens=block_tokens, **options)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp-{os.getpid()}")
        tmp.write_text(json.dumps(rates.as_dict(), indent=1))
        os.replace(tmp, path)
    except OSError as exc:  # a read-only cache directory: keep the rates for this process only
        log.warning("could not save the calibration in %s: %s", path, exc)
    log.info("calibrated in %.1f s: prefill %s, rebuild %.2f GB/s + %.2f ms", rates.measured_s, rates.prefill,
             rates.rebuild.rate_Bps / 1e9, rates.rebuild.fixed_s * 1e3)
    return rates
