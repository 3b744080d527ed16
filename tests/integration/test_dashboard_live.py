"""The dashboard page in a real headless browser (Debian's chromium + chromium-driver) on a live 5x5 constellation.

It must show 25 satellites; after a put, the holders' chunk counts rise on the
page and the selected block's holders are marked (and confirmed by PROBE);
a benchmark's event file fills the TTFT panel; a killed satellite is marked
down; after a rotation step the overhead marker moves one column west and a
rotating store's MIGRATEs appear in the activity feed. On a cFS manifest
of five satellites in one plane (a LOS box does not fit: the nearest
satellites are shaded instead) the header says live, then no satellite
answering once the constellation is stopped, then stopped once its manifest
is gone, and never the old chunk count as current; tools/dashboard_screenshot.py
takes its picture of that page. Every wait has a generous deadline and no
timing is asserted: the 2-second staleness rule is checked on an injected
clock in tests/test_dashboard.py. A screenshot is saved in the test's
temporary directory.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from skymemory.bench.ttft import EventFile, Measurement
from skymemory.dashboard.browser import find_browser, headless_chromium
from skymemory.kv.index.radix import RadixIndex
from skymemory.orbit.manifest import Manifest
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.rotating import RotatingBlockStore

from live import REPO, launch, launched, stop, time_scale_for

SATS = 5
STEP_WALL_S = 8.0  # a rotation step every 8 s of wall time, so the test sees one
WAIT_S = 60.0  # generous bound for anything the page should show


@pytest.fixture(scope="module")
def browser_paths():
    found = find_browser()
    if found is None:
        if os.environ.get("CI"):  # `make test` installs them: their absence in CI is a failure, not a skip
            pytest.fail("chromium / chromedriver missing (make test installs them with apt-get)")
        pytest.skip("chromium and chromium-driver are not installed (make test installs them)")
    return found


@pytest.fixture(scope="module")
def turning(node_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dashboard-sky")
    with launched(tmp, 5, SATS, "--time-scale", repr(time_scale_for(STEP_WALL_S, SATS)),
                  "--memory-budget", str(8 * 1024 * 1024)) as manifest:
        yield manifest


def start_dashboard(manifest: Path, events: Path, *extra: str) -> tuple[subprocess.Popen, str]:
    """`skymemory dashboard` on a free port; returns the process and the URL it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "skymemory", "dashboard", "--manifest", str(manifest),
                             "--events", str(events), "--port", "0", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("dashboard: http://127.0.0.1:"):
        proc.kill()
        raise AssertionError(f"dashboard did not start: {line!r} {proc.stderr.read()}")
    return proc, line.split(": ", 1)[1].strip()


def wait_for(driver, condition, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S, poll_frequency=0.1).until(lambda d: condition(d), message=what)


def cell(driver, plane: int, sat: int):
    return driver.find_element("id", f"cell-{plane}-{sat}")


def step_boundary_not_near(c, margin_s: float) -> None:
    """Return when the next rotation step is at least margin_s away (waiting past the boundary if needed)."""
    while (c.next_step_ms(c.mission_ms()) - c.mission_ms()) / c.time_scale / 1000 < margin_s:
        time.sleep(0.05)


def test_dashboard_page_follows_the_live_constellation(turning, browser_paths, tmp_path):
    m = Manifest.load(turning)
    c = m.constellation()
    events = tmp_path / "events.jsonl"
    proc, url = start_dashboard(turning, events)
    try:
        with headless_chromium() as driver:
            driver.get(url)
            # 25 cells, every satellite up: its own STATS arrived
            wait_for(driver, lambda d: len(d.find_elements("css selector", "#grid .cell")) == 25, "25 cells")
            wait_for(driver, lambda d: len(d.find_elements("css selector", '.cell[data-state="up"]')) == 25,
                     "every satellite up")

            # a put: the holders' chunk counts rise; the block, once indexed, shows its holders
            step_boundary_not_near(c, 2.0)  # the servers are the nearest now and at the put's creation time
            servers = c.nearest(9)
            with ConstellationBlockStore.from_manifest(m, servers) as store:
                record = store.put_block(os.urandom(32), os.urandom(100_000))
            per_server = {s: len(range(i, record.chunk_count, len(servers))) for i, s in enumerate(servers)}
            wait_for(driver, lambda d: all(int(cell(d, *s).get_attribute("data-chunks") or 0) >= n
                                           for s, n in per_server.items()), "holders' chunk counts risen")
            RadixIndex(turning.parent).insert(b"\0" * 32, record, {"position": 0})  # as KVCManager indexes it
            item = f'#blocks li[data-hash="{record.block_hash.hex()}"]'
            wait_for(driver, lambda d: d.find_elements("css selector", item), "the block in the index list")
            driver.find_element("css selector", item).click()
            holders = {(int(e.get_attribute("data-plane")), int(e.get_attribute("data-sat")))
                       for e in wait_for(driver, lambda d: d.find_elements("css selector", ".cell.holder"), "holders")}
            assert holders == set(servers)
            wait_for(driver, lambda d: len(d.find_elements("css selector", "#holders .ok")) == len(servers),
                     "every holder confirmed by PROBE")
            assert len(driver.find_elements("css selector", "#overlay polyline.route")) == len(servers)

            # the TTFT panel follows a benchmark's event file
            writer = EventFile(events)
            writer.write("start", config={"model": "embedded-tiny", "prefix_tokens": [256], "servers": 9})
            for mode, cached in (("nocache", 0), ("sky-laser", 256)):
                writer.write("measurement", **asdict(Measurement(256, mode, 0, 0, 290, 0.05, 1, cached_tokens=cached,
                                                                 expected_cached_tokens=256)))
            writer.close()
            wait_for(driver, lambda d: len(d.find_elements("css selector", "#ttft-chart rect")) == 2, "TTFT bars")
            assert "hits 1" in driver.find_element("id", "kv-summary").text

            # a killed satellite is marked down (one far from the line-of-sight box, so migrations go on)
            overhead_plane = c.overhead()[0]
            victim = next(e for e in m.satellites if abs(c.hop_offset((overhead_plane, 0), (e.plane, 0))[1]) > 1)
            os.kill(victim.pid, signal.SIGKILL)
            wait_for(driver, lambda d: cell(d, victim.plane, victim.sat).get_attribute("data-state") == "down",
                     "the killed satellite marked down")
            assert "DOWN" in cell(driver, victim.plane, victim.sat).text

            # a rotation step: the overhead marker moves one column west, and a rotating store's MIGRATEs show
            with RotatingBlockStore(m, strategy="rotation-hop", n_servers=9) as rotating:
                rotating.put_block(os.urandom(32), os.urandom(60_000))
                marker = driver.find_element("id", "overhead-marker")
                before = (int(marker.get_attribute("data-plane")), int(marker.get_attribute("data-sat")))
                wait_for(driver, lambda d: d.find_element("id", "overhead-marker").get_attribute("data-sat")
                         != str(before[1]), "the overhead marker moved")
                marker = driver.find_element("id", "overhead-marker")
                after = (int(marker.get_attribute("data-plane")), int(marker.get_attribute("data-sat")))
                assert after == (before[0], (before[1] - 1) % SATS)
                wait_for(driver, lambda d: "chunks migrated in" in d.find_element("id", "feed").text,
                         "MIGRATE activity in the feed")

            shot = tmp_path / "dashboard.png"
            driver.save_screenshot(str(shot))
            assert shot.stat().st_size > 10_000
    finally:
        stop_dashboard(proc)


