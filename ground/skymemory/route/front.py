"""The router's HTTP front: OpenAI's /v1/completions in, routed to the prefill and decode sites.

    router = Router("http://prefill:8000", "http://decode:8000", threshold=Threshold(pinned=512),
                    prefix=OrbitPrefix(...), tokenizer=model_tokenizer(model_dir)).start()
    router.url   # http://127.0.0.1:PORT: what clients talk to
    router.close()

For each completion: the prompt's cached prefix in orbit (route.prefix: the blocks the decode site would
load), its uncached increment = prompt tokens - cached tokens, and t (route.threshold). An increment above t
is prefilled at the prefill site first (the same body with max_tokens 1, not streamed: the site stores every
full block of the prompt in orbit and answers with the first token), and the original request then goes to
the decode site with kv_transfer_params["skymemory_prefilled_blocks"] = the prompt's full blocks that site
stored, (len - 1) // 128, which its connector waits for (bounded) when they are still in flight. Any other
request goes straight to the decode site. The decode site's answer is passed back unchanged: streamed
(server-sent events, relayed as they come) or whole. A site's error (its status and body) is passed back too;
a site that does not answer is a 502 or 504 JSON error naming it (route.sites). GET /v1/models and /health go
to the decode site; GET /router says what the router knows (t, the link, the plan, its counters).
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from skymemory.integrations.vllm.config import PREFILLED_PARAM

from .prompt import BadRequest, Tokenizer, one_prompt
from .sites import Site, SiteDown
from .tally import Tally
from .threshold import Threshold

log = logging.getLogger(__name__)

BLOCK_TOKENS = 128
MAX_BODY = 64 << 20  # a request body larger than this is refused (413)
CLIENT_TIMEOUT_S = 60.0  # a client that sends nothing for this long is dropped
SITE_TIMEOUT_S = 300.0  # a site that sends nothing for this long is a 504 (a long prefill queued behind others)
PASSED_GETS = ("/v1/models", "/health")


def error_body(status: int, message: str, kind: str = "BadRequestError") -> bytes:
    """An error as vLLM's OpenAI server says one."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None, "code": status}}).encode()


class Router:
    """An OpenAI-compatible front that sends each completion to the prefill site first or straight to decode."""

    def __init__(self, prefill: str, decode: str, *, threshold: Threshold, prefix=None,
                 tokenizer: Tokenizer | None = None, host: str = "127.0.0.1", port: int = 0,
                 site_timeout_s: float = SITE_TIMEOUT_S, profile=None, block_tokens: int = BLOCK_TOKENS,
                 block_bytes: int | None = None) -> None:
        """prefill, decode: the sites' base URLs. threshold: route.threshold.Threshold (started by start()).
        prefix: route.prefix.OrbitPrefix, or anything with cached_blocks(prompt, salt) (None: nothing is
        cached). tokenizer: for text prompts (None: token ids only). profile: the PrefillProfile whose
        kv_bytes(prompt tokens) counts what crossed the link per offloaded request (None: block_bytes per
        prefilled block). The router closes the threshold, its probe and the prefix it was given."""
        if not site_timeout_s > 0:
            raise ValueError(f"site_timeout_s must be > 0, got {site_timeout_s}")
        self.prefill = Site("prefill", prefill, site_timeout_s)
        self.decode = Site("decode", decode, site_timeout_s)
        self.threshold, self.prefix, self.tokenizer = threshold, prefix, tokenizer
        self.profile = profile
        self.block_tokens = getattr(prefix, "block_tokens", block_tokens)
        self.block_bytes = getattr(prefix, "block_bytes", block_bytes)
        self.tally = Tally()
        self.started = time.time()
        self._server = _Server((host, port), _Handler)
        self._server.daemon_threads = True
        self._server.router = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "Router":
        """Plan t (a first probe of the link, unless pinned), then serve on a thread of its own (once: a started
        router is returned as it is)."""
        if self._thread is not None:
            return self
        self.threshold.start()
        self._thread = threading.Thread(target=self._server.serve_forever, name="router", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=60)
            self._thread = None
        self._server.server_close()
        self.threshold.close()
        for owned in (getattr(self.threshold, "probe", None), self.prefix):
            if owned is not None and hasattr(owned, "close"):
                owned.close()

    def __enter__(self) -> "Router":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    def status(self) -> dict:
        """GET /router."""
        return {"prefill": self.prefill.url, "decode": self.decode.url, "block_tokens": self.block_tokens,
                "uptime_s": time.time() - self.started, **self.threshold.snapshot(), "counters": self.tally.snapshot()}

    # ---- deciding -------------------------------------------------------------------------------
    def cached_tokens(self, prompt: list[int], salt: str | None) -> int:
        if self.prefix is None:
            return 0
        return self.prefix.cached_blocks(prompt, salt) * self.block_tokens

    def stored_at_prefill_site(self, prompt: list[int], salt: str | None) -> None:
        """The prefill site stored the prompt's blocks: the lookup that found them absent a moment ago is not
        remembered, so the prompt's next turn finds them (route.prefix.OrbitPrefix.stored)."""
        if self.prefix is not None:
            self.prefix.stored(prompt, salt)

    def crossed_bytes(self, prompt_tokens: int, blocks: int) -> float:
        if self.profile is not None:
            return self.profile.kv_bytes(prompt_tokens)
        return (self.block_bytes or 0) * blocks


