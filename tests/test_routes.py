"""Routes (issue 14): direct, relay and auto, one option everywhere, turned into the right `via`.

No satellites are needed: a route is decided from the manifest alone, and the block store builds
its clients without sending anything.
"""

from __future__ import annotations

import pytest

from skymemory.cli import main
from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.store.constellation import ConstellationBlockStore
from skymemory.store.objects import ObjectStore
from skymemory.store.routes import DEFAULT_ROUTE, ROUTES, check_route, uplinks, via_for_route


def _manifest(linked=None, bandwidth_mbps: float = 0.0) -> Manifest:
    """A 3x3 manifest; `linked`: the satellites with a ground port (default: all)."""
    sats = [SatelliteEntry(p, s, "127.0.0.1", 20000 + p * 3 + s,
                           40000 + p * 3 + s if linked is None or (p, s) in linked else 0)
            for p in range(3) for s in range(3)]
    return Manifest(planes=3, sats=3, satellites=sats, link={"bandwidth_mbps": bandwidth_mbps})


def test_the_routes_and_the_default():
    assert ROUTES == ("direct", "relay", "auto") and DEFAULT_ROUTE == "auto"
    for r in ROUTES:
        assert check_route(r) == r
    with pytest.raises(ValueError, match="route must be one of direct, relay, auto"):
        check_route("sideways")


def test_via_for_each_route():
    m = _manifest()
    overhead = m.constellation().overhead()
    assert via_for_route("direct", m) is None
    assert via_for_route("relay", m)((2, 2)) == overhead
    assert via_for_route("auto", m) is None  # every satellite has its own ground link
    part = _manifest(linked={(0, 0), (1, 1)})
    auto = via_for_route("auto", part)
    assert auto((1, 1)) == (1, 1) and auto((2, 2)) == part.constellation().overhead()


def test_uplinks_count_the_ground_links_a_transfer_uses():
    m = _manifest()
    servers = [(0, 0), (1, 1), (2, 2)]
    assert uplinks("direct", m, servers) == set(servers)
    assert uplinks("relay", m, servers) == {m.constellation().overhead()}


def test_from_manifest_picks_the_via_of_the_route():
    m = _manifest()
    overhead = m.constellation().overhead()
    for route, want in (("direct", (2, 2)), ("relay", overhead), ("auto", (2, 2)), (None, (2, 2))):
        with ConstellationBlockStore.from_manifest(m, [(2, 2)], route=route, seal=False) as store:  # (no keys)
            assert store.fast._via((2, 2)) == want, route  # the C fast path
            assert store.client._pick_via((2, 2), None) == want, route  # the Python client (probe, evict)
    with pytest.raises(ValueError, match="route= or via="):
        ConstellationBlockStore.from_manifest(m, [(2, 2)], route="relay", via=None)


def test_kvstore_paces_to_the_links_it_uses():
    m = _manifest(bandwidth_mbps=8)
    servers = [(0, 0), (1, 1), (2, 2)]
    one_link = 0.9 * 8e6 / 8
    assert ObjectStore(m, 3, route="relay").pace_Bps(servers) == pytest.approx(one_link)
    assert ObjectStore(m, 3, route="direct").pace_Bps(servers) == pytest.approx(3 * one_link)
    assert ObjectStore(m, 3, route="direct", pace_mbps=0).pace_Bps(servers) == 0  # asked unpaced
    assert ObjectStore(_manifest(), 3).pace_Bps(servers) == 0  # no emulated bandwidth: unpaced
    with pytest.raises(ValueError, match="route must be one of"):
        ObjectStore(m, 3, route="up")


@pytest.mark.parametrize("argv", [
    ["put", "x", "--route", "sideways"],
    ["get", "x", "--route", ""],
    ["put", "x", "--direct"],  # replaced by --route direct
    ["put", "x", "--pace-mbps", "-1"],
    ["demo", "--route", "relay,direct"],
    ["status", "--route", "overhead"],
    ["status", "--via-overhead", "--route", "direct"],  # the deprecated alias and the option: not both
])
def test_a_bad_route_is_one_line_and_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    lines = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(lines) == 1 and "Traceback" not in lines[0], lines
