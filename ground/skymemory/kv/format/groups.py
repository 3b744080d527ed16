"""What a model's cache keeps, layer by layer: its KV groups.

The models served today are not all "every layer full attention, K and V of one shape". transformers
builds a model's cache from layers of a few kinds, and a block must carry what each kind needs:

    full      full attention (DynamicLayer): K and V of every token; K and V may differ in width and
              head count (DeepSeek's MLA keeps one latent "head": the compressed KV as K, the rope
              part as V)
    window    sliding-window attention (DynamicSlidingWindowLayer): K and V of the last W - 1 tokens
    linear    recurrent state (LinearAttentionLayer: Mamba / Mamba-2 conv and SSM state, gated
              delta-net state): not per token but one snapshot, the state after the prefix's last token

`CacheLayout.of_model(model)` reads the kinds from the cache transformers makes for the model's config
and the shapes from one two-token forward (the only way to learn a recurrent layer's state shapes),
so it follows whatever the installed transformers does. A layer of any other kind (an indexer cache,
a linear layer fused with attention) is refused with one sentence, `UnsupportedModel`.

A model whose layers are all `full` with one K/V shape is *dense*: its blocks keep the layer-major
format and names they always had (kv.format.codec). Any other layout is *grouped* (kv.format.group_codec): a
block holds the per-token K/V of every attention layer, and the block that ends a stored prompt
also holds the recurrent state after it. What a prefix of n blocks needs from the store
(`first_needed`): every block when a full-attention layer exists; otherwise only the blocks inside
the widest window of the prefix's last token (a sliding-window model fetches its window, not its
prefix); the state comes with the last block.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer, LinearAttentionLayer

from ..model.cache_arg import cache_arg

FULL, WINDOW, LINEAR = "full", "window", "linear"
STATE_ROLES = ("conv", "recurrent")  # a linear layer's two kinds of state (transformers' names)


class UnsupportedModel(ValueError):
    """A model whose cache holds a layer kind SkyMemory cannot cut into blocks and rebuild."""


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer's per-token K and V: [heads, tokens, dim] each."""

    layer: int  # its index in the model
    window: int  # tokens of its sliding window; 0: full attention
    k_heads: int
    k_dim: int
    v_heads: int
    v_dim: int


@dataclass(frozen=True)
class StateTensor:
    """One tensor of a recurrent layer's state (batch dimension left out)."""

    layer: int
    slot: int  # transformers' state_idx: a layer may keep several states
    role: str  # "conv" or "recurrent"
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def bytes(self) -> int:
        return int(torch.Size(self.shape).numel()) * torch.empty(0, dtype=self.dtype).element_size()


def _kind_name(layer) -> str:
    """What a cache layer keeps, in words (for the refusal of a kind SkyMemory does not rebuild)."""
    name = type(layer).__name__
    if "Indexed" in name:
        return f"{name} cache (attention with a sparse-attention indexer)"
    if "LinearAttentionAnd" in name:
        return f"{name} cache (recurrent state and attention in one layer)"
    if "Dummy" in name:
        return f"{name} cache (a layer that shares another layer's K/V)"
    return f"{name} cache"


def layer_kinds(config, model_name: str = "") -> list[tuple[str, int]]:
    """(kind, window) per layer of the cache transformers builds for `config`; UnsupportedModel otherwise."""
    kinds = []
    for i, layer in enumerate(DynamicCache(config=config).layers):
        kind = type(layer)
        if kind is DynamicLayer:
            kinds.append((FULL, 0))
        elif kind is DynamicSlidingWindowLayer:
            kinds.append((WINDOW, int(layer.sliding_window)))
        elif kind is LinearAttentionLayer:
            kinds.append((LINEAR, 0))
        else:
            raise UnsupportedModel(f"SkyMemory cannot cache {model_name or type(config).__name__}: its layer {i} "
                                   f"keeps a {_kind_name(layer)}, which SkyMemory does not rebuild")
    return kinds


def group_name(kind: str, window: int) -> str:
    """'full', 'linear', 'window 4096'."""
    return f"{kind} {window}" if window else kind


def full_storage_cache(config) -> DynamicCache:
    """The model's own cache, but with every sliding-window layer keeping all its tokens.

    Blocks are cut from it: a window layer's own cache keeps only its last W - 1 tokens, so the
    K/V of a prompt's earlier blocks would be gone (the model's attention still masks by its window:
    the mask comes from the config, the cache only stores). Recurrent layers stay as they are.
    """
    cache = DynamicCache(config=config)
    cache.layers = [DynamicLayer() if type(layer) is DynamicSlidingWindowLayer else layer for layer in cache.layers]
    return cache


