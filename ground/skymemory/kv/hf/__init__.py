"""The Hugging Face engine: KVCManager, the paper's interface on a transformers model.

  manager      KVCManager: add_blocks / get_cache / generate_with_cache
  grouped      its blocks for a grouped model (kv.format.groups): cut from a prompt, fetched, rebuilt into its cache
  report       measurements: cached vs uncached generation, block sizes
"""
