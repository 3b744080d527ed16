"""Moving a prefix's bytes between the store and the model: landing buffers, tiers near the model, streaming.

  landing      the host buffers a prefix's blocks land in
  tiers        copies of blocks near the model: a device tier and a pinned host tier (LRU)
  tier_load    a prefix's blocks served from a host tier with a stream's face (the vLLM worker's)
  streaming    a prefix streamed in layer by layer while the model runs
  affinity     a transfer thread runs on every CPU, not where an engine pinned its creator
"""
