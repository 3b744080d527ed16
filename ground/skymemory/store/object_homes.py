"""Where a named object's metadata lives: R home satellites, spread so one plane or one host failing
cannot take all of them.

Every ground host must find an object's metadata from its key and the launch manifest alone, so the
homes are a pure function of (key, manifest):

1. every satellite gets a rank, SHA-256(key || its index) (rendezvous hashing: a key's homes look
   random, and keys spread evenly over the constellation);
2. walking the satellites in rank order, a satellite is taken if its plane and its host are not
   used yet; if fewer than R are found, a second walk only keeps the planes apart, a third takes
   the best-ranked rest (a constellation of one plane on one host has no better choice).

A satellite's host is where its process runs (ssh destination, network namespace, address), as
the manifest records it, so a mini PC or a network namespace going down takes at most one home.
"""

from __future__ import annotations

import hashlib

from skymemory.orbit.manifest import Manifest, SatelliteEntry

Sat = tuple[int, int]
DEFAULT_REPLICAS = 3


def host_of(entry: SatelliteEntry) -> tuple[str, str, str]:
    """What fails together: the ssh host, the network namespace, the address the satellite is reached at."""
    return entry.remote, entry.netns, entry.host


def home_satellites(key: bytes, manifest: Manifest, replicas: int = DEFAULT_REPLICAS) -> list[Sat]:
    """The key's home satellites, best-ranked first; min(replicas, satellites) of them."""
    if replicas < 1:
        raise ValueError(f"replicas must be >= 1, got {replicas}")
    n = manifest.planes * manifest.sats
    ranked = sorted(manifest.satellites,
                    key=lambda e: hashlib.sha256(key + (e.plane * manifest.sats + e.sat).to_bytes(4, "big")).digest())
    chosen: list[SatelliteEntry] = []
    for keep_hosts_apart in (True, False, None):  # None: the last walk takes whatever ranks best
        for e in ranked:
            if len(chosen) == min(replicas, n):
                break
            if e in chosen:
                continue
            if keep_hosts_apart is not None:
                if any(c.plane == e.plane for c in chosen):
                    continue
                if keep_hosts_apart and any(host_of(c) == host_of(e) for c in chosen):
                    continue
            chosen.append(e)
    return [(e.plane, e.sat) for e in chosen]
