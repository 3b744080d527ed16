"""Token blocks and their chained hashes (paper §3.1).

A prompt's token ids are cut into blocks of `block_tokens` (128 by default).
Block i's hash is

    h_i = SHA-256(h_{i-1} || ids of block i as big-endian u32)

so h_i names the whole prefix up to and including block i. The first
"previous hash" h_{-1} is not the paper's null hash but a *root*: a digest of
the model (name, config, every weight), the tokenizer (vocabulary, merges,
special tokens), the KV encoding and the block size. A changed weight or
tokenizer therefore changes every hash and can never hit an old entry.

A block's KV can depend on more than its tokens and the blocks before it: a
cache salt (a tenant's), a LoRA adapter, the media behind multimodal
placeholder tokens, prompt embeddings. Such a block carries *extra keys*
(kv.naming.extra_keys decides which, as vLLM's own prefix cache does) and hashes as

    h_i = SHA-256(h_{i-1} || ids of block i || EXTRA_DOMAIN || its extra keys, length-prefixed)

A block without extra keys hashes exactly as above, so caches written before
extra keys existed stay hits.

Only full blocks are ever cached, and a lookup always leaves at least one
prompt token for the model to compute (generation needs the logits of the last
prompt token), so a prompt of exactly k blocks uses at most k-1 as prefix.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections.abc import Sequence

import numpy as np
import torch

HASH_BYTES = 32
ROOT_DOMAIN = b"skymemory-kv-root-v1"
EXTRA_DOMAIN = b"skymemory-kv-extra-v1"  # begins the extra keys a block's hash is taken over


def token_bytes(token_ids: Sequence[int]) -> bytes:
    """Token ids as fixed-width big-endian u32 (ids must fit in 32 bits)."""
    array = np.asarray(token_ids, dtype=np.int64)
    if array.size and (array.min() < 0 or array.max() > 0xFFFFFFFF):
        raise ValueError("token ids must be in 0..2**32-1")
    return array.astype(">u4").tobytes()


def split_blocks(token_ids: Sequence[int], block_tokens: int) -> list[list[int]]:
    """The full blocks of `token_ids` (a trailing partial block is dropped)."""
    if block_tokens <= 0:
        raise ValueError("block_tokens must be positive")
    ids = list(token_ids)
    full = len(ids) // block_tokens
    return [ids[i * block_tokens : (i + 1) * block_tokens] for i in range(full)]


def usable_blocks(n_tokens: int, block_tokens: int) -> int:
    """How many full blocks may serve as a prefix: at least one token is left to compute."""
    return max(0, (n_tokens - 1) // block_tokens)


ExtraKeys = tuple  # one block's extra keys: (kind, value, ...) tuples of str, bytes and int (kv.naming.extra_keys)


def _field(value) -> bytes:
    """One value of an extra key, typed and length-prefixed: no two different keys encode alike."""
    if isinstance(value, bool):  # an int subclass: refused rather than silently taken as 0/1
        raise TypeError("extra keys hold str, bytes and int values, not bool")
    if isinstance(value, str):
        tag, data = b"s", value.encode("utf-8")
    elif isinstance(value, (bytes, bytearray)):
        tag, data = b"b", bytes(value)
    elif isinstance(value, int):
        tag, data = b"i", value.to_bytes(8, "big", signed=True)
    else:
        raise TypeError(f"extra keys hold str, bytes and int values, not {type(value).__name__}")
    return tag + len(data).to_bytes(4, "big") + data


def extra_key_bytes(keys: ExtraKeys) -> bytes:
    """The canonical encoding of one block's extra keys: how many, then each key's fields, each length-prefixed."""
    out = [EXTRA_DOMAIN, len(keys).to_bytes(4, "big")]
    for key in keys:
        if not isinstance(key, tuple) or not key or not isinstance(key[0], str):
            raise TypeError(f"an extra key is a tuple (kind, value, ...), not {key!r}")
        out.append(len(key).to_bytes(4, "big"))
        out.extend(_field(value) for value in key)
    return b"".join(out)


def chain_hashes(root: bytes, blocks: Sequence[Sequence[int]],
                 extra: Sequence[ExtraKeys | None] | None = None) -> list[bytes]:
    """[h_0, h_1, ...] for the blocks, starting from `root`.

    `extra`: per block, its extra keys (None or empty: none; a list shorter than `blocks` leaves the
    blocks after it without). A block without extra keys hashes as it always has.
    """
    if len(root) != HASH_BYTES:
        raise ValueError("root must be 32 bytes")
    hashes, previous = [], root
    for i, block in enumerate(blocks):
        keys = extra[i] if extra is not None and i < len(extra) else None
        data = previous + token_bytes(block)
        if keys:
            data += extra_key_bytes(keys)
        previous = hashlib.sha256(data).digest()
        hashes.append(previous)
    return hashes


# --------------------------------------------------------------------------- fingerprints

# Per model object: (version stamp, digest). The stamp changes when any parameter or
# buffer is replaced or modified in place through autograd-visible ops (torch bumps
# `_version`), so a cached digest is never served for changed weights that way.
# The stamp watches parameters and buffers, not state_dict(): HQQ's state_dict builds
# new tensors on every call (so their addresses never match) and costs 1.4 s on the
# 1.1B model; state it keeps outside parameters (its scale/zero dicts) is hashed into
# the digest but not watched for in-place changes.
_weights_cache: "weakref.WeakKeyDictionary[torch.nn.Module, tuple[tuple, bytes]]" = weakref.WeakKeyDictionary()


# The names of the inner tensors of a quantised tensor are asked once and kept on the object:
# quanto's __tensor_flatten__ also formats its size and stride as text, which made the stamp
# of a qint8 model cost 20x a plain one's. An object's inner names never change (its class
# fixes them); the inner tensors themselves are fetched, and so watched, on every call.
_INNER_NAMES = "_skymemory_inner_names"


def _inner_names(tensor: torch.Tensor) -> tuple[str, ...] | None:
    """The names of the tensors inside a quantised tensor subclass; None for a plain tensor."""
    if type(tensor) is torch.Tensor or type(tensor) is torch.nn.Parameter:
        return None
    names = getattr(tensor, _INNER_NAMES, None)
    if names is None:
        flatten = getattr(tensor, "__tensor_flatten__", None)
        if flatten is None:
            return None
        names = tuple(flatten()[0])
        setattr(tensor, _INNER_NAMES, names)
    return names


def _leaf_tensors(name: str, tensor: torch.Tensor):
    """Plain tensors inside `tensor` (quantised tensor subclasses hold several)."""
    inner_names = _inner_names(tensor)
    if inner_names is None:
        yield name, tensor
        return
    for inner in inner_names:
        yield from _leaf_tensors(f"{name}.{inner}", getattr(tensor, inner))


def _tuner_layers(model: torch.nn.Module) -> set[str]:
    """The names of the modules an adapter library (PEFT) wrapped around a model's own layer: such a module holds
    the layer as `base_layer` beside the adapter's tensors."""
    return {name for name, module in model.named_modules()
            if hasattr(module, "base_layer") and hasattr(module, "adapter_layer_names")}


