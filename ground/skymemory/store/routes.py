"""How the ground reaches a satellite: the three routes of a block or object transfer.

- `direct`: every request goes up the destination's own ground link (the paper's ideal,
  where every line-of-sight satellite can be reached);
- `relay`: every request goes up the ground link of the satellite overhead the ground
  station, then over the +GRID ISLs (the path a ground host with one antenna has);
- `auto`: direct to every satellite the manifest gives a ground link, relay for the rest.
  This is what a real ground station has, and the default.

Every satellite the launcher starts has a ground port, and the manifest schema requires one, so on
a launched constellation `auto` is `direct`. Which satellites a real station can reach changes as the
constellation turns (line of sight, not a fixed list), so the launcher has no option to leave some
without a ground link; `auto` is for manifests that describe hardware where only some nodes have one.

`via_for_route` turns a route into the `via` that `SkyMemoryClient` and the C fast path take
(None: straight to the destination's ground port; a callable dst -> the satellite to go up through).
"""

from __future__ import annotations

from typing import Callable

from skymemory.orbit.manifest import Manifest

Sat = tuple[int, int]
ROUTES = ("direct", "relay", "auto")
DEFAULT_ROUTE = "auto"


def check_route(route: str) -> str:
    if route not in ROUTES:
        raise ValueError(f"route must be one of {', '.join(ROUTES)}, got {route!r}")
    return route


def via_for_route(route: str, manifest: Manifest) -> Callable[[Sat], Sat] | None:
    """The `via` for `route` on the constellation `manifest` describes."""
    check_route(route)
    if route == "direct":
        return None
    overhead = manifest.constellation().overhead
    if route == "relay":
        return lambda _dst: overhead()
    linked = manifest.ground_linked()
    if len(linked) == manifest.planes * manifest.sats:
        return None  # every satellite has its own ground link: auto is direct
    return lambda dst: tuple(dst) if tuple(dst) in linked else overhead()


def uplinks(route: str, manifest: Manifest, servers) -> set[Sat]:
    """The satellites whose ground links a transfer with `servers` goes up and down through: one (the
    overhead) for relay, each server with a ground link of its own for direct and auto."""
    via = via_for_route(route, manifest)
    return {tuple(s) if via is None else tuple(via(tuple(s))) for s in servers}


def add_route_arg(parser, what: str = "requests") -> None:
    """The one --route option of every command that moves data (a bad value: argparse's one-line error, exit 2)."""
    parser.add_argument("--route", choices=ROUTES, default=DEFAULT_ROUTE,
                        help=f"how {what} reach the satellites: direct (each satellite's own ground link), relay "
                             "(up through the overhead satellite, then ISL), auto (direct where the manifest gives "
                             f"a satellite a ground link, relay for the rest; default {DEFAULT_ROUTE})")
