"""Link profiles for the benchmarks (paper Table 1, ground-to-satellite latency).

A profile is what every satellite node is started with:
  * `ground_delay_ms`: one-way delay the node adds on its ground port
    (`skymem_node --ground-delay-ms`), i.e. the ground <-> satellite link;
  * `delay_scale`: the ISL light-time multiplier (`--delay-scale`): 1 = the
    real light time from the orbital geometry (paper eqs. 1-2), 0 = none.

Paper Table 1: LEO (theoretical laser) 2-4 ms, LEO (current RF) 20-50 ms.
We take the middle of each range, one way.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class LinkProfile:
    name: str
    ground_delay_ms: float  # one way, ground <-> satellite
    delay_scale: float  # ISL light time multiplier
    description: str

    def as_dict(self) -> dict:
        return asdict(self)

    def launcher_args(self) -> list[str]:
        return ["--ground-delay-ms", repr(self.ground_delay_ms), "--delay-scale", repr(self.delay_scale)]


PROFILES: dict[str, LinkProfile] = {
    "none": LinkProfile("none", 0.0, 0.0, "no link delay (loopback UDP only)"),
    "laser": LinkProfile("laser", 3.0, 1.0, "laser LEO: 3 ms one-way ground link (Table 1: 2-4 ms) + ISL light time"),
    "rf": LinkProfile("rf", 35.0, 1.0, "RF LEO: 35 ms one-way ground link (Table 1: 20-50 ms) + ISL light time"),
}


def parse_profiles(text: str) -> list[LinkProfile]:
    """'none,laser,rf' -> profiles, in that order; unknown or repeated names are a ValueError."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError("no link profile given")
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        raise ValueError(f"unknown link profile(s) {', '.join(unknown)}; choose from {', '.join(PROFILES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"a link profile is listed twice: {text}")
    return [PROFILES[n] for n in names]


def profile_of_manifest(link: dict) -> LinkProfile:
    """The profile a running constellation was launched with (from its manifest's `link`)."""
    ground = float(link.get("ground_delay_ms", 0.0))
    scale = float(link.get("delay_scale", 1.0))
    for p in PROFILES.values():
        if p.ground_delay_ms == ground and p.delay_scale == scale:
            return p
    return LinkProfile("attached", ground, scale, f"attached constellation: {ground:g} ms ground link, "
                                                   f"ISL light time x{scale:g}")


def profiles_arg(text: str) -> list[LinkProfile]:
    """parse_profiles as an argparse type: a bad list is argparse's one-line error (exit 2)."""
    try:
        return parse_profiles(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
