"""The dashboard's parts without a browser: staleness and rates (injected clock), the sky, blocks and routes,
the followed files, the poller against fake satellites, the server's JSON, and the command's errors."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skymemory.bench.ttft import EventFile, Measurement
from skymemory.cli.dashboard import PORT_IN_USE
from skymemory.dashboard import blocks, fleet, poller, sky
from skymemory.dashboard.bench_events import BenchEvents, cache_outcome
from skymemory.dashboard.fleet import Fleet
from skymemory.dashboard.server import Dashboard
from skymemory.kv.index.radix import RadixIndex
from skymemory.orbit import placement
from skymemory.orbit.constellation import Constellation
from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.protocol import wire
from skymemory.store.contract import BlockRecord

from fakesat import FakeSatellite


def counters(**over) -> dict:
    base = {name: 0 for name in wire.STATS_FIELDS}
    base.update(bytes_budget=1 << 20, uptime_s=10)
    base.update(over)
    return base


# ---- fleet: up or down, rates, activity -----------------------------------------------------------


def test_a_silent_satellite_is_down_after_the_stale_limit_and_shown_within_two_seconds():
    f = Fleet(1, 2)
    assert f.tracks[(0, 0)].state(0.0) == "waiting"
    f.record((0, 0), 100.0, counters(), 1)
    track = f.tracks[(0, 0)]
    assert track.state(100.0 + fleet.STALE_AFTER_S) == "up"
    assert track.state(100.0 + fleet.STALE_AFTER_S + 0.01) == "down"
    # a snapshot is pushed every PUSH_PERIOD_S: the first one after the limit shows it within the promise
    assert fleet.STALE_AFTER_S + fleet.PUSH_PERIOD_S < fleet.SHOWN_STALE_WITHIN_S
    # a live satellite's newest sample is at most a poll period plus the reply wait old: never shown down
    assert fleet.POLL_PERIOD_S + poller.REPLY_WAIT_S < fleet.STALE_AFTER_S


def test_shown_down_within_two_seconds_of_the_last_answer_on_the_server_clock():
    """Poll rounds every POLL_PERIOD_S answer until t=K; pushes every PUSH_PERIOD_S; the first push
    that says 'down' comes less than SHOWN_STALE_WITHIN_S after K, whatever the phase of the two clocks."""
    for phase in (0.0, 0.07, 0.13, 0.24):
        f = Fleet(1, 1)
        t, last_answer = 0.0, 5.0
        while t <= last_answer:
            f.record((0, 0), t + poller.REPLY_WAIT_S, counters(), 0)
            t += fleet.POLL_PERIOD_S
        push = phase
        while f.snapshot(push)["cells"][0]["state"] != "down":
            push += fleet.PUSH_PERIOD_S
        assert push - last_answer < fleet.SHOWN_STALE_WITHIN_S


def test_rates_leave_out_the_dashboards_own_requests_and_restarts_start_afresh():
    f = Fleet(1, 1)
    f.record((0, 0), 0.0, counters(cmd_count=10, err_count=1), own_requests=1)
    f.record((0, 0), 1.0, counters(cmd_count=30, err_count=3), own_requests=5)  # 4 of the 20 were ours
    track = f.tracks[(0, 0)]
    assert track.rate("cmd_count") == pytest.approx(16.0)
    assert track.rate("err_count") == pytest.approx(2.0)
    f.record((0, 0), 2.0, counters(cmd_count=2, uptime_s=1), own_requests=6)  # restarted: counters went down
    assert track.rate("cmd_count") == 0.0 and len(track.samples) == 1
    assert not f.activity


def test_migrations_show_which_column_leaves_and_where_chunks_go():
    f = Fleet(3, 5)
    for sat in [(1, 3), (1, 0), (2, 3), (2, 0), (0, 4)]:
        f.record(sat, 0.0, counters(), 1)
    f.record((1, 3), 1.0, counters(migrated_out=6), 2)
    f.record((1, 0), 1.1, counters(migrated_in=6), 2)
    f.record((2, 3), 1.0, counters(migrated_out=2), 2)
    f.record((2, 0), 1.2, counters(migrated_in=2), 2)
    f.record((0, 4), 1.0, counters(lru_evictions=3, blocks_purged=1), 2)
    assert f.flows(2.0) == [{"plane": 1, "from": [(3, 6)], "to": [(0, 6)]},
                            {"plane": 2, "from": [(3, 2)], "to": [(0, 2)]}]
    snap = f.snapshot(2.0)
    cell = next(c for c in snap["cells"] if (c["plane"], c["sat"]) == (0, 4))
    assert cell["recent"] == {"lru_evictions": 3, "blocks_purged": 1}
    assert {i["kind"] for i in snap["feed"]} == set(fleet.ACTIVITY_KINDS)
    assert f.flows(1.0 + fleet.ACTIVITY_WINDOW_S + 1) == []  # old news leaves the picture


# ---- the sky, blocks and routes ---------------------------------------------------------------------


def test_sky_view_box_overhead_and_the_column_that_leaves():
    c = Constellation(5, 5, epoch_ms=0, time_scale=1.0, overhead_at_epoch=(2, 2))
    step_s = c.step_ms / 1000
    view = sky.sky_view(c, "rotation-hop", 9, unix_s=step_s * 0.5)
    assert view["overhead"] == [2, 2]
    assert view["box"] == {"planes": [1, 2, 3], "sats": [1, 2, 3]}
    assert view["leaving"] == {"sat": 3, "planes": [1, 2, 3]}
    assert view["entering"] == {"sat": 0, "planes": [1, 2, 3]}
    assert view["next_step_in_s"] == pytest.approx(step_s / 2, abs=0.01)  # mission time is whole ms
    after = sky.sky_view(c, "rotation-hop", 9, unix_s=step_s * 1.5)
    assert after["overhead"] == [2, 1]  # one column west
    assert after["box"]["sats"] == [0, 1, 2]
    assert sky.sky_view(c, "rotation-hop", 36, unix_s=0)["box"] is None  # a 6x6 box does not fit 5x5
    assert sky.sky_view(c, "hop", 5, unix_s=0)["leaving"] is None  # static layouts do not migrate


def test_line_of_sight_is_the_box_or_where_no_box_fits_the_nearest_satellites():
    c = Constellation(5, 5, epoch_ms=0, time_scale=1.0, overhead_at_epoch=(2, 2))
    view = sky.sky_view(c, "rotation-hop", 9, unix_s=1.0)
    assert sorted(map(tuple, view["los"])) == [(p, s) for p in (1, 2, 3) for s in (1, 2, 3)] and not view["los_note"]
    # five satellites in one plane (docs/CFS.md's five cFS instances): a 3x3 box cannot be placed
    line = Constellation(1, 5, epoch_ms=0, time_scale=1.0)
    view = sky.sky_view(line, "rotation-hop", 5, unix_s=1.0)
    assert view["box"] is None and view["los_note"] == "rotation-hop layout of 5 servers needs 3 planes x 3 sats; " \
                                                      "the grid is 1x5"
    assert [tuple(s) for s in view["los"]] == line.nearest(5, view["mission_ms"])  # where put stripes a file


def test_grid_route_follows_the_grid_rule_with_its_tie_breaks():
    assert blocks.grid_route((0, 0), (0, 0), 5, 5) == [(0, 0)]
    assert blocks.grid_route((2, 2), (0, 4), 5, 5) == [(2, 2), (1, 2), (0, 2), (0, 3), (0, 4)]  # planes first
    assert blocks.grid_route((0, 0), (4, 4), 5, 5) == [(0, 0), (4, 0), (4, 4)]  # the short way round, both rings
    assert blocks.grid_route((0, 0), (2, 0), 4, 4) == [(0, 0), (1, 0), (2, 0)]  # tie on an even ring: south
    assert blocks.grid_route((0, 0), (0, 2), 4, 4) == [(0, 0), (0, 1), (0, 2)]  # and east
    c = Constellation(7, 6)
    for a in c.all_satellites():
        for b in c.all_satellites():
            assert len(blocks.grid_route(a, b, 7, 6)) == c.hops(a, b) + 1


def test_holders_come_from_the_placement():
    c = Constellation(5, 5, epoch_ms=0, overhead_at_epoch=(2, 2))
    step = c.step_ms
    rec = BlockRecord(b"\1" * 32, 60_000, 6144, 10, int(step * 0.2), "rotation-hop", 9, (2, 2))
    later = int(step * 1.2)  # one step on: the leaving column's chunks are expected where migration puts them
    where = blocks.holders(rec, c, later)
    expected = placement.locate_chunks(rec, later, placement.Rotation(5, 5, step))
    assert where == {s: [i for i, x in enumerate(expected) if x == s] for s in set(expected)}
    explicit = BlockRecord(b"\2" * 32, 60_000, 6144, 10, int(step * 0.2), "explicit", 4, (2, 2))
    nearest = c.nearest(4, explicit.created_ms)
    assert blocks.holders(explicit, c, later) == {s: [i for i in range(10) if i % 4 == k] for k, s in enumerate(nearest)}


def test_index_follower_follows_what_the_radix_index_commits(tmp_path):
    follower = blocks.IndexFollower(tmp_path)
    assert follower.poll() and follower.blocks == [] and "no ground index" in follower.problem
    assert not follower.poll()  # still none: nothing new to say
    index = RadixIndex(tmp_path)  # another process's index, say
    older = BlockRecord(b"\3" * 32, 100, 6144, 1, 1000, "rotation-hop", 9, (1, 1))
    newer = BlockRecord(b"\4" * 32, 200, 6144, 1, 2000, "explicit", 4, (1, 1))
    index.insert(b"\0" * 32, older, {"position": 0})
    index.insert(older.block_hash, newer, {"position": 1})
    assert follower.poll()
    assert [b.record for b in follower.blocks] == [newer, older] and follower.problem is None
    assert follower.count == 2 and follower.find(newer.block_hash.hex()).meta == {"position": 1}
    assert follower.find("not hex") is None and follower.find("00" * 32) is None
    assert not follower.poll()  # nobody committed: not read again
    index.remove(newer.block_hash)
    assert follower.poll() and [b.record for b in follower.blocks] == [older]
    # the folder, its SQLite file or an old kv-index.json all name the same index
    assert blocks.index_directory(tmp_path / "kv-index.sqlite") == tmp_path
    assert blocks.index_directory(tmp_path / "kv-index.json") == tmp_path


def test_index_follower_follows_the_seal_failure_ledger(tmp_path):
    follower = blocks.IndexFollower(tmp_path)
    follower.poll()
    assert follower.seal_failures == {}
    index = RadixIndex(tmp_path)  # a KV load in another process noted a block that did not open
    assert follower.poll() and follower.seal_failures == {}
    index.note_seal_failures({(1, 2): 1})
    assert follower.poll() and {s: n for s, (n, _) in follower.seal_failures.items()} == {(1, 2): 1}
    assert not follower.poll()
    index.note_seal_failures({(1, 2): 1, (0, 0): 1})
    assert follower.poll() and {s: n for s, (n, _) in follower.seal_failures.items()} == {(1, 2): 2, (0, 0): 1}


# ---- the benchmark's event file --------------------------------------------------------------------


def measurement(mode: str, cached: int, expected: int = 512, ttft: float = 0.1) -> Measurement:
    return Measurement(512, mode, 0, 0, 544, ttft, 7, cached_tokens=cached, expected_cached_tokens=expected)


def test_bench_events_follow_a_growing_file_and_start_over_when_it_is_replaced(tmp_path):
    from dataclasses import asdict

    path = tmp_path / "events.jsonl"
    follower = BenchEvents(path)
    assert follower.poll() == 0 and follower.state == "waiting"
    events = EventFile(path)  # the benchmark's own writer
    events.write("start", config={"model": "m", "prefix_tokens": [512], "servers": 10})
    events.write("constellation", profile="laser", manifest=str(tmp_path / "sky" / "manifest.json"))
    events.write("measurement", **asdict(measurement("nocache", 0)))
    with open(path, "a") as f:
        f.write('{"event": "log", "message": "half a li')  # a line still being written
    assert follower.poll() == 3
    assert follower.state == "running" and follower.manifest == tmp_path / "sky" / "manifest.json"
    with open(path, "a") as f:
        f.write('ne"}\n')
    events.write("measurement", **asdict(measurement("sky-laser", 512)))
    events.write("measurement", **asdict(measurement("sky-laser-auto", 256)))
    events.write("measurement", **asdict(measurement("local", 0)))
    events.write("done", summary=[])
    events.close()
    assert follower.poll() == 5
    snap = follower.snapshot()
    assert snap["state"] == "done" and snap["logs"][-1]["message"] == "half a line"
    assert snap["outcomes"] == {"hit": 1, "partial": 1, "miss": 1}
    assert [m["mode"] for m in snap["measurements"]] == ["nocache", "sky-laser", "sky-laser-auto", "local"]
    with open(path, "a") as f:  # another run appended to the same file: it is the one shown
        f.write(json.dumps({"event": "start", "time": 2, "config": {"model": "other"}}) + "\n")
    assert follower.poll() == 1
    assert follower.config == {"model": "other"} and follower.measurements == [] and follower.manifest is None
    path.write_text(json.dumps({"event": "start", "time": 1, "config": {}}) + "\n")  # a new, shorter file
    assert follower.poll() == 1 and follower.measurements == [] and follower.manifest is None


def test_cache_outcome():
    assert cache_outcome({"mode": "nocache", "cached_tokens": 0, "expected_cached_tokens": 512}) is None
    assert cache_outcome({"mode": "device-ram", "cached_tokens": 512, "expected_cached_tokens": 512}) is None
    assert cache_outcome({"mode": "gpu-ram", "cached_tokens": 512, "expected_cached_tokens": 512}) is None  # old name
    assert cache_outcome({"mode": "sky-rf", "cached_tokens": 512, "expected_cached_tokens": 512}) == "hit"
    assert cache_outcome({"mode": "local", "cached_tokens": 0, "expected_cached_tokens": 0}) is None


# ---- the poller and the server against fake satellites --------------------------------------------------


def fake_manifest(sats: list[FakeSatellite], path: Path) -> Path:
    entries = [SatelliteEntry(plane=s.me[0], sat=s.me[1], host=s.address[0], isl_port=1, ground_port=s.address[1])
               for s in sats]
    m = Manifest(planes=1, sats=len(sats), epoch_ms=int(time.time() * 1000), satellites=entries)
    m.save(path)
    return path


async def until(condition, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


def test_poller_decodes_every_satellites_stats_and_counts_its_own_requests(tmp_path):
    with FakeSatellite(0, 0) as a, FakeSatellite(0, 1) as b:
        m = Manifest.load(fake_manifest([a, b], tmp_path / "manifest.json"))
        seen: dict = {}

        async def main():
            stop = asyncio.Event()
            p = poller.StatsPoller(m, lambda sat, t, c, own: seen.setdefault(sat, []).append((c, own)),
                                   period_s=0.05)
            task = asyncio.ensure_future(p.run(stop))
            await until(lambda: all(len(seen.get(s, [])) >= 3 for s in [(0, 0), (0, 1)]))
            stop.set()
            await task

        asyncio.run(main())
        for sat, fake in [((0, 0), a), ((0, 1), b)]:
            fields, own = seen[sat][-1]
            assert (fields["plane"], fields["sat"]) == sat
            assert own >= len(seen[sat])  # the n-th answered request was at least the n-th sent
        stats_requests = [wire.decode_command(r) for r in a.received]
        assert all(r.cc == wire.SKYMEM_STATS_CC and r.route.src_sat == poller.DASHBOARD_STATION for r in stats_requests)


def test_a_poll_round_is_decoded_in_one_batch_and_only_answers_to_our_requests_count(tmp_path, capfd):
    entries = [SatelliteEntry(0, s, "127.0.0.1", 1, 40000 + s) for s in range(3)]
    m = Manifest(planes=1, sats=3, satellites=entries)
    seen = []
    p = poller.StatsPoller(m, lambda sat, t, c, own: seen.append((sat, t, c["chunks"], own)))
    p._asked = {11: ((0, 0), 0.0, 4), 12: ((0, 1), 0.0, 4), 13: ((0, 2), 0.0, 4)}

    def reply(rid: int, sat: tuple, seq: int) -> bytes:
        route = wire.RouteHeader(wire.SKYMEM_GROUND_PLANE, poller.DASHBOARD_STATION, sat[0], sat[1], request_id=rid)
        body = wire.Stats(*sat, *([0] * 2), 5 + sat[1], *([0] * 15)).pack()
        return wire.encode_reply(route, wire.SKYMEM_REPLY_STATS, wire.SKYMEM_STATS_CC, body=body, seq=seq)

    inbox = poller._Inbox()
    # each satellite numbers its own packets: a round's sequence counts are in no order (ccsdspy would warn)
    for packet in (reply(12, (0, 1), 900), reply(11, (0, 0), 3), reply(99, (0, 2), 1), reply(13, (0, 1), 50)):
        inbox.datagram_received(packet, ("127.0.0.1", 1))
    inbox.datagram_received(b"not a packet", ("127.0.0.1", 1))
    assert len(inbox.packets) == 4 and inbox.ignored == 1
    p._take(inbox)
    # request 99 is not ours; request 13 went to (0, 2) but (0, 1) answered it
    assert [(sat, chunks, own) for sat, _, chunks, own in seen] == [((0, 1), 6, 4), ((0, 0), 5, 4)]
    assert "Sequence count" not in capfd.readouterr().err


def test_server_listens_on_loopback_and_serves_page_and_snapshot(tmp_path):
    import aiohttp

    with FakeSatellite(0, 0) as a, FakeSatellite(0, 1) as b:
        manifest = fake_manifest([a, b], tmp_path / "manifest.json")

        async def main():
            d = Dashboard(manifest=manifest, poll_period_s=0.05)
            port = await d.start(0)
            try:
                assert d._runner.addresses == [("127.0.0.1", port)]
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
                    async with http.get(f"http://127.0.0.1:{port}/") as r:
                        assert r.status == 200 and "dashboard.js" in await r.text()
                    async with http.get(f"http://127.0.0.1:{port}/static/dashboard.js") as r:
                        assert r.status == 200
                    await until(lambda: all(c["state"] == "up" for c in d.snapshot()["fleet"]["cells"]))
                    async with http.get(f"http://127.0.0.1:{port}/api/snapshot") as r:
                        snap = await r.json()
                    async with http.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                        pushed = await asyncio.wait_for(ws.receive_json(), 10)
            finally:
                await d.stop()
            return snap, pushed

        snap, pushed = asyncio.run(main())
    for s in (snap, pushed):
        assert [(c["plane"], c["sat"], c["state"]) for c in s["fleet"]["cells"]] == [(0, 0, "up"), (0, 1, "up")]
        assert s["manifest"]["planes"] == 1 and s["kv"]["count"] == 0


def test_status_says_live_then_silent_then_stopped_and_the_index_is_named_as_the_user_chose_it(tmp_path):
    manifest = tmp_path / "manifest.json"

    async def main():
        with FakeSatellite(0, 0) as a, FakeSatellite(0, 1) as b:
            fake_manifest([a, b], manifest)
            d = Dashboard(manifest=manifest, poll_period_s=0.05)
            await d.start(0)
            await until(lambda: d.snapshot()["status"]["state"] == "live")
            snap = d.snapshot()
            assert snap["status"]["text"] == "live" and snap["kv"]["index"] == f"beside {manifest}"
        try:
            await until(lambda: d.snapshot()["status"]["state"] == "silent")  # both satellites went quiet
            assert d.snapshot()["status"]["text"] == "no satellite answering"
            manifest.unlink()  # what the launcher's stop does last
            await until(lambda: d.snapshot()["status"]["state"] == "stopped")
            snap = d.snapshot()
            assert snap["status"]["text"] == "stopped: its manifest is gone (last picture shown)"
            assert snap["fleet"] is not None and d.poller is not None and d._poller_stop is None  # last picture, no polls
        finally:
            await d.stop()

    asyncio.run(main())


def test_snapshot_shows_each_satellites_seal_failures_on_its_cell_and_in_the_kv_panel(tmp_path):
    index_dir = tmp_path / "index"
    index = RadixIndex(index_dir)
    index.note_seal_failures({(0, 1): 2})

    async def main():
        with FakeSatellite(0, 0) as a, FakeSatellite(0, 1) as b:
            d = Dashboard(manifest=fake_manifest([a, b], tmp_path / "manifest.json"), kv_index=index_dir,
                          poll_period_s=0.05)
            await d.start(0)
            try:
                await until(lambda: d.snapshot()["kv"]["seal_failures"] != [])
                first = d.snapshot()
                index.note_seal_failures({(0, 1): 1, (0, 0): 1})  # another process, later
                await until(lambda: len(d.snapshot()["kv"]["seal_failures"]) == 2)
                return first, json.loads(json.dumps(d.snapshot()))  # as the page gets it
            finally:
                await d.stop()

    first, later = asyncio.run(main())
    assert {(c["plane"], c["sat"]): c["seal_failures"] for c in first["fleet"]["cells"]} == {(0, 0): 0, (0, 1): 2}
    assert [(f["plane"], f["sat"], f["count"]) for f in first["kv"]["seal_failures"]] == [(0, 1, 2)]
    assert {(c["plane"], c["sat"]): c["seal_failures"] for c in later["fleet"]["cells"]} == {(0, 0): 1, (0, 1): 3}
    # the most first, each with the Unix time of its last
    assert [(f["plane"], f["sat"], f["count"]) for f in later["kv"]["seal_failures"]] == [(0, 1, 3), (0, 0, 1)]
    assert all(abs(f["last_unix"] - time.time()) < 600 for f in later["kv"]["seal_failures"])


def test_a_benchmarks_own_index_is_not_named_by_its_temporary_folder(tmp_path):
    with FakeSatellite(0, 0) as a:
        run_dir = tmp_path / "skymemory-ttft-x1y2"  # as tempfile names a benchmark's work folder
        manifest = fake_manifest([a], run_dir / "manifest.json")
        events = tmp_path / "events.jsonl"
        writer = EventFile(events)
        writer.write("start", config={"model": "embedded-tiny"})
        writer.write("constellation", profile="none", manifest=str(manifest))
        writer.close()

        async def main():
            d = Dashboard(events=events, poll_period_s=0.05)
            await d.start(0)
            try:
                await until(lambda: d.snapshot()["manifest"] is not None)
                return d.snapshot()
            finally:
                await d.stop()

        snap = asyncio.run(main())
    assert snap["kv"]["index"] is None and str(run_dir) not in json.dumps(snap["kv"])
    assert snap["bench"]["config"]["model"] == "embedded-tiny"  # what the page names the index by instead


# ---- the command line ------------------------------------------------------------------------------------


def dashboard_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "skymemory", "dashboard", *args], capture_output=True, text=True,
                          timeout=60)


def test_cli_says_what_is_wrong_in_one_line(tmp_path):
    r = dashboard_cli("--manifest", str(tmp_path / "missing.json"))
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "no manifest at" in r.stderr
    r = dashboard_cli("--port", "65536")
    assert r.returncode == 2 and "must be in 0..65535" in r.stderr and "Traceback" not in r.stderr
    r = dashboard_cli("--events", str(tmp_path / "no" / "such" / "dir" / "events.jsonl"))
    assert r.returncode == 1 and "no directory" in r.stderr and "Traceback" not in r.stderr
    with FakeSatellite(0, 0) as a:
        manifest = fake_manifest([a], tmp_path / "manifest.json")
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            r = dashboard_cli("--manifest", str(manifest), "--port", str(port))
    assert r.returncode == PORT_IN_USE and r.stderr.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}: the port is in use" in r.stderr
    assert "choose another with --port N" in r.stderr  # the option that fixes it, by name


def test_demo_dashboard_runs_beside_the_run_and_a_busy_port_stops_the_demo_before_it_boots(tmp_path):
    import urllib.request

    from skymemory.dashboard.alongside import DashboardProcess

    events = tmp_path / "events.jsonl"
    with DashboardProcess("--events", events, "--port", 0) as url:
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "api/snapshot", timeout=10) as r:
            snap = json.load(r)
        assert "waiting for a benchmark" in snap["problem"] and snap["bench"]["state"] == "waiting"
        port = url.rstrip("/").rsplit(":", 1)[1]
        r = subprocess.run([sys.executable, "-m", "skymemory", "demo", "--dashboard", "--dashboard-port", port,
                            "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "the port is in use" in r.stderr and "Traceback" not in r.stderr
    assert "choose another with --dashboard-port N" in r.stderr  # demo's own option, not the dashboard's --port
    assert "booting" not in r.stderr
