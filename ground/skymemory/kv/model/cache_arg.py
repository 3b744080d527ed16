"""How a transformers model takes and returns its KV cache.

transformers 5 renamed the argument and output field `past_key_values` to `cache` (the old name
warns on every call, and goes in 5.40); earlier versions know only `past_key_values`. These two
helpers use whichever name the installed version has, so the same code runs on both:

    out = model(input_ids=ids, **cache_arg(model, cache), use_cache=True)
    cache = cache_of(out)
"""

from __future__ import annotations

import inspect
from functools import lru_cache

__all__ = ["cache_arg", "cache_of"]


@lru_cache(maxsize=None)
def _name_for(model_class: type) -> str:
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def cache_arg(model, cache) -> dict:
    """{argument name: cache}, for model(...) and model.generate(...)."""
    return {_name_for(type(model)): cache}


def cache_of(output):
    """The KV cache a forward returned (None when it returned none)."""
    for name in ("cache", "past_key_values"):
        if name in output:  # a ModelOutput holds only the fields that are set
            return output[name]
    return None
