#!/usr/bin/env python3
"""A screenshot of a running dashboard, taken by headless Chromium once the run has shown enough.

docs/dashboard.png is made this way, during the 19x5 demo (two terminals, or `&`):

    SKYMEM_NODE=$PWD/build/skymem_node .venv/bin/python -m skymemory demo --dashboard --dashboard-port 8050 &
    .venv/bin/python tools/dashboard_screenshot.py --url http://127.0.0.1:8050/ --measurements 24 -o docs/dashboard.png

It opens the page, waits (at most --timeout seconds) until the constellation
is all up and the benchmark, still running, has written at least
--measurements measurements, then until the page itself has drawn a snapshot
taken after that (the first data reach the page some time after it loads: a
screenshot taken at load is empty), selects the newest block of the ground
index if there is one, and saves the page as a PNG; it fails if the run ended
meanwhile. Headless Chromium comes from skymemory.dashboard.browser (as root
too: it passes --no-sandbox).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
import urllib.request
from pathlib import Path

from selenium.common.exceptions import WebDriverException

from skymemory.dashboard.browser import headless_chromium

PAGE_WAIT_S = 30.0  # for the page to draw a snapshot once the server has one worth showing


def snapshot(url: str) -> dict:
    with urllib.request.urlopen(url + "api/snapshot", timeout=10) as r:
        return json.load(r)


def ready(snap: dict, measurements: int) -> bool:
    """The constellation all up and, when measurements are asked for, the benchmark still running with that many."""
    fleet, bench = snap.get("fleet"), snap.get("bench")
    all_up = bool(fleet) and all(c["state"] == "up" for c in fleet["cells"])
    running = bench is None or measurements == 0 or (bench["state"] == "running"
                                                     and len(bench["measurements"]) >= measurements)
    return all_up and running


def snapshots_drawn(driver) -> int:
    """How many snapshots the page has drawn (dashboard.js counts them in body[data-snapshots])."""
    return int(driver.execute_script("return document.body.dataset.snapshots || 0"))


def wait_until_drawn(driver, after: int, deadline: float) -> bool:
    """Wait until the page has drawn more than `after` snapshots; False at the deadline."""
    while snapshots_drawn(driver) <= after:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8050/")
    ap.add_argument("-o", "--output", type=Path, default=Path("docs/dashboard.png"))
    ap.add_argument("--measurements", type=int, default=0,
                    help="wait for a running benchmark to have this many measurements (default 0: for no benchmark)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="give up after this many seconds (default 1800)")
    ap.add_argument("--size", default="1500x1080", help="window size (default 1500x1080)")
    args = ap.parse_args()
    url = args.url if args.url.endswith("/") else args.url + "/"
    width, height = (int(v) for v in args.size.split("x"))
    deadline = time.monotonic() + args.timeout
    while True:  # the page must be there before the browser opens it
        try:
            snapshot(url)
            break
        except OSError:
            if time.monotonic() > deadline:
                print(f"dashboard_screenshot: nothing listens at {url}", file=sys.stderr)
                return 1
            time.sleep(1.0)
    with contextlib.ExitStack() as browser:
        try:
            driver = browser.enter_context(headless_chromium(width, height))
        except (OSError, WebDriverException) as exc:  # not installed, or it would not start: one line
            print(f"dashboard_screenshot: cannot start headless Chromium: {str(exc).strip().splitlines()[0]}",
                  file=sys.stderr)
            return 1
        driver.get(url)  # open already, so the picture is taken the moment the run is far enough
        while not ready(snapshot(url), args.measurements):
            if time.monotonic() > deadline:
                print(f"dashboard_screenshot: {url} did not show enough within {args.timeout:.0f} s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        # the page draws what the server pushes: wait for a picture at least as new as the one found ready
        if not wait_until_drawn(driver, snapshots_drawn(driver), min(deadline, time.monotonic() + PAGE_WAIT_S)):
            print(f"dashboard_screenshot: the page at {url} drew no snapshot within {PAGE_WAIT_S:.0f} s of the "
                  "server having one (its WebSocket /ws did not deliver)", file=sys.stderr)
            return 1
        blocks = driver.find_elements("css selector", "#blocks li")
        if blocks:
            blocks[0].click()
            time.sleep(2.0)  # the holders' PROBE answers
        wait_until_drawn(driver, snapshots_drawn(driver), time.monotonic() + PAGE_WAIT_S)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.output))
    if not ready(snapshot(url), args.measurements):
        print(f"dashboard_screenshot: the run ended around the screenshot; {args.output} may show the teardown "
              "(try a lower --measurements)", file=sys.stderr)
        return 1
    print(f"saved {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