@dataclass(frozen=True)
class CacheLayout:
    """A model's cache, layer by layer: its attention layers' K/V shapes and its recurrent state tensors."""

    kinds: tuple[tuple[str, int], ...]  # (kind, window) per model layer
    attention: tuple[AttentionLayer, ...]
    states: tuple[StateTensor, ...]

    @classmethod
    def of_model(cls, model) -> "CacheLayout":
        """The layout of `model`'s cache (one two-token forward on its device for the shapes)."""
        name = getattr(model.config, "name_or_path", "") or type(model).__name__
        kinds = tuple(layer_kinds(model.config, name))
        cache = full_storage_cache(model.config)
        ids = torch.tensor([[1, 2]], dtype=torch.long, device=model.device)
        with torch.no_grad():
            model(input_ids=ids, **cache_arg(model, cache), use_cache=True)
        attention, states = [], []
        for i, ((kind, window), layer) in enumerate(zip(kinds, cache.layers)):
            if kind == LINEAR:
                for slot in range(layer.number_of_states):
                    for role, held in (("conv", layer.conv_states), ("recurrent", layer.recurrent_states)):
                        tensor = held.get(slot)
                        if tensor is not None:
                            states.append(StateTensor(i, slot, role, tuple(tensor.shape[1:]), tensor.dtype))
            else:
                k, v = layer.keys, layer.values
                attention.append(AttentionLayer(i, window, k.shape[1], k.shape[3], v.shape[1], v.shape[3]))
        return cls(kinds, tuple(attention), tuple(states))

    @classmethod
    def of_config(cls, config) -> "CacheLayout":
        """The layout of a model of this configuration, without its weights: built on the meta device (no memory),
        its experts' plain loop (the grouped kernels want real dtypes). ValueError when that model cannot run there."""
        from transformers import AutoModelForCausalLM

        layer_kinds(config, getattr(config, "name_or_path", "") or type(config).__name__)  # refuse before building
        try:
            with torch.device("meta"):
                model = AutoModelForCausalLM.from_config(config, experts_implementation="eager")
            return cls.of_model(model)
        except (RuntimeError, NotImplementedError, ValueError, TypeError) as exc:
            raise ValueError(f"the cache layout of {getattr(config, 'name_or_path', '') or config.model_type} needs "
                             f"its weights ({type(exc).__name__} on the meta device): measure it on a built model") \
                from None

    # ------------------------------------------------------------------ what it is

    @property
    def dense(self) -> bool:
        """Every layer full attention with K and V of one shape: today's layer-major blocks (kv.format.codec)."""
        if self.states or not self.attention or any(a.window for a in self.attention):
            return False
        first = self.attention[0]
        return all((a.k_heads, a.k_dim, a.v_heads, a.v_dim) == (first.k_heads, first.k_dim, first.k_heads,
                                                                  first.k_dim) for a in self.attention)

    @property
    def has_full(self) -> bool:
        return any(a.window == 0 for a in self.attention)

    @property
    def widest_window(self) -> int:
        return max((a.window for a in self.attention), default=0)

    def describe(self) -> dict:
        """A JSON-able description: what the chain root and every block's header are bound to."""
        return {"kinds": [list(k) for k in self.kinds],
                "attention": [[a.layer, a.window, a.k_heads, a.k_dim, a.v_heads, a.v_dim] for a in self.attention],
                "states": [[s.layer, s.slot, s.role, list(s.shape), str(s.dtype)] for s in self.states]}

    @property
    def digest(self) -> bytes:
        """16 bytes naming this layout (in a grouped block's header and in the chain root's layout name)."""
        return hashlib.sha256(json.dumps(self.describe(), sort_keys=True).encode()).digest()[:16]

    def groups(self) -> list[dict]:
        """One line per group, for `skymemory model info`: kind, window, layers."""
        out: dict[tuple[str, int], int] = {}
        for kind, window in self.kinds:
            out[(kind, window)] = out.get((kind, window), 0) + 1
        return [{"kind": kind, "window": window, "layers": n} for (kind, window), n in out.items()]

    def in_words(self) -> str:
        """'5 window 32 + 1 full': the groups as a message or a table says them."""
        return " + ".join(f"{g['layers']} {group_name(g['kind'], g['window'])}" for g in self.groups())

    # ------------------------------------------------------------------ what a prefix needs

    def state_bytes(self) -> int:
        """Bytes of one snapshot of every recurrent layer's state."""
        return sum(s.bytes for s in self.states)

    def first_needed(self, blocks: int, block_tokens: int) -> int:
        """The first block a prefix of `blocks` blocks must fetch: 0 with a full-attention layer; else the
        first block holding a token inside the widest window of the prefix's last token (a window of W
        attends the last W - 1 cached tokens); with only recurrent layers, the last block (its state)."""
        if blocks <= 0:
            return 0
        if self.has_full:
            return 0
        if not self.attention:
            return blocks - 1
        first_token = max(0, blocks * block_tokens - (self.widest_window - 1))
        return min(first_token // block_tokens, blocks - 1)
