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
index if there is one, and saves the page as a PNG. While it waits it says
what for, every PROGRESS_S seconds; it gives up at once, saying why, when the
run ends first (the benchmark done, the constellation stopped, the dashboard
gone for GONE_S seconds), and when nothing answers at --url within
LISTEN_WAIT_S. Headless Chromium comes from skymemory.dashboard.browser (as
root too: it passes --no-sandbox).
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
LISTEN_WAIT_S = 120.0  # for the dashboard to answer at all (the demo serves it before it boots anything)
GONE_S = 30.0  # a dashboard that has not answered for this long has ended (with its run)
PROGRESS_S = 15.0  # how often a wait says what it is waiting for


def snapshot(url: str) -> dict:
    with urllib.request.urlopen(url + "api/snapshot", timeout=10) as r:
        return json.load(r)


def ready(snap: dict, measurements: int) -> bool:
    """The constellation all up and, when measurements are asked for, the benchmark still running with that many."""
    return waiting_for(snap, measurements) == (None, None)


def waiting_for(snap: dict, measurements: int) -> tuple[str | None, str | None]:
    """(what the picture still lacks, None when ready; why it can no longer come, None while it can)."""
    fleet, bench, status = snap.get("fleet"), snap.get("bench"), snap.get("status") or {}
    if status.get("state") == "stopped":
        return "a live constellation", f"the constellation has stopped ({status.get('text')})"
    wanted = bench is not None and measurements > 0
    if wanted and bench["state"] == "done":
        return (f"{measurements} measurements of a running benchmark",
                f"the benchmark finished with {len(bench['measurements'])} measurements shown (try a lower "
                "--measurements, or start the screenshot with the run)")
    missing = []
    if not fleet:
        missing.append("a constellation (none attached yet)")
    else:
        up = sum(1 for c in fleet["cells"] if c["state"] == "up")
        if up < len(fleet["cells"]):
            missing.append(f"every satellite up ({up} of {len(fleet['cells'])})")
    if wanted and bench["state"] != "running":
        missing.append("the benchmark to start")
    elif wanted and len(bench["measurements"]) < measurements:
        missing.append(f"{measurements} measurements ({len(bench['measurements'])} so far)")
    return ("; ".join(missing) or None), None


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


def wait_ready(url: str, measurements: int, deadline: float, timeout: float) -> str | None:
    """Poll the server until its snapshot is ready; why not, when the run ended, the server went away or
    the deadline passed. Says what it waits for, then again every PROGRESS_S seconds."""
    said, last_answer = float("-inf"), time.monotonic()
    missing = "the dashboard's first snapshot"
    while True:
        now = time.monotonic()
        try:
            missing, over = waiting_for(snapshot(url), measurements)
            last_answer = now
        except OSError as exc:
            if now - last_answer > GONE_S:
                return f"the dashboard at {url} has not answered for {GONE_S:.0f} s ({exc}): the run has ended"
            over = None
        if over:
            return over
        if missing is None:
            return None
        if now > deadline:
            return f"still waiting for {missing} after --timeout {timeout:.0f} s"
        if now - said >= PROGRESS_S:
            print(f"dashboard_screenshot: waiting for {missing}", file=sys.stderr, flush=True)
            said = now
        time.sleep(0.2)


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
    listen_deadline = min(deadline, time.monotonic() + LISTEN_WAIT_S)
    print(f"dashboard_screenshot: waiting for the dashboard at {url}", file=sys.stderr, flush=True)
    while True:  # the page must be there before the browser opens it
        try:
            snap = snapshot(url)
            break
        except OSError as exc:
            if time.monotonic() > listen_deadline:
                print(f"dashboard_screenshot: nothing answers at {url} after {LISTEN_WAIT_S:.0f} s ({exc}); start "
                      "`skymemory demo --dashboard` (or `skymemory dashboard`) first", file=sys.stderr)
                return 1
            time.sleep(1.0)
    _, over = waiting_for(snap, args.measurements)
    if over:  # before a browser starts: a run that has ended never shows what was asked
        print(f"dashboard_screenshot: {over}; no screenshot", file=sys.stderr)
        return 1
    with contextlib.ExitStack() as browser:
        try:
            driver = browser.enter_context(headless_chromium(width, height))
        except (OSError, WebDriverException) as exc:  # not installed, or it would not start: one line
            print(f"dashboard_screenshot: cannot start headless Chromium: {str(exc).strip().splitlines()[0]}",
                  file=sys.stderr)
            return 1
        driver.get(url)  # open already, so the picture is taken the moment the run is far enough
        why = wait_ready(url, args.measurements, deadline, args.timeout)
        if why:
            print(f"dashboard_screenshot: {why}; no screenshot", file=sys.stderr)
            return 1
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
    try:
        still = ready(snapshot(url), args.measurements)
    except OSError:  # the dashboard has gone with its run
        still = False
    if not still:
        print(f"dashboard_screenshot: the run ended around the screenshot; {args.output} may show the teardown "
              "(try a lower --measurements)", file=sys.stderr)
        return 1
    print(f"saved {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
