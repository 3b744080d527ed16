"""What a block's hash covers besides its tokens (kv.naming.blocks hashes it): the keys vLLM's own prefix cache adds.

vLLM keys a block of its prefix cache by its tokens and, where a request has them
(vllm/v1/core/kv_cache_utils.py, generate_block_hash_extra_keys):

- the LoRA adapter, on every block;
- each multimodal input, on the blocks its placeholder tokens overlap, with its
  offset from the block's first token;
- the cache salt (a tenant's), on the first block only: the chain carries it on;
- a hash of the block's slice of prompt embeddings.

SkyMemory folds the same inputs into the same blocks, so that a block is
shared where vLLM would share it and nowhere else, but across servers and
engines: an adapter is named by a fingerprint of its weights and the
configuration that changes its math (two servers that load it under other
names or ids agree; a name re-pointed at other weights does not), a medium by
vLLM's hash of its processed input (the one without a LoRA prefix: the adapter
is keyed anyway).

Both engines call this module: the vLLM connector's scheduler side builds a
RequestKeys from vLLM's Request (integrations.vllm.connector), KVCManager from
its `cache_salt=` and the PEFT adapter active on its model. An input that
cannot be keyed (an adapter whose weights cannot be read, a medium without an
identifier, a kind of input vLLM keys that this module does not know) raises
Unkeyable: such a request is neither loaded nor stored, and `say_once` tells the
log once per kind.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

log = logging.getLogger(__name__)

ADAPTER_DOMAIN = b"skymemory-adapter-v1"
EMBEDS_DOMAIN = b"skymemory-prompt-embeds-v1"

# The adapter configuration that changes what the adapter computes (PEFT's LoraConfig names, as
# adapter_config.json holds them); dropout, initialisation, task type and paths do not
ADAPTER_MATH_FIELDS = ("peft_type", "r", "lora_alpha", "use_rslora", "fan_in_fan_out", "target_modules",
                       "exclude_modules", "modules_to_save", "rank_pattern", "alpha_pattern", "bias", "lora_bias",
                       "use_dora", "layers_to_transform", "layers_pattern")
ADAPTER_TYPES = ("LORA",)  # what vLLM serves; other PEFT types are not keyed (not cached)
ADAPTER_PREFIX = "base_model.model."  # PEFT's name prefix of a PeftModel's tensors (absent under transformers')


class Unkeyable(ValueError):
    """A request has an input whose effect on the KV cannot be named: it is neither loaded nor stored."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(f"{kind}: {detail}")
        self.kind = kind
        self.detail = detail


_said: set[str] = set()
_said_lock = threading.Lock()


def say_once(exc: Unkeyable, who: str = "") -> None:
    """Warn that requests with this kind of input are not cached: once per kind and process."""
    with _said_lock:
        if exc.kind in _said:
            return
        _said.add(exc.kind)
    log.warning("SkyMemory: %s%s cannot be keyed (%s): such requests are neither loaded from the cache nor stored "
                "in it (said once)", who, exc.kind, exc.detail)


@dataclass(frozen=True)
class Media:
    """A multimodal input: its identifier and the placeholder tokens it fills."""

    identifier: str
    offset: int
    length: int


@dataclass(frozen=True)
class RequestKeys:
    """What a request's blocks are keyed by besides their tokens (the defaults: nothing, the plain chain)."""

    cache_salt: str | None = None
    adapter: bytes | None = None  # adapter_fingerprint of the adapter in use
    media: tuple[Media, ...] = ()  # in prompt order
    embeds: tuple[bytes, ...] = ()  # embeds_hashes: one per full block when the prompt came as embeddings

    @property
    def tenant(self) -> str | None:
        """Whose blocks these are (the cache salt), for a store that keeps tenants apart."""
        return self.cache_salt or None

    @property
    def plain(self) -> bool:
        return not (self.cache_salt or self.adapter or self.media or self.embeds)

    def per_block(self, n_blocks: int, block_tokens: int) -> list[tuple] | None:
        """Each block's extra keys, in vLLM's order (adapter, media, salt, embeddings); None when none has any."""
        if self.plain:
            return None
        if self.embeds and len(self.embeds) < n_blocks:
            raise ValueError(f"{len(self.embeds)} prompt-embedding hashes for {n_blocks} blocks")
        out = []
        for i in range(n_blocks):
            start, end = i * block_tokens, (i + 1) * block_tokens
            keys: list[tuple] = []
            if self.adapter:
                keys.append(("adapter", self.adapter))
            for medium in self.media:  # vLLM's test: the medium's placeholders reach into [start, end)
                if end > medium.offset and start < medium.offset + medium.length:
                    keys.append(("media", medium.identifier, medium.offset - start))
            if i == 0 and self.cache_salt:
                keys.append(("cache_salt", self.cache_salt))
            if self.embeds:
                keys.append(("prompt_embeds", self.embeds[i]))
            out.append(tuple(keys) or None)
        return out


