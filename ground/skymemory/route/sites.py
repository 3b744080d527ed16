"""Talking to a site (a `vllm serve`): every wait bounded, and a site that does not answer named.

One HTTP connection per request (http.client; `timeout` bounds the connect and every read). A site that
refuses or drops the connection is a SiteDown with HTTP status 502, one that sends nothing for `timeout_s`
is 504; both name the site and its URL, so the client knows which one failed.
"""

from __future__ import annotations

import http.client
import socket
from urllib.parse import urlsplit


class SiteDown(Exception):
    """A site that did not answer: `status` (502 or 504) and one sentence naming it."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def check_url(text: str) -> str:
    """http(s)://host[:port][/base] without a query: ValueError otherwise. Returns it without a trailing /."""
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s)://host[:port] URL: {text!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        raise ValueError(f"bad port in {text!r}") from None
    if parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"a site URL has no query, fragment nor credentials: {text!r}")
    return text.rstrip("/")


class Site:
    def __init__(self, name: str, url: str, timeout_s: float) -> None:
        self.name, self.url, self.timeout_s = name, check_url(url), timeout_s
        parts = urlsplit(self.url)
        self._https = parts.scheme == "https"
        self._host, self._port, self._base = parts.hostname, parts.port, parts.path.rstrip("/")

    def open(self, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send the request; the connection (close it when done) and the response, its headers read.
        Raises SiteDown."""
        kind = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        connection = kind(self._host, self._port, timeout=self.timeout_s)
        try:
            connection.request(method, self._base + path, body=body, headers=headers or {})
            return connection, connection.getresponse()
        except BaseException as exc:
            connection.close()
            raise self.down(exc) from None

    def down(self, exc: BaseException) -> BaseException:
        """What a failure of this site's connection is to the client: SiteDown naming it (others unchanged)."""
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return SiteDown(504, f"the {self.name} site ({self.url}) sent nothing for {self.timeout_s:g} s")
        if isinstance(exc, (OSError, http.client.HTTPException)):
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else (str(exc) or type(exc).__name__)
            return SiteDown(502, f"the {self.name} site ({self.url}) did not answer: {why}")
        return exc

    def call(self, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, str, bytes]:
        """The whole answer: (status, content type, body). Raises SiteDown."""
        connection, response = self.open(method, path, body, headers)
        try:
            data = response.read()
        except BaseException as exc:
            raise self.down(exc) from None
        finally:
            connection.close()
        return response.status, response.getheader("Content-Type") or "application/json", data
