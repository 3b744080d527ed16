"""Benchmarks (docs/CONTRACTS.md: `skymemory.bench.*`).

Each benchmark module that wants a command line exposes `register(subparsers)`;
`skymemory bench` (skymemory/cli/bench.py) discovers them, so `skymemory bench
ttft` comes from `ttft.py` and a later `transfer.py` adds `skymemory bench
transfer` without touching the CLI.

Modules (one idea each):
  profiles      the link profiles (no delay, laser LEO, RF LEO; paper Table 1)
  launch        boot / tear down a local constellation for a benchmark run
  options       command-line options the benchmarks and `skymemory demo` share
  workload      vLLM-prefix-caching-style prompts: a long shared prefix, different suffixes
  ttft          the time-to-first-token benchmark (no cache / SkyMemory / local RAM)
  ttft_command  `skymemory bench ttft` and the body of `skymemory demo`: options -> run -> outputs
  report        JSON, markdown table and PNG plots of a TTFT run
  ceiling       the compute ceiling of any prefix cache: the fastest cached TTFT this machine allows
  streaming     TTFT with the prefix streamed layer by layer, and fetch-or-recompute
  rebuild       landed KV bytes -> a cache on the model's device, beside the copy limits
  vllm          time to first token through vLLM: no cache, its own prefix cache, the SkyMemory connector
                (run from .venv-vllm)
  serve         a chat workload (users x turns) through `vllm serve` at several concurrencies, with and
                without SkyMemory (run from .venv-vllm)
  chat          the chat workload: a shared system prompt, histories that grow, think time; its replay
  sites         prefill at one ground site, decode at another: one site, all offloaded, routed by t
                (run from .venv-vllm)
  openai_server  `vllm serve` as a process, and a client that streams completions from it
  transfer      block get/set goodput over the line-of-sight satellites
  stripes       what coding a stripe (Reed-Solomon, ISA-L) costs on this CPU, beside sealing the same bytes
  roundtrip     a named object and a real KV block round-tripped byte-exact through a launched constellation
  index         the ground KV index: inserts, lookups, removals at 10k-1M blocks, one process and several
  orbit_index   the KV index in orbit: records published, hit and miss lookups per link profile, lookups/s
  boot          the launcher: boot a grid detached, measure, round-trip an object, stop, verify
  auth          what command authentication costs: sets/s and gets/s with and without it
  dashboard     what the dashboard costs the satellites: each node's CPU time with and without it
  faults        the fault-injection matrix: every operation exact, cleanly missed or cleanly failed
  stripe_faults  faults' block cells: coded stripes against uncoded with m satellites dead or one slow
  soak          a full constellation under mixed load for a fixed time, with rotation
"""
