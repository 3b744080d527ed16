"""Booting a constellation: local processes, network namespaces, ssh hosts, cFS, docker.

The manifest is written before the health check, so `stop` can always tear
down what was started, even when the boot fails half way.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from skymemory.launcher import cfs, cfs_limits, docker, firewall, keys, netns, nodes, processes, sites, ssh, swarm
from skymemory.launcher.common import LaunchError, live_pids, log, log_tail, pss_kib, rss_kib, self_pid
from skymemory.launcher.health import crossing_pairs, isl_failures, wait_healthy
from skymemory.launcher.machines import container_name
from skymemory.launcher.stop import summary_table, teardown
from skymemory.orbit.manifest import Manifest, SatelliteEntry
from skymemory.protocol.auth import signer_for_manifest


def start(args) -> int:
    manifest_path: Path = args.manifest
    if manifest_path.exists():
        try:
            old = Manifest.load(manifest_path)
        except ValueError:
            old = None
        if old is not None and old.backend.get("kind") in ("ssh", "docker", "swarm"):
            raise LaunchError(f"{manifest_path} describes a {old.backend['kind']} constellation that may still run "
                              f"elsewhere; stop it first: tools/launch_constellation.py stop --manifest {manifest_path}")
        if old is not None and live_pids(old):
            raise LaunchError(f"a constellation from {manifest_path} is still running "
                              f"({len(live_pids(old))} live processes); stop it first: "
                              f"tools/launch_constellation.py stop --manifest {manifest_path}")
        log(args, f"replacing stale manifest {manifest_path} (none of its processes run)")
    run_dir: Path = args.run_dir.resolve()
    made_run_dir = not run_dir.exists()  # a failed boot removes it again (else only the keys it wrote)
    stale = processes.read_pid_files(run_dir / "pids")
    if any(processes.alive(p, "skymem_node") for p in stale.values()):
        raise LaunchError(f"live node processes are listed in {run_dir / 'pids'}; stop them first")
    for f in (run_dir / "pids").glob("*.pid") if (run_dir / "pids").is_dir() else []:
        f.unlink()

    n = args.planes * args.sats
    epoch_ms = int(time.time() * 1000)
    t0 = time.monotonic()
    m = Manifest(planes=args.planes, sats=args.sats, altitude_km=args.altitude_km,
                 inclination_deg=args.inclination_deg, walker_phase=args.walker_phase, epoch_ms=epoch_ms,
                 time_scale=args.time_scale, runtime=args.runtime, ground_station=args.ground_station,
                 ground_overhead=args.overhead, chunk_size=args.chunk_size, memory_budget=args.memory_budget,
                 link=nodes.link_profile(args), run_dir=str(run_dir), launcher_pid=self_pid(),
                 created_unix=time.time())
    if args.runtime == "cfs":
        _check_cfs_fits(args, n)  # before anything starts
    try:
        group = processes.ProcessGroup(run_dir, die_with_parent=not args.detach)
        common = nodes.node_options(args, epoch_ms)
        key_opts = _make_keys(args, m, run_dir)  # per satellite: its own key file
        log(args, f"booting {args.planes}x{args.sats} = {n} satellites ({_backend_name(args)}); run dir {run_dir}")
        if args.port_warning:
            print(f"launch_constellation: warning: {args.port_warning}", file=sys.stderr)
        if args.layout.per_satellite:
            log(args, f"  an address per satellite: {args.layout.address(0)}..{args.layout.address(n - 1)}, ISL "
                      f"port {args.layout.isl_base}, ground port {args.layout.ground_base} (--addresses)")
        if args.hosts:
            _start_ssh(args, m, common, key_opts)
        elif args.runtime in ("docker", "swarm"):
            problem = (_start_docker if args.runtime == "docker" else _start_swarm)(args, m, common, key_opts)
            if problem:  # nothing was started
                print(f"launch_constellation: {problem}", file=sys.stderr)
                return 1
        elif args.runtime == "cfs":
            _start_cfs(args, m, common, group)
        else:
            _start_local(args, m, common, key_opts, group)
        m.process_group = group.pgid
        m.save(manifest_path)
        started_s = time.monotonic() - t0

        next_log_check = [0.0]

        def abort() -> str | None:
            dead = group.dead()
            if dead:
                name, code = next(iter(dead.items()))
                return (f"{len(dead)} satellite process(es) exited during boot, e.g. {name} with code {code}:\n"
                        + _why_failed(m, sorted(dead)))
            if m.runtime == "docker" and time.monotonic() >= next_log_check[0]:
                next_log_check[0] = time.monotonic() + 2.0  # `docker ps` costs a fraction of a second
                stopped = {c: st for c, st in docker.containers(m.backend["project"]).items() if st != "running"}
                if stopped:
                    name, state = next(iter(stopped.items()))
                    return (f"{len(stopped)} container(s) stopped during boot, e.g. {name} ({state}); its log:\n"
                            + docker.logs_tail(name))
            if m.runtime == "swarm" and time.monotonic() >= next_log_check[0]:
                next_log_check[0] = time.monotonic() + 3.0  # `docker stack ps` over 95 services takes a while
                errors = swarm.task_errors(m.backend["docker_host"], m.backend["stack"])
                if errors:
                    return f"{len(errors)} task(s) of the stack failed during boot, e.g. {errors[0]}"
            if m.runtime == "cfs" and time.monotonic() >= next_log_check[0]:
                next_log_check[0] = time.monotonic() + (3.0 if args.hosts else 0.5)  # ssh costs more
                bad = _failing_instances(m)
                if bad:
                    return f"{len(bad)} cFS instance(s) reported errors while booting:\n" + _why_failed(m, bad)
            return None

        healthy = wait_healthy(m.ground_addresses(), m.ground_host, args.health_timeout, args.quiet, abort,
                               signer_for_manifest(m))
        if len(healthy) < n:
            missing = sorted(set(m.ground_addresses()) - healthy)
            raise LaunchError(f"{n - len(healthy)} of {n} satellites did not answer a NOOP within "
                              f"{args.health_timeout:g} s, e.g. {missing[:5]}\n"
                              + _why_failed(m, [nodes.sat_name(p, s) for p, s in missing]))
        if m.backend.get("kind") in ("netns", "swarm"):
            _check_isl_between_machines(m)
        if m.sites:
            _write_sites(args, m, manifest_path)
    except BaseException as exc:
        log(args, f"boot failed ({(str(exc).splitlines() or [type(exc).__name__])[0]}); tearing down")
        left = teardown(m)
        manifest_path.unlink(missing_ok=True)
        sites.remove_manifests(m)
        if not left:  # (a survivor keeps its pid file and log)
            _remove_what_boot_wrote(args, m, run_dir, made_run_dir)
        if isinstance(exc, KeyboardInterrupt):
            return 130
        raise
    boot_s = time.monotonic() - t0
    local = [e.pid for e in m.satellites if e.pid and not e.remote]
    if not args.quiet:
        print(summary_table(m), file=sys.stderr)
    memory = (f"; total RSS {rss_kib(local) / 1024:.1f} MiB (PSS {pss_kib(local) / 1024:.1f} MiB) over {len(local)} "
              "local processes" if local else "")
    if m.runtime == "docker":
        memory = _container_memory(m)
    started = {"docker": "containers", "swarm": "services"}.get(m.runtime, "processes")
    print(f"{n} satellites healthy; {started} started in {started_s:.2f} s, boot-to-healthy {boot_s:.2f} s{memory}",
          file=sys.stderr)
    print(f"manifest: {manifest_path}")
    sys.stdout.flush()
    if args.detach:
        m.launcher_pid = 0
        m.save(manifest_path)
        log(args, f"detached; stop with: tools/launch_constellation.py stop --manifest {manifest_path}")
        return 0
    return _foreground(args, m, group, manifest_path)


def _write_sites(args, m: Manifest, manifest_path: Path) -> None:
    """Each ground site's manifest beside the main one, and how to run a process there."""
    for site, path in zip(m.sites, sites.write_manifests(m, manifest_path)):
        log(args, f"  ground site {site['site']}: namespace {site['namespace']} ({site['address']}), overhead "
                  f"{tuple(site['ground_overhead'])} at epoch, station {site['ground_station']}: "
                  f"ip netns exec {site['namespace']} skymemory ... --manifest {path}")


