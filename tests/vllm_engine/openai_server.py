"""`vllm serve` (vLLM's OpenAI server, the command people run) with the SkyMemory connector, for the tests.

A process group of its own, on a free port; `with` waits (bounded) until /health answers and stops it with
SIGINT (then SIGKILL) on the way out. `complete` is one POST /v1/completions, as any HTTP client sends it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

BLOCK = 128
START_TIMEOUT_S = 600  # a server starts in 20-60 s here, longer on a loaded machine; a hang is a failure
REQUEST_TIMEOUT_S = 300


def transfer_config(extra: dict) -> dict:
    """vLLM's --kv-transfer-config for the SkyMemory connector with `extra` as its settings."""
    return {"kv_connector": "SkyMemoryConnector", "kv_connector_module_path": "skymemory.integrations.vllm",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute", "kv_connector_extra_config": extra}


class OpenAIServer:
    """`vllm serve MODEL ... --kv-transfer-config {...}`; extra=None serves without the connector."""

    def __init__(self, tmp: Path, model: Path, extra: dict | None, name: str, *, max_tokens: int = 16) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.model, self.log_path, self.max_tokens = str(model), tmp / f"{name}.log", max_tokens
        vllm = Path(sys.executable).with_name("vllm")  # the console script of this virtualenv
        command = [str(vllm), "serve", self.model, "--host", "127.0.0.1", "--port", str(self.port),
                   "--block-size", str(BLOCK), "--no-enable-prefix-caching", "--max-model-len", "4096",
                   "--dtype", "float32", "--enforce-eager", "--seed", "0", "--generation-config", "vllm",
                   "--enable-prompt-tokens-details"]
        if extra is not None:
            command += ["--kv-transfer-config", json.dumps(transfer_config(extra))]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                            start_new_session=True)

    def __enter__(self) -> "OpenAIServer":
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                assert self.process.poll() is None, "the server exited:\n" + self.log_path.read_text()[-6000:]
                assert time.monotonic() < deadline, f"the server did not start; its log: {self.log_path}"
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as reply:
                        if reply.status == 200:
                            return self
                except (urllib.error.URLError, OSError):
                    pass
                time.sleep(0.5)
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()

    def complete(self, ids: list[int], salt: str | None = None) -> dict:
        """POST /v1/completions, greedy; returns {"tokens", "cached" (prompt tokens cached), "said" (the
        connector's kv_transfer_params)}."""
        body = {"model": self.model, "prompt": ids, "max_tokens": self.max_tokens, "temperature": 0,
                "return_token_ids": True}
        if salt is not None:
            body["cache_salt"] = salt
        post = urllib.request.Request(f"http://127.0.0.1:{self.port}/v1/completions", json.dumps(body).encode(),
                                      {"Content-Type": "application/json"})
        with urllib.request.urlopen(post, timeout=REQUEST_TIMEOUT_S) as reply:
            out = json.loads(reply.read())
        details = out["usage"].get("prompt_tokens_details") or {}
        return {"tokens": out["choices"][0]["token_ids"], "cached": details.get("cached_tokens"),
                "said": (out.get("kv_transfer_params") or {}).get("skymemory")}
