"""The dashboard server: one asyncio loop keeps the picture current and pushes it to every open page.

Why aiohttp: the ground library is asyncio (SkyMemoryClient, the migration
driver), and aiohttp serves static files, JSON and WebSockets from the same
event loop as the telemetry poller and the file followers: no threads, no
second server process, no build step for the page.

`Dashboard` wires the parts:

* the constellation: `--manifest`, or else the newest one a running
  benchmark announced in its event file (and again whenever the manifest
  file changes: a relaunch); each one gets a fresh `Fleet` and `StatsPoller`;
* `sky.sky_view`: overhead satellite, LOS box, next step, leaving column;
* `blocks.IndexFollower`: the ground KV index (`--kv-index`, default the
  index beside the manifest) and its seal-failure ledger (each satellite's
  cell says `seal_failures`, the KV panel lists the satellites with any); for the block a page selected, its
  holders and the +GRID routes of a get, and once a second a PROBE of each
  holder for the first chunk it should hold (confirmed or missing);
* `bench_events.BenchEvents`: the TTFT panel and the cache hits and misses.

Each snapshot says in `status` whether the constellation is live: "stopped"
once its manifest is gone (the launcher's `stop` removes it; the last
picture stays, every satellite down), "silent" while no satellite answers,
"waiting" before the first answer, else "live" with how many are up.

HTTP: `/` the page, `/static/...` its script and style, `/ws` the WebSocket
(a snapshot every PUSH_PERIOD_S; the page sends {"select": block hash or
null}), `/api/snapshot?block=HASH` the same snapshot once, as JSON. The
server listens on 127.0.0.1 only.

Listening on loopback does not keep other sites out: a page on any site can
make the browser send requests here, and DNS rebinding (evil.example
resolving to 127.0.0.1) makes them same-origin to it. The page's "select"
makes the ground send signed PROBEs, so, as Jupyter and Grafana do, every
request must name an allowed host in its `Host:` (loopback names, plus those
given with `allowed_hosts` / `--allow-host`), and a request that carries an
`Origin:` (a browser's WebSocket always does) must come from the dashboard's
own origin. Anything else gets 403 and one line saying why.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from skymemory.link.client import SkyMemoryClient
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest
from skymemory.protocol.errors import SkyMemoryError

from . import blocks, sky
from .bench_events import BenchEvents
from .fleet import POLL_PERIOD_S, PUSH_PERIOD_S, Fleet
from .poller import DASHBOARD_STATION, StatsPoller

LISTEN_HOST = "127.0.0.1"  # never another address
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")  # the names a page on this machine reaches LISTEN_HOST by
STATIC_DIR = Path(__file__).resolve().parent / "static"
PROBE_STATION = DASHBOARD_STATION + 1  # its own return address on the satellites, apart from the poller's
PROBE_PERIOD_S = 1.0
SOURCES_PERIOD_S = 0.25
DEFAULT_SERVERS = 9  # the LOS box when neither --servers nor a benchmark says (RotatingBlockStore's default)
SEND_TIMEOUT_S = 5.0
BLOCKS_SHOWN = 40
MEASUREMENTS_SHOWN = 300


class Dashboard:
    def __init__(self, *, manifest: Path | None = None, events: Path | None = None, kv_index: Path | None = None,
                 strategy: str = "rotation-hop", servers: int | None = None, poll_period_s: float = POLL_PERIOD_S,
                 push_period_s: float = PUSH_PERIOD_S, allowed_hosts: Iterable[str] = ()) -> None:
        self.fixed_manifest = Path(manifest) if manifest is not None else None
        self.bench = BenchEvents(events) if events is not None else None
        self.fixed_index = kv_index
        self.strategy = strategy
        self.servers = servers
        self.poll_period_s = poll_period_s
        self.push_period_s = push_period_s
        # the names a request may give in Host: (ports aside); any other is a rebound DNS name or a mistake
        self.allowed_hosts = frozenset([*LOOPBACK_NAMES, LISTEN_HOST, *filter(None, map(host_name, allowed_hosts))])
        self.port: int | None = None  # once listening
        self.manifest: Manifest | None = None
        self.manifest_path: Path | None = None
        self.problem: str | None = None  # why there is no constellation to show
        self.manifest_gone = False  # the manifest shown was removed: the constellation was stopped
        self.fleet: Fleet | None = None
        self.poller: StatsPoller | None = None
        self.index: blocks.IndexFollower | None = None
        self.pages: list[dict] = []  # one {"selected": hash or None} per open WebSocket
        self.confirmed: dict[str, dict] = {}  # block hash -> {(plane, sat): True / False}
        self.probes_sent: dict[tuple[int, int], int] = {}  # PROBEs sent per satellite (the fleet discounts them)
        self._manifest_stamp: tuple | None = None
        self._poller_stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task] = []
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()

    # ---- lifecycle --------------------------------------------------------------------------
    async def start(self, port: int) -> int:
        """Listen on 127.0.0.1:port (0: any free port); returns the port. OSError when it is taken."""
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._page)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/api/snapshot", self._snapshot_json)
        app.router.add_static("/static/", STATIC_DIR)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, LISTEN_HOST, port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            raise
        self._refresh_sources()
        self._tasks += [asyncio.ensure_future(self._follow_sources()), asyncio.ensure_future(self._probe_selected())]
        self.port = self._runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        self._stop.set()
        self._stop_poller()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()

    # ---- sources: manifest, event file, index file --------------------------------------------
    async def _follow_sources(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(SOURCES_PERIOD_S)
            self._refresh_sources()

    def _refresh_sources(self) -> None:
        if self.bench is not None:
            self.bench.poll()
        path = self.fixed_manifest or (self.bench.manifest if self.bench is not None else None)
        if path is None:
            where = self.bench.path if self.bench is not None else "an event file"
            self.problem = f"waiting for a benchmark to announce its constellation in {where}"
        else:
            self._attach(path)
        if self.index is not None:
            self.index.poll()

    def _attach(self, path: Path) -> None:
        """(Re)load the manifest when it is new or its file changed; restart the poller on it."""
        try:
            st = path.stat()
            stamp = (str(path), st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (str(path), None, None)
        if stamp == self._manifest_stamp:
            return
        self._manifest_stamp = stamp
        try:
            manifest = Manifest.load(path)
        except FileNotFoundError as exc:
            if self.manifest is not None and path == self.manifest_path:  # `stop` removes it: nobody to poll
                self.manifest_gone = True
                self._stop_poller()
            self.problem = str(exc)
            return
        except (ValueError, TypeError) as exc:
            self.problem = str(exc)
            return
        self._stop_poller()
        self.manifest, self.manifest_path, self.problem, self.manifest_gone = manifest, path, None, False
        self.fleet = Fleet(manifest.planes, manifest.sats)
        self.probes_sent = {}
        self.poller = StatsPoller(manifest, self._on_stats, period_s=self.poll_period_s)
        self._poller_stop = asyncio.Event()
        self._tasks = [t for t in self._tasks if not t.done()]
        self._tasks.append(asyncio.ensure_future(self._run_poller(self.poller, self._poller_stop)))
        index_dir = blocks.index_directory(Path(self.fixed_index) if self.fixed_index is not None else path.parent)
        if self.index is None or self.index.directory != index_dir:
            if self.index is not None:
                self.index.close()
            self.index = blocks.IndexFollower(index_dir, self._index_label())
        self.index.poll()

    def _index_label(self) -> str | None:
        """The index as the user named it: --kv-index, or the folder of the --manifest they gave. None when
        both come from a benchmark's event file (its index is in a temporary folder the user never chose)."""
        if self.fixed_index is not None:
            return f"in {self.fixed_index}"
        return f"beside {self.fixed_manifest}" if self.fixed_manifest is not None else None

    def _on_stats(self, sat, received_at: float, counters: dict, stats_requests: int) -> None:
        # the satellite counts the dashboard's PROBEs as commands too: they are not the constellation's load
        self.fleet.record(sat, received_at, counters, stats_requests + self.probes_sent.get(sat, 0))

    async def _run_poller(self, poller: StatsPoller, stop: asyncio.Event) -> None:
        try:
            await poller.run(stop)
        except OSError as exc:  # e.g. the manifest's ground address is not one of this host's
            self.problem = f"cannot poll the satellites from {poller.bind[0]}: {exc}"

    def _stop_poller(self) -> None:
        if self._poller_stop is not None:
            self._poller_stop.set()
            self._poller_stop = None

    # ---- the selected blocks' holders, checked with PROBE ----------------------------------------
    async def _probe_selected(self) -> None:
        while not self._stop.is_set():
            await asyncio.sleep(PROBE_PERIOD_S)
            wanted = {p["selected"] for p in self.pages if p["selected"]}
            for gone in set(self.confirmed) - wanted:
                del self.confirmed[gone]
            if not wanted or self.manifest is None or self.index is None:
                continue
            m = self.manifest
            async with SkyMemoryClient(m.ground_addresses(), station_id=PROBE_STATION, timeout=0.3, retries=1,
                                       bind=(m.ground_host, 0), signer=signer_for_manifest(m)) as client:
                for block_hash in wanted:
                    block = self.index.find(block_hash)
                    if block is not None:
                        self.confirmed[block_hash] = await self._probe_block(client, block)

    async def _probe_block(self, client: SkyMemoryClient, block: blocks.IndexedBlock) -> dict:
        c = self.manifest.constellation()
        try:
            where = blocks.holders(block.record, c, c.mission_ms())
        except ValueError:  # a record of another grid: nothing to probe
            return {}

        async def one(sat, chunk_ids):
            self.probes_sent[sat] = self.probes_sent.get(sat, 0) + 1
            try:
                return sat, await client.probe(sat, block.record.block_hash, chunk_ids[0]) is not None
            except SkyMemoryError:
                return sat, None  # no answer: unknown, the fleet shows whether the satellite is up

        return dict(await asyncio.gather(*(one(s, ids) for s, ids in where.items())))

    # ---- the picture -----------------------------------------------------------------------------
    def snapshot(self, selected: str | None = None, now: float | None = None) -> dict:
        now = time.monotonic() if now is None else now
        out: dict = {"time": time.time(), "problem": self.problem, "status": None, "manifest": None, "sky": None,
                     "fleet": None, "kv": None, "bench": None}
        if self.bench is not None:
            bench = self.bench.snapshot()
            bench["measurements"] = bench["measurements"][-MEASUREMENTS_SHOWN:]
            out["bench"] = bench
        m = self.manifest
        if m is None:
            out["status"] = {"state": "waiting", "text": "no constellation yet"}
            return out
        c = m.constellation()
        servers = self.servers or (self.bench.config.get("servers") if self.bench else None) or DEFAULT_SERVERS
        out["manifest"] = {"path": str(self.manifest_path), "runtime": m.runtime, "planes": m.planes, "sats": m.sats,
                           "time_scale": m.time_scale, "link": m.link}
        out["sky"] = sky.sky_view(c, self.strategy, min(servers, m.planes * m.sats))
        out["fleet"] = self.fleet.snapshot(now)
        ledger = self.index.seal_failures if self.index is not None else {}
        for cell in out["fleet"]["cells"]:  # the ground's count, so known of a satellite that is down too
            cell["seal_failures"] = ledger.get((cell["plane"], cell["sat"]), (0, 0.0))[0]
        out["status"] = self._status(out["fleet"]["cells"])
        out["kv"] = self._kv(c, selected)
        return out

    def _status(self, cells: list[dict]) -> dict:
        """Whether the constellation is live, for the page's header: state and the words to show."""
        states = [c["state"] for c in cells]
        up, down = states.count("up"), states.count("down")
        if self.manifest_gone:
            return {"state": "stopped", "text": "stopped: its manifest is gone (last picture shown)"}
        if up == 0 and down:
            return {"state": "silent", "text": "no satellite answering"}
        if up == 0:
            return {"state": "waiting", "text": "waiting for the satellites' first STATS"}
        return {"state": "live", "text": "live" if up == len(cells) else f"live, {down} of {len(cells)} down"}

    def _kv(self, c, selected: str | None) -> dict:
        index = self.index
        kv = {"index": index.label if index else None, "problem": index.problem if index else None,
              "count": index.count if index else 0, "blocks": [], "selected": None, "seal_failures": []}
        if index is None:
            return kv
        # satellites whose KV blocks did not open under the ground's key, the most first
        kv["seal_failures"] = [{"plane": p, "sat": s, "count": n, "last_unix": t}
                               for (p, s), (n, t) in sorted(index.seal_failures.items(),
                                                            key=lambda item: (-item[1][0], item[0]))]
        for b in index.blocks[:BLOCKS_SHOWN]:
            kv["blocks"].append({"hash": b.block_hash, "chunks": b.record.chunk_count, "bytes": b.record.n_bytes,
                                 "strategy": b.record.strategy, "servers": b.record.n_servers,
                                 "position": b.meta.get("position"), "tokens": b.meta.get("tokens")})
        block = index.find(selected) if selected else None
        if block is None:
            return kv
        via = c.overhead()
        try:
            where = blocks.holders(block.record, c, c.mission_ms())
        except ValueError as exc:  # a record of another grid (an old index file)
            kv["selected"] = {"hash": block.block_hash, "problem": str(exc), "holders": [], "routes": []}
            return kv
        confirmed = self.confirmed.get(block.block_hash, {})
        kv["selected"] = {
            "hash": block.block_hash, "strategy": block.record.strategy, "chunks": block.record.chunk_count,
            "centre": list(block.record.centre), "via": list(via),
            "holders": [{"plane": s[0], "sat": s[1], "chunks": len(ids), "first": ids[0], "confirmed": confirmed.get(s)}
                        for s, ids in sorted(where.items())],
            "routes": [[list(x) for x in blocks.grid_route(via, s, c.planes, c.sats)] for s in sorted(where)],
        }
        return kv

    # ---- HTTP ------------------------------------------------------------------------------------
    @web.middleware
    async def _guard(self, request: web.Request, handler) -> web.StreamResponse:
        """Refuse (403, one line) a request not for one of our names or sent by another site's page."""
        refusal = self._refusal(request)
        if refusal is not None:
            return web.Response(status=403, text=refusal + "\n")
        return await handler(request)

    def _refusal(self, request: web.Request) -> str | None:
        # request.host would fall back to this machine's name: a request without Host: is refused instead
        host = request.headers.get("Host", "").strip()
        if not host:
            return ("refused: the request names no host (no Host: header); "
                    f"ask for http://{LISTEN_HOST}:{self.port}/")
        name = split_host(host)[0]
        if name not in self.allowed_hosts:
            shown = _shown(name)
            return (f"refused: this dashboard does not answer to host {shown} (allowed: "
                    f"{', '.join(sorted(self.allowed_hosts))}); to allow it, start it with --allow-host {shown}")
        # a browser sends Origin: with every WebSocket and every cross-site fetch; tools send none
        origin = request.headers.get("Origin")
        if origin is not None and not self._own_origin(origin, host):
            return (f"refused: a page from {_shown(origin)} may not use this dashboard (its own origin is "
                    f"http://{_shown(host)}); open the page at that address, or start the dashboard with "
                    "--allow-host NAME for the name you use")
        return None

    def _own_origin(self, origin: str, host: str) -> bool:
        """Whether Origin: is the dashboard's own: an allowed name, and the address the request came to (its Host:,
        so an SSH tunnel's port too) or our own port."""
        try:
            url = urlsplit(origin.strip())
            port = url.port
        except ValueError:  # "null" (a sandboxed or file: page) parses, a bad port does not
            return False
        if url.scheme not in ("http", "https") or url.username is not None or url.path or url.query or url.fragment:
            return False
        if url.hostname not in self.allowed_hosts:
            return False
        return url.netloc.lower() == host.lower() or (url.scheme == "http" and port == self.port)

    async def _page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC_DIR / "index.html")

    async def _snapshot_json(self, request: web.Request) -> web.Response:
        return web.json_response(self.snapshot(request.query.get("block")))

    async def _websocket(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=10.0)
        await ws.prepare(request)
        page = {"selected": None}
        self.pages.append(page)
        pusher = asyncio.ensure_future(self._push(ws, page))
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    with contextlib.suppress(ValueError, AttributeError):
                        selected = json.loads(message.data).get("select")
                        page["selected"] = selected if isinstance(selected, str) else None
        finally:
            pusher.cancel()
            self.pages.remove(page)
        return ws

    async def _push(self, ws: web.WebSocketResponse, page: dict) -> None:
        with contextlib.suppress(ConnectionError, asyncio.TimeoutError, RuntimeError):
            while not ws.closed:
                await asyncio.wait_for(ws.send_json(self.snapshot(page["selected"])), SEND_TIMEOUT_S)
                await asyncio.sleep(self.push_period_s)


def host_name(text: str) -> str:
    """A host name as Host: gives it, ports aside: lower case, an IPv6 address without its brackets."""
    name = text.strip().lower()
    return name[1:-1] if name.startswith("[") and name.endswith("]") else name


def split_host(value: str) -> tuple[str, str | None]:
    """Host: "name[:port]" or "[v6]:port" -> (host_name, port or None). A bare IPv6 address (not valid in Host:,
    but seen) is the name whole."""
    value = value.strip()
    if value.startswith("["):
        name, _, rest = value.partition("]")
        return host_name(name + "]"), rest[1:] if rest.startswith(":") else None
    if value.count(":") == 1:
        name, port = value.split(":")
        return host_name(name), port
    return host_name(value), None


def _shown(text: str) -> str:
    """What a request sent, fit for a one-line answer: short, non-ASCII and control characters escaped."""
    return ascii(text[:100])[1:-1]