def _remove_what_boot_wrote(args, m: Manifest, run_dir: Path, made_run_dir: bool) -> None:
    """After a failed boot, nothing of it stays here: the run directory when this launch made it, else the key
    files it wrote (the ground's, each satellite's, their copies in cFS instances' /cf)."""
    if made_run_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
        log(args, f"removed the run directory {run_dir}")
        return
    folders = [run_dir / "pids", run_dir / "logs"]
    if m.auth_key_file:
        ground = Path(m.auth_key_file)
        for p in range(args.planes):
            for s in range(args.sats):
                keys.satellite_key_file(ground, p, s).unlink(missing_ok=True)
                (run_dir / "cfs" / nodes.sat_name(p, s) / keys.CFS_KEY_FILE).unlink(missing_ok=True)
        ground.unlink(missing_ok=True)
        folders.append(keys.satellite_key_file(ground, 0, 0).parent)
    if m.content_key_file:
        Path(m.content_key_file).unlink(missing_ok=True)
    for folder in folders:
        with contextlib.suppress(OSError):  # only when empty: an earlier run's logs stay
            folder.rmdir()
    log(args, f"removed what it wrote in {run_dir}" + (" (key files included)" if m.auth_key_file else ""))


def _make_keys(args, m: Manifest, run_dir: Path):
    """The constellation's keys (unless --insecure): the ground's file, named in the manifest, and each
    satellite's own. Returns, per satellite entry, the node options that hand a native node its own file:
    the file itself here, its copy in --remote-dir on ssh hosts (_start_ssh copies it there), its
    read-only mount in containers. cFS instances get a copy in their /cf instead."""
    m.content_key_file = str(keys.make_content_key_file(run_dir))  # sealing: the ground's alone, either way
    if args.insecure:
        log(args, "  --insecure: no authentication; whoever reaches a port can command these satellites")
        return lambda e: []
    sats = [(p, s) for p in range(args.planes) for s in range(args.sats)]
    m.auth_key_file = str(keys.make_key_file(run_dir, sats))  # the ground's, wherever the satellites run
    if args.runtime == "cfs":
        return lambda e: []
    if args.hosts:
        return lambda e: ["--auth-keys", keys.remote_key_file(args.remote_dir, e.plane, e.sat)]
    if args.runtime in ("docker", "swarm"):
        return lambda e: ["--auth-keys", keys.CONTAINER_KEY_FILE]
    return lambda e: ["--auth-keys", str(keys.satellite_key_file(m.auth_key_file, e.plane, e.sat))]


