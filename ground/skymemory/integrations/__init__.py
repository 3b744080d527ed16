"""SkyMemory inside serving engines other than Hugging Face `generate` (which kv.manager serves itself).

  vllm   SkyMemoryConnector: the constellation as a vLLM KV connector (needs vLLM: `make vllm`)

Engine-neutral work stays in skymemory.kv (naming blocks, the index, the decision, paged pages, streaming);
an integration only translates an engine's calls. Same layer as skymemory.launcher: imports kv and below.
"""
