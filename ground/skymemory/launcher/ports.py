"""Where satellites listen on one machine: addresses and ports clear of the kernel's ephemeral range.

Two layouts (--addresses; docs/CONTRACTS.md):

    shared         every satellite on --bind; satellite i on ISL port isl_base + i and ground port
                   ground_base + i (two port ranges as long as the grid)
    per-satellite  satellite i on address --bind + i, on the ports isl_base and ground_base
                   themselves: 127.0.0.0/8 has an address for every satellite, so a 128x128 grid
                   needs two ports instead of 32,768

Any port inside net.ipv4.ip_local_port_range may be handed to a client socket (the ground's, a
browser's, any program's) and then a satellite cannot bind it, so `auto` (the default) takes the
shared layout while both its ranges lie outside that range, and otherwise, on a loopback --bind,
gives every satellite its own address. With the launcher's default bases (ISL 20000, ground
30000) and Linux's default range (32768..60999), grids up to 2,768 satellites share 127.0.0.1 and
larger ones get an address each. Bases the user chose that still reach into the ephemeral range
are allowed with a warning. `choose` returns the layout and that warning, or raises
ValueError with one line saying why no layout fits.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
CHOICES = ("auto", "shared", "per-satellite")


def ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in EPHEMERAL_RANGE_FILE.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL


@dataclass(frozen=True)
class Layout:
    per_satellite: bool
    bind: str
    isl_base: int
    ground_base: int

    @property
    def name(self) -> str:
        return "per-satellite" if self.per_satellite else "shared"

    def address(self, i: int) -> str:
        return str(ipaddress.IPv4Address(self.bind) + i) if self.per_satellite else self.bind

    def isl_port(self, i: int) -> int:
        return self.isl_base if self.per_satellite else self.isl_base + i

    def ground_port(self, i: int) -> int:
        return self.ground_base if self.per_satellite else self.ground_base + i

    def port_ranges(self, n: int) -> dict[str, tuple[int, int]]:
        span = 0 if self.per_satellite else n - 1
        return {"ISL": (self.isl_base, self.isl_base + span), "ground": (self.ground_base, self.ground_base + span)}


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def _shared_problem(layout: Layout, n: int) -> str | None:
    ranges = layout.port_ranges(n)
    for name, (lo, hi) in ranges.items():
        if hi > 65535:
            return f"{name} ports {lo}..{hi} for {n} satellites run past 65535"
    if _overlap(ranges["ISL"], ranges["ground"]):
        return "the ISL and ground port ranges overlap; move one base"
    return None


def _per_satellite_problem(layout: Layout, n: int) -> str | None:
    first = ipaddress.IPv4Address(layout.bind)
    if not first.is_loopback:
        return f"an address per satellite needs a loopback --bind (127.x.y.z), not {layout.bind}"
    if int(first) + n - 1 > int(ipaddress.IPv4Address("127.255.255.254")):
        return f"--bind {layout.bind} + {n} satellites runs past 127.255.255.254"
    if layout.isl_base == layout.ground_base:
        return "--isl-port-base and --ground-port-base must differ"
    return None


def _in_ephemeral(layout: Layout, n: int, ephemeral: tuple[int, int]) -> str | None:
    hit = [f"{name} ports {lo}..{hi}" if lo != hi else f"{name} port {lo}"
           for name, (lo, hi) in layout.port_ranges(n).items() if _overlap((lo, hi), ephemeral)]
    if not hit:
        return None
    return (f"{' and '.join(hit)} lie in the kernel's ephemeral port range {ephemeral[0]}..{ephemeral[1]} "
            "(net.ipv4.ip_local_port_range): a client socket may take one before its satellite binds it")


def choose(n: int, bind: str, isl_base: int, ground_base: int, addresses: str = "auto", one_machine: bool = True,
           ephemeral: tuple[int, int] | None = None) -> tuple[Layout, str | None]:
    """The layout for n satellites and a warning (or None). `one_machine`: all satellites on this
    machine's loopback (native, docker); namespaces, ssh hosts and cFS use the shared layout."""
    if addresses not in CHOICES:
        raise ValueError(f"--addresses must be one of {', '.join(CHOICES)}")
    ephemeral = ephemeral or ephemeral_range()
    shared = Layout(False, bind, isl_base, ground_base)
    per_sat = Layout(True, bind, isl_base, ground_base)
    if addresses == "per-satellite" and not one_machine:
        raise ValueError("--addresses per-satellite is for satellites on this machine's loopback "
                         "(not --netns, --hosts or --runtime cfs/swarm)")
    if addresses == "shared" or not one_machine:
        problem = _shared_problem(shared, n)
        if problem:
            raise ValueError(problem)
        return shared, _in_ephemeral(shared, n, ephemeral)
    if addresses == "per-satellite":
        problem = _per_satellite_problem(per_sat, n)
        if problem:
            raise ValueError(problem)
        return per_sat, _in_ephemeral(per_sat, n, ephemeral)
    # auto: the first layout that is possible and clear of the ephemeral range, shared first;
    # else the first possible one, with the warning
    possible = [layout for layout, problem in ((shared, _shared_problem(shared, n)),
                                               (per_sat, _per_satellite_problem(per_sat, n))) if problem is None]
    if not possible:
        raise ValueError(_shared_problem(shared, n))
    for layout in possible:
        if _in_ephemeral(layout, n, ephemeral) is None:
            return layout, None
    return possible[0], _in_ephemeral(possible[0], n, ephemeral)
