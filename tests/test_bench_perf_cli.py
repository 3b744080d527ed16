"""`skymemory bench transfer` / `bench streaming`: argument validation (no constellation booted)."""

from __future__ import annotations

import argparse
import json

import pytest

from skymemory.bench import streaming, transfer


def parser():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    transfer.register(sub)
    streaming.register(sub)
    return p


@pytest.mark.parametrize("argv", [
    ["transfer", "--chunk-sizes", "100"],  # below 256
    ["transfer", "--chunk-sizes", "70000"],  # above the 60000-byte maximum
    ["transfer", "--sizes-mb", "0"],
    ["transfer", "--sizes-mb", "x"],
    ["transfer", "--profiles", "moon"],
    ["transfer", "--servers", "0"],
    ["transfer", "--rounds", "0"],
    ["streaming", "--kv", "int4"],
    ["streaming", "--profiles", "none,none"],
    ["streaming", "--prefix-blocks", "-1"],
    ["streaming", "--pace", "fast"],
    ["streaming", "--pace", "0"],
    ["streaming", "--pace", "off,off"],
    ["streaming", "--stream-windows", "big"],
    ["streaming", "--stream-windows", "0"],
    ["streaming", "--stream-windows", "get,get"],
    ["streaming", "--layer-waits", "maybe"],
    ["streaming", "--layer-waits", ""],
    ["streaming", "--layer-waits", "off,on,off"],
])
def test_bad_arguments_are_rejected(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parser().parse_args(argv)
    assert e.value.code == 2 and "error" in capsys.readouterr().err


def test_defaults():
    a = parser().parse_args(["transfer"])
    assert a.chunk_sizes == [6144, 60000] and a.sizes_mb == [1, 4, 16, 64] and [p.name for p in a.profiles] == [
        "none", "laser", "rf"]
    b = parser().parse_args(["streaming"])
    assert b.prefix_blocks == 8 and b.kv == "fp16" and [p.name for p in b.profiles] == ["none", "laser"]
    assert b.pace == [0.0] and b.wave_layers == 1
    assert parser().parse_args(["streaming", "--pace", "off,800"]).pace == [0.0, 800e6]
    assert b.stream_windows == [None] and not b.transfer_only and b.layer_waits == ("on",)
    assert parser().parse_args(["streaming", "--layer-waits", "off,on"]).layer_waits == ("off", "on")
    assert parser().parse_args(["streaming", "--stream-windows", "get,8,link"]).stream_windows == [
        None, 8 * 2**20, "link"]


def test_rounds_merge_into_one_row_per_measurement_over_all_runs():
    def row(auth, times, packets, retx):
        return transfer._row("none", auth, "on", 0, "auto", 6144, "16MB", "get", "C only", 16_000_000, times,
                             packets, retx, 1)
    rounds = [row("on", [0.02, 0.04], 100, 1), row("off", [0.01], 90, 0), row("on", [0.03], 120, 2)]
    merged = transfer.merge_rounds(rounds)
    assert [r["auth"] for r in merged] == ["on", "off"]
    on = merged[0]
    assert on["runs"] == 3 and on["median_s"] == 0.03 and on["retransmits"] == 3
    assert on["goodput_MBps"] == pytest.approx(16 / 0.03) and on["packets_per_s"] == pytest.approx(110 / 0.03)
    assert merged[1] == rounds[1]  # measured once: as it was


def test_seal_costs_pair_each_sealed_measurement_with_the_same_one_in_the_clear():
    def row(seal, seconds):
        return transfer._row("laser", "on", seal, 0, "auto", 6144, "16MB", "get", "python+C", 16_000_000, [seconds],
                             10, 0, 1)
    table = transfer.seal_cost([row("on", 0.2), row("off", 0.16)])
    assert table.splitlines()[-1].endswith("| 100.0 | 80.0 | 80.0 % |")
    assert "openssl" not in table and transfer.seal_cost([row("on", 0.2)]) == ""
    assert parser().parse_args(["transfer"]).seal == ["on"]
    assert parser().parse_args(["transfer", "--seal", "on,off"]).seal == ["on", "off"]
    with pytest.raises(SystemExit):
        parser().parse_args(["transfer", "--seal", "maybe"])


def test_parity_costs_pair_each_coded_measurement_with_the_same_one_uncoded(tmp_path):
    def row(parity, seconds):
        return transfer._row("laser", "on", "on", parity, "auto", 6144, "16MB", "set", "python+C", 16_000_000,
                             [seconds], 10, 0, 1)
    table = transfer.parity_cost([row(2, 0.25), row(0, 0.2)])
    assert table.splitlines()[-1].endswith("| 2 | 80.0 | 64.0 | 80.0 % |")
    assert transfer.parity_cost([row(0, 0.2)]) == ""
    assert parser().parse_args(["transfer"]).parity == [0]
    assert parser().parse_args(["transfer", "--parity", "0,2"]).parity == [0, 2]
    for bad in ("-1", "32", "2,2", "x"):
        with pytest.raises(SystemExit):
            parser().parse_args(["transfer", "--parity", bad])
    a = parser().parse_args(["transfer", "--servers", "2", "--parity", "2", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="parity 2 needs at least 3 satellites"):
        a.func(a)


def test_one_fit_length_is_refused_before_any_work(tmp_path):
    a = parser().parse_args(["streaming", "--fit-lengths", "32", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="two different lengths"):
        a.func(a)


def test_more_servers_than_satellites_is_an_error(tmp_path):
    a = parser().parse_args(["transfer", "--servers", "30", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="exceeds"):
        a.func(a)


def test_streaming_runs_against_a_keyed_constellation(node_path, tmp_path):
    """End to end on the test model: the store signs with the constellation's key (keyed by default)."""
    a = parser().parse_args(["streaming", "--model", "embedded-tiny", "--profiles", "none", "--planes", "3",
                             "--sats", "3", "--servers", "4", "--prefix-blocks", "2", "--block-tokens", "16",
                             "--suffix", "4", "--repeats", "1", "--fit-lengths", "8,16", "--node", str(node_path),
                             "--out", str(tmp_path)])
    assert a.func(a) == 0
    modes = json.loads((tmp_path / "streaming.json").read_text())["modes"]
    assert modes["sky-none"]["first_token_equal"] and modes["sky-none-stream"]["first_token_equal"]


def test_a_stream_no_reader_waited_on_has_no_layer_0_time_nor_sleeps_in_the_table():
    fetch = {"transfer_ms": 38.0, "vs_fetch": 1.0, "vs_fetch_paired": 1.0, "window_MiB": 24, "retransmits": 0}
    waited = dict(fetch, transfer_ms=41.8, vs_fetch=1.1, vs_fetch_paired=1.08, first_layer_ms=19.6, bytes_in_ms=41.2,
                  last_layer_ms=42.1, reader_sleeps=6)
    nowait = dict(fetch, transfer_ms=39.2, vs_fetch=1.03, vs_fetch_paired=1.02, bytes_in_ms=39.4, last_layer_ms=39.4)
    table = streaming.markdown_transfer({"prefix_bytes": 46e6, "config": {"repeats": 25}, "transfers": {
        "sky-none": fetch, "sky-none-stream": waited, "sky-none-stream-nowait": nowait}})
    assert "| sky-none | 24 | 38.0 | 1.00 | 1.00 |  | |  |  | 0 |" in table
    assert "| sky-none-stream | 24 | 41.8 | 1.10 | 1.08 | 19.6 | 41.2 | 42.1 | 6 | 0 |" in table
    assert "| sky-none-stream-nowait | 24 | 39.2 | 1.03 | 1.02 |  | 39.4 | 39.4 |  | 0 |" in table


def test_a_stream_is_compared_with_the_fetch_of_its_own_round_as_well_as_with_the_fetches_median():
    """The machine slowing down between one round's fetch and its stream (round 3) moves the ratio of the
    medians; the rounds' own ratios do not."""
    def rows(*ms):
        return [{"transfer_s": t / 1e3, "retransmits": 0, "window_bytes": 24 << 20} for t in ms]
    steady = streaming.summarize_transfers({"sky-none": rows(40, 41, 42, 43, 44),
                                            "sky-none-stream": rows(42, 43.05, 44.1, 45.15, 46.2)})
    assert steady["sky-none-stream"]["vs_fetch"] == pytest.approx(1.05)
    assert steady["sky-none-stream"]["vs_fetch_paired"] == pytest.approx(1.05)
    assert steady["sky-none"]["vs_fetch"] == steady["sky-none"]["vs_fetch_paired"] == 1.0
    drifted = streaming.summarize_transfers({"sky-none": rows(40, 40, 40, 80, 80),
                                             "sky-none-stream": rows(42, 42, 84, 84, 84)})
    assert drifted["sky-none-stream"]["vs_fetch"] == pytest.approx(2.1)  # 84 ms over 40 ms
    assert drifted["sky-none-stream"]["vs_fetch_paired"] == pytest.approx(1.05)


def test_transfer_only_times_a_checked_fetch_beside_streams_with_and_without_a_reader(node_path, tmp_path):
    """End to end on the test model's geometry: every mode of every round timed, the reader's sleeps counted."""
    a = parser().parse_args(["streaming", "--transfer-only", "--model", "embedded-tiny", "--profiles", "none",
                             "--planes", "3", "--sats", "3", "--servers", "4", "--prefix-blocks", "2",
                             "--block-tokens", "16", "--repeats", "2", "--layer-waits", "on,off",
                             "--node", str(node_path), "--out", str(tmp_path)])
    assert a.func(a) == 0
    transfers = json.loads((tmp_path / "transfer.json").read_text())["transfers"]
    assert set(transfers) == {"sky-none", "sky-none-stream", "sky-none-stream-nowait"}
    assert all(t["runs"] == 2 and t["transfer_ms"] > 0 for t in transfers.values())
    assert transfers["sky-none-stream"]["reader_sleeps"] >= 0 and "reader_sleeps" not in transfers["sky-none"]
    assert "| sky-none-stream |" in (tmp_path / "transfer.md").read_text()
