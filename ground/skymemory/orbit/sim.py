"""The paper's latency simulator (§4, Table 2, Figure 16).

For one block of ``kvc_bytes`` split into ``ceil(kvc_bytes / chunk_bytes)``
chunks, chunk c on server c mod n + 1, the latency of a server is

    distance / c  +  processing_time x (chunks on that server)

and the get/set latency of the block is the worst (max) over the servers that
hold a chunk, all being contacted in parallel.  The distance is

* ground-hosted strategies (baseline, rotation, rotation-hop): the slant range
  from the ground host under the centre satellite to the server, eq. 4
  ``sqrt(D^2 + h^2)`` with eq. 3 ``D = hypot(D_M * east, D_N * south)``;
* on-board ``hop``: the LLM sits on the centre satellite and a chunk travels
  the routed +GRID path, ``|east| * D_M + |south| * D_N``.

D_M is the intra-plane spacing (eq. 1), D_N the inter-plane spacing at its
maximum (eq. 2).  Offsets wrap the shorter way round the torus.  Latencies are
one-way light time plus processing, in seconds, as in the paper.
"""

from __future__ import annotations

import csv
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from skymemory.orbit import geometry, placement

GROUND_HOSTED = frozenset({"baseline", "rotation", "rotation-hop"})
PAPER_STRATEGIES = ("rotation", "hop", "rotation-hop")
MB = 1_000_000


