"""skymemory.orbit.geometry (Python) and skymem_geometry.c (what the satellites use) compute the same numbers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skymemory.orbit import geometry
from skymemory.protocol import native

pytestmark = pytest.mark.skipif(not native.AVAILABLE or not hasattr(native.lib, "skymem_orbital_period_s"),
                                reason="skymemory._native (with geometry) not built")
lib = native.lib

alt = st.floats(160e3, 2000e3)
size = st.integers(1, 100)


@settings(max_examples=200, deadline=None)
@given(h=alt, planes=size, sats=size, incl=st.floats(0, math.pi), t=st.floats(0, 1e6), phase=st.integers(0, 50),
       x=st.integers(-40, 40), y=st.integers(-40, 40))
def test_python_and_c_geometry_agree(h, planes, sats, incl, t, phase, x, y):
    close = lambda a, b: math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)  # noqa: E731
    assert close(lib.skymem_orbital_period_s(h), geometry.orbital_period_s(h))
    d_m = geometry.intra_plane_distance_m(h, sats)
    assert close(lib.skymem_intra_plane_distance_m(h, sats), d_m)
    assert close(lib.skymem_inter_plane_distance_max_m(h, planes), geometry.inter_plane_distance_max_m(h, planes))
    d_n = geometry.inter_plane_distance_m(h, planes, sats, incl, t, phase)
    assert close(lib.skymem_inter_plane_distance_m(h, planes, sats, incl, t, phase), d_n)
    assert close(lib.skymem_grid_distance_m(d_m, d_n, x, y), geometry.grid_distance_m(d_m, d_n, x, y))
    assert close(lib.skymem_slant_range_m(d_m, h), geometry.slant_range_m(d_m, h))
    assert close(lib.skymem_light_time_s(d_n), geometry.light_time_s(d_n))
