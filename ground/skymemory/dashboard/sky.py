"""Where the sky is now: the overhead satellite, the line-of-sight box, the next rotation step and the column it moves.

Pure functions of the constellation model (skymemory.orbit.constellation) and the
placement rules (skymemory.orbit.placement), so the page shows exactly what the
ground library computes. The LOS box is the layout box of `n_servers`
servers of a strategy around the overhead satellite: `w = ceil(sqrt(n))`
columns, and the rows its offsets use. At the next step boundary the overhead
satellite moves one column west, and a migrating layout moves the chunks of
the box's east column `w` columns west, to the column that enters the box
(paper Figure 8): `leaving` and `entering` below.

`los` lists the satellites the page shades as in line of sight: the box's,
or, on a grid the box does not fit (a 1x5 constellation and a 3x3 box),
the `n_servers` nearest the ground host, which is where a store that names
its servers (`skymemory put`, ConstellationBlockStore) puts a block there;
`los_note` then says why it is not a box.
"""

from __future__ import annotations

import time

from skymemory.orbit import placement
from skymemory.orbit.constellation import Constellation


def los_box(strategy: str, n_servers: int, planes: int, sats: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """((first east offset, last), (first south offset, last)) of the box, or None when it does not fit the grid."""
    try:
        placement.check_fits(strategy, n_servers, planes, sats)
    except ValueError:
        return None
    offsets = placement.offsets(strategy, n_servers)
    ys = [y for _, y in offsets]
    if strategy in placement.MIGRATING_STRATEGIES:
        columns = placement.box_columns(n_servers)
    else:
        xs = [x for x, _ in offsets]
        columns = (min(xs), max(xs))
    return columns, (min(ys), max(ys))


def sky_view(c: Constellation, strategy: str, n_servers: int, unix_s: float | None = None) -> dict:
    """Everything the page draws about the turning sky, at a Unix time (default now)."""
    unix_ms = (time.time() if unix_s is None else unix_s) * 1000.0
    mission_ms = c.mission_ms(unix_ms)
    plane, sat = c.overhead(mission_ms)
    view = {
        "mission_ms": mission_ms,
        "step": c.step_index(mission_ms),
        "step_s": c.step_ms / 1000.0 / c.time_scale,  # wall seconds per rotation step
        "next_step_in_s": (c.next_step_ms(mission_ms) - mission_ms) / 1000.0 / c.time_scale,
        "overhead": [plane, sat],
        "strategy": strategy,
        "servers": n_servers,
        "box": None,
        "los": [],
        "los_note": None,
        "leaving": None,
        "entering": None,
    }
    try:
        placement.check_fits(strategy, n_servers, c.planes, c.sats)
    except ValueError as exc:  # no box on this grid: the nearest satellites, and what the box would need
        view["los_note"] = str(exc)
        view["los"] = [list(s) for s in c.nearest(min(n_servers, c.planes * c.sats), mission_ms)]
        return view
    (x0, x1), (y0, y1) = los_box(strategy, n_servers, c.planes, c.sats)
    rows = sorted({(plane + y) % c.planes for y in range(y0, y1 + 1)})
    view["box"] = {"planes": rows, "sats": sorted({(sat + x) % c.sats for x in range(x0, x1 + 1)})}
    view["los"] = [[p, s] for p in rows for s in view["box"]["sats"]]
    if strategy in placement.MIGRATING_STRATEGIES and x1 - x0 + 1 < c.sats:
        view["leaving"] = {"sat": (sat + x1) % c.sats, "planes": rows}
        view["entering"] = {"sat": (sat - 1 + x0) % c.sats, "planes": rows}
    return view
