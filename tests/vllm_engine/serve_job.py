"""Runs vLLM engines one after the other in a fresh process, as a test's job file says, and writes what they returned.

    python serve_job.py JOB.json

JOB: {"model": model folder, "out": results file,
      "engines": [{"name": ..., "connector": kv_connector_extra_config or null, "multiprocess": bool,
                   "marker": a file written just before the first request (or null),
                   "together": bool (every request in one generate call: scheduled, loaded and saved in the
                               same steps; default: one call per request, in order),
                   "lora": bool (serve LoRA adapters, rank <= 8, two at a time),
                   "prefix_caching": bool (vLLM's own prefix cache on: a model with Mamba layers needs it with the
                                     connector; default off), "max_num_batched_tokens": n (default vLLM's),
                   "dtype": the engine's dtype (default float32),
                   "requests": [{"name": ..., "ids": [...], "max_tokens": n, "policy": null | "fetch" | ...,
                                 "salt": a cache salt (or null), "lora": [name, id, folder] (or null)}]}]}
OUT: {engine name: {request name: {"tokens", "num_cached_tokens", "kv_transfer_params", "seconds"}}}

A process of its own because vLLM starts its engine processes with spawn and keeps one worker
connector per process; engines run one at a time, each shut down before the next.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
from pathlib import Path


def run_engine(model: str, engine: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.config import KVTransferConfig
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "1" if engine.get("multiprocess") else "0"
    options = {}
    if engine.get("connector") is not None:
        options["kv_transfer_config"] = KVTransferConfig(
            kv_connector="SkyMemoryConnector", kv_connector_module_path="skymemory.integrations.vllm",
            kv_role="kv_both", kv_load_failure_policy="recompute", kv_connector_extra_config=engine["connector"])
    if engine.get("lora"):
        options.update(enable_lora=True, max_lora_rank=8, max_loras=2)
    if engine.get("max_num_batched_tokens"):
        options.update(max_num_batched_tokens=engine["max_num_batched_tokens"])
    llm = LLM(model=model, block_size=128, enable_prefix_caching=bool(engine.get("prefix_caching")),
              max_model_len=4096, dtype=engine.get("dtype", "float32"), enforce_eager=True, seed=0, **options)
    results = {}
    try:
        if engine.get("marker"):
            Path(engine["marker"]).write_text("generating")
        def inputs(request: dict):
            extra = {"kv_transfer_params": {"skymemory_policy": request["policy"]}} if request.get("policy") else None
            params = SamplingParams(max_tokens=request.get("max_tokens", 16), temperature=0, extra_args=extra)
            prompt = TokensPrompt(prompt_token_ids=request["ids"])
            if request.get("salt"):
                prompt["cache_salt"] = request["salt"]
            return prompt, params, LoRARequest(*request["lora"]) if request.get("lora") else None

        batches = [engine["requests"]] if engine.get("together") else [[r] for r in engine["requests"]]
        for batch in batches:
            prompts, params, loras = zip(*(inputs(r) for r in batch))
            started = time.perf_counter()
            outs = llm.generate(list(prompts), list(params), use_tqdm=False,
                                lora_request=list(loras) if any(loras) else None)
            for request, out in zip(batch, outs):
                results[request["name"]] = {"tokens": list(out.outputs[0].token_ids),
                                            "num_cached_tokens": out.num_cached_tokens,
                                            "kv_transfer_params": out.kv_transfer_params,
                                            "seconds": time.perf_counter() - started}
    finally:
        llm.llm_engine.engine_core.shutdown()  # the connector's shutdown stores what it still has queued
        del llm
        gc.collect()
    return results


def main(job_path: str) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    job = json.loads(Path(job_path).read_text())
    out = {engine["name"]: run_engine(job["model"], engine) for engine in job["engines"]}
    Path(job["out"]).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