def stop_dashboard(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        assert proc.wait(timeout=30) == 0
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def header(driver) -> tuple[str, str]:
    el = driver.find_element("id", "connection")
    return el.get_attribute("data-state"), el.text


def test_header_follows_a_cfs_constellation_to_its_stop_and_shades_its_line_of_sight(node_path, browser_paths,
                                                                                       tmp_path):
    # a cFS manifest without cFS: native nodes answer the same STATS the dashboard polls, and the manifest
    # says `runtime: cfs` as `--runtime cfs` writes it, for five satellites in one plane (docs/CFS.md's five)
    native = launch(tmp_path / "native", 1, 5)
    try:
        m = Manifest.load(native)
        m.runtime = "cfs"
        cfs = m.save(tmp_path / "cfs" / "manifest.json")
        c = m.constellation()
        proc, url = start_dashboard(cfs, tmp_path / "events.jsonl", "--servers", "3")
        try:
            with headless_chromium() as driver:
                driver.get(url)
                wait_for(driver, lambda d: len(d.find_elements("css selector", '.cell[data-state="up"]')) == 5,
                         "every satellite up")
                wait_for(driver, lambda d: header(d) == ("live", "live"), "the header says live")
                assert driver.find_element("id", "constellation").text.startswith("1 x 5 cfs")
                # a 3-server box needs 2 planes: the 3 nearest satellites are shaded, and the header says why
                shaded = {(int(e.get_attribute("data-plane")), int(e.get_attribute("data-sat")))
                          for e in driver.find_elements("css selector", ".cell.los")}
                assert shaded == set(c.nearest(3))  # the overhead satellite and its two neighbours
                assert "the 3 nearest satellites" in driver.find_element("id", "step").text
                with ConstellationBlockStore.from_manifest(m, c.nearest(3)) as store:
                    store.put_block(os.urandom(32), os.urandom(50_000))
                wait_for(driver, lambda d: "9 chunks" in d.find_element("id", "totals").text, "the chunks counted")

                # the README's screenshot tool, on this page (as root it passes --no-sandbox)
                shot = tmp_path / "shot.png"
                r = subprocess.run([sys.executable, str(REPO / "tools" / "dashboard_screenshot.py"), "--url", url,
                                    "-o", str(shot), "--timeout", str(WAIT_S)], capture_output=True, text=True,
                                   timeout=3 * WAIT_S)
                assert r.returncode == 0 and shot.stat().st_size > 10_000, r.stderr

                r = stop(native)  # the satellites are gone; the cFS manifest is still there
                assert r.returncode == 0, r.stderr
                wait_for(driver, lambda d: header(d)[0] == "silent", "the header says no satellite answers")
                assert header(driver)[1] == "no satellite answering"
                assert "last seen 9 chunks" in driver.find_element("id", "totals").text
                assert "0 up" in driver.find_element("id", "totals").text
                cfs.unlink()  # what `stop` does last: the manifest goes
                wait_for(driver, lambda d: header(d)[0] == "stopped", "the header says stopped")
                state, text = header(driver)
                assert text.startswith("stopped:") and "good" not in driver.find_element(
                    "id", "connection").get_attribute("class")
                driver.save_screenshot(str(tmp_path / "stopped.png"))
        finally:
            stop_dashboard(proc)
    finally:
        if native.exists():
            stop(native)