def embeds_hashes(embeds: torch.Tensor, block_tokens: int) -> tuple[bytes, ...]:
    """SHA-256 of each full block's slice of a prompt's embeddings ([tokens, hidden]: dtype, shape and bytes)."""
    full = embeds.shape[0] // block_tokens
    out = []
    for i in range(full):
        part = embeds[i * block_tokens:(i + 1) * block_tokens].detach().to("cpu").contiguous()
        digest = hashlib.sha256(EMBEDS_DOMAIN + f"|{part.dtype}|{tuple(part.shape)}|".encode())
        digest.update(memoryview(part.reshape(-1).view(torch.uint8).numpy()))
        out.append(digest.digest())
    return tuple(out)


# --------------------------------------------------------------------------- adapters

def _canonical(value):
    """A configuration value as both sides hold it: sets and lists of names sorted, whole floats as ints."""
    if isinstance(value, (set, frozenset, list, tuple)):
        items = [_canonical(v) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) or all(
            isinstance(v, str) for v in items) else items
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if hasattr(value, "value") and isinstance(getattr(value, "value"), str):  # an enum (PeftType.LORA)
        return value.value
    return value


def adapter_config(config: Mapping) -> dict:
    """The fields of an adapter configuration that change its math, defaults (None, False, empty) left out."""
    out = {}
    for name in ADAPTER_MATH_FIELDS:
        value = _canonical(config.get(name))
        if value in (None, False, "", [], {}):
            continue
        out[name] = value
    peft_type = out.get("peft_type", "LORA")
    if peft_type not in ADAPTER_TYPES:
        raise Unkeyable(f"a {peft_type} adapter", f"only {', '.join(ADAPTER_TYPES)} adapters are keyed")
    out["peft_type"] = peft_type
    return out


