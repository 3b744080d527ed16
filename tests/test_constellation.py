"""Constellation model (overhead satellite, LOS window, distances) and the manifest."""

from __future__ import annotations

import pytest

from skymemory.orbit import geometry
from skymemory.orbit.constellation import Constellation
from skymemory.orbit.manifest import Manifest, SatelliteEntry


def make(**kw) -> Constellation:
    kw.setdefault("epoch_ms", 0)
    return Constellation(planes=19, sats=5, overhead_at_epoch=(9, 2), **kw)


def test_overhead_moves_one_column_west_per_step():
    c = make()
    step = c.step_ms
    assert step == pytest.approx(geometry.orbital_period_s(550_000) * 1000 / 5)
    assert c.overhead(0) == (9, 2)
    assert c.overhead(step - 1) == (9, 2)
    assert c.overhead(step) == (9, 1)
    assert c.overhead(2 * step) == (9, 0)
    assert c.overhead(3 * step) == (9, 4)  # wraps
    assert c.overhead(5 * step) == (9, 2)  # one orbit later


def test_mission_clock_scales_wall_time():
    c = Constellation(planes=3, sats=3, epoch_ms=1_000_000, time_scale=60.0)
    assert c.mission_ms(1_000_000) == 1_000_000
    assert c.mission_ms(1_001_000) == 1_060_000


def test_los_window_is_centred_box_with_wrap():
    c = make()
    assert c.los_window(3, 3, 0) == [(8, 1), (8, 2), (8, 3), (9, 1), (9, 2), (9, 3), (10, 1), (10, 2), (10, 3)]
    w = c.los_window(3, 1, 2 * c.step_ms)  # overhead (9, 0): west neighbour wraps to sat 4
    assert w == [(9, 4), (9, 0), (9, 1)]
    with pytest.raises(ValueError):
        c.los_window(6, 1, 0)


def test_nearest_starts_overhead_and_grows_by_distance():
    c = make()
    near = c.nearest(10, 0)
    assert near[0] == (9, 2)
    dists = [c.slant_range_m(s, 0) for s in near]
    assert dists == sorted(dists)
    assert len(set(near)) == 10
    assert c.slant_range_m((9, 2), 0) == pytest.approx(550_000)


def test_latency_adds_ground_link_and_isl_hops():
    c = make()
    direct = c.one_way_latency_s((9, 2), mission_ms=0)
    assert direct == pytest.approx(550_000 / geometry.SPEED_OF_LIGHT_M_S)
    two_hops = c.one_way_latency_s((9, 4), via=(9, 2), mission_ms=0)
    assert two_hops == pytest.approx(direct + 2 * c.d_m() / geometry.SPEED_OF_LIGHT_M_S)


def test_rejects_bad_parameters():
    with pytest.raises(ValueError):
        Constellation(planes=0, sats=5)
    with pytest.raises(ValueError):
        Constellation(planes=3, sats=3, overhead_at_epoch=(3, 0))
    with pytest.raises(ValueError):
        Constellation(planes=3, sats=3, time_scale=0)


def test_manifest_roundtrip(tmp_path):
    sats = [SatelliteEntry(p, s, "127.0.0.1", 20000 + p * 2 + s, 40000 + p * 2 + s, pid=100 + p)
            for p in range(2) for s in range(2)]
    m = Manifest(planes=2, sats=2, epoch_ms=123, time_scale=2.0, ground_overhead=(1, 1), satellites=sats,
                 link={"delay_scale": 1.0})
    path = m.save(tmp_path / "m.json")
    back = Manifest.load(path)
    assert back == m
    assert back.entry(1, 0).ground_port == 40002
    assert back.ground_addresses()[(0, 1)] == ("127.0.0.1", 40001)
    assert back.constellation().overhead(123) == (1, 1)
    with pytest.raises(KeyError):
        back.entry(2, 0)
    (tmp_path / "bad.json").write_text('{"format_version": 1, "planes": 2, "sats": 2, "satellites": []}')
    with pytest.raises(ValueError, match="lists 0 satellites"):
        Manifest.load(tmp_path / "bad.json")


def test_a_block_set_at_one_ground_site_is_located_alike_at_another():
    """Two ground sites see one constellation with other satellites overhead (launcher --sites): the
    placement of a block one set (nearest_when_set) is read from its record's centre, not from the
    reader's own overhead, so the other site asks the satellites that hold it."""
    from skymemory.store.constellation import nearest_when_set
    from skymemory.store.contract import BlockRecord

    prefill_site = Constellation(planes=3, sats=3, epoch_ms=0, overhead_at_epoch=(1, 1))
    decode_site = Constellation(planes=3, sats=3, epoch_ms=0, overhead_at_epoch=(2, 2))
    now = 1000
    stored = prefill_site.nearest(7, now)
    record = BlockRecord(b"\1" * 32, 9000, 1000, 9, now, "explicit", 7, prefill_site.overhead(now), 2)
    assert nearest_when_set(decode_site)(record, now + 5) == stored
    assert decode_site.nearest(7, now) != stored  # what the decode site would have asked before
