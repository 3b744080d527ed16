"""SkyMemory as a vLLM KV connector: `kv_connector_module_path="skymemory.integrations.vllm"`,
`kv_connector="SkyMemoryConnector"` (README, "Serve with vLLM").

  connector  SkyMemoryConnector: the thin adapter vLLM loads (the only module that imports vLLM)
  config     its settings, from kv_connector_extra_config
  scheduler  which cached blocks a request loads, which pages a step saves (no network)
  worker     loads into the engine's pages layer by layer, saves in the background
  messages   what the two sides tell each other each step

The connector is imported on first use, so the other modules work without vLLM installed.
"""


def __getattr__(name: str):
    if name == "SkyMemoryConnector":  # vLLM's factory asks the module for its class by name
        from .connector import SkyMemoryConnector

        return SkyMemoryConnector
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
