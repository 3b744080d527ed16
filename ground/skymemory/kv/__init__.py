"""The KV cache layer: turns prompts into cached transformer KV blocks and back.

Modules (one idea each):
  device       where the model runs and in which precision
  tokenizer    a byte-level tokenizer that needs no download
  models       load_model(): TinyLlama from disk, or the embedded models built locally
  blocks       128-token blocks, chained SHA-256 hashes, model/tokenizer fingerprints
  extra_keys   what a block is keyed by besides its tokens: cache salt, adapter, media, prompt embeddings
  identity     those fingerprints for an engine that does not hold the transformers model (vLLM)
  radix        the ground index of cached blocks: one SQLite file every process shares
  orbit_records  the index in orbit: each block's record on home satellites, so any ground host finds any block
  codec        KV cache <-> per-block bytes (layer-major, fp16 / int8, CRC32C)
  groups       what a model's cache keeps, layer by layer: full, sliding-window and recurrent groups
  group_codec  a grouped model's block <-> bytes (K/V of every attention layer; the state in a prompt's last block)
  grouped      KVCManager's blocks for a grouped model: cut from a prompt, fetched, rebuilt into its cache
  throughput   KV bytes a prefix fetches against its prefill time: the break-even link rate Φkv
  store        the block-store contract types (+ an in-process store)
  landing      the host buffers a prefix's blocks land in
  tiers        copies of blocks near the model: a device tier and a pinned host tier (LRU)
  tier_load    a prefix's blocks served from a host tier with a stream's face (the vLLM worker's)
  rebuild      landed bytes -> the prefix's K and V per layer on the model's device
  streaming    a prefix streamed in layer by layer while the model runs
  lost         the one rule for a block that failed to load: it and those after it leave store and index
  saving       saving blocks (stored, indexed, kept near) and noting a load's use: one path for both engines
  affinity     a transfer thread runs on every CPU, not where an engine pinned its creator
  paged        an engine's paged KV cache, read and written block by block
  page_loads   a paged engine's loads, layer by layer into its pages: a failure costs only what failed
  paged_steps  what a paged engine's scheduler and worker sides tell each other each step
  paged_scheduler  a paged engine's scheduler side: which cached blocks a request loads, which pages it saves
  paged_worker  a paged engine's worker side: loads into its pages layer by layer, saves in the background
  engine       the face a serving engine's adapter (integrations/) imports: the two sides and their names
  costmodel    fetch or recompute: predicted time to first token of each choice
  calibration  this device's compute and rebuild rates, measured once and kept on disk
  policy       the per-request decision, from those rates and the store's measured link
  lookup       a prompt's cached prefix named, found and priced: one PrefixFinder for both engines
  cache_arg    the name the installed transformers takes a cache by
  result       what get_cache returns
  manager      KVCManager: add_blocks / get_cache / generate_with_cache
  report       measurements: cached vs uncached generation, block sizes

Nothing heavy is imported here; import the submodule you need. Without the kv extra (torch,
transformers), importing one that needs it raises skymemory.extras.MissingExtra, a ModuleNotFoundError
that names the extra and the pip command; radix, policy and the others that need none import as before.
"""

from skymemory.extras import name_missing_extras

name_missing_extras(__name__, "the KV layer (skymemory.kv)", "kv")
