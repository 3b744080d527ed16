"""How fast this host computes and rebuilds, measured once per model / device / dtype and kept on disk.

The fetch-or-recompute decision (kv.decide.policy, kv.decide.costmodel) needs two device
rates:

* compute: forwards of growing prompts (16, 32, 64, ... tokens, until one takes
  longer than `budget_s` -- three lengths at least -- or the model's length
  limit), and a 32-token forward over each of those prompts as context; fitted
  to T(new, ctx).
* rebuild: landed bytes -> a cache on the device (check, copy to the device,
  relayout), for 1 and 4 synthetic blocks; fitted to fixed + bytes / rate (a
  difference between the two smaller than NOISE of the larger is taken as that
  much: a per-byte cost below the noise is not a rate of petabytes per second).

Both are measured after a warm-up (on CUDA of every shape: the first call of
a shape can cost 10-50x a warm one) and the fastest of `repeats` runs is kept
(shared machines). About 15 s on a 2-core CPU with TinyLlama, seconds on a GPU.

A calibration is checked before it is saved and when it is read (problems()):
every time positive and finite; a forward no more than NOISE faster than a
shorter one (prefills by length, a suffix by its context), and no slower than
the model allows (T(k n) <= k^2 T(n) for a prefill k times longer, k T for a
context k times longer) plus NOISE; and the fit within FIT_ERROR (relative)
of every point. A measurement that fails is measured again (ATTEMPTS in all);
one that keeps failing is never saved: the attempt the fit follows best is used
by this process only, with a warning, and carries the reason (`problem`).

The result is saved as JSON under $SKYMEMORY_CACHE/calibration/, keyed by
everything that changes the timings: model architecture and quantisation,
device (GPU name, the multiprocessors this process sees and the CUDA MPS
thread percentage; or CPU model and torch threads), dtype, torch version, KV
format and block size. A saved file that fails the checks is stale; one that
passes is timed again in part (recheck(): the largest prefill that took
<= 0.3 s, the suffix over it, the smallest and a middle one; none that cheap:
the smallest prefill) and when any is more than 2x off either way everything is
measured again (a file written during a loaded run is not trusted for ever).
What was loaded, checked or measured is kept for the process: later calls for
the same key (other managers of the model) neither re-time nor warn again
(each warning once per process and key) until the file changes or a caller
asks for a refresh. KVCManager also compares the forwards its callers time
(observe_forward) with these rates.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import itertools
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from skymemory.protocol import native

from ..format import codec, rebuild
from ..format.groups import FULL, layer_kinds
from ..model.cache_arg import cache_arg, cache_of
from ..model.device import cpu_name, timings
from ..model.models import cache_dir
from .costmodel import PrefillModel, RebuildModel

log = logging.getLogger(__name__)

FORMAT = 2  # bump when what is measured or saved changes: old files are then measured again (2: rebuild points)
SUFFIX_TOKENS = 32
MAX_TOKENS = 16384
NOISE = 0.2  # a forward may be this much faster than a shorter one (or slower than the model allows): timing noise
FIT_ERROR = 0.5  # the fit must be within this relative error of every point it was fitted to
ATTEMPTS = 3  # measurements at most before one that fails the checks is used (unsaved)


class CalibrationRefused(ValueError):
    """A calibration whose points or fit fail the checks (problems()): it is not saved."""


@dataclass(frozen=True)
class DeviceRates:
    """What calibrate() measured (and the key it is filed under)."""

    prefill: PrefillModel
    rebuild: RebuildModel
    points: list  # (new tokens, context tokens, seconds) of every timed forward
    key: dict
    measured_s: float  # how long the calibration took
    rebuild_points: list = dataclasses.field(default_factory=list)  # (bytes, seconds) of every timed rebuild
    problem: str | None = None  # why these rates failed the checks (used unsaved), None when they passed

    def as_dict(self) -> dict:
        return {"format": FORMAT, "prefill": asdict(self.prefill), "rebuild": asdict(self.rebuild),
                "points": self.points, "rebuild_points": self.rebuild_points, "key": self.key,
                "measured_s": self.measured_s}

    @classmethod
    def from_dict(cls, data: dict) -> "DeviceRates":
        """Read back; both models are fitted again from the saved points (a fit that improved since the
        file was written applies to it too)."""
        prefill = PrefillModel(**data["prefill"])
        if len(data["points"]) >= 3:
            prefill = PrefillModel.fit(data["points"], device=prefill.device)
        rebuild_points = data.get("rebuild_points", [])
        rebuild_model = fit_rebuild(rebuild_points) if len(rebuild_points) >= 2 else RebuildModel(**data["rebuild"])
        return cls(prefill, rebuild_model, data["points"], data["key"], data["measured_s"], rebuild_points)


def _ms(seconds: float) -> str:
    """'9,100', '15', '0.0012': milliseconds as a warning shows them."""
    ms = seconds * 1e3
    return f"{ms:,.0f}" if ms >= 10 else f"{ms:.2g}"


def _forward(new: int, context: int) -> str:
    return f"prefill of {new:,} tokens" if context == 0 else f"{new}-token forward over {context:,} tokens"


def fit_error(prefill: PrefillModel, points) -> float:
    """The largest relative error of `prefill` over (new, context, seconds) points (0 with none; inf when a
    time is not > 0)."""
    if any(not s > 0 for _, _, s in points):
        return math.inf
    return max((abs(prefill.forward_s(n, c) - s) / s for n, c, s in points), default=0.0)


def _series_problem(points, along: int, power: int) -> str | None:
    """Is any point NOISE faster than one with less of `along` (1: context, 0: new tokens; the rest equal), or
    slower than the model allows (k^power times the time for k times as much, plus NOISE)?"""
    series: dict = {}
    for p in points:
        series.setdefault(p[1 - along], []).append(p)
    for group in series.values():
        for shorter, longer in itertools.combinations(sorted(group, key=lambda p: p[along]), 2):
            ratio = longer[along] / shorter[along]
            if longer[2] < shorter[2] * (1 - NOISE):
                return (f"{_forward(*longer[:2])} {_ms(longer[2])} ms is faster than the "
                        f"{_forward(*shorter[:2])} {_ms(shorter[2])} ms")
            if ratio > 1 and longer[2] > shorter[2] * ratio ** power * (1 + NOISE):
                return (f"{_forward(*longer[:2])} {_ms(longer[2])} ms is {longer[2] / shorter[2]:.1f}x the "
                        f"{_forward(*shorter[:2])} {_ms(shorter[2])} ms (at most {ratio ** power:g}x)")
    return None


def problems(rates: DeviceRates) -> str | None:
    """Why `rates` must not be saved (nor a saved file trusted), or None: see the module doc."""
    points = [tuple(p) for p in rates.points]
    for new, context, seconds in points:
        if new <= 0 or context < 0 or not (math.isfinite(seconds) and seconds > 0):
            return f"a {_forward(new, context)} timed {seconds!r} s"
    for size, seconds in rates.rebuild_points:
        if size <= 0 or not (math.isfinite(seconds) and seconds > 0):
            return f"a rebuild of {size:,} bytes timed {seconds!r} s"
    if sum(1 for p in points if p[1] == 0) < 3:
        return f"{sum(1 for p in points if p[1] == 0)} prefill lengths timed, the fit needs 3"
    prefills = [p for p in points if p[1] == 0]
    over_context = [p for p in points if p[1] > 0]
    problem = _series_problem(prefills, 0, 2) or _series_problem(over_context, 1, 1)
    if problem:
        return problem
    error = fit_error(rates.prefill, points)
    if not error <= FIT_ERROR:
        worst = max(points, key=lambda p: abs(rates.prefill.forward_s(p[0], p[1]) - p[2]) / p[2])
        return (f"the fit is {error:.0%} off the {_forward(*worst[:2])} ({_ms(worst[2])} ms measured, "
                f"{_ms(rates.prefill.forward_s(worst[0], worst[1]))} ms fitted; at most {FIT_ERROR:.0%})")
    return None


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
        suffix = ids[:, context:context + new]
        if _dense_cache(model.config):
            kept = [(layer.keys, layer.values) for layer in context_cache.layers]

            def fresh_context():
                return rebuild.to_cache(kept, model.config)
        else:  # window and recurrent layers keep state that a forward changes in place: a copy each time

            def fresh_context():
                return copy.deepcopy(context_cache)

        def over_context():
            model(input_ids=suffix, **cache_arg(model, fresh_context()), use_cache=True)

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


def recheck_points(points) -> list:
    """The saved points a re-check times again, in that order: the largest prefill that took <= RECHECK_S, the
    suffix over it (or, not that cheap, the cheap suffix over the most context), the smallest prefill and one
    in the middle; none that cheap (a big model on a CPU): the smallest prefill alone."""
    prefills = sorted((tuple(p) for p in points if p[1] == 0), key=lambda p: p[0])
    if not prefills:
        return []
    cheap = [p for p in prefills if p[2] <= RECHECK_S]
    if not cheap:
        return prefills[:1]
    suffixes = sorted((tuple(p) for p in points if p[1] > 0 and p[2] <= RECHECK_S), key=lambda p: p[1])
    over_largest = [p for p in suffixes if p[1] == cheap[-1][0]]
    chosen = [cheap[-1]] + (over_largest or suffixes[-1:]) + [cheap[0], cheap[len(cheap) // 2]]
    return list(dict.fromkeys(chosen))  # a short list repeats itself: once each


def recheck(model, rates: "DeviceRates", *, repeats: int = 2) -> str | None:
    """Time recheck_points() again; None when every one agrees with its saved time within DISAGREE (it stops at
    the first that does not), else what disagreed."""
    ids = _calibration_ids(model)
    for new, context, cached_s in recheck_points(rates.points):
        if new + context > ids.shape[1]:
            continue
        measured = _time_forward(model, ids, new, context, repeats)
        if disagrees(cached_s, measured):
            return f"cached {_forward(new, context)} {_ms(cached_s)} ms, measured now {_ms(measured)} ms"
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


def _measure_rebuild(model, kv_format: str, block_tokens: int, repeats: int) -> list[tuple[int, float]]:
    """(bytes, seconds) of the check + copy to the device + relayout of 1 and 4 synthetic blocks of this
    model's geometry."""
    geometry = codec.BlockGeometry.from_config(model.config, block_tokens)
    # a grouped model (kv.format.groups: window, recurrent or MLA layers) is timed as a dense model of its config's
    # shapes, in a plain cache: its own cache takes no dense prefix
    config = model.config if _dense_cache(model.config) else None
    points = []
    for blocks in (1, 4):
        host, crc = synthetic_prefix(geometry, kv_format, blocks, pin=model.device.type == "cuda")

        def run():
            rebuild.check_blocks(host, [crc] * blocks, geometry, kv_format)
            rebuild.prefix_cache(host, geometry, kv_format, model.dtype, model.device, config)

        points.append((host.numel(), min(timings(run, repeats, model.device))))
    return points


