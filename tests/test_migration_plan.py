"""The ground migration planner: Figure 8, byte counts, and agreement with locating."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skymemory.orbit import migration, placement


@dataclass(frozen=True)
class Record:  # the fields of skymemory.store.BlockRecord the planner reads
    block_hash: bytes
    n_bytes: int
    chunk_bytes: int
    chunk_count: int
    created_ms: int
    strategy: str
    n_servers: int
    centre: tuple[int, int]
    parity: int = 0


ROT = placement.Rotation(planes=7, sats=9, step_ms=1000)


def fig7_block(**changes) -> Record:
    fields = dict(block_hash=b"\x11" * 32, n_bytes=1650, chunk_bytes=100, chunk_count=17, created_ms=500,
                  strategy="rotation-hop", n_servers=9, centre=(3, 4))
    fields.update(changes)
    return Record(**fields)


def test_figure_8_plan():
    ops = migration.plan_transition([fig7_block()], step=0, rotation=ROT)
    assert [(op.server, op.source, op.target) for op in ops] == [
        (6, (2, 5), (2, 2)), (3, (3, 5), (3, 2)), (8, (4, 5), (4, 2))]
    by_server = {op.server: op for op in ops}
    assert (by_server[6].first, by_server[6].count, by_server[6].stride) == (5, 2, 9)  # chunks 5, 14
    assert (by_server[3].first, by_server[3].count, by_server[3].stride) == (2, 2, 9)  # chunks 2, 11
    assert by_server[8].chunk_ids() == [7, 16]  # 16 is the last chunk: 50 bytes
    assert [by_server[s].n_bytes for s in (6, 3, 8)] == [200, 200, 150]
    assert migration.total_bytes(ops) == 550
    assert all(op.isl_hops == 3 for op in ops)


def test_second_step_moves_the_next_column():
    ops = migration.plan_transition([fig7_block()], step=1, rotation=ROT)
    # after step 1 the overhead is sat 3; east column is sat 4 (servers 2, 1, 4) -> sat 1
    assert [(op.server, op.source, op.target) for op in ops] == [
        (2, (2, 4), (2, 1)), (1, (3, 4), (3, 1)), (4, (4, 4), (4, 1))]


def test_servers_without_chunks_are_skipped():
    block = fig7_block(n_bytes=250, chunk_count=3)  # servers 1..3 only
    ops = migration.plan_transition([block], step=0, rotation=ROT)
    assert [op.server for op in ops] == [3]
    assert ops[0].chunk_ids() == [2] and ops[0].n_bytes == 50


@pytest.mark.parametrize("strategy", ["hop", "baseline"])
def test_static_strategies_never_migrate(strategy):
    assert migration.plan_transition([fig7_block(strategy=strategy)], step=0, rotation=ROT) == []


def test_block_created_later_is_not_planned():
    assert migration.plan_transition([fig7_block(created_ms=1500)], step=0, rotation=ROT) == []


def test_box_spanning_the_plane_never_migrates():
    rot = placement.Rotation(planes=7, sats=3, step_ms=1000)
    assert migration.plan_transition([fig7_block(centre=(3, 1))], step=0, rotation=rot) == []


def test_ops_ordered_by_source_over_blocks():
    a = fig7_block(block_hash=b"\x02" * 32)
    b = fig7_block(block_hash=b"\x01" * 32, centre=(1, 4))
    ops = migration.plan_transition([a, b], step=0, rotation=ROT)
    assert [op.source for op in ops] == sorted(op.source for op in ops)
    assert len(ops) == 6


@pytest.mark.parametrize(
    "changes",
    [dict(n_bytes=1701), dict(n_bytes=1600), dict(chunk_bytes=0), dict(chunk_count=0), dict(strategy="x"),
     dict(n_servers=0)],
)
def test_inconsistent_records_are_rejected(changes):
    with pytest.raises(ValueError):
        migration.plan_transition([fig7_block(**changes)], step=0, rotation=ROT)


def apply(positions: dict[int, tuple[int, int]], ops) -> dict[int, tuple[int, int]]:
    result = dict(positions)
    for op in ops:
        for chunk in op.chunk_ids():
            assert result[chunk] == op.source, "the planner moves chunks from where they are"
            result[chunk] = op.target
    return result


@settings(max_examples=150, deadline=None)
@given(
    strategy=st.sampled_from(sorted(placement.STRATEGIES)),
    n_servers=st.integers(1, 30),
    planes=st.integers(6, 12),
    sats=st.integers(6, 14),
    centre=st.tuples(st.integers(0, 11), st.integers(0, 13)),
    created_ms=st.integers(0, 50_000),
    chunk_count=st.integers(1, 80),
    step_ms=st.integers(1, 5000),
    steps=st.integers(0, 30),
)
def test_plan_turns_step_k_positions_into_step_k_plus_1(strategy, n_servers, planes, sats, centre,
                                                        created_ms, chunk_count, step_ms, steps):
    """Replaying the planned MIGRATEs step by step gives exactly what locate_chunks computes."""
    rotation = placement.Rotation(planes=planes, sats=sats, step_ms=step_ms)
    try:
        placement.check_fits(strategy, n_servers, planes, sats)
    except ValueError:
        return
    block = Record(b"\x00" * 32, chunk_count * 10, 10, chunk_count, created_ms, strategy, n_servers,
                   (centre[0] % planes, centre[1] % sats))
    k0 = placement.rotation_step_index(created_ms, step_ms)
    positions = dict(enumerate(placement.locate_chunks(block, created_ms, rotation)))
    for k in range(k0, k0 + steps):
        positions = apply(positions, migration.plan_transition([block], k, rotation))
        expected = placement.locate_chunks(block, (k + 1) * step_ms, rotation)
        assert [positions[c] for c in range(chunk_count)] == expected


# ---- helpers of the live driver (no network) --------------------------------------------------


def test_previous_step_time_is_the_last_millisecond_of_the_previous_step():
    from skymemory.store.placed import previous_step_time

    rec = fig7_block(created_ms=500)  # created in step 0 (1000 ms steps)
    assert previous_step_time(rec, 2500, 1000) == 1999
    assert placement.rotation_step_index(1999, 1000) == 1
    assert previous_step_time(rec, 1000, 1000) == 999  # just past a boundary
    assert previous_step_time(rec, 800, 1000) is None  # the block did not exist in the step before
    # float step lengths (orbital period / sats) still land inside the previous step
    step = 1147.8
    for now in (2 * step, 2 * step + 0.4, 3 * step - 0.1):
        t = previous_step_time(fig7_block(created_ms=0), int(now), step)
        assert placement.rotation_step_index(t, step) == placement.rotation_step_index(int(now), step) - 1


def test_driver_table_counts_and_totals():
    from skymemory.store.rotation import MigrationDriver, StepStats

    driver = MigrationDriver.__new__(MigrationDriver)  # only the reporting half, no client or clock
    driver.steps = {7: StepStats(7, blocks=2, ops=3, messages=4, chunks=9, bytes=900, replans=1),
                    8: StepStats(8, blocks=2, ops=3, messages=3, chunks=9, bytes=880, last_done_wall_s=0.5)}
    lines = driver.table().splitlines()
    assert lines[1].split() == ["0->1", "2", "4", "3", "1", "9", "900", "0", "0.00"]
    assert lines[2].split() == ["1->2", "2", "3", "3", "0", "9", "880", "0", "0.50"]
    assert lines[3].split() == ["total", "4", "7", "6", "1", "18", "1780", "0", "0.50"]


def test_rotate_cli_without_a_constellation_says_why(tmp_path, capsys):
    from skymemory.cli import main

    assert main(["rotate", "--manifest", str(tmp_path / "none.json"), "--duration", "1"]) == 1
    assert "no manifest" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["rotate", "--duration", "-1"])
    assert e.value.code == 2


def test_candidate_times_cover_now_previous_and_a_lagging_driver():
    from skymemory.store.placed import candidate_times

    rec = fig7_block(created_ms=500)  # step 0, 1000 ms steps
    steps = lambda ts: [placement.rotation_step_index(t, 1000) for t in ts]  # noqa: E731
    assert steps(candidate_times(rec, 700, 1000)) == [0]
    assert steps(candidate_times(rec, 3500, 1000)) == [3, 2]
    # the driver confirmed only step 1: its layout and step 2's are places too
    assert steps(candidate_times(rec, 3500, 1000, lambda h: 1)) == [3, 2, 1]
    assert steps(candidate_times(rec, 5500, 1000, lambda h: 1)) == [5, 4, 1, 2]
    # a driver that is up to date adds nothing; an unknown block adds nothing
    assert steps(candidate_times(rec, 3500, 1000, lambda h: 3)) == [3, 2]
    assert steps(candidate_times(rec, 3500, 1000, lambda h: None)) == [3, 2]
    # times are never before the block existed
    assert min(candidate_times(rec, 5500, 1000, lambda h: 0)) >= 500


def test_a_sealed_block_whose_last_chunk_only_a_seal_explains_is_planned():
    """43,000 bytes sealed in chunks of 6,144 (6,112 of content each) are 8 chunks: more than 7 of 6,144 would
    need, and the planner once refused such a block, so it never migrated."""
    block = fig7_block(n_bytes=43_000, chunk_bytes=6144, chunk_count=8)
    migration.check_block(block)
    assert 0 < migration.chunk_bytes_of(block, 7) <= 6144


def test_a_coded_block_counts_its_parity_chunks():
    coded = fig7_block(n_bytes=40_000, chunk_bytes=6144, chunk_count=9, n_servers=9, parity=2)  # 7 data + 2
    migration.check_block(coded)
    with pytest.raises(ValueError):
        migration.check_block(fig7_block(n_bytes=50_000, chunk_bytes=6144, chunk_count=9, n_servers=9, parity=2))