def _base_name(name: str, tuners: set[str]) -> str | None:
    """A state name as the model without adapters names it (`q_proj.base_layer.weight` -> `q_proj.weight`);
    None for an adapter's own tensor (`q_proj.lora_A.default.weight`)."""
    parts, out, path, i = name.split("."), [], [], 0
    while i < len(parts):
        path.append(parts[i])
        out.append(parts[i])
        i += 1
        if ".".join(path) in tuners:
            if i >= len(parts) or parts[i] != "base_layer":
                return None
            path.append("base_layer")
            i += 1
    return ".".join(out)


def _named_state(model: torch.nn.Module):
    # a model with adapters injected (PEFT) is digested as the model it was: the adapters are keyed per block
    # (kv.naming.extra_keys), so a base model and each of its adapters share one root
    tuners = _tuner_layers(model)
    for name, tensor in model.state_dict(keep_vars=True).items():
        if tuners:
            name = _base_name(name, tuners)
            if name is None:
                continue
        if isinstance(tensor, torch.Tensor):
            yield from _leaf_tensors(name, tensor.detach() if tensor.requires_grad else tensor)


def _stamp_leaves(name: str, tensor: torch.Tensor, out: list) -> None:
    inner_names = _inner_names(tensor)
    if inner_names is None:
        # Inference tensors (HQQ builds its weights under torch.inference_mode) keep no version
        # counter; they can only be changed inside inference mode, which the stamp cannot see.
        version = None if tensor.is_inference() else tensor._version
        out.append((name, tensor.data_ptr(), version, tensor.shape, tensor.dtype))
        return
    for inner in inner_names:
        _stamp_leaves(inner, getattr(tensor, inner), out)