def _own_key_files(m: Manifest) -> dict | None:
    """Each satellite's own key file here, {(plane, sat): path} (None: --insecure)."""
    if not m.auth_key_file:
        return None
    return {(e.plane, e.sat): keys.satellite_key_file(m.auth_key_file, e.plane, e.sat) for e in m.satellites}


def _failing_instances(m: Manifest) -> list[str]:
    """cFS instances whose log already reports an error (see cfs.failing)."""
    by_host: dict[str, list[str]] = {}
    for e in m.satellites:
        by_host.setdefault(e.remote, []).append(nodes.sat_name(e.plane, e.sat))
    bad = []
    for host, names in by_host.items():
        if host:
            try:
                bad += ssh.failing(host, m.backend["remote_dir"], names, m.backend.get("ssh_config"))
            except (RuntimeError, OSError, subprocess.TimeoutExpired):
                pass  # the health check's timeout still ends the boot
        else:
            logs = {}
            for name in names:
                try:
                    logs[name] = (Path(m.run_dir) / "logs" / f"{name}.log").read_text(errors="replace")
                except FileNotFoundError:
                    pass
            bad += cfs.failing(logs)
    return bad


def _why_failed(m: Manifest, names: list[str]) -> str:
    """For cFS, the first error line of each failed instance's log; for a node, the end of one log."""
    if m.runtime == "docker":
        e = next(e for e in m.satellites if nodes.sat_name(e.plane, e.sat) == names[0])
        name = container_name(m.backend["project"], e.plane, e.sat)
        return f"end of container {name}'s log:\n" + docker.logs_tail(name)
    if m.runtime == "swarm":
        e = next(e for e in m.satellites if nodes.sat_name(e.plane, e.sat) == names[0])
        name = swarm.service_name(m.backend["stack"], e.plane, e.sat)
        return f"end of service {name}'s log:\n" + swarm.logs_tail(m.backend["docker_host"], name)
    if m.runtime != "cfs" and m.backend.get("kind") == "ssh":
        e = next(e for e in m.satellites if nodes.sat_name(e.plane, e.sat) == names[0])
        try:
            return f"end of {names[0]}'s log on {e.remote}:\n" + ssh.log_tail(
                e.remote, m.backend["remote_dir"], names[0], config=m.backend.get("ssh_config"))
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            return f"(log of {names[0]} on {e.remote} not read: {exc})"
    if m.runtime != "cfs":
        return log_tail(Path(m.run_dir), names[0])
    by_host: dict[str, list[str]] = {}
    for e in m.satellites:
        if nodes.sat_name(e.plane, e.sat) in names:
            by_host.setdefault(e.remote, []).append(nodes.sat_name(e.plane, e.sat))
    lines: dict[str, str | None] = {}
    for host, mine in by_host.items():
        if host:
            try:
                lines.update({f"{host} {k}": v for k, v in ssh.first_errors(
                    host, m.backend["remote_dir"], mine, m.backend.get("ssh_config")).items()})
            except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
                lines.update({f"{host} {k}": f"(log not read: {exc})" for k in mine})
        else:
            for k in mine:
                try:
                    text = (Path(m.run_dir) / "logs" / f"{k}.log").read_text(errors="replace")
                except FileNotFoundError:
                    text = ""
                lines[k] = cfs.first_error(text)
    return "first error line of each failed instance's log:\n" + cfs.first_errors(lines)


