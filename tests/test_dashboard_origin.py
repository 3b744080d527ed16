"""The dashboard answers only its own names and its own page (finding N7): a rebound DNS name (Host: evil.example)
and another site's WebSocket (Origin: http://evil.example) get 403 and one line saying why; the page at
http://127.0.0.1:PORT/, tools without an Origin and names given with --allow-host keep working. Real requests to
a real Dashboard on 127.0.0.1, an ephemeral port."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import aiohttp
import pytest

from skymemory.cli import build_parser
from skymemory.dashboard.alongside import DashboardProcess
from skymemory.dashboard.server import Dashboard

WAIT_S = 10.0  # a bound on each wait, not a timing claim


async def raw_get(port: int, head: str) -> tuple[int, str]:
    """One HTTP request as written (its request line and headers), over a plain socket: (status, body)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), WAIT_S)
    try:
        writer.write(head.replace("\n", "\r\n").encode() + b"Connection: close\r\n\r\n")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), WAIT_S)
    finally:
        writer.close()
    status_line, _, rest = answer.decode("utf-8", "replace").partition("\r\n")
    return int(status_line.split()[1]), rest.partition("\r\n\r\n")[2]


def serving(test, **options):
    """Run `test(dashboard, port)` against a started Dashboard (no constellation: the page and its snapshot)."""

    async def main():
        d = Dashboard(**options)
        port = await d.start(0)
        try:
            return await test(d, port)
        finally:
            await d.stop()

    return asyncio.run(main())


async def ws_status(port: int, *, origin: str | None = None, host: str | None = None) -> int:
    """The WebSocket handshake's answer: 101 when accepted (and a snapshot was pushed), else its HTTP status."""
    headers = {"Host": host} if host is not None else None
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http:
        try:
            async with http.ws_connect(f"http://127.0.0.1:{port}/ws", origin=origin, headers=headers) as ws:
                snap = await asyncio.wait_for(ws.receive_json(), WAIT_S)
                assert "problem" in snap
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def test_a_request_for_another_host_is_refused_in_one_line_naming_it_and_the_option():
    async def test(d, port):
        status, body = await raw_get(port, "GET / HTTP/1.1\nHost: evil.example:%d\n" % port)
        assert status == 403 and body.count("\n") == 1
        assert "evil.example" in body and "--allow-host evil.example" in body
        status, body = await raw_get(port, "GET /api/snapshot HTTP/1.1\nHost: rebound.evil.example\n")
        assert status == 403 and "rebound.evil.example" in body
        status, body = await raw_get(port, "GET /api/snapshot HTTP/1.0\n")  # no Host: at all
        assert status == 403 and "no Host: header" in body
        for empty in ("", ":%d" % port, "[]:%d" % port):  # no name, whatever allowed_hosts holds
            status, body = await raw_get(port, f"GET /api/snapshot HTTP/1.1\nHost: {empty}\n")
            assert status == 403
        # a name that is not ASCII is shown escaped: the answer stays one line
        status, body = await raw_get(port, "GET / HTTP/1.1\nHost: \u00e9vil.example\n")
        assert status in (400, 403) and body.count("\n") <= 1 and "\u00e9" not in body

    serving(test, allowed_hosts=[""])


@pytest.mark.parametrize("host", ["127.0.0.1:{port}", "localhost:{port}", "LocalHost:{port}", "[::1]:{port}",
                                  "127.0.0.1", "localhost"])
def test_the_loopback_names_are_answered(host):
    async def test(d, port):
        status, body = await raw_get(port, f"GET / HTTP/1.1\nHost: {host.format(port=port)}\n")
        assert status == 200 and "dashboard.js" in body
        status, body = await raw_get(port, f"GET /static/dashboard.js HTTP/1.1\nHost: {host.format(port=port)}\n")
        assert status == 200

    serving(test)


def test_the_page_and_tools_without_an_origin_keep_working():
    async def test(d, port):
        url = f"http://127.0.0.1:{port}/"
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http:
            async with http.get(url) as r:
                assert r.status == 200 and "dashboard.js" in await r.text()
            async with http.get(url + "api/snapshot") as r:
                assert r.status == 200 and "problem" in await r.json()
            # what the page's own fetches and WebSocket send: Origin is the address it was loaded from
            async with http.get(url + "api/snapshot", headers={"Origin": f"http://127.0.0.1:{port}"}) as r:
                assert r.status == 200
        assert await ws_status(port) == 101  # tests and tools send no Origin
        assert await ws_status(port, origin=f"http://127.0.0.1:{port}") == 101
        assert await ws_status(port, origin=f"http://localhost:{port}", host=f"localhost:{port}") == 101
        # an SSH tunnel (-L 9000:127.0.0.1:PORT): the browser's Host and Origin both name its port
        assert await ws_status(port, origin="http://localhost:9000", host="localhost:9000") == 101
        return await asyncio.to_thread(lambda: urllib.request.urlopen(url + "api/snapshot", timeout=WAIT_S).status)

    assert serving(test) == 200  # what tools/dashboard_screenshot.py and `skymemory demo` read


