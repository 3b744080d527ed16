"""`vllm serve` as people run it, and a client that talks to it over HTTP as any OpenAI client does.

    with OpenAIServer(model_dir, log_path, connector={"manifest": ...}, kv_blocks=64) as server:
        reply = server.stream(prompt_ids, max_tokens=32)   # TTFT from the first streamed token
        tokens, cached = reply.tokens, reply.cached_tokens

A ground site's server runs in the site's network namespace and answers at the site's address
(netns="skm…-site0", host="10.77.0.…": launcher --sites), as a server in another data centre would.

Several servers behind one front, as a round-robin load balancer spreads requests over replicas:

    with OpenAIServer(...) as a, OpenAIServer(...) as b:
        front = RoundRobin([a, b])          # request i goes to server i mod 2
        reply = front.stream(prompt_ids, max_tokens=32)

The server is `<this virtualenv>/bin/vllm serve MODEL ...` in a process group of its own on a free port; `with`
waits (bounded) until /health answers and stops it with SIGINT, then SIGKILL, on the way out. Every request is
greedy, on token ids, with the prompt's cached tokens reported (--enable-prompt-tokens-details). Used by
`skymemory bench serve` and the tests that serve through vLLM (tests/vllm_engine).
"""

from __future__ import annotations

import http.client
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from skymemory.launcher.netns import exec_prefix
from skymemory.launcher.processes import SETPRIV

BLOCK_TOKENS = 128  # one vLLM block = one SkyMemory block (the connector requires it)
START_TIMEOUT_S = 600.0  # a server starts in 20-60 s here, longer on a loaded machine; a hang is a failure
REQUEST_TIMEOUT_S = 300.0  # the longest wait for a byte of an answer (a request queued behind many waits long)


def transfer_config(extra: dict, role: str = "kv_both") -> dict:
    """vLLM's --kv-transfer-config for the SkyMemory connector with `extra` as its settings, in `role` (kv_both, or
    kv_producer for a prefill site, kv_consumer for a decode site: integrations.vllm.connector)."""
    return {"kv_connector": "SkyMemoryConnector", "kv_connector_module_path": "skymemory.integrations.vllm",
            "kv_role": role, "kv_load_failure_policy": "recompute", "kv_connector_extra_config": extra}


@dataclass
class Reply:
    """One completion as the client saw it."""

    tokens: list[int]
    prompt_tokens: int
    cached_tokens: int  # the engine's prefix cache and the connector's loads together
    ttft_s: float  # request sent -> first token received (streamed); the whole request when not streamed
    total_s: float
    said: dict = field(default_factory=dict)  # the connector's kv_transfer_params["skymemory"], when it says