def _backend_name(args) -> str:
    if args.netns:
        return f"native in {args.netns} network namespaces"
    if args.hosts:
        return f"{args.runtime} over ssh on {len(args.hosts)} hosts"
    return args.runtime


def _progress(args, k: int, n: int) -> None:
    if args.quiet:
        return
    if sys.stderr.isatty():
        print(f"  started {k}/{n}", end="\r" if k < n else "\n", file=sys.stderr, flush=True)
    elif k == n or k % max(1, n // 10) == 0:
        print(f"  started {k}/{n}", file=sys.stderr, flush=True)


def _entries(args, host_of) -> list[SatelliteEntry]:
    """One entry per satellite: its host and ports; for cFS its cpuid and CI_LAB port; its telemetry address."""
    out = []
    for p in range(args.planes):
        for s in range(args.sats):
            i = p * args.sats + s
            e = SatelliteEntry(p, s, host_of(i), args.layout.isl_port(i), args.layout.ground_port(i))
            if args.runtime == "cfs":
                e.cpuid = cfs.cpuid(args.cfs_first_cpuid, i)
                e.command_port = cfs.ci_lab_port(args.cfs_ci_lab_base, e.cpuid)
            if args.tlm_address:
                e.tlm_host, e.tlm_port = cfs.tlm_address(args.tlm_address, i, bool(args.hosts)), args.tlm_port
            out.append(e)
    return out


def _instance_cost(args) -> cfs_limits.InstanceCost:
    return cfs_limits.InstanceCost(args.cfs_queues_per_instance, args.cfs_queue_slots_per_instance,
                                   args.cfs_queue_depth)


def _cfs_config(args, common: list[str], e: SatelliteEntry, hosts: list[str] | None) -> dict[str, str]:
    """skymemory.cfg of one instance: the node options, its identity, its machine (docs/CFS.md)."""
    config = cfs.options_as_config(common)
    config.update({"isl-port-base": str(args.isl_port_base), "ground-port-base": str(args.ground_port_base),
                   "first-cpuid": str(args.cfs_first_cpuid), "plane": str(e.plane), "sat": str(e.sat),
                   "bind": e.host})
    if hosts:
        config["hosts"] = ", ".join(hosts)
    return config


def _start_local(args, m: Manifest, common: list[str], key_opts, group: processes.ProcessGroup) -> None:
    node = str(nodes.find_node(args.node))
    n = args.planes * args.sats
    peers = None
    if args.netns:
        why = netns.probe()
        if why:
            raise LaunchError(f"--netns is not possible here: {why}")
        try:
            record = netns.build(args.netns, sites=args.sites)
        except netns.NetnsUnavailable as exc:
            raise LaunchError(f"--netns is not possible here: {exc}") from None
        m.backend = {"kind": "netns", "marker": "skymem_node", **record}
        m.sites = sites.describe(m, args.manifest, record.get("site_namespaces", []), record.get("site_addresses", []))
        m.ground_host = record["ground_address"]
        host_index = lambda i: i * args.netns // n  # contiguous shares, like satellites per mini PC
        m.satellites = _entries(args, lambda i: netns.host_address(host_index(i)))
        for e in m.satellites:
            e.netns = record["namespaces"][host_index(e.plane * args.sats + e.sat)]
        m.save(args.manifest)  # the namespaces are recorded before the firewall is touched
        m.backend["firewall_rule"] = firewall.allow_bridge(record["bridge"])
        if m.backend["firewall_rule"]:
            log(args, f"  bridged traffic goes through iptables here (net.bridge.bridge-nf-call-iptables = 1): "
                      f"ACCEPT rule for {record['bridge']} added to {m.backend['firewall_rule']['chain']} "
                      "until stop")
        peers = str(nodes.write_peers(Path(m.run_dir) / "peers.txt", m.satellites))
        m.save(args.manifest)  # teardown info on disk before any process starts
    else:
        m.backend = {"kind": "native", "marker": "skymem_node", "addresses": args.layout.name}
        m.ground_host = args.bind
        m.satellites = _entries(args, args.layout.address)
        _check_ports_free(m)
    for k, e in enumerate(m.satellites, 1):
        argv = nodes.node_argv(node, e, common + key_opts(e), args, peers)
        if e.netns:
            argv = netns.exec_prefix(e.netns) + argv
        e.pid = group.start(nodes.sat_name(e.plane, e.sat), argv)
        _progress(args, k, n)


def _check_isl_between_machines(m: Manifest) -> None:
    """Neighbours on different machines (namespaces, swarm nodes) must hear each other: the ground
    reaches every machine directly, but their ISL traffic crosses a bridge or a network between
    them, where a firewall may drop it."""
    swarm_nodes = m.backend.get("kind") == "swarm"
    pairs = crossing_pairs(m.satellites, m.planes, m.sats, (lambda e: e.host) if swarm_nodes else (lambda e: e.netns))
    failed = isl_failures(m.ground_addresses(), m.ground_host, pairs, signer_for_manifest(m))
    if failed and swarm_nodes:
        src, dst = failed[0]
        raise LaunchError(f"the satellites answer the ground, but {len(failed)} of {len(pairs)} ISLs between swarm "
                          f"nodes carry nothing (e.g. {src} -> {dst}): open the UDP ISL ports "
                          f"{min(e.isl_port for e in m.satellites)}-{max(e.isl_port for e in m.satellites)} "
                          "between the nodes (docker/README.md)")
    if failed:
        src, dst = failed[0]
        raise LaunchError(f"the satellites answer the ground, but {len(failed)} of {len(pairs)} ISLs between namespaces "
                          f"carry nothing (e.g. {src} -> {dst}): traffic across the bridge {m.backend['bridge']} is "
                          f"dropped; {firewall.filtering_note()}")


def _check_ports_free(m: Manifest) -> None:
    busy = processes.first_busy_udp([(e.host, e.isl_port) for e in m.satellites] +
                                    [(e.host, e.ground_port) for e in m.satellites])
    if busy is not None:
        raise LaunchError(f"UDP port {busy[0]}:{busy[1]} is already in use; choose other "
                          "--isl-port-base / --ground-port-base")


def _start_cfs(args, m: Manifest, common: list[str], group: processes.ProcessGroup) -> None:
    n = args.planes * args.sats
    m.backend = {"kind": "cfs", "marker": args.cfs_binary, "exe": str(args.cfs_exe.resolve())}
    m.ground_host = "127.0.0.1"
    m.satellites = _entries(args, lambda i: "127.0.0.1")
    busy = processes.busy_udp_port("0.0.0.0", [e.command_port for e in m.satellites])
    if busy is not None:  # CI_LAB binds every address
        raise LaunchError(f"UDP port {busy} (a CI_LAB port) is already in use; choose another --cfs-first-cpuid")
    for k, e in enumerate(m.satellites, 1):
        name = nodes.sat_name(e.plane, e.sat)
        work = cfs.prepare_workdir(args.cfs_exe, Path(m.run_dir) / "cfs" / name, _cfs_config(args, common, e, None))
        if m.auth_key_file:  # its own keys only
            keys.install_for_cfs(keys.satellite_key_file(m.auth_key_file, e.plane, e.sat), work)
        # the boot is judged by its log's error lines: an earlier launch's must not count (the log is appended to)
        (Path(m.run_dir) / "logs" / f"{name}.log").unlink(missing_ok=True)
        e.pid = group.start(name, cfs.core_argv(args.cfs_binary, e.cpuid), cwd=work)
        _progress(args, k, n)


def _start_ssh(args, m: Manifest, common: list[str], key_opts) -> None:
    n = args.planes * args.sats
    hosts = args.hosts
    config = str(args.ssh_config) if args.ssh_config else None
    addresses = [ssh.host_address(h) for h in hosts]
    host_index = lambda i: i * len(hosts) // n  # contiguous shares, the rule of SKYMEM_HOST_OF on cFS
    m.satellites = _entries(args, lambda i: addresses[host_index(i)])
    shares = [[e for e in m.satellites if host_index(e.plane * args.sats + e.sat) == h] for h in range(len(hosts))]
    m.backend = {"kind": "ssh", "marker": args.cfs_binary if args.runtime == "cfs" else "skymem_node",
                 "hosts": hosts, "remote_dir": args.remote_dir, "ssh_config": config,
                 "remote_key_dir": keys.remote_key_dir(args.remote_dir) if m.auth_key_file else ""}
    m.ground_host = "0.0.0.0"
    peers = nodes.peers_text(m.satellites)
    remote_peers = f"{args.remote_dir}/peers.txt"
    local_node = str(nodes.find_node(args.node)) if args.copy_node else None
    remote_key = m.backend["remote_key_dir"]
    m.save(args.manifest)  # the hosts on disk before the first key copy, so `stop` can remove every copy
    for h, dest in enumerate(hosts):
        mine = shares[h]
        if remote_key:  # before anything starts there: the keys of its own satellites, no others
            _copy_keys(m, dest, mine, config)
        if args.runtime == "cfs":
            jobs = [(nodes.sat_name(e.plane, e.sat), cfs.core_argv(args.cfs_binary, e.cpuid),
                     cfs.config_text(_cfs_config(args, common, e, addresses))) for e in mine]
            script = ssh.cfs_start_script(args.remote_dir, str(args.cfs_exe), args.cfs_binary, jobs, remote_key)
        else:
            node = ssh.copy_node(dest, local_node, args.remote_dir, config) if local_node else args.remote_node
            jobs = [(nodes.sat_name(e.plane, e.sat),
                     nodes.node_argv(node, e, common + key_opts(e), args, remote_peers)) for e in mine]
            script = ssh.start_script(args.remote_dir, peers, jobs)
        pids = ssh.parse_pids(ssh.run_script(dest, script, config=config))
        for e in mine:
            e.remote = dest
            e.pid = pids.get(nodes.sat_name(e.plane, e.sat), 0)
        m.save(args.manifest)  # each host's pids on disk as soon as they exist
        log(args, f"  {dest}: started {len(pids)}/{len(mine)} satellites"
                  + (f", each keyed with its own key file, in {remote_key}" if remote_key else ""))
        if len(pids) != len(mine):
            raise LaunchError(f"{dest} started only {len(pids)} of {len(mine)} nodes")


def _copy_keys(m: Manifest, dest: str, mine: list, config: str | None) -> None:
    """The key files of the satellites `dest` runs to that host; a host it cannot reach stops the launch,
    since its nodes would otherwise run without authentication."""
    files = {keys.remote_key_file(m.backend["remote_dir"], e.plane, e.sat):
             str(keys.satellite_key_file(m.auth_key_file, e.plane, e.sat)) for e in mine}
    try:
        ssh.copy_keys(dest, files, config)
    except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as exc:
        raise LaunchError(f"the key files cannot be copied to {dest}:{m.backend['remote_key_dir']} "
                          f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); the launch stops rather "
                          "than run unauthenticated (--insecure launches without a key)") from None


