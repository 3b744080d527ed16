"""Draw a placement on the torus grid like the paper's Figures 4-8 and 13-15.

Each square is a satellite (columns = sats along a plane, east to the right;
rows = planes, south downwards).  Orange squares are the LOS box (or, for the
static strategies, the satellites holding servers), the number is the server
(server s holds chunks s-1, s-1+n, s-1+2n, ...), the green ring marks the
satellite overhead, and arrows show the MIGRATE operations of the next
rotation step (east column -> column entering on the west).
"""

from __future__ import annotations

from pathlib import Path

from skymemory.orbit import placement


def draw_layout(
    path: Path,
    strategy: str,
    n_servers: int,
    planes: int,
    sats: int,
    centre: placement.Satellite,
    steps: int = 0,
) -> None:
    """Write a PNG of the layout `steps` rotation steps after it was set with `centre` overhead."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, Rectangle

    placement.check_fits(strategy, n_servers, planes, sats)
    centre = placement.check_satellite(centre, planes, sats)
    if steps < 0:
        raise ValueError("steps must be >= 0")
    migrating = strategy in placement.MIGRATING_STRATEGIES
    here = placement.overhead_after(centre, steps, planes, sats)
    # Relative to the current overhead satellite; static layouts drift east as it moves west.
    current = placement.current_offsets(strategy, n_servers, steps)
    cells = {placement.satellite_at(here, o, planes, sats): i + 1 for i, o in enumerate(current)}

    # The LOS box: box columns x the rows the servers occupy (migration never changes rows).
    shaded = set(cells)
    entering: set[placement.Satellite] = set()
    if migrating:
        x0, x1 = placement.box_columns(n_servers)
        ys = {y for _, y in current}
        shaded = {placement.satellite_at(here, (x, y), planes, sats) for x in range(x0, x1 + 1) for y in ys}
        entering = {placement.satellite_at(here, (x0 - 1, y), planes, sats) for y in ys}

    size = max(0.42 * max(planes, sats), 4.0)
    fig, ax = plt.subplots(figsize=(size * sats / max(planes, sats) + 0.6, size * planes / max(planes, sats) + 1.0))
    font = 11 if max(planes, sats) <= 12 else 8
    for plane in range(planes):
        for sat in range(sats):
            colour = "#ffb347" if (plane, sat) in shaded else "#eeeeee"
            hatch = "///" if (plane, sat) in entering else None
            ax.add_patch(Rectangle((sat - 0.5, plane - 0.5), 1, 1, facecolor=colour, edgecolor="white",
                                   hatch=hatch, linewidth=1.2))
            server = cells.get((plane, sat))
            if server is not None:
                ax.text(sat, plane, str(server), ha="center", va="center", fontsize=font,
                        fontweight="bold" if server == 1 else None)
    ax.add_patch(plt.Circle((here[1], here[0]), 0.46, fill=False, edgecolor="green", linewidth=2.5))

    if migrating:
        from skymemory.orbit.migration import plan_block

        rotation = placement.Rotation(planes=planes, sats=sats, step_ms=1.0)
        block = _DrawBlock(n_servers=n_servers, strategy=strategy, centre=centre, chunk_count=n_servers)
        for op in plan_block(block, steps, rotation):
            (sp, ss), (tp, ts) = op.source, op.target
            # A shallow arc that peaks on the row boundary, clear of the numbers.
            rad = 0.5 / max(abs(ss - ts), 1)
            ax.add_patch(FancyArrowPatch((ss, sp - 0.25), (ts, tp - 0.25), connectionstyle=f"arc3,rad={rad}",
                                         arrowstyle="-|>", mutation_scale=11, color="tab:blue", linewidth=1.2))

    ax.set_xlim(-0.5, sats - 0.5)
    ax.set_ylim(planes - 0.5, -0.5)
    ax.set_aspect("equal")
    ax.set_xticks(range(sats))
    ax.set_yticks(range(planes))
    ax.tick_params(labelsize=7)
    ax.set_xlabel("sat in plane (east \u2192)   overhead moves west one sat per rotation step", fontsize=8)
    ax.set_ylabel("plane (south \u2193)", fontsize=8)
    what = ("arrows: MIGRATE at the next step\nhatched: column entering line of sight" if migrating
            else "static layout: no migration")
    ax.set_title(f"{strategy}, {n_servers} servers, step {steps}, overhead (plane {here[0]}, sat {here[1]})\n"
                 f"number = server s (holds chunks s-1, s-1+n, ...)\n{what}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


class _DrawBlock:
    """A one-chunk-per-server block created at mission time 0, for planning the arrows."""

    block_hash = b"\x00" * 32
    created_ms = 0
    chunk_bytes = 1
    parity = 0  # uncoded

    def __init__(self, n_servers: int, strategy: str, centre: placement.Satellite, chunk_count: int) -> None:
        self.n_servers = n_servers
        self.strategy = strategy
        self.centre = centre
        self.chunk_count = chunk_count
        self.n_bytes = chunk_count