def adapter_fingerprint(config: Mapping, tensors: Iterable[tuple[str, torch.Tensor]]) -> bytes:
    """SHA-256 over an adapter's math configuration and its tensors (names without PEFT's wrapper prefix, sorted;
    shapes; values as float32), so an adapter saved in fp16 and loaded in fp32 is the same adapter."""
    digest = hashlib.sha256(ADAPTER_DOMAIN)
    digest.update(json.dumps(adapter_config(config), sort_keys=True).encode() + b"\0")
    named = sorted((name.removeprefix(ADAPTER_PREFIX), tensor) for name, tensor in tensors)
    if not named:
        raise Unkeyable("an adapter without weights", "nothing to fingerprint")
    for name, tensor in named:
        data = tensor.detach().to("cpu", torch.float32).contiguous()
        digest.update(f"{name}|{tuple(data.shape)}|".encode())
        if data.numel():
            digest.update(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
    return digest.digest()


_dir_fingerprints: dict[tuple, bytes] = {}
_dir_lock = threading.Lock()
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")


def adapter_dir_fingerprint(path: str | os.PathLike) -> bytes:
    """The fingerprint of a saved adapter (adapter_config.json and adapter_model.safetensors or .bin, as PEFT
    writes them and vLLM loads them); kept per folder and its files' sizes and modification times."""
    directory = Path(path).expanduser()
    config_path = directory / "adapter_config.json"
    weights = next((directory / name for name in ADAPTER_WEIGHTS if (directory / name).is_file()), None)
    if not config_path.is_file() or weights is None:
        raise Unkeyable("an adapter that is not a local folder",
                        f"{path} has no adapter_config.json and {' or '.join(ADAPTER_WEIGHTS)}")
    try:
        stats = [(p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in (config_path, weights)]
    except OSError as exc:
        raise Unkeyable("an adapter that cannot be read", f"{path}: {exc}") from None
    key = (str(directory.resolve()), tuple(stats))
    with _dir_lock:
        known = _dir_fingerprints.get(key)
    if known is not None:
        return known
    try:
        config = json.loads(config_path.read_text())
        if weights.suffix == ".safetensors":
            from safetensors.torch import load_file

            tensors = load_file(str(weights), device="cpu")
        else:
            tensors = torch.load(weights, map_location="cpu", weights_only=True)
    except Unkeyable:
        raise
    except Exception as exc:  # noqa: BLE001 - any unreadable adapter is one we cannot key
        raise Unkeyable("an adapter that cannot be read", f"{path}: {exc!r}") from None
    fingerprint = adapter_fingerprint(config, tensors.items())
    with _dir_lock:
        _dir_fingerprints[key] = fingerprint
    return fingerprint


# --------------------------------------------------------------------------- PEFT models (the Hugging Face side)

def _tuner_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers an adapter library (PEFT) wrapped: each holds the model's own layer as `base_layer`."""
    return [m for m in model.modules() if hasattr(m, "base_layer") and hasattr(m, "adapter_layer_names")]


def base_model(model: torch.nn.Module) -> torch.nn.Module:
    """The model a PeftModel wraps (the model itself otherwise): what the chain root is taken from."""
    if isinstance(getattr(model, "peft_config", None), Mapping) and callable(getattr(model, "get_base_model", None)):
        return model.get_base_model()
    return model


def _adapters_in_use(model: torch.nn.Module, tuners: list[torch.nn.Module]) -> list[str]:
    """The adapters the model's forward applies now: none when its adapter layers are disabled."""
    states = set()
    for layer in tuners:
        active = layer.active_adapters if isinstance(layer.active_adapters, list) else [layer.active_adapters]
        # a merged adapter is in the base weights (the root changes with them) and keyed too: never shared by mistake
        states.add(() if layer.disable_adapters else tuple(sorted(set(active) | set(layer.merged_adapters))))
    if len(states) > 1:
        raise Unkeyable("a model whose adapter layers disagree",
                        "some layers have other adapters active or disabled than others")
    return list(states.pop()) if states else []


_peft_fingerprints: "weakref.WeakKeyDictionary[torch.nn.Module, dict]" = weakref.WeakKeyDictionary()


def _stamp(tuners: list[torch.nn.Module], name: str) -> tuple:
    """What changes when the adapter's tensors are replaced or changed in place (as kv.naming.blocks' weights stamp)."""
    out = []
    for layer in tuners:
        for slot in layer.adapter_layer_names:
            holder = getattr(layer, slot, None)
            if holder is None or name not in holder:
                continue
            part = holder[name]
            for tensor in part.parameters() if isinstance(part, torch.nn.Module) else [part]:
                out.append((tensor.data_ptr(), tensor._version, tuple(tensor.shape), tensor.dtype))
    return tuple(out)


def active_adapter(model: torch.nn.Module) -> bytes | None:
    """The fingerprint of the PEFT adapter(s) the model runs with now (None: none, or not a PEFT model).

    A PeftModel, or a transformers model with adapters loaded through its PEFT integration (load_adapter), is
    recognised by what it holds (`peft_config`, adapter layers), so nothing here needs PEFT unless the model
    is one. A prompt-learning adapter (prefix or prompt tuning: virtual tokens) or another type than LoRA
    raises Unkeyable.
    """
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, Mapping) or not configs:
        return None
    tuners = _tuner_layers(model)
    if not tuners:
        kinds = sorted({str(_canonical(getattr(c, "peft_type", "?"))) for c in configs.values()})
        raise Unkeyable(f"a {'/'.join(kinds)} adapter", "it changes the model's inputs, not its layers")
    names = _adapters_in_use(model, tuners)
    if not names:
        return None
    from peft.utils import get_peft_model_state_dict  # a PEFT model: PEFT is installed

    cache = _peft_fingerprints.setdefault(model, {})
    fingerprints = []
    for name in names:
        config = configs[name]
        config_dict = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        math = json.dumps(adapter_config(config_dict), sort_keys=True)
        stamp = (math, _stamp(tuners, name))
        known = cache.get(name)
        if known is None or known[0] != stamp:
            # the adapter's own tensors; "auto" would also ask the Hub whether the vocabulary was resized (a resized
            # embedding is a base weight anyway: the root names it)
            tensors = get_peft_model_state_dict(model, adapter_name=name, save_embedding_layers=False)
            known = cache[name] = (stamp, adapter_fingerprint(config_dict, tensors.items()))
        fingerprints.append(known[1])
    if len(fingerprints) == 1:
        return fingerprints[0]
    return hashlib.sha256(ADAPTER_DOMAIN + b"|several|" + b"".join(sorted(fingerprints))).digest()