@pytest.mark.parametrize("origin", ["http://evil.example", "http://evil.example:{port}", "https://evil.example",
                                   "null", "http://localhost:9000", "http://127.0.0.1:{port}.evil.example",
                                   "http://127.0.0.1@evil.example:{port}", "file://", "chrome-extension://abc"])
def test_another_sites_websocket_is_refused_and_never_selects_a_block(origin):
    async def test(d, port):
        assert await ws_status(port, origin=origin.format(port=port)) == 403
        assert d.pages == []  # no page: no "select", no PROBE sent on its behalf
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT_S)) as http:
            headers = {"Origin": origin.format(port=port)}
            async with http.get(f"http://127.0.0.1:{port}/api/snapshot", headers=headers) as r:
                body = await r.text()
                assert r.status == 403 and body.count("\n") == 1 and "may not use this dashboard" in body
            async with http.post(f"http://127.0.0.1:{port}/ws", headers=headers) as r:
                assert r.status == 403  # any method
            async with http.post(f"http://127.0.0.1:{port}/ws") as r:
                assert r.status == 405  # the same without Origin: refused by the router, not by us

    serving(test)


def test_a_rebound_name_cannot_open_the_websocket_even_with_a_matching_origin():
    async def test(d, port):
        evil = f"evil.example:{port}"
        assert await ws_status(port, origin=f"http://{evil}", host=evil) == 403
        assert await ws_status(port, host=evil) == 403  # nor without Origin
        assert d.pages == []

    serving(test)


def test_allowed_hosts_adds_names_and_nothing_else():
    async def test(d, port):
        name = f"dash.example.org:{port}"
        status, _ = await raw_get(port, f"GET / HTTP/1.1\nHost: {name}\n")
        assert status == 200
        assert await ws_status(port, origin=f"http://{name}", host=name) == 101
        assert await ws_status(port, origin=f"http://{name}", host=f"127.0.0.1:{port}") == 101  # our port
        status, _ = await raw_get(port, f"GET / HTTP/1.1\nHost: other.example.org:{port}\n")
        assert status == 403
        assert await ws_status(port, origin=f"http://other.example.org:{port}", host=name) == 403
        status, _ = await raw_get(port, f"GET / HTTP/1.1\nHost: [fe80::1]:{port}\n")
        assert status == 200

    serving(test, allowed_hosts=["Dash.Example.org", "[fe80::1]"])


def test_the_allow_host_option_is_parsed_and_checked(capsys):
    parser = build_parser()
    assert parser.parse_args(["dashboard"]).allow_host == []
    args = parser.parse_args(["dashboard", "--allow-host", "Dash.Example.org", "--allow-host", "[::1]",
                              "--allow-host", "10.0.0.7", "--allow-host", "my_box"])
    assert args.allow_host == ["dash.example.org", "::1", "10.0.0.7", "my_box"]
    for bad in ["http://dash.example.org", "dash.example.org:8050", "*.example.org", "", "a b", "dash/x", "-x.org"]:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(["dashboard", f"--allow-host={bad}"])
        err = capsys.readouterr().err
        assert exit_.value.code == 2 and err.count("\n") == 1, err
        assert "argument --allow-host: not a host name or address" in err and "Traceback" not in err


def test_the_command_answers_a_name_given_with_allow_host_and_refuses_others(tmp_path):
    def get(url: str, host: str) -> tuple[int, str]:
        request = urllib.request.Request(url, headers={"Host": host})
        try:
            with urllib.request.urlopen(request, timeout=WAIT_S) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    events = tmp_path / "events.jsonl"
    with DashboardProcess("--events", events, "--port", 0, "--allow-host", "dash.example.org") as url:
        port = url.rstrip("/").rsplit(":", 1)[1]
        assert get(url + "api/snapshot", f"dash.example.org:{port}")[0] == 200
        assert get(url + "api/snapshot", f"127.0.0.1:{port}")[0] == 200
        status, body = get(url + "api/snapshot", f"evil.example:{port}")
    assert status == 403 and "--allow-host evil.example" in body
