"""The router of Prefill-as-a-Service (the paper's PrfaaS-PD short-term routing, §3.4.3): `skymemory route`.

Two ground sites each run `vllm serve` with the SkyMemory connector: a prefill site (kv_producer: it stores
every prompt's full blocks in orbit and answers with the first token) and a decode site (kv_consumer or
kv_both: it loads the blocks it finds in orbit, computes the rest and decodes). The router is an
OpenAI-compatible HTTP front between clients and the two:

  prefix     how many of a prompt's full blocks the decode site would find in orbit, named as the
             connector names them (ServedModel, PrefixFinder, the records in orbit)
  probe      the link the KV crosses, measured by timed reads of a probe block through the constellation
  threshold  t: pinned, or planned (kv.decide.disaggregation.plan) from the measured link, again after
             each probe
  prompt     a /v1/completions body's one prompt, as token ids
  sites      forwarding to a site, every wait bounded; a site that does not answer is named
  tally      what was routed where, for GET /router
  front      the HTTP server: Router(...).start() / .url / .close()
  build      open_router: a Router from what `skymemory route` is told

A request whose uncached increment (prompt tokens - cached tokens) exceeds t is prefilled at the prefill
site first (max_tokens 1), then decoded at the decode site, told how many blocks to expect
(kv_transfer_params["skymemory_prefilled_blocks"]); any other goes straight to the decode site.
"""

__all__ = ["Router", "open_router"]


def __getattr__(name: str):
    # imported on first use: `skymemory route --help` (and its URL checks) need none of the KV layer
    if name == "Router":
        from .front import Router

        return Router
    if name == "open_router":
        from .build import open_router

        return open_router
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