def _check_cfs_fits(args, n: int) -> None:
    """Every host's share of cFS instances must fit its message-queue limits (read over ssh for --hosts)."""
    cost = _instance_cost(args)
    hosts = args.hosts or [""]
    problems = []
    for h, dest in enumerate(hosts):
        count = sum(1 for i in range(n) if i * len(hosts) // n == h)
        try:
            config = str(args.ssh_config) if args.ssh_config else None
            limits = (cfs_limits.HostLimits.parse(ssh.run_script(dest, cfs_limits.PROBE_SCRIPT, config=config)) if dest
                      else cfs_limits.HostLimits.local())
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            raise LaunchError(f"cannot read the message-queue limits of {dest}: {exc}") from None
        where = dest or "this host"
        log(args, f"{cfs_limits.summary(limits, cost, where)}" + (f"; its share: {count}" if dest else ""))
        problem = cfs_limits.problem(count, limits, cost, where)
        if problem:
            problems.append(problem)
    if problems:
        raise LaunchError("\n".join(problems))


def _start_docker(args, m: Manifest, common: list[str], key_opts) -> str | None:
    """Write the compose file and bring the containers up; returns why not when no engine or Compose is there."""
    m.ground_host = args.bind
    m.satellites = _entries(args, args.layout.address)
    project = f"skymem{secrets.token_hex(3)}"
    jobs = [((e.plane, e.sat), nodes.node_argv("", e, common + key_opts(e), args, None)[1:]) for e in m.satellites]
    try:
        compose_path = docker.write_compose(Path(m.run_dir) / "docker-compose.yml", project, jobs,
                                            args.container_cpus, args.container_memory_mib, _own_key_files(m))
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    command = docker.compose_command()
    problem = docker.NO_COMPOSE if command is None else docker.engine_problem()
    if problem:
        return (f"{problem}; compose file written to {compose_path} (run `docker compose -f {compose_path} "
                f"-p {project} up -d` where an engine and Compose are)")
    _check_ports_free(m)  # host networking: the containers' nodes bind this machine's ports
    m.backend = {"kind": "docker", "compose": str(compose_path), "project": project, "compose_command": command,
                 "addresses": args.layout.name}
    m.save(args.manifest)  # teardown info on disk before any container exists
    log(args, f"  {' '.join(command)} up -d: {len(jobs)} containers, project {project}"
              + (f", each keyed with its own key file mounted read-only at {keys.CONTAINER_KEY_FILE}"
                 if m.auth_key_file else ""))
    r = docker.compose(command, compose_path, project, "up", "-d", services=len(jobs))
    if r.returncode != 0:
        raise LaunchError(f"{' '.join(command)} up failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return None


def _start_swarm(args, m: Manifest, common: list[str], key_opts) -> str | None:
    """Deploy the stack on the swarm the docker CLI reaches; returns why not when there is no swarm
    manager or no labelled node (nothing was started then)."""
    docker_host = os.environ.get("DOCKER_HOST", "")
    problem = swarm.manager_problem(docker_host)
    if problem:
        return problem
    try:
        hosts = swarm.swarm_hosts(docker_host)
    except ValueError as exc:
        return str(exc)
    n = args.planes * args.sats
    if len(hosts) > n:
        return f"the swarm has {len(hosts)} labelled hosts for {n} satellites"
    host_index = [swarm.host_of(i, n, len(hosts)) for i in range(n)]
    m.ground_host = "0.0.0.0"  # the ground reaches each node by its own address
    m.satellites = _entries(args, lambda i: hosts[host_index[i]].address)
    stack = f"skymem{secrets.token_hex(3)}"
    run_dir = Path(m.run_dir)
    peers = nodes.write_peers(run_dir / "peers.txt", m.satellites)
    jobs = [((e.plane, e.sat), host_index[e.plane * args.sats + e.sat],
             nodes.node_argv("", e, common + key_opts(e), args, swarm.PEERS_TARGET)[1:]) for e in m.satellites]
    try:
        text = swarm.stack_text(jobs, peers, _own_key_files(m))
    except ValueError as exc:
        raise LaunchError(str(exc)) from None
    stack_file = run_dir / "swarm-stack.yml"
    stack_file.write_text(text)
    m.backend = {"kind": "swarm", "stack": stack, "stack_file": str(stack_file), "docker_host": docker_host,
                 "nodes": [{"label": h.index, "id": h.node_id, "hostname": h.hostname, "address": h.address}
                           for h in hosts]}
    m.save(args.manifest)  # teardown info on disk before any service exists
    if args.sites:
        _join_swarm_sites(args, m, [h.address for h in hosts])
    for h in hosts:
        log(args, f"  swarm node {h.hostname} ({h.address}, {swarm.HOST_LABEL}={h.index}): "
                  f"{host_index.count(h.index)} satellites")
    log(args, f"  docker stack deploy: stack {stack}, {n} services"
              + (f", each keyed with its own secret ({stack}_keys-P-S), read-only at {keys.CONTAINER_KEY_FILE}"
                 if m.auth_key_file else ""))
    swarm.deploy(docker_host, stack_file, stack)
    return None


def _join_swarm_sites(args, m: Manifest, addresses: list[str]) -> None:
    """--sites with --runtime swarm: the ground sites as namespaces on the bridge of this machine that the swarm
    nodes are on (nodes emulated as namespaces, as make test-swarm's are); the bridge is left as it is."""
    found = netns.bridge_for(addresses)
    if found is None:
        raise LaunchError(f"--sites {args.sites} with --runtime swarm puts the ground sites on the bridge of this "
                          f"machine the swarm nodes are on, and no bridge here holds their addresses "
                          f"({', '.join(addresses)}): with swarm nodes on machines of their own, run each site on a "
                          "machine of its own, with a copy of the manifest whose ground_host, ground_overhead and "
                          "ground_station are that site's")
    why = netns.probe()
    if why:
        raise LaunchError(f"--sites is not possible here: {why}")
    bridge, iface = found
    try:
        record = netns.join_sites(bridge, iface, addresses, args.sites)
    except netns.NetnsUnavailable as exc:
        raise LaunchError(f"--sites is not possible here: {exc}") from None
    m.backend["site_record"] = record
    m.sites = sites.describe(m, args.manifest, record["site_namespaces"], record["site_addresses"])
    m.save(args.manifest)  # the namespaces are recorded before any service exists
    log(args, f"  {args.sites} ground sites on the swarm nodes' bridge {bridge} ({iface.network}): "
              f"{', '.join(record['site_addresses'])}")


def _container_memory(m: Manifest) -> str:
    """Each container's node (RSS, PSS) and the containerd-shim that holds it, averaged over the containers."""
    names = [container_name(m.backend["project"], e.plane, e.sat) for e in m.satellites]
    nodes_ = list(docker.node_pids(names).values())
    shims = [p for p in (processes.parent_pid(pid) for pid in nodes_) if p]
    if not nodes_:
        return ""
    k = len(nodes_)
    return (f"; per container: node RSS {rss_kib(nodes_) / k:.0f} KiB (PSS {pss_kib(nodes_) / k:.0f} KiB), "
            f"containerd-shim RSS {rss_kib(shims) / max(1, len(shims)):.0f} KiB "
            f"(PSS {pss_kib(shims) / max(1, len(shims)):.0f} KiB), over {k} containers")


def _foreground(args, m: Manifest, group: processes.ProcessGroup, manifest_path: Path) -> int:
    stop_reason: list[str] = []

    def on_signal(signum, _frame):
        stop_reason.append(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    log(args, "running; Ctrl-C stops every satellite")
    code = 0
    while not stop_reason:
        dead = group.dead()
        if dead:
            log(args, f"{len(dead)} satellite(s) exited unexpectedly, e.g. {next(iter(dead))}; stopping")
            code = 1
            break
        time.sleep(0.2)
    log(args, f"stopping ({stop_reason[0] if stop_reason else 'node exit'})")
    left = teardown(m)
    manifest_path.unlink(missing_ok=True)
    sites.remove_manifests(m)
    if left:
        print(f"launch_constellation: {len(left)} processes survived: {left}", file=sys.stderr)
        return 1
    return code