def _version_stamp(model: torch.nn.Module) -> tuple:
    """What changes when any parameter or buffer (or an inner tensor of a quantised one) is replaced or
    modified in place: per tensor in module order, its slot name, address, version, shape and dtype.

    Runs on every lookup, so it is one walk over the modules with no per-tensor Python dispatch: not
    detached (a detached tensor shares the version counter and storage anyway, and detaching a
    quantised tensor rebuilds it through its Python dispatch), and no full names (the walk's order
    already says where each tensor sits).
    """
    out: list = []
    plain = (torch.Tensor, torch.nn.Parameter)
    for module in model.modules():
        for slots in (module._parameters, module._buffers):
            for name, tensor in slots.items():
                if tensor is None:
                    continue
                if type(tensor) in plain:  # most tensors: inline, without a call per tensor
                    out.append((name, tensor.data_ptr(), None if tensor.is_inference() else tensor._version,
                                tensor.shape, tensor.dtype))
                else:
                    _stamp_leaves(name, tensor, out)
    return tuple(out)


def weights_digest(model: torch.nn.Module, *, use_cache: bool = True) -> bytes:
    """SHA-256 over every weight and buffer (name, dtype, shape, raw bytes).

    Full hashing: any single changed bit changes the digest. On the 1.1B model
    it costs a few seconds on CPU (measured by `skymemory model bench`), so it
    is cached per model object and recomputed when a tensor changes.
    """
    stamp = _version_stamp(model)
    if use_cache:
        cached = _weights_cache.get(model)
        if cached is not None and cached[0] == stamp:
            return cached[1]
    digest = hashlib.sha256()
    for name, tensor in _named_state(model):
        data = tensor.detach().contiguous()
        if data.device.type != "cpu":
            data = data.cpu()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        if data.numel():
            digest.update(memoryview(data.reshape(-1).view(torch.uint8).numpy()))
    value = digest.digest()
    _weights_cache[model] = (stamp, value)
    return value


def model_fingerprint(model: torch.nn.Module) -> bytes:
    """Model class, name, full config, quantisation and weights digest."""
    config = model.config.to_dict()
    config.pop("transformers_version", None)
    # save_pretrained writes the class name into config.architectures of the model it saves: the same
    # model would otherwise change its name by being saved (the class is named below anyway)
    config.pop("architectures", None)
    description = {
        "class": type(model).__name__,
        "name": getattr(model.config, "name_or_path", ""),
        "config": config,
        "quantization": getattr(model, "skymemory_quantization", None),
    }
    head = json.dumps(description, sort_keys=True, default=str).encode()
    return hashlib.sha256(b"model|" + head + b"|" + weights_digest(model)).digest()


def tokenizer_fingerprint(tokenizer) -> bytes:
    """Everything that decides which ids a text becomes: vocabulary, merges, normaliser, special tokens."""
    parts = {
        "class": type(tokenizer).__name__,
        "special": {k: str(v) for k, v in sorted(tokenizer.special_tokens_map.items())},
        "added": sorted((tok, idx) for tok, idx in tokenizer.get_added_vocab().items()),
    }
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        parts["backend"] = backend.to_str()  # full JSON: model (vocab + merges), pre/post-processors
    else:
        parts["vocab"] = sorted(tokenizer.get_vocab().items())
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(b"tokenizer|" + blob).digest()


def root_hash(model_fp: bytes, tokenizer_fp: bytes, *, kv_format: str, block_tokens: int, layout: str = "") -> bytes:
    """h_{-1}: binds the chain to the model, the tokenizer, the KV encoding, the block size and the block
    layout (its codec version and integrity check: blocks of another layout are never looked up)."""
    return hashlib.sha256(
        ROOT_DOMAIN + model_fp + tokenizer_fp + kv_format.encode() + block_tokens.to_bytes(4, "big")
        + layout.encode()
    ).digest()
