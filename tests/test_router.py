"""`skymemory route`, the router of Prefill-as-a-Service (skymemory.route): what goes where, and what it says.

The two sites are small local HTTP servers that record what they got and answer as `vllm serve` does (test
doubles: they isolate the router). Routing is checked with a pinned threshold and a prefix lookup that says
how many blocks are cached; the lookup itself, the link probe and the planned threshold run against a real
launched constellation, with blocks stored as the prefill site's connector stores them.
"""

from __future__ import annotations

import http.client
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skymemory.cli import main
from skymemory.integrations.vllm.config import PREFILLED_PARAM
from skymemory.route.front import Router
from skymemory.route.threshold import Threshold

WAIT_S = 30  # every wait on a socket here is bounded
GROUND = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "ground")


class FakeSite:
    """A `vllm serve` double: records each request (method, path, JSON body) and answers a completion whole or
    streamed (three events and [DONE]); `status` other than 200 answers that error instead."""

    def __init__(self, name: str) -> None:
        self.name, self.got, self.status = name, [], 200
        site = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _send(self, status, body, kind="application/json"):
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                site.got.append(("GET", self.path, None))
                self._send(200, json.dumps({"object": "list", "data": [{"id": site.name}]}).encode())

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                site.got.append(("POST", self.path, body))
                if site.status != 200:
                    self._send(site.status, json.dumps({"error": {"message": f"{site.name} refused",
                                                                  "code": site.status}}).encode())
                    return
                if not body.get("stream"):
                    self._send(200, json.dumps({"id": "c", "site": site.name,
                                                "choices": [{"text": "hello", "token_ids": [7]}],
                                                "usage": {"prompt_tokens": 1}}).encode())
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for i in range(3):
                    event = f"data: {json.dumps({'choices': [{'text': str(i), 'token_ids': [i]}]})}\n\n".encode()
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                done = b"data: [DONE]\n\n"
                self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def posts(self) -> list[dict]:
        return [body for method, _, body in self.got if method == "POST"]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Cached:
    """A prefix lookup that says `blocks` cached blocks for every prompt (the routing, apart from the lookup)."""

    block_tokens, block_bytes = 128, 4096

    def __init__(self, blocks: int = 0) -> None:
        self.blocks, self.asked, self.stored_at_prefill = blocks, [], []

    def cached_blocks(self, prompt, salt=None) -> int:
        self.asked.append((len(prompt), salt))
        return min(self.blocks, (len(prompt) - 1) // 128)

    def stored(self, prompt, salt=None) -> None:
        self.stored_at_prefill.append((len(prompt), salt))


@pytest.fixture
def sites():
    prefill, decode = FakeSite("prefill"), FakeSite("decode")
    yield prefill, decode
    prefill.close()
    decode.close()


def post(url: str, body: dict | bytes) -> tuple[int, dict, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url + "/v1/completions", data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            return answer.status, dict(answer.headers), json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def get(url: str, path: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + path, timeout=WAIT_S) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def router_for(sites, t: int = 256, prefix=None, **kw) -> Router:
    prefill, decode = sites
    return Router(prefill.url, decode.url, threshold=Threshold(pinned=t), prefix=prefix or Cached(), **kw).start()


def test_a_short_prompt_goes_only_to_decode(sites):
    prefill, decode = sites
    with router_for(sites, t=256) as router:
        status, headers, answer = post(router.url, {"model": "m", "prompt": list(range(200)), "max_tokens": 5,
                                                    "cache_salt": "alice"})
        assert status == 200 and answer["site"] == "decode" and headers["X-SkyMemory-Route"] == "straight"
        assert prefill.posts() == []
        assert decode.posts() == [{"model": "m", "prompt": list(range(200)), "max_tokens": 5, "cache_salt": "alice"}]
        counters = get(router.url, "/router")[1]["counters"]
    assert counters["requests_straight"] == 1 and counters["requests_offloaded"] == 0
    assert counters["prompt_tokens_straight"] == 200


def test_a_long_uncached_prompt_is_prefilled_then_decoded_with_its_blocks_named(sites):
    prefill, decode = sites
    body = {"model": "m", "prompt": list(range(1000)), "max_tokens": 5, "cache_salt": "alice",
            "stream_options": {"include_usage": True}, "kv_transfer_params": {"skymemory_policy": "fetch"}}
    prefix = Cached()
    with router_for(sites, t=256, prefix=prefix) as router:
        status, headers, answer = post(router.url, body)
        assert status == 200 and answer["site"] == "decode" and headers["X-SkyMemory-Route"] == "offloaded"
        assert prefix.stored_at_prefill == [(1000, "alice")]  # its next turn asks the orbit for them again
        [asked] = prefill.posts()
        # the same body, one token, not streamed (no stream_options: vLLM refuses them unstreamed), same salt
        assert asked == {**{k: v for k, v in body.items() if k != "stream_options"}, "max_tokens": 1,
                         "stream": False}
        [decoded] = decode.posts()
        assert decoded == {**body, "kv_transfer_params": {"skymemory_policy": "fetch", PREFILLED_PARAM: 999 // 128}}
        said = get(router.url, "/router")[1]
    assert said["threshold"] == 256 and said["pinned"] is True
    counters = said["counters"]
    assert counters["requests_offloaded"] == 1 and counters["prompt_tokens_offloaded"] == 1000
    assert counters["kv_bytes_crossed"] == 7 * 4096  # no profile: the blocks stored, at the prefix's block size
    assert counters["prefill_site_s"] > 0


def test_only_the_uncached_increment_counts(sites):
    prefill, decode = sites
    prefix = Cached(blocks=6)  # 768 of 1000 tokens cached: 232 left, under t
    with router_for(sites, t=256, prefix=prefix) as router:
        assert post(router.url, {"prompt": list(range(1000)), "cache_salt": "bob"})[0] == 200
        assert prefill.posts() == [] and len(decode.posts()) == 1
        assert prefix.asked == [(1000, "bob")]  # the salt is the lookup's tenant
        prefix.blocks = 5  # 360 left: over t
        assert post(router.url, {"prompt": list(range(1000))})[0] == 200
        assert len(prefill.posts()) == 1 and decode.posts()[-1]["kv_transfer_params"] == {PREFILLED_PARAM: 7}
        counters = get(router.url, "/router")[1]["counters"]
    assert counters["cached_tokens"] == 768 + 640


def test_a_pinned_threshold_decides_alone(sites):
    prefill, decode = sites
    with router_for(sites, t=0, prefix=Cached(blocks=0)) as router:  # t 0: everything uncached is offloaded
        post(router.url, {"prompt": [1, 2, 3]})
    assert len(prefill.posts()) == 1 and decode.posts()[0]["kv_transfer_params"] == {PREFILLED_PARAM: 0}


def test_streaming_is_passed_through(sites):
    prefill, decode = sites
    with router_for(sites, t=256) as router:
        host, port = router.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
        try:
            connection.request("POST", "/v1/completions", json.dumps({"prompt": list(range(1000)), "stream": True}),
                               {"Content-Type": "application/json"})
            answer = connection.getresponse()
            assert answer.status == 200 and answer.getheader("Content-Type").startswith("text/event-stream")
            events = [line.strip() for line in answer.read().decode().splitlines() if line.strip()]
        finally:
            connection.close()
    assert events == [f"data: {json.dumps({'choices': [{'text': str(i), 'token_ids': [i]}]})}" for i in range(3)] \
        + ["data: [DONE]"]
    assert prefill.posts()[0]["stream"] is False and decode.posts()[0]["stream"] is True


def test_text_prompts_are_tokenized_and_batches_of_more_than_one_refused(sites):
    prefill, decode = sites
    tokenizer = lambda text, special: [1] * special + [ord(c) for c in text]  # noqa: E731
    with router_for(sites, t=256, tokenizer=tokenizer) as router:
        assert post(router.url, {"prompt": ["x" * 300]})[0] == 200  # a batch of one: 301 tokens, offloaded
        assert len(prefill.posts()) == 1
        status, _, answer = post(router.url, {"prompt": ["a", "b"]})
        assert status == 400 and "batch of 2" in answer["error"]["message"] and answer["error"]["code"] == 400
        assert post(router.url, {"prompt": [[1, 2], [3]]})[0] == 400
        assert post(router.url, b"not json")[0] == 400
        assert post(router.url, {"prompt": [1], "cache_salt": 5})[0] == 400
        assert post(router.url, {"max_tokens": 3})[0] == 400
    assert len(decode.posts()) == 1


def test_gets_pass_through_and_site_errors_keep_their_status(sites):
    prefill, decode = sites
    with router_for(sites, t=256) as router:
        assert get(router.url, "/v1/models") == (200, {"object": "list", "data": [{"id": "decode"}]})
        assert get(router.url, "/health")[0] == 200
        assert get(router.url, "/nothing")[0] == 404
        prefill.status = 422
        status, _, answer = post(router.url, {"prompt": list(range(1000))})
        assert status == 422 and answer["error"]["message"] == "prefill refused"
        assert decode.posts() == []  # the prefill failed: nothing decoded
        decode.status = 400
        assert post(router.url, {"prompt": [1, 2]})[:1] == (400,)


def test_a_site_down_is_a_502_naming_it(sites):
    prefill, decode = sites
    prefill.close()  # nothing listens at its address any more
    with router_for(sites, t=256) as router:
        status, _, answer = post(router.url, {"prompt": list(range(1000))})
        assert status == 502 and "prefill site" in answer["error"]["message"] and prefill.url in \
            answer["error"]["message"]
        decode.close()
        status, _, answer = post(router.url, {"prompt": [1, 2]})
        assert status == 502 and "decode site" in answer["error"]["message"]
        assert get(router.url, "/health")[0] == 502
        assert get(router.url, "/router")[1]["counters"]["site_errors"] == 3


class Link:
    """A probe double: each measure() says the next rate."""

    def __init__(self, *rates) -> None:
        self.rates = list(rates)

    def measure(self):
        rate = self.rates.pop(0)
        if isinstance(rate, Exception):
            raise rate
        return rate


def profile():
    from skymemory.kv.decide.disaggregation import PrefillProfile

    # 2 MB of KV per 128 tokens, prefill near-quadratic: short prompts saturate a slow link
    return PrefillProfile("m", "cpu", "fp16", 128, tuple((n, n * 16384, 0.02 + n * 1e-5 + n * n * 2e-9)
                                                          for n in (128, 512, 1024, 2048, 4096)))


def test_the_planned_threshold_follows_the_link_and_keeps_its_history(caplog):
    from skymemory.kv.decide.disaggregation import PAPER, Deployment, plan

    lengths, deployment = PAPER.scaled_to(4096), Deployment(4, 2, 256, 0.01, 16)  # decode never binds
    threshold = Threshold(profile=profile(), lengths=lengths, deployment=deployment,
                          probe=Link(1e6, 1e6, OSError("link down"), 1e9), probe_s=3600)
    with caplog.at_level(logging.INFO, logger="skymemory.route.threshold"):
        threshold.start()  # the first probe, then the loop (which waits an hour: updates are called here)
        try:
            slow = threshold.value
            assert slow == round(plan(profile(), lengths, 1e6, deployment).threshold)
            assert threshold.update() == slow and len(threshold.history) == 1  # the same link: t unmoved
            assert threshold.update() == slow  # a failed probe keeps t
            fast = threshold.update()
        finally:
            threshold.close()
    assert fast == round(plan(profile(), lengths, 1e9, deployment).threshold) and fast < slow
    said = threshold.snapshot()
    assert [h["threshold"] for h in said["history"]] == [slow, fast] and said["link_Bps"] == 1e9
    assert said["probe_failures"] == 1 and "link down" in said["last_probe_error"]
    assert round(said["plan"]["threshold"]) == fast
    assert f"threshold t: {slow} -> {fast} tokens (link 1000.0 MB/s)" in caplog.messages


@pytest.mark.parametrize("argv, said", [
    (["--decode", "http://127.0.0.1:1", "--model", "{model}", "--manifest", "{manifest}", "--threshold", "5"],
     "--prefill"),
    (["--prefill", "ftp://x", "--decode", "http://127.0.0.1:1", "--model", "{model}", "--manifest", "{manifest}",
      "--threshold", "5"], "not an http(s)://host[:port] URL"),
    (["--prefill", "http://h:99999", "--decode", "http://127.0.0.1:1", "--model", "{model}",
      "--manifest", "{manifest}", "--threshold", "5"], "bad port"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{tmp}", "--manifest", "{manifest}",
      "--threshold", "5"], "not a model folder"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{tmp}/none",
      "--threshold", "5"], "no such file"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{manifest}"],
     "one of the arguments --profile --threshold is required"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{manifest}",
      "--threshold", "-1"], "must be >= 0"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{manifest}",
      "--threshold", "5", "--profile", "{manifest}"], "not allowed with argument"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{manifest}",
      "--threshold", "5", "--probe-s", "0"], "--probe-s"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{manifest}",
      "--threshold", "5", "--connector-config", "[1]"], "must be a JSON object"),
    (["--prefill", "http://h:1", "--decode", "http://h:2", "--model", "{model}", "--manifest", "{manifest}",
      "--threshold", "5", "--port", "70000"], "--port"),
])
def test_bad_command_lines_are_one_line(argv, said, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    argv = [a.format(model=model, manifest=manifest, tmp=tmp_path) for a in argv]
    with pytest.raises(SystemExit) as exit_:
        main(["route", *argv])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and said in err and len(err.splitlines()) == 1, err


def test_a_bad_connector_setting_is_one_line(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    manifest = tmp_path / "manifest.json"
    manifest.write_text("{}")
    code = main(["route", "--prefill", "http://h:1", "--decode", "http://h:2", "--model", str(model),
                 "--manifest", str(manifest), "--threshold", "5", "--connector-config", '{"seal": "yes"}'])
    err = capsys.readouterr().err.strip()
    assert code == 1 and "seal must be true or false" in err and len(err.splitlines()) == 1, err
    code = main(["route", "--prefill", "http://h:1", "--decode", "http://h:2", "--model", str(model),
                 "--manifest", str(manifest), "--threshold", "5"])
    err = capsys.readouterr().err.strip()
    assert code == 1 and err.startswith("skymemory route: manifest ") and len(err.splitlines()) == 1, err


def test_the_orbit_prefix_the_link_probe_and_the_planned_threshold_on_a_constellation(node_path, tmp_path, sites):
    """Blocks stored as the prefill site's connector stores them (its scheduler's hashes, save_blocks with the
    records in orbit, its own index) are found by the router through the records in orbit alone (its index is
    another folder): a prompt cached but for a short increment goes straight to decode, the same prompt under
    another cache salt (another tenant) is uncached and offloaded. With a profile, start() measures the link
    through the constellation and plans t from it."""
    import torch

    from skymemory.integrations.vllm.config import ConnectorConfig
    from skymemory.integrations.vllm.worker import open_store
    from skymemory.kv.engine import OrbitRecords, RequestKeys, ServedModel, open_index
    from skymemory.kv.index.saving import BlockSave, save_blocks
    from skymemory.kv.model.models import save_model_dir
    from skymemory.orbit.manifest import Manifest
    from skymemory.route.build import open_router

    from live import launched

    prefill, decode = sites
    model = save_model_dir("embedded-tiny", tmp_path / "model")
    prompt = [(7 * i) % 250 + 3 for i in range(4 * 128 + 40)]  # 4 full blocks and 40 tokens
    with launched(tmp_path, 3, 3) as manifest:
        # the prefill site's side: its connector's settings, its own index
        config = ConnectorConfig.from_extra({"manifest": str(manifest), "index_dir": str(tmp_path / "prefill-index"),
                                             "servers": 3}, served_model=str(model))
        from transformers import AutoConfig

        served = ServedModel.of(config.model, AutoConfig.from_pretrained(model).get_text_config(), block_tokens=128,
                                kv_format=config.kv_format, sealed=config.seal)
        index = open_index(config.index_dir)
        scheduler = served.scheduler(torch.float32, index, "auto")
        root = scheduler.root
        hashes = scheduler.finder.hashes(root, prompt, RequestKeys(cache_salt="alice"))
        assert len(hashes) == 4
        store = open_store(config, Manifest.load(manifest), 0x0B01)
        try:
            saves = [BlockSave(h, hashes[i - 1] if i else root, i, bytes(served.block_bytes))
                     for i, h in enumerate(hashes)]
            save_blocks(store.for_tenant("alice"), index, saves, served.form, orbit=OrbitRecords(store),
                        tenant="alice")
        finally:
            store.close()

        connector = {"index_dir": str(tmp_path / "decode-index"), "servers": 3}
        router = open_router(prefill.url, decode.url, model, manifest, connector=connector, threshold=100,
                             dtype="fp32")
        with router:
            assert router.prefix.cached_blocks(prompt, "alice") == 4
            assert router.prefix.cached_blocks(prompt, "bob") == 0
            assert post(router.url, {"prompt": prompt, "cache_salt": "alice"})[0] == 200  # 40 uncached: straight
            assert prefill.posts() == []
            assert post(router.url, {"prompt": prompt, "cache_salt": "bob"})[0] == 200  # 552 uncached
            assert prefill.posts()[0]["cache_salt"] == "bob"
            assert decode.posts()[-1]["kv_transfer_params"] == {PREFILLED_PARAM: 4}
            counters = get(router.url, "/router")[1]["counters"]
        assert counters["cached_tokens"] == 512 and counters["requests_offloaded"] == 1

        saved = tmp_path / "profile.json"
        profile().save(saved)
        planned = open_router(prefill.url, decode.url, model, manifest, connector=connector, profile=saved,
                              probe_s=3600, dtype="fp32")
        with planned:
            said = get(planned.url, "/router")[1]
        assert said["probes"] == 1 and said["link_Bps"] > 0 and said["pinned"] is False
        assert said["threshold"] == round(said["plan"]["threshold"]) and len(said["history"]) == 1

        # the command line: one line when listening, its URL in it; the router answers there; Ctrl-C stops it
        command = subprocess.Popen(
            [sys.executable, "-m", "skymemory", "route", "--prefill", prefill.url, "--decode", decode.url,
             "--model", str(model), "--manifest", str(manifest), "--connector-config", json.dumps(connector),
             "--dtype", "fp32", "--threshold", "100", "--port", "0"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": GROUND})
        try:
            line = _first_line(command, WAIT_S * 4)
            assert line.startswith("skymemory route: listening on http://127.0.0.1:"), line
            url = line.split()[4]
            assert get(url, "/router")[1]["threshold"] == 100
        finally:
            command.send_signal(signal.SIGINT)
            command.communicate(timeout=WAIT_S)
        assert command.returncode == 0


def _first_line(process: subprocess.Popen, timeout_s: float) -> str:
    """The process's first line of output, waited for at most timeout_s."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout_s)
    assert lines and lines[0], f"no line in {timeout_s} s"
    return lines[0].strip()


def test_a_clients_own_claim_of_prefilled_blocks_never_reaches_the_decode_site(sites):
    """Only the router says what a prefill site stored: a client that says it itself, on a request that goes
    straight, would hold its request at the decode site for blocks no one stores."""
    prefill, decode = sites
    body = {"prompt": list(range(200)), "kv_transfer_params": {PREFILLED_PARAM: 50, "skymemory_policy": "fetch"}}
    with router_for(sites, t=256) as router:
        assert post(router.url, body)[0] == 200
    [decoded] = decode.posts()
    assert decoded["kv_transfer_params"] == {"skymemory_policy": "fetch"} and prefill.posts() == []
