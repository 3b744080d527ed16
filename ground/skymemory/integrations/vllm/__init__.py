"""SkyMemory as a vLLM KV connector: `kv_connector_module_path="skymemory.integrations.vllm"`,
`kv_connector="SkyMemoryConnector"` (README, "Serve with vLLM").

  connector  SkyMemoryConnector: the thin adapter vLLM loads; the two sides it maps vLLM's calls onto are
             engine-neutral, kv.engine's PagedScheduler and PagedWorker
  kv_groups  vLLM's KV cache groups (its hybrid allocator's page tables) and the model's cache layout on them
  config     its settings, from kv_connector_extra_config
  worker     the worker side on the constellation those settings name (its stores)
  block_table  vLLM's block tables as the paged sides take them (its null block: no page)

The connector and kv_groups import vLLM; the connector is imported on first use, so the other modules work
without vLLM installed.
"""


def __getattr__(name: str):
    if name == "SkyMemoryConnector":  # vLLM's factory asks the module for its class by name
        from .connector import SkyMemoryConnector

        return SkyMemoryConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
