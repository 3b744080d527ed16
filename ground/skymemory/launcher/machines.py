"""Which machine runs each satellite of a manifest: an ssh host, a network namespace, a container,
a swarm node, or this machine. `skymemory status` and the launcher's `status` group satellites by it, so a user
sees which machine is unhealthy rather than a list of satellites."""

from __future__ import annotations

from skymemory.orbit.manifest import Manifest, SatelliteEntry

THIS_MACHINE = "this machine"


def machine_of(m: Manifest, e: SatelliteEntry) -> str:
    if e.remote:
        return f"ssh host {e.remote}"
    if e.netns:
        return f"namespace {e.netns} ({e.host})"
    if m.backend.get("kind") == "swarm":
        hostname = {n.get("address"): n.get("hostname") for n in m.backend.get("nodes", [])}.get(e.host, "?")
        return f"swarm node {hostname} ({e.host})"
    if m.backend.get("kind") == "docker":
        return f"container {container_name(m.backend.get('project', 'skymemory'), e.plane, e.sat)}"
    return THIS_MACHINE


def container_name(project: str, plane: int, sat: int) -> str:
    """The container of one satellite (the compose file sets `container_name` to this)."""
    return f"{project}-sat-{plane}-{sat}"


def group_by_machine(m: Manifest) -> dict[str, list[SatelliteEntry]]:
    """Machine -> its satellites, machines in the order of their first satellite."""
    groups: dict[str, list[SatelliteEntry]] = {}
    for e in m.satellites:
        groups.setdefault(machine_of(m, e), []).append(e)
    return groups
