"""The latency simulator (paper §4) and the `skymemory sim` / `skymemory layout` commands."""

from __future__ import annotations

import csv
import json
import math

import pytest

from skymemory.cli import main
from skymemory.orbit import geometry, sim

C = geometry.SPEED_OF_LIGHT_M_S


def spacing(h_m: float, count: int = 15) -> float:
    """eq. 1 / eq. 2 for the 15x15 grid, written out here."""
    return (geometry.EARTH_RADIUS_M + h_m) * math.sqrt(2 * (1 - math.cos(2 * math.pi / count)))


def test_single_server_ground_and_on_board():
    ground = sim.simulate(sim.SimConfig(strategy="rotation-hop", n_servers=1, altitude_km=550,
                                        kvc_bytes=100, chunk_bytes=100, processing_time_s=0.004))
    assert ground.max == ground.min == ground.avg == pytest.approx(550_000 / C + 0.004, rel=1e-12)
    board = sim.simulate(sim.SimConfig(strategy="hop", n_servers=1, kvc_bytes=100, chunk_bytes=100,
                                       processing_time_s=0.004))
    assert board.max == pytest.approx(0.004, rel=1e-12)


def test_hop_sums_isl_hops_along_the_route():
    cfg = sim.SimConfig(strategy="hop", n_servers=9, altitude_km=1000, kvc_bytes=9, chunk_bytes=1,
                        processing_time_s=0.0)
    d = spacing(1_000_000)
    lat = sim.server_latencies_s(cfg)
    # rings 0, 1 (1 hop) and the first four of ring 2 ((0,-2), (1,-1), (-1,-1), (2,0): 2 hops each)
    assert lat == pytest.approx([0.0] + [d / C] * 4 + [2 * d / C] * 4, rel=1e-12)


def test_ground_uses_slant_range_eq_3_and_4():
    cfg = sim.SimConfig(strategy="rotation", n_servers=9, altitude_km=550, kvc_bytes=9, chunk_bytes=1,
                        processing_time_s=0.0)
    h = 550_000.0
    d = spacing(h)
    lat = sim.simulate(cfg)
    assert lat.max == pytest.approx(math.sqrt(2 * d * d + h * h) / C, rel=1e-12)  # a corner
    assert lat.min == pytest.approx(h / C, rel=1e-12)  # server 5 overhead


def test_processing_time_counts_chunks_per_server():
    # 10 chunks on 9 servers: server 1 holds chunks 0 and 9
    cfg = sim.SimConfig(strategy="hop", n_servers=9, kvc_bytes=10 * 6144 - 5, chunk_bytes=6144,
                        processing_time_s=0.5)
    assert cfg.chunk_count == 10
    lat = sim.server_latencies_s(cfg)
    assert lat[0] == pytest.approx(1.0)
    assert all(0.5 < x < 0.6 for x in lat[1:])


def test_servers_without_chunks_are_not_counted():
    cfg = sim.SimConfig(strategy="hop", n_servers=25, kvc_bytes=3, chunk_bytes=1, processing_time_s=0.0)
    assert len(sim.server_latencies_s(cfg)) == 3


def test_rotation_hop_never_worse_than_rotation():
    for n in sim.SWEEPS["servers"][1]:
        for kvc_mb in (1, 2, 7, 21):
            for p in (0.0, 0.002, 0.01, 0.02):
                for alt in (160.0, 550.0, 1200.0, 2000.0):
                    kw = dict(n_servers=n, kvc_bytes=kvc_mb * sim.MB, processing_time_s=p, altitude_km=alt)
                    rh = sim.simulate(sim.SimConfig(strategy="rotation-hop", **kw)).max
                    assert rh <= sim.simulate(sim.SimConfig(strategy="rotation", **kw)).max


def test_paper_findings_at_the_defaults():
    base = sim.SimConfig()
    for n in sim.SWEEPS["servers"][1]:
        counts = sim.ordering_across_altitudes(base, n)
        assert counts["rotation-hop<=hop"] == counts["altitudes"] == 47
        assert counts["rotation-hop<=rotation"] == 47
    scaling = sim.server_scaling(base)
    for strategy, s in scaling.items():
        assert 0.8 < s["reduction"] < 0.95, strategy  # the paper: "about 90%"


def test_config_validation():
    for bad in (dict(altitude_km=0), dict(altitude_km=float("nan")), dict(kvc_bytes=0), dict(kvc_bytes=1.5),
                dict(chunk_bytes=0), dict(processing_time_s=-1), dict(strategy="x"), dict(n_servers=0),
                dict(n_servers=225, strategy="hop")):
        with pytest.raises(ValueError):
            sim.SimConfig(**bad)


# ---- CLI -------------------------------------------------------------------------------


def test_cli_json(capsys):
    rc = main(["sim", "--strategy", "hop", "--servers", "9", "--altitude", "1000", "--kvc-bytes", "9",
               "--chunk-bytes", "1", "--processing-time", "0", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max"] == pytest.approx(2 * spacing(1_000_000) / C, rel=1e-12)
    assert out["min"] == 0.0
    assert set(out) >= {"max", "min", "avg"}


@pytest.mark.parametrize(
    "argv",
    [["--servers", "0"], ["--servers", "x"], ["--altitude", "-5"], ["--altitude", "nan"], ["--kvc-bytes", "1.5"],
     ["--chunk-bytes", "0"], ["--processing-time", "-0.1"], ["--strategy", "spiral"], ["--planes", "0"]],
)
def test_cli_rejects_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["sim", *argv])
    assert exc.value.code == 2
    assert "error" in capsys.readouterr().err


def test_cli_rejects_layout_that_does_not_fit(capsys):
    assert main(["sim", "--strategy", "hop", "--servers", "225"]) == 2
    assert "needs" in capsys.readouterr().err


def test_cli_sweep(tmp_path, capsys):
    assert main(["sim", "sweep"]) == 2
    out = tmp_path / "sim"
    assert main(["sim", "sweep", "--out", str(out)]) == 0
    with open(out / "sweep_servers.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 * 4
    assert {r["n_servers"] for r in rows} == {"9", "25", "49", "81"}
    for name in ("figure16.png", "altitude_light_time.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rotation-hop <= hop at 47/47" in capsys.readouterr().out


def test_cli_layout(tmp_path, capsys):
    png = tmp_path / "l.png"
    assert main(["layout", "--strategy", "rotation-hop", "--servers", "9", "--centre", "3,4", "-o", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["layout", "--servers", "81", "--planes", "7", "-o", str(png)]) == 2
    assert "needs" in capsys.readouterr().err
    assert main(["layout", "--centre", "9,0", "-o", str(png)]) == 2
    assert main(["layout", "-o", str(tmp_path / "x.jpg")]) == 2
    with pytest.raises(SystemExit):
        main(["layout", "--centre", "3", "-o", str(png)])
