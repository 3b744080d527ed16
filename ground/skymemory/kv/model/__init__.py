"""The model the cache is for: loading it, where it runs, its tokenizer, how it takes a cache.

  models       load_model(): TinyLlama from disk, or the embedded models (every family) built locally
  device       where the model runs and in which precision
  tokenizer    a byte-level tokenizer that needs no download
  cache_arg    the name the installed transformers takes a cache by
"""
