"""The KV cache layer: turns prompts into cached transformer KV blocks and back.

Modules (one idea each):
  device     where the model runs and in which precision
  tokenizer  a byte-level tokenizer that needs no download
  models     load_model(): TinyLlama from disk, or the embedded models built locally
  blocks     128-token blocks, chained SHA-256 hashes, model/tokenizer fingerprints
  radix      the ground index of cached blocks: one SQLite file every process shares
  codec      KV cache <-> per-block bytes (layer-major, fp16 / int8, digest)
  store      the block-store contract types (+ an in-process store)
  manager    KVCManager: add_blocks / get_cache / generate_with_cache
  report     measurements: cached vs uncached generation, block sizes

Nothing heavy is imported here; import the submodule you need.
"""
