#!/usr/bin/env python3
"""A screenshot of a running dashboard, taken by headless Chromium once the run has shown enough.

docs/dashboard.png is made this way, during the 19x5 demo (two terminals, or `&`):

    SKYMEM_NODE=$PWD/build/skymem_node .venv/bin/python -m skymemory demo --dashboard --dashboard-port 8050 &
    .venv/bin/python tools/dashboard_screenshot.py --url http://127.0.0.1:8050/ --measurements 24 -o docs/dashboard.png

It opens the page, waits (at most --timeout seconds) until the constellation
is all up and the benchmark, still running, has written at least
--measurements measurements, selects the newest block of the ground index if
there is one, and saves the page as a PNG; it fails if the run ended meanwhile.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request
from pathlib import Path

from skymemory.dashboard.browser import headless_chromium


def snapshot(url: str) -> dict:
    with urllib.request.urlopen(url + "api/snapshot", timeout=10) as r:
        return json.load(r)


def ready(snap: dict, measurements: int) -> bool:
    """The constellation all up and, when a benchmark is followed, still running with enough measurements."""
    fleet, bench = snap.get("fleet"), snap.get("bench")
    all_up = bool(fleet) and all(c["state"] == "up" for c in fleet["cells"])
    running = bench is None or (bench["state"] == "running" and len(bench["measurements"]) >= measurements)
    return all_up and running


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8050/")
    ap.add_argument("-o", "--output", type=Path, default=Path("docs/dashboard.png"))
    ap.add_argument("--measurements", type=int, default=0, help="wait for this many benchmark measurements")
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
    with headless_chromium(width, height) as driver:
        driver.get(url)  # open already, so the picture is taken the moment the run is far enough
        while not ready(snapshot(url), args.measurements):
            if time.monotonic() > deadline:
                print(f"dashboard_screenshot: {url} did not show enough within {args.timeout:.0f} s", file=sys.stderr)
                return 1
            time.sleep(0.2)
        blocks = driver.find_elements("css selector", "#blocks li")
        if blocks:
            blocks[0].click()
            time.sleep(2.0)  # the holders' PROBE answers
        time.sleep(0.5)  # two pushes: the page has what the server had
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
