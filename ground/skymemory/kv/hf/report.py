"""Measurements of the KV layer: does a cached prefix change what the model says?

`compare_generation` runs greedy generation twice for one prompt: once
with the prefix KV from the cache (`get_cache`) and once computing the whole
prompt, and reports whether the tokens are identical, how many leading tokens
agree, and the largest absolute difference of the logits while the two
sequences still agree (after a divergence the contexts differ, so the logits
are no longer comparable).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..format import codec
from ..model.cache_arg import cache_arg
from .manager import KVCManager


@dataclass
class Comparison:
    prefix_tokens: int
    prompt_tokens: int
    new_tokens: int
    cached: list[int]
    reference: list[int]
    agree: int  # leading generated tokens that are equal
    max_abs_logit_diff: float  # over the steps before the first disagreement (and the first one)

    @property
    def identical(self) -> bool:
        return self.cached == self.reference


def _greedy(model, input_ids, new_tokens: int, cache=None):
    with torch.no_grad():
        output = model.generate(
            input_ids,
            attention_mask=torch.ones_like(input_ids),
            **cache_arg(model, cache),
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,  # EOS must not end one run earlier than the other
            do_sample=False,
            return_dict_in_generate=True,
            output_logits=True,
        )
    tokens = output.sequences[0, input_ids.shape[1] :].tolist()
    return tokens, [step[0].float() for step in output.logits]


def compare_generation(manager: KVCManager, prompt: str | list[int], new_tokens: int = 16) -> Comparison:
    result = manager.get_cache(prompt)
    cached, cached_logits = _greedy(manager.model, result.input_ids, new_tokens, result.cache)
    reference, reference_logits = _greedy(manager.model, result.input_ids, new_tokens)
    agree = 0
    while agree < min(len(cached), len(reference)) and cached[agree] == reference[agree]:
        agree += 1
    steps = min(agree + 1, len(cached_logits), len(reference_logits))
    diff = max((cached_logits[i] - reference_logits[i]).abs().max().item() for i in range(steps)) if steps else 0.0
    return Comparison(result.prefix_tokens, result.input_ids.shape[1], new_tokens, cached, reference, agree, diff)


def block_size_table(config, block_tokens: int = 128) -> list[tuple[str, int]]:
    """(KV format, encoded bytes of one block) for a model configuration."""
    geometry = codec.BlockGeometry.from_config(config, block_tokens)
    return [(fmt, codec.block_bytes(geometry, fmt)) for fmt in codec.KV_FORMATS]