class _Server(ThreadingHTTPServer):
    """A client that hangs up (a closed keep-alive connection, a cancelled request) is logged in one line, not as a
    traceback on stderr; anything else is an error, with its traceback in the log."""

    def handle_error(self, request, client_address) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            log.debug("router: client %s went away: %r", client_address, exc)
        else:
            log.exception("router: a request from %s failed", client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; a streamed answer is sent chunked
    timeout = CLIENT_TIMEOUT_S
    server_version = "SkyMemoryRouter"

    @property
    def router(self) -> Router:
        return self.server.router

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.debug("router: %s %s", self.address_string(), format % args)

    # ---- answering ------------------------------------------------------------------------------
    def _send(self, status: int, body: bytes, content_type: str = "application/json", route: str | None = None):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if route:
            self.send_header("X-SkyMemory-Route", route)
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self._send(status, error_body(status, message, kind))

    def _down(self, exc: SiteDown) -> None:
        self.router.tally.add(site_errors=1)
        self._error(exc.status, str(exc), "BadGatewayError" if exc.status == 502 else "GatewayTimeoutError")

    def do_GET(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's name
        path = self.path.split("?", 1)[0]
        if path == "/router":
            self._send(200, json.dumps(self.router.status()).encode())
        elif path in PASSED_GETS:
            try:
                status, kind, body = self.router.decode.call("GET", self.path)
            except SiteDown as exc:
                self._down(exc)
                return
            self._send(status, body, kind)
        else:
            self._error(404, f"no route {path}: the router answers POST /v1/completions, GET /router, "
                        f"{', '.join(PASSED_GETS)}", "NotFoundError")

    def _body(self) -> dict | None:
        """The request's JSON object, or None after answering the error."""
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._error(411, "a request body with its Content-Length is needed", "LengthRequiredError")
            return None
        if not 0 <= length <= MAX_BODY:
            self.close_connection = True
            self._error(413, f"a request body of at most {MAX_BODY} bytes, got {length}", "PayloadTooLargeError")
            return None
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            self._error(400, f"the body is not JSON: {exc}")
            return None
        if not isinstance(body, dict):
            self._error(400, "the body must be a JSON object")
            return None
        return body

    def do_POST(self) -> None:  # noqa: N802 - BaseHTTPRequestHandler's name
        path = self.path.split("?", 1)[0]
        body = self._body()
        if body is None:
            return
        if path != "/v1/completions":
            self._error(404, f"no route POST {path}: the router answers POST /v1/completions", "NotFoundError")
            return
        router = self.router
        try:
            prompt = one_prompt(body, router.tokenizer)
            salt = body.get("cache_salt")
            if salt is not None and not isinstance(salt, str):
                raise BadRequest(f"cache_salt must be a string, got {salt!r}")
            params = body.get("kv_transfer_params")
            if params is not None and not isinstance(params, dict):
                raise BadRequest("kv_transfer_params must be a JSON object")
        except BadRequest as exc:
            router.tally.add(requests_refused=1)
            self._error(400, str(exc))
            return
        if params is not None and PREFILLED_PARAM in params:
            # only the router says what a prefill site stored: a client's own claim would hold its request (and the
            # decode site's orbit lookups) for blocks no one is storing
            params = {k: v for k, v in params.items() if k != PREFILLED_PARAM}
            body = {**body, "kv_transfer_params": params}
        cached = min(router.cached_tokens(prompt, salt), len(prompt))
        increment = len(prompt) - cached
        t = router.threshold.value
        if t is not None and increment > t:
            blocks = (len(prompt) - 1) // router.block_tokens
            if not self._prefill(body, len(prompt), cached, blocks):
                return
            router.stored_at_prefill_site(prompt, salt)
            body = {**body, "kv_transfer_params": {**(params or {}), PREFILLED_PARAM: blocks}}
            route = "offloaded"
        else:
            router.tally.add(requests_straight=1, prompt_tokens_straight=len(prompt), cached_tokens=cached)
            route = "straight"
        log.debug("router: %d prompt tokens, %d cached, increment %d, t %s: %s", len(prompt), cached, increment, t,
                  route)
        self._relay(body, route)

    def _prefill(self, body: dict, tokens: int, cached: int, blocks: int) -> bool:
        """The prompt prefilled at the prefill site (its full blocks stored in orbit); False after passing back its
        error or saying it did not answer."""
        router = self.router
        asked = {key: value for key, value in body.items() if key != "stream_options"}
        asked.update(max_tokens=1, stream=False)
        started = time.perf_counter()
        try:
            status, kind, answer = router.prefill.call("POST", "/v1/completions", json.dumps(asked).encode(),
                                                       {"Content-Type": "application/json"})
        except SiteDown as exc:
            self._down(exc)
            return False
        router.tally.add(prefill_site_s=time.perf_counter() - started)
        if status != 200:
            router.tally.add(site_errors=1)
            self._send(status, answer, kind, "offloaded")
            return False
        router.tally.add(requests_offloaded=1, prompt_tokens_offloaded=tokens, cached_tokens=cached,
                         kv_bytes_crossed=router.crossed_bytes(tokens, blocks))
        return True

    def _relay(self, body: dict, route: str) -> None:
        """The decode site's answer, passed back as it comes."""
        site = self.router.decode
        try:
            connection, response = site.open("POST", "/v1/completions", json.dumps(body).encode(),
                                             {"Content-Type": "application/json"})
        except SiteDown as exc:
            self._down(exc)
            return
        try:
            kind = response.getheader("Content-Type") or "application/json"
            if not kind.startswith("text/event-stream"):
                try:
                    answer = response.read()
                except Exception as exc:  # noqa: BLE001 - the site's failure, said as the client's error
                    down = site.down(exc)
                    if isinstance(down, SiteDown):
                        self._down(down)
                        return
                    raise
                if response.status != 200:
                    self.router.tally.add(site_errors=1)
                self._send(response.status, answer, kind, route)
                return
            self._stream(response, kind, route)
        finally:
            connection.close()

    def _stream(self, response, kind: str, route: str) -> None:
        """Server-sent events relayed chunk by chunk as the site sends them. A site that stops mid-stream ends it
        with an error event, as vLLM says an error after its 200."""
        self.send_response(response.status)
        self.send_header("Content-Type", kind)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("X-SkyMemory-Route", route)
        self.end_headers()
        try:
            while True:
                try:
                    data = response.read1(65536)
                except Exception as exc:  # noqa: BLE001 - the site's failure, said in the stream
                    down = self.router.decode.down(exc)
                    self.router.tally.add(site_errors=1)
                    data = b"data: " + error_body(502, str(down), "BadGatewayError") + b"\n\n"
                    self._chunk(data)
                    break
                if not data:
                    break
                self._chunk(data)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:  # the client went away: nothing more to send
            self.close_connection = True

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()