class Endpoint:
    """An OpenAI-compatible completions endpoint at host:port serving `model`: a vLLM server, or a front that passes
    requests on (skymemory route)."""

    def __init__(self, host: str, port: int, model: str, *, request_timeout_s: float = REQUEST_TIMEOUT_S,
                 log_path: Path | None = None) -> None:
        self.host, self.port, self.model = host, int(port), str(model)
        self.url = f"http://{host}:{self.port}"
        self.request_timeout_s = request_timeout_s
        self.log_path = log_path  # where a failure points to (the server's log), when there is one

    def metric(self, name: str) -> float:
        """The sum of a Prometheus metric's samples on /metrics (e.g. "vllm:num_preemptions_total"); 0 when the
        server has none yet."""
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=self.request_timeout_s) as reply:
            text = reply.read().decode()
        total = 0.0
        for line in text.splitlines():
            if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
                total += float(line.rsplit(" ", 1)[1])
        return total

    def _body(self, ids: list[int], max_tokens: int, salt: str | None, stream: bool) -> bytes:
        body = {"model": self.model, "prompt": ids, "max_tokens": max_tokens, "temperature": 0,
                "return_token_ids": True, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if salt is not None:
            body["cache_salt"] = salt
        return json.dumps(body).encode()

    def complete(self, ids: list[int], max_tokens: int = 16, salt: str | None = None) -> Reply:
        """POST /v1/completions, the whole answer at once."""
        started = time.perf_counter()
        post = urllib.request.Request(f"{self.url}/v1/completions",
                                      self._body(ids, max_tokens, salt, stream=False),
                                      {"Content-Type": "application/json"})
        with urllib.request.urlopen(post, timeout=self.request_timeout_s) as answer:
            out = json.loads(answer.read())
        took = time.perf_counter() - started
        usage = out["usage"]
        return Reply(out["choices"][0]["token_ids"], usage["prompt_tokens"],
                     (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0, took, took,
                     (out.get("kv_transfer_params") or {}).get("skymemory") or {})

    def stream(self, ids: list[int], max_tokens: int = 16, salt: str | None = None) -> Reply:
        """POST /v1/completions streamed (server-sent events): the time to the first token is the TTFT a
        user sees."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=self.request_timeout_s)
        tokens: list[int] = []
        usage: dict = {}
        said: dict = {}
        first = None
        started = time.perf_counter()
        try:
            connection.request("POST", "/v1/completions", self._body(ids, max_tokens, salt, stream=True),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            if answer.status != 200:
                raise RuntimeError(f"vllm serve answered {answer.status}: {answer.read()[:300]!r}")
            for raw in answer:
                line = raw.strip()
                if not line.startswith(b"data:"):
                    continue
                data = line[5:].strip()
                if data == b"[DONE]":
                    break
                event = json.loads(data)
                if "error" in event:  # an error after the 200 (a bad prompt): said, not taken for an answer
                    raise RuntimeError(f"vllm serve: {event['error'].get('message', event['error'])}")
                for choice in event.get("choices") or ():
                    got = choice.get("token_ids") or []
                    if got and first is None:
                        first = time.perf_counter()
                    tokens += got
                usage = event.get("usage") or usage
                said = (event.get("kv_transfer_params") or {}).get("skymemory") or said
        except TimeoutError:
            raise TimeoutError(f"{self.url} sent nothing for {self.request_timeout_s:g} s on a request of {len(ids)} "
                               f"tokens ({len(tokens)} of {max_tokens} came); its log: {self.log_path}") from None
        finally:
            connection.close()
        ended = time.perf_counter()
        if not usage:
            raise RuntimeError("vllm serve's stream ended without its usage (stream_options.include_usage)")
        return Reply(tokens, usage["prompt_tokens"], (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
                     or 0, (first or ended) - started, ended - started, said)



def _group_members(pgid: int) -> list[int]:
    """The live processes of a process group (zombies are dead: their parent reaps them, whoever that is)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        state, _ppid, group = stat.rsplit(")", 1)[1].split()[:3]  # after "(comm)", which may hold spaces
        if int(group) == pgid and state != "Z":
            members.append(int(entry.name))
    return members


class OpenAIServer(Endpoint):
    """`vllm serve` with (connector=settings) or without (None) the SkyMemory connector."""

    def __init__(self, model: str | os.PathLike, log_path: Path, *, connector: dict | None = None,
                 prefix_caching: bool = False, kv_blocks: int | None = None, max_model_len: int = 4096,
                 env: dict | None = None, start_timeout_s: float = START_TIMEOUT_S,
                 request_timeout_s: float = REQUEST_TIMEOUT_S, extra_args: tuple[str, ...] = (),
                 kv_role: str = "kv_both", netns: str | None = None, host: str = "127.0.0.1") -> None:
        """netns: the network namespace it runs in (None: this one), answering at `host` there."""
        with socket.socket() as probe:  # a fresh namespace has every port free: this one is as good there
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        super().__init__(host, port, str(model), request_timeout_s=request_timeout_s, log_path=Path(log_path))
        self.start_timeout_s = start_timeout_s
        command = [str(Path(sys.executable).with_name("vllm")), "serve", self.model, "--host", host,
                   "--port", str(self.port), "--block-size", str(BLOCK_TOKENS), "--max-model-len", str(max_model_len),
                   "--dtype", "float32", "--enforce-eager", "--seed", "0", "--generation-config", "vllm",
                   "--enable-prompt-tokens-details",
                   "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching"]
        if kv_blocks is not None:  # the engine's KV memory, in blocks (vLLM's own override, on any device)
            command += ["--num-gpu-blocks-override", str(kv_blocks)]
        if connector is not None:
            command += ["--kv-transfer-config", json.dumps(transfer_config(connector, kv_role))]
        command += list(extra_args)  # any other `vllm serve` option, as given
        if netns is not None:
            command = [*exec_prefix(netns), *command]  # it execs vLLM: the same process, signals and all
        self.command = command
        environment = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", **os.environ, **(env or {})}
        # a session of its own (a Ctrl-C reaches us, and we stop it), and SIGTERM when we die however we die
        run = [SETPRIV, "--pdeathsig", "TERM", "--", *command] if SETPRIV else command
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(run, stdout=log, stderr=subprocess.STDOUT, env=environment,
                                            start_new_session=True)

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def __enter__(self) -> "OpenAIServer":
        deadline = time.monotonic() + self.start_timeout_s
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(f"vllm serve exited ({self.process.returncode}); its log "
                                       f"{self.log_path} ends:\n{self.log_tail()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"vllm serve did not answer /health in {self.start_timeout_s:.0f} s; its "
                                       f"log: {self.log_path}")
                try:
                    with urllib.request.urlopen(f"{self.url}/health", timeout=5) as reply:
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
        self._wait_for_group()

    def _wait_for_group(self, grace_s: float = 30.0) -> None:
        """Until every process of the server's group is gone (its engine core and workers outlive the API server
        a moment; a network namespace it ran in cannot be removed before): SIGKILL for what outlives the grace."""
        deadline, killed = time.monotonic() + grace_s, False
        while left := _group_members(self.process.pid):
            if time.monotonic() > deadline:
                if killed:
                    raise RuntimeError(f"vllm serve's processes {left} outlived SIGKILL; its log: {self.log_path}")
                os.killpg(self.process.pid, signal.SIGKILL)
                deadline, killed = time.monotonic() + 10.0, True
            time.sleep(0.1)

class RoundRobin:
    """Servers behind one front that sends request i to server i mod N (a round-robin load balancer): a user's
    next turn lands on another server than the last, so it finds its history's KV only in a cache they share."""

    def __init__(self, servers: list[OpenAIServer]) -> None:
        if not servers:
            raise ValueError("a front needs at least one server")
        self.servers = list(servers)
        self._turn = itertools.count()
        self._lock = threading.Lock()

    def _next(self) -> OpenAIServer:
        with self._lock:
            return self.servers[next(self._turn) % len(self.servers)]

    def stream(self, ids: list[int], max_tokens: int = 16, salt: str | None = None) -> Reply:
        return self._next().stream(ids, max_tokens, salt)
