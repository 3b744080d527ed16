"""Tearing a constellation down (by pid files and the manifest) and reporting on it."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from skymemory.launcher import cfs, docker, firewall, keys, netns, nodes, processes, sites, ssh, swarm
from skymemory.launcher.common import rss_kib, self_pid
from skymemory.launcher.health import wait_healthy
from skymemory.launcher.machines import container_name
from skymemory.orbit.manifest import Manifest
from skymemory.protocol.auth import signer_for_manifest


def teardown(m: Manifest) -> list:
    """Stop every process of the manifest, remove namespaces / containers; return survivors."""
    kind = m.backend.get("kind", "native")
    marker = m.backend.get("marker", "skymem_node")
    survivors: list = []
    if kind == "ssh":
        config = m.backend.get("ssh_config")
        key = m.backend.get("remote_key_dir") or m.backend.get("remote_key_file")  # (an older manifest's one file)
        for dest in m.backend.get("hosts", []):
            pids = [e.pid for e in m.satellites if e.remote == dest and e.pid]
            try:
                if pids:
                    left = [f"{dest}:{p}" for p in ssh.stop_remote(dest, pids, config=config)]
                    if m.runtime == "cfs" and not left:  # cFE leaves its reset area behind (see cfs.py)
                        left += [f"{dest}: {err}" for err in ssh.remove_shared_memory(dest, pids, config)]
                    survivors += left
                if key:  # on every host: a failed boot may have copied it to a host that started nothing
                    # cFS instances' copies too; by address, not e.remote, which is set once the host's start
                    # script has run
                    here = [e for e in m.satellites if e.host == ssh.host_address(dest)]
                    own = [keys.remote_key_file(m.backend["remote_dir"], e.plane, e.sat) for e in here]
                    cfs_copies = [f"{m.backend['remote_dir']}/cfs/{nodes.sat_name(e.plane, e.sat)}/{ssh.CFS_KEY}"
                                  for e in here if m.runtime == "cfs"]
                    key_dir = m.backend.get("remote_key_dir")
                    ssh.remove_files(dest, [*own, *cfs_copies] if key_dir else [key, *cfs_copies], config)
                    if key_dir:  # the folder too, once empty (another host's satellites may share it)
                        ssh.run_script(dest, f"rmdir {shlex.quote(key_dir)} 2>/dev/null; true\n", timeout=30,
                                       config=config)
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                survivors.append(f"{dest}: {exc}")
        return survivors
    if kind == "docker":
        return _docker_down(m)
    if kind == "swarm":
        left = _swarm_down(m)
        return left or _remove_sites(m.backend.get("site_record"))
    pid_dir = Path(m.run_dir) / "pids"
    pids = processes.read_pid_files(pid_dir)
    pids.update({nodes.sat_name(e.plane, e.sat): e.pid for e in m.satellites if e.pid})
    survivors = processes.terminate(pids, marker)
    if kind == "cfs" and not survivors:
        survivors += cfs.remove_shared_memory({p for p in pids.values() if p})
    if kind == "netns":
        for ns in m.backend.get("namespaces", []):  # anything else still inside our namespaces
            survivors += [p for p in netns.namespace_pids(ns) if processes.alive(p)]
        for ns in m.backend.get("site_namespaces", []):  # a ground site's processes are its user's to end
            survivors += [f"pid {p} in ground site namespace {ns}" for p in netns.namespace_pids(ns)
                          if processes.alive(p)]
        if not survivors:
            survivors += netns.teardown(m.backend)
            survivors += firewall.remove(m.backend.get("firewall_rule"))  # the rule the launcher added, if any
    if not survivors:
        for f in pid_dir.glob("*.pid") if pid_dir.is_dir() else []:
            f.unlink()
    return survivors


def _remove_sites(record: dict | None) -> list:
    """The ground-site namespaces a swarm launch joined to its nodes' bridge (not the bridge): what is left."""
    if not record:
        return []
    left = [f"pid {p} in ground site namespace {ns}" for ns in record.get("site_namespaces", [])
            for p in netns.namespace_pids(ns) if processes.alive(p)]
    return left or netns.teardown(record)


