"""SkyMemory inside serving engines other than Hugging Face `generate` (which kv.hf.manager serves itself).

  vllm   SkyMemoryConnector: the constellation as a vLLM KV connector (needs vLLM: `make vllm`)

Engine-neutral work stays in skymemory.kv (naming blocks, the index, the decision, a paged engine's
scheduler and worker sides, loads and saves); an integration only translates an engine's calls, and reaches
kv through its face for engines, skymemory.kv.engine, alone. Same layer as skymemory.launcher: imports kv
and below.
"""
