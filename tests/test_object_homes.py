"""Where a named object's metadata lives: three home satellites in different planes and, where the
constellation has several hosts, on different hosts (skymemory.store.object_homes)."""

from __future__ import annotations

from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.store.object_homes import home_satellites, host_of
from skymemory.store.objects import key_of


def manifest(planes: int, sats: int, hosts: int = 1) -> Manifest:
    n = planes * sats
    entries = [SatelliteEntry(p, s, f"10.0.0.{1 + (p * sats + s) * hosts // n}", 20000 + p * sats + s,
                              40000 + p * sats + s) for p in range(planes) for s in range(sats)]
    return Manifest(planes=planes, sats=sats, satellites=entries)


def test_three_homes_in_three_planes_on_one_host():
    m = manifest(19, 5)
    for i in range(300):
        homes = home_satellites(key_of(f"object-{i}"), m)
        assert len(homes) == 3 and len({p for p, _ in homes}) == 3
        assert homes == home_satellites(key_of(f"object-{i}"), m)  # a pure function of key and manifest


def test_homes_on_different_hosts_when_there_are_several():
    m = manifest(19, 5, hosts=5)  # five mini PCs, 19 satellites each, in contiguous shares
    by_sat = {(e.plane, e.sat): host_of(e) for e in m.satellites}
    for i in range(300):
        homes = home_satellites(key_of(f"object-{i}"), m)
        assert len({by_sat[h] for h in homes}) == 3 and len({p for p, _ in homes}) == 3


def test_small_constellations_take_what_they_have():
    assert len(set(home_satellites(key_of("x"), manifest(1, 5)))) == 3  # one plane: three satellites of it
    assert sorted(home_satellites(key_of("x"), manifest(1, 2))) == [(0, 0), (0, 1)]
    assert home_satellites(key_of("x"), manifest(1, 1)) == [(0, 0)]
    assert len(home_satellites(key_of("x"), manifest(4, 4), replicas=5)) == 5


def test_keys_spread_over_every_satellite():
    m = manifest(19, 5)
    firsts = {home_satellites(key_of(f"obj{i}"), m)[0] for i in range(2000)}
    assert firsts == {(p, s) for p in range(19) for s in range(5)}