def _docker_down(m: Manifest) -> list:
    """`compose down`, then check that no container of the project is left (the names of those that are)."""
    project = m.backend["project"]
    command = m.backend.get("compose_command") or docker.compose_command()
    if command is None:
        return [docker.NO_COMPOSE]
    r = docker.compose(command, Path(m.backend["compose"]), project, "down", "--timeout", "5",
                       services=len(m.satellites))
    try:
        left = [f"container {name} ({state})" for name, state in docker.containers(project).items()]
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return [f"cannot list the project's containers: {exc}"]
    if r.returncode != 0:
        left.append(f"{' '.join(command)} down failed: {r.stderr.strip()}")
    return left


def _swarm_down(m: Manifest) -> list:
    """`docker stack rm`, then wait until the stack's objects are gone and no satellite answers."""
    if not m.backend.get("stack"):
        return []  # the launch stopped before it named a stack: nothing was deployed
    signer = signer_for_manifest(m)

    def silent() -> bool:  # nobody answers a NOOP within a second
        return not wait_healthy(m.ground_addresses(), m.ground_host, 1.0, quiet=True, signer=signer)

    try:
        return swarm.remove(m.backend.get("docker_host", ""), m.backend["stack"], silent)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [f"cannot ask the swarm manager: {exc}"]


def _main_manifest(m: Manifest, manifest_path: Path, action: str) -> None:
    """A ground site's manifest describes no launch of its own: `stop` and `status` take the main one."""
    if m.site_of:
        raise ValueError(f"{manifest_path} is a ground site's manifest; {action} the constellation with its main "
                         f"manifest: tools/launch_constellation.py {action} --manifest {m.site_of}")


def stop(manifest_path: Path, quiet: bool = False) -> int:
    m = Manifest.load(manifest_path)
    _main_manifest(m, manifest_path, "stop")
    if m.launcher_pid and m.launcher_pid != self_pid() and processes.alive(m.launcher_pid, "launch"):
        # a foreground launcher owns this run: ask it to tear down, then verify below
        os.kill(m.launcher_pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and processes.alive(m.launcher_pid):
            time.sleep(0.1)
    n_local = sum(1 for e in m.satellites if e.pid and not e.remote)
    left = teardown(m)
    marker = m.backend.get("marker", "skymem_node")  # a pid may be reused once its node has exited
    still = [e.pid for e in m.satellites if e.pid and not e.remote and processes.alive(e.pid, marker)]
    if left or still:
        print(f"launch_constellation: could not stop everything: {left or still}", file=sys.stderr)
        return 1
    manifest_path.unlink(missing_ok=True)
    sites.remove_manifests(m)
    if not quiet:
        hosts = m.backend.get("hosts", []) if m.backend.get("kind") == "ssh" else []
        where = (f"{sum(1 for e in m.satellites if e.pid)} processes on {len(hosts)} ssh hosts" if hosts
                 else f"{len(m.satellites)} containers removed" if m.backend.get("kind") == "docker"
                 else f"stack {m.backend.get('stack')} removed: {len(m.satellites)} services on "
                      f"{len(m.backend.get('nodes', []))} swarm nodes" if m.backend.get("kind") == "swarm"
                 else f"{n_local} local processes")
        if m.sites:
            where += f"; {len(m.sites)} ground site namespaces removed"
        print(f"stopped {m.planes}x{m.sats} constellation ({where}); none left running", file=sys.stderr)
    return 0


def status(manifest_path: Path) -> int:
    m = Manifest.load(manifest_path)
    _main_manifest(m, manifest_path, "status")
    code = {"ssh": _ssh_status, "docker": _docker_status, "swarm": _swarm_status}.get(
        m.backend.get("kind"), _local_status)(m)
    lines, missing = sites.status_lines(m, netns.namespace_exists)
    if lines:
        print(f"{len(m.sites)} ground sites ({len(m.sites) - missing} namespaces there; run a site's process with "
              "`ip netns exec NAMESPACE ...` and its manifest):")
        print("\n".join(lines))
    return code or int(bool(missing))


def _local_status(m: Manifest) -> int:
    marker = m.backend.get("marker", "skymem_node")
    local = [e for e in m.satellites if e.pid and not e.remote]
    alive = [e for e in local if processes.alive(e.pid, marker)]
    print(f"{m.planes}x{m.sats} {m.runtime} constellation: {len(alive)}/{len(local)} local processes alive; "
          f"RSS {rss_kib([e.pid for e in alive]) / 1024:.1f} MiB")
    return 0 if len(alive) == len(local) else 1


def _ssh_status(m: Manifest) -> int:
    """One line per ssh host: how many of its satellites' processes still run, or why it cannot be asked."""
    config = m.backend.get("ssh_config")
    running = total = 0
    unhealthy = []
    for dest in m.backend.get("hosts", []):
        pids = [e.pid for e in m.satellites if e.remote == dest and e.pid]
        total += len(pids)
        try:
            alive = ssh.alive_pids(dest, pids, config) if pids else []
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            print(f"  {dest}: unreachable over ssh ({str(exc).splitlines()[0]})")
            unhealthy.append(f"{dest} (unreachable)")
            continue
        running += len(alive)
        print(f"  {dest}: {len(alive)}/{len(pids)} satellites running")
        if len(alive) < len(pids):
            unhealthy.append(f"{dest} ({len(alive)}/{len(pids)} running)")
    print(f"{m.planes}x{m.sats} {m.runtime} constellation on {len(m.backend.get('hosts', []))} ssh hosts: "
          f"{running}/{total} satellites running" + (f"; unhealthy: {', '.join(unhealthy)}" if unhealthy else ""))
    return 0 if not unhealthy else 1


def _docker_status(m: Manifest) -> int:
    """How many of the satellites' containers run; the others by name and state."""
    try:
        states = docker.containers(m.backend["project"])
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"cannot ask the Docker engine: {exc}")
        return 1
    names = [container_name(m.backend["project"], e.plane, e.sat) for e in m.satellites]
    unhealthy = [f"{n} ({states.get(n, 'missing')})" for n in names if states.get(n) != "running"]
    for line in unhealthy:
        print(f"  container {line}")
    print(f"{m.planes}x{m.sats} constellation in containers (project {m.backend['project']}): "
          f"{len(names) - len(unhealthy)}/{len(names)} running")
    return 0 if not unhealthy else 1


