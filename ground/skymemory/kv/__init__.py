"""The KV cache layer: turns prompts into cached transformer KV blocks and back.

Folders by concern, lowest first (each imports only the ones above it in this list, and kv.store):
  store        the block-store contract types (+ an in-process store)
  model        the model the cache is for: loading it (every embedded family), its device, its tokenizer
  format       a block's bytes: what each layer kind keeps (groups), the dense and grouped codecs, rebuild
  naming       what a block is called: chained hashes, fingerprints, extra keys, an engine's identity
  decide       fetch or recompute: cost model, calibration, policy, KV throughput (Φkv)
  index        which blocks are cached and where: the ground index, records in orbit, lookup, saving
  transfer     moving a prefix's bytes: landing buffers, tiers near the model, streaming
  hf           the Hugging Face engine: KVCManager (and its grouped-model blocks)
  paged        a paged serving engine's (vLLM's) pages and its scheduler and worker sides
  engine       the face a serving engine's adapter (integrations/) imports: the two sides and their names

Each folder's __init__.py lists its modules. Where a layer kind (full, sliding window, recurrent state)
is handled: format/groups.py says which layers are which and what a prefix needs, format/group_codec.py
their bytes, hf/grouped.py the Hugging Face engine's store, fetch and rebuild of them.

Nothing heavy is imported here. The names a Hugging Face user starts from are its face, imported on first
use: `from skymemory.kv import KVCManager, load_model, generate_with_cache, cache_arg`; everything else from
its module. Without the kv extra (torch,
transformers), importing one that needs it raises skymemory.extras.MissingExtra, a ModuleNotFoundError
that names the extra and the pip command; radix, policy and the others that need none import as before.
"""

from skymemory.extras import name_missing_extras

name_missing_extras(__name__, "the KV layer (skymemory.kv)", "kv")


_FACE = {"KVCManager": "skymemory.kv.hf.manager", "generate_with_cache": "skymemory.kv.hf.manager",
         "load_model": "skymemory.kv.model.models", "cache_arg": "skymemory.kv.model.cache_arg"}


def __getattr__(name: str):
    if name in _FACE:
        import importlib

        return getattr(importlib.import_module(_FACE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
