"""`skymemory dashboard`: a live web view of the constellation, its chunks, migrations and the KV cache.

Modules, one idea each:

* `poller`       asks every satellite for STATS a few times a second, decodes the replies with ccsdspy
* `fleet`        per-satellite state from those samples: up or down, memory, rates, MIGRATE and eviction activity
* `sky`          overhead satellite, line-of-sight box, next rotation step and the column it moves
* `blocks`       the ground KV index file, where a block's chunks are now, the +GRID route of a get
* `bench_events` follows a running `bench ttft` / `demo` event file (the TTFT panel, hits and misses)
* `server`       the aiohttp server (127.0.0.1 only) that wires them and pushes snapshots over a WebSocket
* `browser`      headless Chromium through Selenium, for the browser test and the docs screenshot
* `alongside`    the dashboard as a child process beside a running command (`skymemory demo --dashboard`)
* `static/`      the page: plain HTML, CSS and JavaScript
"""

from .server import Dashboard

__all__ = ["Dashboard"]
