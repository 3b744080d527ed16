"""Link and node faults (a fast subset of `skymemory bench faults`): under loss,
duplication, reordering, corruption and satellites killed mid-operation, every
operation completes (acknowledged, failed, exact or missed) and no get ever
returns wrong bytes. No timing thresholds: "completes" means the workload
returns and no operation hit its (generous) bound."""

from __future__ import annotations

import pytest

from skymemory.bench.faults import run_matrix


@pytest.mark.parametrize("cell,authenticated", [("mixed", True), ("mixed", False), ("loss10", True), ("kill", True)])
def test_no_wrong_result_and_every_operation_completes(node_built, cell, authenticated):
    blocks, chunks = 9, 3
    (tally, _secs), = run_matrix([cell], planes=2, sats=3, blocks=blocks, chunks=chunks, size=2048,
                                 authenticated=authenticated).values()
    c = tally.counts
    assert tally.wrong == 0, tally.wrong_examples
    assert c["hung"] == 0
    # every operation of the workload was accounted for exactly once
    sets = blocks * chunks
    migrations, evictions = len(range(0, blocks, 3)), len(range(1, blocks, 3))
    extra_gets = sum(chunks for b in range(blocks) if b % 3 == 2) if cell == "kill" else 0
    assert c["set_acked"] + c["set_failed"] == sets
    assert c["migrate_acked"] + c["migrate_failed"] == migrations
    assert c["evict_acked"] + c["evict_failed"] == evictions
    assert c["get_exact"] + c["get_miss"] == 2 * sets + extra_gets
    # the faults do not make everything fail: most data comes back exactly
    assert c["get_exact"] > 0
