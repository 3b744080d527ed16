"""A paged serving engine (vLLM): its pages read and written block by block, and its two sides.

  paged            an engine's paged KV cache, read and written block by block
  page_groups      which of an engine's page tables each layer keeps its pages in (a hybrid allocator's groups)
  page_loads       a paged engine's loads, layer by layer into its pages: a failure costs only what failed
  whole_loads      a hybrid engine's loads: a request's blocks whole, before it runs, all or nothing
  state_pages      a recurrent layer's state pages, read and written as bytes
  paged_steps      what a paged engine's scheduler and worker sides tell each other each step
  paged_scheduler  its scheduler side: which cached blocks a request loads, which pages it saves
  paged_worker     its worker side: loads into its pages layer by layer, saves in the background

kv.engine is the face its adapters (integrations/) import.
"""