def _dense_cache(config) -> bool:
    """Every layer of the model's cache a full-attention layer (kv.format.groups)."""
    return all(kind == FULL for kind, _ in layer_kinds(config))


def fit_rebuild(points) -> RebuildModel:
    """fixed + bytes / rate through the smallest and the largest of (bytes, seconds) points. When the larger
    took less than NOISE of its time longer (a launch-bound GPU; or noise), that much is taken as what its
    extra bytes cost: a bounded rate, not the petabytes per second a difference of nothing gives."""
    (small, small_s), (large, large_s) = min(points), max(points)
    rate = (large - small) / max(large_s - small_s, NOISE * large_s, 1e-9)
    return RebuildModel(max(0.0, small_s - small / rate), rate)


def calibrate(model, *, kv_format: str = "fp16", block_tokens: int = 128, budget_s: float = 1.0,
              repeats: int = 2, max_tokens: int = MAX_TOKENS) -> DeviceRates:
    """Measure the compute and rebuild rates of `model` on its device, once (unchecked: see load_or_calibrate)."""
    started = time.perf_counter()
    points = _measure_compute(model, budget_s, repeats, max_tokens)
    prefill = PrefillModel.fit(points, device=str(model.device))
    rebuild_points = _measure_rebuild(model, kv_format, block_tokens, repeats)
    return DeviceRates(prefill, fit_rebuild(rebuild_points), [list(p) for p in points],
                       calibration_key(model, kv_format, block_tokens), time.perf_counter() - started,
                       [list(p) for p in rebuild_points])


