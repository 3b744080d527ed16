"""Rotation over lossy links: 1 % loss, 1 % duplication, 2 % reordering on every link.

Requests, replies and the satellites' migration SET_CHUNKs get lost or doubled;
the client retries, the satellites resend unacknowledged chunks, and the driver
re-plans whatever still fails.  Every block must still read back byte-exact.
"""

from __future__ import annotations

import asyncio

import pytest

from skymemory.cli.rotate import format_report, run_rotation
from skymemory.orbit.manifest import Manifest

from live import launched, time_scale_for

PLANES, SATS = 5, 5
STEP_WALL_S = 3.0
STEPS = 3


@pytest.fixture(scope="module")
def lossy(node_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rotation-lossy")
    with launched(tmp, PLANES, SATS, "--time-scale", repr(time_scale_for(STEP_WALL_S, SATS)), "--loss", "0.01",
                  "--dup", "0.01", "--reorder", "0.02", "--seed", "7") as manifest:
        yield manifest


def test_rotation_over_lossy_links_loses_nothing(lossy):
    m = Manifest.load(lossy)
    report = asyncio.run(run_rotation(m, STEPS * STEP_WALL_S + 0.5, blocks=6, block_bytes=60_000,
                                      layouts=[("rotation-hop", 9)], put_interval_s=1.0, readers=1))
    print(format_report(report, m))
    assert report.steps_passed >= STEPS
    assert report.lost == [] and report.blocks_verified == report.blocks_stored == 6 + report.puts_during
    assert report.get_mismatches == 0 and report.hop_violations == []
    assert report.driver_totals["chunks"] > 0 and report.driver_totals["broken"] == 0
    # duplicated or resent migration SET_CHUNKs are counted again by the target
    assert report.migrated_in_satellites >= report.driver_totals["chunks"]
