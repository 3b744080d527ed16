"""Benchmarks (docs/CONTRACTS.md: `skymemory.bench.*`).

Each benchmark module that wants a command line exposes `register(subparsers)`;
`skymemory bench` (skymemory/cli/bench.py) discovers them, so `skymemory bench
ttft` comes from `ttft.py` and a later `transfer.py` adds `skymemory bench
transfer` without touching the CLI.

Modules (one idea each):
  profiles   the link profiles (no delay, laser LEO, RF LEO; paper Table 1)
  launch     boot / tear down a local constellation for a benchmark run
  workload   vLLM-prefix-caching-style prompts: a long shared prefix, different suffixes
  ttft       the time-to-first-token benchmark (no cache / SkyMemory / local RAM)
  vllm       time to first token through vLLM: no cache, its own prefix cache, the SkyMemory connector
             (run from .venv-vllm)
  report     JSON, markdown table and PNG plots of a TTFT run
  index      the ground KV index: inserts, lookups, removals at 10k-1M blocks, one process and several
"""