def save(rates: DeviceRates) -> str:
    """Write `rates` where load_or_calibrate reads them (the text written); CalibrationRefused, and nothing
    written, when they fail the checks."""
    problem = problems(rates)
    if problem is not None:
        raise CalibrationRefused(f"calibration not saved: {problem}")
    path = _path(rates.key)
    text = json.dumps(rates.as_dict(), indent=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)
    return text


# What this process loaded (and checked) or measured, per file: (the file's text when it was read or written,
# or None when the rates were not saved; the rates). A later call for the same key returns them while the
# file is unchanged: several managers of one model neither re-time the file nor warn again.
_KNOWN: dict[Path, tuple[str | None, DeviceRates]] = {}
_WARNED: set[tuple[Path, str]] = set()  # (file, kind): each kind of warning once per process and key


def _warn_once(path: Path, kind: str, message: str, *args) -> None:
    if (path, kind) in _WARNED:
        log.info(message, *args)
    else:
        _WARNED.add((path, kind))
        log.warning(message, *args)


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _parse(text: str, key: dict) -> tuple[DeviceRates | None, str | None]:
    """(the rates a saved file holds, or None; why they are stale, or None when there is nothing to say)."""
    try:
        data = json.loads(text)
        if data.get("format") != FORMAT or data.get("key") != key:
            return None, None  # an older format (or a hash collision): measured again quietly
        rates = DeviceRates.from_dict(data)
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"unreadable ({exc})"
    problem = problems(rates)
    return (rates, None) if problem is None else (None, f"the saved points fail the checks: {problem}")