@dataclass(frozen=True)
class SimConfig:
    strategy: str = "rotation-hop"
    n_servers: int = 25
    altitude_km: float = 550.0
    kvc_bytes: int = 10 * MB
    chunk_bytes: int = 6144
    processing_time_s: float = 0.01  # middle of Table 2's 0.002-0.02 s
    planes: int = 15  # Table 2: MAX_ORBS
    sats: int = 15  # Table 2: MAX_SATELLITES

    def __post_init__(self) -> None:
        placement.check_strategy(self.strategy)
        placement.check_n_servers(self.n_servers)
        placement.check_torus(self.planes, self.sats)
        if not (math.isfinite(self.altitude_km) and 0 < self.altitude_km <= 100_000):
            raise ValueError(f"altitude must be in (0, 100000] km, got {self.altitude_km}")
        if isinstance(self.kvc_bytes, bool) or not isinstance(self.kvc_bytes, int) or self.kvc_bytes < 1:
            raise ValueError(f"KVC size must be a positive integer number of bytes, got {self.kvc_bytes!r}")
        if isinstance(self.chunk_bytes, bool) or not isinstance(self.chunk_bytes, int) or self.chunk_bytes < 1:
            raise ValueError(f"chunk size must be a positive integer number of bytes, got {self.chunk_bytes!r}")
        if not (math.isfinite(self.processing_time_s) and self.processing_time_s >= 0):
            raise ValueError(f"processing time must be >= 0 s, got {self.processing_time_s}")
        placement.check_fits(self.strategy, self.n_servers, self.planes, self.sats)

    @property
    def chunk_count(self) -> int:
        return -(-self.kvc_bytes // self.chunk_bytes)


@dataclass(frozen=True)
class Latency:
    max: float
    min: float
    avg: float


def server_distances_m(cfg: SimConfig) -> list[float]:
    """Distance from the LLM host to each server (server 1 first), metres."""
    h = cfg.altitude_km * 1000.0
    d_m = geometry.intra_plane_distance_m(h, cfg.sats)
    d_n = geometry.inter_plane_distance_max_m(h, cfg.planes)
    result = []
    for east, south in placement.offsets(cfg.strategy, cfg.n_servers):
        east = placement.torus_delta(0, east, cfg.sats)
        south = placement.torus_delta(0, south, cfg.planes)
        if cfg.strategy in GROUND_HOSTED:
            result.append(geometry.slant_range_m(geometry.grid_distance_m(d_m, d_n, east, south), h))
        else:
            result.append(abs(east) * d_m + abs(south) * d_n)
    return result


def server_latencies_s(cfg: SimConfig) -> list[float]:
    """Latency of each server that holds at least one chunk (server order)."""
    latencies = []
    for server, distance in enumerate(server_distances_m(cfg), start=1):
        _, count, _ = placement.server_chunks(server, cfg.n_servers, cfg.chunk_count)
        if count:
            latencies.append(geometry.light_time_s(distance) + cfg.processing_time_s * count)
    return latencies


def simulate(cfg: SimConfig) -> Latency:
    lat = server_latencies_s(cfg)
    return Latency(max=max(lat), min=min(lat), avg=sum(lat) / len(lat))


# ---- sweeps (Figure 16) ---------------------------------------------------------

SWEEPS = {
    "kvc": ("kvc_bytes", [mb * MB for mb in range(1, 22)]),
    "servers": ("n_servers", [9, 25, 49, 81]),
    "processing": ("processing_time_s", [round(0.002 * i, 3) for i in range(1, 11)]),
    "altitude": ("altitude_km", [float(a) for a in range(160, 2001, 40)]),
}
SWEEP_STRATEGIES = ("baseline", "rotation", "hop", "rotation-hop")
CSV_FIELDS = ["strategy", "n_servers", "altitude_km", "kvc_bytes", "chunk_bytes", "processing_time_s",
              "chunk_count", "max_s", "min_s", "avg_s"]


def sweep(name: str, base: SimConfig | None = None, strategies=SWEEP_STRATEGIES) -> list[dict]:
    """One row per (strategy, swept value), other parameters from `base`."""
    if name not in SWEEPS:
        raise ValueError(f"unknown sweep {name!r}; choose one of {', '.join(SWEEPS)}")
    base = base or SimConfig()
    field, values = SWEEPS[name]
    rows = []
    for strategy in strategies:
        for value in values:
            cfg = SimConfig(**{**asdict(base), "strategy": strategy, field: value})
            lat = simulate(cfg)
            row = {k: v for k, v in asdict(cfg).items() if k in CSV_FIELDS}
            row.update(chunk_count=cfg.chunk_count, max_s=lat.max, min_s=lat.min, avg_s=lat.avg)
            rows.append(row)
    return rows


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


_AXES = {
    "kvc": ("kvc_bytes", "KVC size (MB)", 1 / MB),
    "servers": ("n_servers", "servers", 1),
    "processing": ("processing_time_s", "chunk processing time (s)", 1),
    "altitude": ("altitude_km", "altitude (km)", 1),
}
_STYLE = {"baseline": ("tab:gray", ":"), "rotation": ("tab:blue", "-"),
          "hop": ("tab:orange", "--"), "rotation-hop": ("tab:green", "-.")}


def plot_sweeps(results: dict[str, list[dict]], path: Path, base: SimConfig) -> None:
    """A 2x2 figure of worst-case latency per sweep and strategy, like the paper's Figure 16."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(10, 7.5))
    for ax, name in zip(axes.flat, ("kvc", "servers", "processing", "altitude")):
        field, label, scale = _AXES[name]
        for strategy in SWEEP_STRATEGIES:
            rows = [r for r in results[name] if r["strategy"] == strategy]
            colour, dash = _STYLE[strategy]
            ax.plot([r[field] * scale for r in rows], [r["max_s"] for r in rows], dash, color=colour,
                    marker="o" if name == "servers" else None, markersize=4, label=strategy)
        ax.set_xlabel(label)
        ax.set_ylabel("max latency (s)")
        ax.grid(alpha=0.3)
    axes[0, 0].legend()
    fig.suptitle(
        f"Worst-case get/set latency, {base.planes}x{base.sats} grid; defaults: {base.kvc_bytes / MB:g} MB KVC, "
        f"{base.chunk_bytes} B chunks, {base.n_servers} servers, {base.processing_time_s} s/chunk, "
        f"{base.altitude_km:g} km",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot_altitude_light_time(base: SimConfig, path: Path) -> list[dict]:
    """Altitude sweep with processing time 0, per server count: isolates the geometry
    (where the strategies differ) from the processing time (which dominates)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = []
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.6), sharey=False)
    for ax, n in zip(axes, SWEEPS["servers"][1]):
        for strategy in PAPER_STRATEGIES:
            xs, ys = [], []
            for alt in SWEEPS["altitude"][1]:
                cfg = SimConfig(**{**asdict(base), "strategy": strategy, "n_servers": n,
                                   "altitude_km": alt, "processing_time_s": 0.0})
                lat = simulate(cfg)
                row = {k: v for k, v in asdict(cfg).items() if k in CSV_FIELDS}
                row.update(chunk_count=cfg.chunk_count, max_s=lat.max, min_s=lat.min, avg_s=lat.avg)
                rows.append(row)
                xs.append(alt)
                ys.append(lat.max * 1000)
            colour, dash = _STYLE[strategy]
            ax.plot(xs, ys, dash, color=colour, label=strategy)
        ax.set_title(f"{n} servers", fontsize=10)
        ax.set_xlabel("altitude (km)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("max light time (ms)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Worst-case latency without processing time (geometry only); rotation and rotation-hop "
                 "use the same box when n is a square, so their lines coincide", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return rows


def run_all_sweeps(out: Path, base: SimConfig | None = None) -> dict[str, list[dict]]:
    """Write sweep_<name>.csv for every sweep, figure16.png, and the geometry-only altitude sweep."""
    base = base or SimConfig()
    out.mkdir(parents=True, exist_ok=True)
    results = {name: sweep(name, base) for name in SWEEPS}
    for name, rows in results.items():
        write_csv(rows, out / f"sweep_{name}.csv")
    plot_sweeps(results, out / "figure16.png", base)
    geometry_rows = plot_altitude_light_time(base, out / "altitude_light_time.png")
    write_csv(geometry_rows, out / "sweep_altitude_light_time.csv")
    results["altitude_light_time"] = geometry_rows
    return results


# ---- the paper's findings, checked on our numbers ----------------------------------


def ordering_across_altitudes(base: SimConfig, n_servers: int) -> dict[str, int]:
    """How many altitudes of the sweep satisfy rotation-hop <= hop and rotation-hop <= rotation (max latency)."""
    counts = {"altitudes": 0, "rotation-hop<=hop": 0, "rotation-hop<=rotation": 0}
    for alt in SWEEPS["altitude"][1]:
        lat = {s: simulate(SimConfig(**{**asdict(base), "strategy": s, "n_servers": n_servers,
                                        "altitude_km": alt})).max for s in PAPER_STRATEGIES}
        counts["altitudes"] += 1
        counts["rotation-hop<=hop"] += lat["rotation-hop"] <= lat["hop"]
        counts["rotation-hop<=rotation"] += lat["rotation-hop"] <= lat["rotation"]
    return counts


def server_scaling(base: SimConfig, small: int = 9, large: int = 81) -> dict[str, dict[str, float]]:
    """Worst-case latency at `small` and `large` servers per strategy, and the reduction."""
    result = {}
    for strategy in SWEEP_STRATEGIES:
        a = simulate(SimConfig(**{**asdict(base), "strategy": strategy, "n_servers": small})).max
        b = simulate(SimConfig(**{**asdict(base), "strategy": strategy, "n_servers": large})).max
        result[strategy] = {"small_s": a, "large_s": b, "ratio": b / a, "reduction": 1 - b / a}
    return result


def summary(results: dict[str, list[dict]] | None = None, base: SimConfig | None = None) -> str:
    base = base or SimConfig()
    lines = [f"defaults: {base.kvc_bytes} B KVC, {base.chunk_bytes} B chunks ({base.chunk_count} chunks), "
             f"{base.n_servers} servers, {base.processing_time_s} s/chunk, {base.altitude_km:g} km, "
             f"{base.planes}x{base.sats} grid"]
    for n in SWEEPS["servers"][1]:
        c = ordering_across_altitudes(base, n)
        lines.append(f"{n} servers: rotation-hop <= hop at {c['rotation-hop<=hop']}/{c['altitudes']} altitudes, "
                     f"<= rotation at {c['rotation-hop<=rotation']}/{c['altitudes']}")
    for strategy, s in server_scaling(base).items():
        lines.append(f"9 -> 81 servers, {strategy}: {s['small_s']:.4f} s -> {s['large_s']:.4f} s "
                     f"(x{s['ratio']:.3f}, {100 * s['reduction']:.1f}% lower)")
    return "\n".join(lines)


def ordering_grid() -> dict[str, int]:
    """Count, over the full Table 2 grid (servers x KVC 1-21 MB x processing 0, 0.002-0.02 s x
    altitudes), the configurations where rotation-hop is worse than hop / than rotation."""
    counts = {"configs": 0, "rotation-hop>hop": 0, "rotation-hop>rotation": 0}
    for n in SWEEPS["servers"][1]:
        for kvc in SWEEPS["kvc"][1]:
            for p in [0.0] + SWEEPS["processing"][1]:
                for alt in SWEEPS["altitude"][1]:
                    kw = dict(n_servers=n, kvc_bytes=kvc, processing_time_s=p, altitude_km=alt)
                    lat = {s: simulate(SimConfig(strategy=s, **kw)).max for s in PAPER_STRATEGIES}
                    counts["configs"] += 1
                    counts["rotation-hop>hop"] += lat["rotation-hop"] > lat["hop"]
                    counts["rotation-hop>rotation"] += lat["rotation-hop"] > lat["rotation"]
    return counts
