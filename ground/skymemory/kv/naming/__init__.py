"""Naming and identity: what a block is called, so that two engines share it exactly when both would compute it.

  blocks       128-token blocks, chained SHA-256 hashes, model/tokenizer fingerprints
  extra_keys   what a block is keyed by besides its tokens: cache salt, adapter, media, prompt embeddings
  identity     those fingerprints for an engine that does not hold the transformers model (vLLM)
"""