def _measure(model, path: Path, **options) -> DeviceRates:
    """calibrate() until the result passes the checks, ATTEMPTS times at most; when none does, the attempt the
    fit follows best, with its `problem` (and a warning)."""
    refused = []
    for attempt in range(1, ATTEMPTS + 1):
        rates = calibrate(model, **options)
        problem = problems(rates)
        if problem is None:
            return rates
        log.info("calibration attempt %d of %d refused: %s", attempt, ATTEMPTS, problem)
        refused.append(dataclasses.replace(rates, problem=problem))
    best = min(refused, key=lambda r: fit_error(r.prefill, r.points) if r.points else math.inf)
    _warn_once(path, "refused", "calibration of %s on %s failed its checks %d times (%s): using the "
               "closest fit for this process only, unsaved; decisions from it may be off", best.key.get("model"),
               best.key.get("device"), ATTEMPTS, best.problem)
    return best


def load_or_calibrate(model, *, kv_format: str = "fp16", block_tokens: int = 128, refresh: bool = False,
                      **options) -> DeviceRates:
    """The saved rates for this model/device/dtype (checked, and timed again in part, once per process), or
    measure (and save) them now; refresh=True measures again whatever is saved."""
    key = calibration_key(model, kv_format, block_tokens)
    path = _path(key)
    if not refresh:
        text = _read_text(path)
        known = _KNOWN.get(path)
        if known is not None and (known[0] is None or known[0] == text):
            return known[1]
        cached, stale = _parse(text, key) if text is not None else (None, None)
        if cached is not None:
            # a file measured on a loaded machine (or before a change the key cannot see) is not trusted
            # blindly: a few cheap points are timed again
            stale = recheck(model, cached, repeats=options.get("repeats", 2))
            if stale is None:
                _KNOWN[path] = (text, cached)
                return cached
        if stale is not None:
            _warn_once(path, "stale", "calibration %s: %s: re-measuring", path, stale)
    log.info("calibrating compute and rebuild rates of %s on %s (once; saved in %s)", key["model"],
             key["device"], path)
    rates = _measure(model, path, kv_format=kv_format, block_tokens=block_tokens, **options)
    text = None
    if rates.problem is None:
        try:
            text = save(rates)
        except OSError as exc:  # a read-only cache directory: keep the rates for this process only
            log.warning("could not save the calibration in %s: %s", path, exc)
        log.info("calibrated in %.1f s: prefill %s, rebuild %.2f GB/s + %.2f ms", rates.measured_s, rates.prefill,
                 rates.rebuild.rate_Bps / 1e9, rates.rebuild.fixed_s * 1e3)
    _KNOWN[path] = (text, rates)
    return rates

