"""The chain root of a model that a serving engine runs, without holding that engine's model object.

KVCManager names blocks from the transformers model it holds (kv.naming.blocks): the
model's fingerprint (class, name, configuration, every weight), the
tokenizer's, the KV format, the block size and the block layout. An engine
with its own implementation of the model (vLLM) must name blocks the same way
to share one cache with it. `model_identity(spec, dtype)` therefore loads the
model exactly as a KVCManager user does (`kv.model.models.load_model(spec, "cpu",
dtype)`: the fingerprint does not depend on the device), takes both
fingerprints and keeps them on disk under $SKYMEMORY_CACHE/identity/, keyed
by what could change them: the spec, the dtype, the model files' names,
sizes and modification times (or an embedded model's format), and the
transformers version. The first start pays one load of the weights (seconds,
and their size in RAM); later starts read a small JSON file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from ..format import codec
from .blocks import root_hash

log = logging.getLogger(__name__)

FORMAT = 2  # bump when kv.naming.blocks' fingerprints change: saved identities are then taken again


@dataclass(frozen=True)
class ModelIdentity:
    """A model's and its tokenizer's fingerprints, as KVCManager computes them for load_model(spec, dtype=dtype)."""

    spec: str
    dtype: str  # fp32 / fp16 / bf16
    model_fp: bytes
    tokenizer_fp: bytes

    def root(self, *, kv_format: str, block_tokens: int, sha256: bool = False, sealed: bool = False,
             layout: str | None = None) -> bytes:
        """The chain root of blocks of this model in `kv_format`, as KVCManager(kv_dtype=kv_format) names them
        (`sealed`: on a store that seals, as every store from a manifest does by default). `layout`: the blocks'
        layout name when they are not kv.format.codec's dense ones (kv.format.group_codec.layout_name)."""
        return root_hash(self.model_fp, self.tokenizer_fp, kv_format=codec.check_format(kv_format),
                         block_tokens=block_tokens, layout=layout or codec.layout_name(sha256, sealed))


def _files_stamp(directory: Path) -> list:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in directory.iterdir() if p.is_file())


def identity_key(spec: str, dtype: str) -> dict | None:
    """What the saved identity of (spec, dtype) depends on; None when the files cannot be seen (not saved)."""
    import transformers

    from ..model.models import EMBEDDED, EMBEDDED_FORMAT, resolve_spec

    spec = resolve_spec(spec)
    key = {"format": FORMAT, "spec": spec, "dtype": dtype, "transformers": transformers.__version__}
    if spec in EMBEDDED:
        key["embedded_format"] = EMBEDDED_FORMAT
        return key
    directory = Path(spec)
    if not directory.is_dir():  # a hub id: the snapshot in the local hub cache
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(spec, "config.json")
        if not isinstance(found, str):
            return None
        directory = Path(found).parent
    key["files"] = _files_stamp(directory.resolve())
    return key


def _path(key: dict) -> Path:
    from ..model.models import cache_dir

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    return cache_dir() / "identity" / f"{digest}.json"


def model_identity(spec: str, dtype: str, *, refresh: bool = False) -> ModelIdentity:
    """The fingerprints of load_model(spec, dtype=dtype) (saved ones when nothing they depend on changed)."""
    from ..model.device import dtype_name, parse_dtype
    from ..model.models import load_model, resolve_spec
    from .blocks import model_fingerprint, tokenizer_fingerprint

    dtype = dtype_name(parse_dtype(dtype))
    key = identity_key(spec, dtype)
    path = _path(key) if key is not None else None
    if path is not None and not refresh and path.is_file():
        try:
            data = json.loads(path.read_text())
            if data["key"] == key:
                return ModelIdentity(data["key"]["spec"], dtype, bytes.fromhex(data["model"]),
                                     bytes.fromhex(data["tokenizer"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable model identity %s: %s", path, exc)
    started = time.perf_counter()
    log.info("taking the fingerprint of %s (%s): loading its weights once", spec, dtype)
    model, tokenizer = load_model(spec, "cpu", dtype)
    identity = ModelIdentity(resolve_spec(spec), dtype, model_fingerprint(model), tokenizer_fingerprint(tokenizer))
    del model
    log.info("fingerprint of %s taken in %.1f s", spec, time.perf_counter() - started)
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp-{os.getpid()}")
            tmp.write_text(json.dumps({"key": key, "model": identity.model_fp.hex(),
                                       "tokenizer": identity.tokenizer_fp.hex()}))
            os.replace(tmp, path)
        except OSError as exc:  # a read-only cache: take it again next time
            log.warning("could not save the model identity in %s: %s", path, exc)
    return identity
