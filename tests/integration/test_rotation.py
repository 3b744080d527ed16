"""A launched 19x5 constellation turns a full orbital period (5 rotation steps) in about
half a minute while blocks are stored, read and added; the migration driver keeps them
in the LOS box.  At the end every block reads back byte-exact, no get took more ISL
hops than the layout bound, and the MIGRATE messages / bytes of every step are counted.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from skymemory.cli.rotate import format_report, run_rotation
from skymemory.orbit import placement
from skymemory.orbit.manifest import Manifest

from live import REPO, launched, time_scale_for

PLANES, SATS = 19, 5
STEP_WALL_S = 5.0  # wall seconds per rotation step: a full period (5 steps) in 25 s
LAYOUTS = [("rotation-hop", 9), ("rotation", 16)]


@pytest.fixture(scope="module")
def turning(node_path, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rotation")
    with launched(tmp, PLANES, SATS, "--time-scale", repr(time_scale_for(STEP_WALL_S, SATS))) as manifest:
        yield manifest


def test_full_period_keeps_every_block_within_reach(turning):
    m = Manifest.load(turning)
    c = m.constellation()
    assert c.step_ms / 1000 / c.time_scale == pytest.approx(STEP_WALL_S, rel=1e-6)
    report = asyncio.run(run_rotation(m, SATS * STEP_WALL_S + 0.5, blocks=10, block_bytes=60_000,
                                      layouts=LAYOUTS, put_interval_s=1.0, readers=2))
    print(format_report(report, m))
    assert report.steps_passed >= SATS  # a full orbital period
    # every block, stored before or during the rotation, read back byte-exact at the end
    assert report.lost == []
    assert report.blocks_verified == report.blocks_stored == 10 + report.puts_during
    assert report.puts_during > 0 and report.put_failures == 0
    # gets kept working while the constellation turned, and returned the right bytes
    assert report.gets_during > 0
    assert report.get_misses_during == 0 and report.get_mismatches == 0
    # no get needed more hops than the layout bound; the corners of the box reach it
    for strategy, n in LAYOUTS:
        assert report.max_hops[f"{strategy}:{n}"] == placement.max_hops(strategy, n)
    assert report.hop_violations == []
    # MIGRATE traffic: every step moved something, and the satellites agree on the chunk count
    rows = [line.split() for line in report.table.splitlines()[1:-1]]
    assert len(rows) >= SATS
    for row in rows:
        step, blocks, messages, ops, replans, chunks, n_bytes = row[:7]
        assert int(messages) >= int(ops) > 0 and int(chunks) > 0 and int(n_bytes) > 0, row
    assert report.migrated_in_satellites == report.driver_totals["chunks"] > 0
    assert report.driver_totals["broken"] == 0


def test_rotate_cli_validates_arguments(turning):
    env = {**os.environ, "PYTHONPATH": str(REPO / "ground")}
    for bad in (["--duration", "0"], ["--duration", "5", "--layout", "spiral:9"],
                ["--duration", "5", "--blocks", "0"], ["--duration", "5", "--layout", "rotation-hop:x"]):
        r = subprocess.run([sys.executable, "-m", "skymemory", "rotate", "--manifest", str(turning), *bad],
                           capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == 2 and "error" in r.stderr, (bad, r.stderr)
    # a layout that does not fit the 19x5 grid (a 7x7 box needs 7 sats per plane)
    r = subprocess.run([sys.executable, "-m", "skymemory", "rotate", "--manifest", str(turning), "--duration", "1",
                        "--layout", "rotation-hop:49"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 1 and "needs" in r.stderr, r.stderr
