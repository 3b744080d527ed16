"""Ground sites (--sites N): ground hosts far apart, each in a network namespace of its own.

A prefill site stores a prompt's KV blocks, a decode site far away loads them: the blocks go up over
the one's overhead satellite and come down over the other's, through the ISLs. With --netns H the
launcher adds N namespaces on the hosts' bridge that run no satellite (netns.build: site k at
10.77.0.<253-k>), and writes, beside the main manifest, one manifest per site (manifest.site-K.json):
the same constellation seen from that site, i.e. its own

    ground_host      the site's address (where its clients bind)
    ground_overhead  its own overhead satellite at epoch: site k is (k*planes//N, k*sats//N) hops from
                     the main overhead, so site 0 is at the main overhead and, for two sites, site 1
                     the farthest satellite from it on the torus (planes/2, sats/2 hops)
    ground_station   its own station id: the main ground's + 1 + k (the satellites learn an address per
                     station id, from verified commands, and answer there)
    ground_netns     its namespace: run its processes with `ip netns exec NS ...`
    site_of          the main manifest (`stop` and `status` take that one)

The main manifest lists the sites (`sites`). The key files are files of this machine, so processes in a
site read them as processes here do.
"""

from __future__ import annotations

import json
import typing
from pathlib import Path

from skymemory.orbit.manifest import Manifest

Sat = tuple[int, int]


class Site(typing.NamedTuple):
    """A ground site of a --sites launch: its namespace (run a process there with `ip netns exec`), its
    address, and its manifest (the constellation as that site sees it)."""

    namespace: str
    address: str
    manifest: Path


def sites_of(main: Manifest) -> list[Site]:
    """The ground sites a main manifest lists, in site order."""
    return [Site(s["namespace"], s["address"], Path(s["manifest"])) for s in main.sites]


def from_main_ground(site_manifest: Path, main_manifest: Path, out: Path) -> Path:
    """A site's view of the sky (its overhead satellite, its station) from the main ground's address, written to
    `out`: for a process that stands in front of that site but runs in this namespace (the router of a test or a
    benchmark): its requests go up through the site's overhead as the site's own would."""
    seen = json.loads(Path(site_manifest).read_text())
    seen["ground_host"] = Manifest.load(main_manifest).ground_host
    for site_only in ("ground_netns", "site_of"):
        seen.pop(site_only, None)
    Path(out).write_text(json.dumps(seen))
    return Path(out)


def overheads(planes: int, sats: int, main: Sat, n: int) -> list[Sat]:
    """Each site's overhead satellite at epoch, spread evenly over the torus from the main overhead."""
    return [((main[0] + k * planes // n) % planes, (main[1] + k * sats // n) % sats) for k in range(n)]


def stations(main_station: int, n: int) -> list[int]:
    """Each site's ground-station id: the ones after the main ground's (0xFFFF is not a station id)."""
    return [(main_station + 1 + k) % 0xFFFF for k in range(n)]


def manifest_path(main: Path, k: int) -> Path:
    """manifest.json -> manifest.site-0.json, beside it."""
    return main.with_name(f"{main.stem}.site-{k}{main.suffix or '.json'}")


def describe(m: Manifest, main_path: Path, namespaces: list[str], addresses: list[str]) -> list[dict]:
    """The main manifest's `sites`: one entry per site."""
    n = len(namespaces)
    return [{"site": k, "namespace": ns, "address": address, "ground_station": station,
             "ground_overhead": list(overhead), "manifest": str(manifest_path(main_path.resolve(), k))}
            for k, (ns, address, station, overhead) in enumerate(zip(
                namespaces, addresses, stations(m.ground_station, n),
                overheads(m.planes, m.sats, tuple(m.ground_overhead), n)))]


def site_manifest(m: Manifest, site: dict, main_path: Path) -> Manifest:
    """The constellation of `m` as ground site `site` (an entry of m.sites) sees it."""
    d = json.loads(m.to_json())  # a copy
    d.update(ground_host=site["address"], ground_overhead=list(site["ground_overhead"]),
             ground_station=site["ground_station"], ground_netns=site["namespace"], sites=[],
             site_of=str(main_path.resolve()), launcher_pid=0)
    return Manifest.from_dict(d)


def write_manifests(m: Manifest, main_path: Path) -> list[Path]:
    """Each site's manifest, beside the main one (after the main one is written)."""
    return [site_manifest(m, site, main_path).save(site["manifest"]) for site in m.sites]


def remove_manifests(m: Manifest) -> None:
    for site in m.sites:
        Path(site["manifest"]).unlink(missing_ok=True)


def status_lines(m: Manifest, exists) -> tuple[list[str], int]:
    """One line per site (namespace, address, overhead, station, manifest) and how many lack their namespace."""
    lines, missing = [], 0
    for site in m.sites:
        there = exists(site["namespace"])
        missing += not there
        lines.append(f"  site {site['site']}: namespace {site['namespace']} ({site['address']})"
                     f"{'' if there else ' MISSING'}, overhead at epoch {tuple(site['ground_overhead'])}, "
                     f"station {site['ground_station']}, manifest {site['manifest']}")
    return lines, missing