def _swarm_status(m: Manifest) -> int:
    """One line per swarm node: how many of its satellites' services run their task; the others by name."""
    stack = m.backend["stack"]
    try:
        replicas = swarm.service_replicas(m.backend.get("docker_host", ""), stack)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"cannot ask the swarm manager: {exc}")
        return 1
    hostname = {n["address"]: n["hostname"] for n in m.backend.get("nodes", [])}
    unhealthy, by_node = [], {}
    for e in m.satellites:
        name = swarm.service_name(stack, e.plane, e.sat)
        state = replicas.get(name, "missing")
        running = by_node.setdefault(e.host, [0, 0])
        running[1] += 1
        if state.split(" ")[0] == "1/1":
            running[0] += 1
        else:
            unhealthy.append(f"{name} ({state})")
    for address, (up, total) in by_node.items():
        print(f"  swarm node {hostname.get(address, '?')} ({address}): {up}/{total} satellites running")
    for line in unhealthy:
        print(f"  service {line}")
    print(f"{m.planes}x{m.sats} constellation as swarm stack {stack} on {len(by_node)} nodes: "
          f"{len(m.satellites) - len(unhealthy)}/{len(m.satellites)} running")
    return 0 if not unhealthy else 1


def summary_table(m: Manifest) -> str:
    cfs_ports = any(e.command_port for e in m.satellites)
    tlm = any(e.tlm_host for e in m.satellites)
    rows = [("plane", "sats", "host", "isl ports", "ground ports") + ("CI_LAB ports",) * cfs_ports
            + ("telemetry to",) * tlm + ("pids",)]
    for p in range(m.planes):
        es = m.satellites[p * m.sats:(p + 1) * m.sats]
        hosts = sorted({e.host for e in es})
        tlm_to = [e.tlm_host for e in es]  # one address each on one host, in index order
        rows.append((str(p), str(len(es)), ",".join(hosts) if len(hosts) <= 2 else f"{es[0].host}..{es[-1].host}",
                     _span(es[0].isl_port, es[-1].isl_port), _span(es[0].ground_port, es[-1].ground_port))
                    + (f"{es[0].command_port}-{es[-1].command_port}",) * cfs_ports
                    + ((f"{tlm_to[0]}-{tlm_to[-1]}" if tlm_to[0] != tlm_to[-1] else tlm_to[0])
                       + f":{es[0].tlm_port}",) * tlm
                    + (f"{es[0].pid}..{es[-1].pid}" if es[0].pid else "-",))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"
