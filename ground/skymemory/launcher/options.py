"""Command line of tools/launch_constellation.py, with every argument validated."""

from __future__ import annotations

import argparse
import difflib
import ipaddress
import math
import os
import sys
from pathlib import Path

from skymemory.argtypes import int_range
from skymemory.launcher import cfs, cfs_limits, netns, ports, sites
from skymemory.orbit.manifest import DEFAULT_PATH
from skymemory.protocol.wire import SKYMEM_DEFAULT_TTL

MAX_SATELLITES = 16384  # 128 x 128, as measured on one 2-core machine (BENCHMARKS.md)
RUNTIMES = ("native", "cfs", "docker", "swarm")
CONTAINER_MEMORY_MARGIN_MIB = 16  # beyond the chunk store: the binary, socket buffers, queued packets


def _float_range(lo: float, hi: float):
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(v) or v < lo or v > hi:
            raise argparse.ArgumentTypeError(f"{v} is outside [{lo:g}, {hi:g}]")
        return v

    return parse


def _ipv4(text: str) -> str:
    try:
        return str(ipaddress.IPv4Address(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IPv4 address: {text!r}") from None


def _hosts(text: str) -> list[str]:
    hosts = [h.strip() for h in text.split(",")]
    if not hosts or any(not h or any(c.isspace() for c in h) or h.startswith("-") for h in hosts):
        raise argparse.ArgumentTypeError(f"--hosts wants a comma-separated list of ssh destinations, got {text!r}")
    if len(set(hosts)) != len(hosts):
        raise argparse.ArgumentTypeError("--hosts lists a host twice")
    for h in hosts:  # nodes bind the host's address, so it must be an IPv4 literal ([user@]a.b.c.d)
        try:
            ipaddress.IPv4Address(h.rsplit("@", 1)[-1])
        except ValueError:
            raise argparse.ArgumentTypeError(f"--hosts entry {h!r}: want [user@]IPv4-address") from None
    return hosts


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="launch_constellation.py",
        description="Boot a SkyMemory constellation (one process per satellite), health-check it, "
                    "write the manifest the ground reads. `stop` tears a detached one down.",
    )
    p.add_argument("action", nargs="?", choices=("start", "stop", "status"), default="start",
                   help="start (default), stop a detached constellation, or status of its processes")
    p.add_argument("--manifest", type=Path, default=DEFAULT_PATH, help=f"manifest path (default {DEFAULT_PATH})")
    g = p.add_argument_group("constellation")
    g.add_argument("--planes", type=int_range(1, 1024), default=19, help="orbital planes (rows), default 19")
    g.add_argument("--sats", type=int_range(1, 1024), default=5, help="satellites per plane (columns), default 5")
    g.add_argument("--altitude-km", type=_float_range(100, 40000), default=550.0)
    g.add_argument("--inclination-deg", type=_float_range(0, 180), default=53.0)
    g.add_argument("--walker-phase", type=int_range(0, 1023), default=0)
    g.add_argument("--ground-station", type=int_range(0, 0xFFFE), default=0, help="ground station id")
    g.add_argument("--overhead", type=str, default=None,
                   help="PLANE,SAT overhead the ground host at launch (default: the grid centre)")
    g = p.add_argument_group("node options (passed to every satellite)")
    g.add_argument("--memory-budget", type=int_range(4096, 1 << 40), default=64 * 1024 * 1024,
                   help="bytes of chunk memory per satellite (default 64 MiB)")
    g.add_argument("--chunk-size", type=int_range(1, 60000), default=6144, help="max chunk data bytes")
    g.add_argument("--time-scale", type=_float_range(1e-6, 1e6), default=1.0,
                   help="mission seconds per wall second, 1e-6..1e6 (the satellites' range: skymem_options.h)")
    g.add_argument("--delay-scale", type=_float_range(0, 1e6), default=1.0,
                   help="ISL light-time delay multiplier (0 = off)")
    g.add_argument("--ground-delay-ms", type=_float_range(0, 60000), default=0.0)
    g.add_argument("--bandwidth-mbps", type=_float_range(0, 1e6), default=0.0, help="per-link cap, 0 = unlimited")
    for name in ("loss", "dup", "reorder", "corrupt"):
        g.add_argument(f"--{name}", type=_float_range(0, 1), default=0.0, help=f"emulated {name} rate 0..1")
    g.add_argument("--seed", type=int_range(0, 2**32 - 1), default=1)
    g.add_argument("--log-level", choices=("error", "warn", "info", "debug"), default="warn")
    g = p.add_argument_group("where the satellites run")
    g.add_argument("--runtime", choices=RUNTIMES, default="native",
                   help="native processes (default), cfs executables, docker containers on this engine, or a swarm "
                        "stack on the swarm whose manager the docker CLI reaches (DOCKER_HOST; docker/README.md)")
    g.add_argument("--node", type=Path, default=None, help="skymem_node binary (default $SKYMEM_NODE or build/skymem_node)")
    g.add_argument("--bind", type=_ipv4, default="127.0.0.1", help="address the local nodes bind (native)")
    g.add_argument("--isl-port-base", type=int_range(1024, 65535), default=20000)
    g.add_argument("--ground-port-base", type=int_range(1024, 65535), default=30000,
                   help="default 30000: with the ISL ports from 20000, below Linux's ephemeral ports (32768 up)")
    g.add_argument("--addresses", choices=ports.CHOICES, default="auto",
                   help="shared: every satellite on --bind, ports base + i; per-satellite: satellite i on --bind + i, "
                        "ports = the bases; auto (default): shared while its ports stay out of the kernel's "
                        "ephemeral range, else per-satellite (docs/CONTRACTS.md)")
    g.add_argument("--netns", type=int_range(1, 250), default=0, metavar="H",
                   help="spread satellites over H network namespaces (emulated hosts, needs root)")
    g.add_argument("--sites", type=int_range(1, netns.MAX_SITES), default=0, metavar="N",
                   help=f"with --netns (or --runtime swarm on nodes emulated here): N ground sites "
                        f"(1..{netns.MAX_SITES}), each a namespace of its own on the hosts' bridge that runs no "
                        "satellite, with its own address, overhead satellite (spread far apart on the torus) and "
                        "station id, described by a manifest beside --manifest (NAME.site-K.json); run a site's "
                        "processes with `ip netns exec` (launcher/sites.py)")
    g.add_argument("--hosts", type=_hosts, default=None, help="comma-separated ssh hosts to run satellites on")
    g.add_argument("--remote-node", default="skymem_node",
                   help="node binary on --hosts machines: a path, or a name on their PATH (default skymem_node)")
    g.add_argument("--copy-node", action="store_true",
                   help="with --hosts: copy this machine's node binary (--node) into --remote-dir on every host first")
    g.add_argument("--remote-dir", default="/tmp/skymemory", help="working directory on --hosts machines")
    g.add_argument("--ssh-config", type=Path, default=None,
                   help="ssh client config for --hosts (`ssh -F FILE`: user, key, known hosts); default ssh's own")
    g = p.add_argument_group("containers (--runtime docker; docker/README.md)")
    g.add_argument("--container-cpus", type=_float_range(0.01, 1024), default=None,
                   help="CPU cap of every satellite's container, in cores (e.g. 0.25); default none")
    g.add_argument("--container-memory-mib", type=int_range(4, 1 << 20), default=None,
                   help="memory cap of every satellite's container, MiB; must exceed --memory-budget by "
                        f"{CONTAINER_MEMORY_MARGIN_MIB} MiB (the node's own memory); default none")
    g = p.add_argument_group("cFS (--runtime cfs; docs/CFS.md)")
    g.add_argument("--cfs-exe", type=Path, default=None,
                   help="cFS exe directory (with core-cpu1); with --hosts, its path on every host")
    g.add_argument("--cfs-binary", default="core-cpu1", help="name of the cFS core executable in --cfs-exe")
    g.add_argument("--cfs-first-cpuid", type=int_range(1, 65535), default=cfs.DEFAULT_FIRST_CPUID,
                   help=f"cpuid of satellite (0,0); the others follow (default {cfs.DEFAULT_FIRST_CPUID}: "
                        "cpuid 2's CI_LAB port would be TO_LAB's telemetry port)")
    g.add_argument("--cfs-ci-lab-base", type=int_range(1, 65535), default=cfs.DEFAULT_CI_LAB_BASE,
                   help="the mission's CI_LAB base port: CI_LAB listens on base + cpuid - 1 (default 1234)")
    g.add_argument("--cfs-queues-per-instance", type=int_range(1, 10000), default=cfs_limits.QUEUES_PER_INSTANCE,
                   help=f"POSIX message queues one instance creates (default {cfs_limits.QUEUES_PER_INSTANCE}, "
                        "the stock mission with the SkyMemory apps)")
    g.add_argument("--cfs-queue-slots-per-instance", type=int_range(1, 10**7), default=cfs_limits.SLOTS_PER_INSTANCE,
                   help=f"message slots of those queues together (default {cfs_limits.SLOTS_PER_INSTANCE})")
    g.add_argument("--cfs-queue-depth", type=int_range(1, 100000), default=cfs_limits.DEEPEST_PIPE,
                   help=f"the deepest software-bus pipe of the mission, which fs.mqueue.msg_max must allow "
                        f"(default {cfs_limits.DEEPEST_PIPE}, TO_LAB's)")
    g = p.add_argument_group("telemetry (housekeeping of both apps)")
    g.add_argument("--tlm-address", type=_ipv4, default=None,
                   help="where housekeeping goes: on one host satellite i uses this address + i (default "
                        f"{cfs.DEFAULT_TLM_ADDRESS} for cFS, TO_LAB's destination; native nodes send none unless "
                        "given); with --hosts every satellite sends to this address itself")
    g.add_argument("--tlm-port", type=int_range(1, 65535), default=cfs.DEFAULT_TO_LAB_PORT,
                   help=f"telemetry port (default {cfs.DEFAULT_TO_LAB_PORT}, the stock TO_LAB_TLM_PORT)")
    g = p.add_argument_group("launcher behaviour")
    g.add_argument("--detach", action="store_true", help="leave the constellation running and exit; `stop` ends it")
    g.add_argument("--insecure", action="store_true",
                   help="no authentication: without it the launcher makes a key file for this constellation "
                        "(mode 0600 in the run directory, named in the manifest) and every node, cFS app and client "
                        "signs and checks every command and reply with it (docs/RELIABILITY.md)")
    g.add_argument("--health-timeout", type=_float_range(0.5, 3600), default=60.0,
                   help="seconds to wait for every satellite to answer a NOOP")
    g.add_argument("--run-dir", type=Path, default=None, help="pid files and logs (default: next to the manifest)")
    g.add_argument("--quiet", action="store_true", help="no progress line")
    return p


def _check_cfs_ports(parser: argparse.ArgumentParser, args: argparse.Namespace, n: int) -> None:
    """CI_LAB ports (fixed by the cpuids) must miss TO_LAB's port and SkyMemory's own ports."""
    if args.cfs_first_cpuid + n - 1 > 65535:
        parser.error(f"--cfs-first-cpuid {args.cfs_first_cpuid} + {n} satellites runs past cpuid 65535")
    lo = cfs.ci_lab_port(args.cfs_ci_lab_base, args.cfs_first_cpuid)
    hi = lo + n - 1
    if hi > 65535:
        parser.error(f"CI_LAB ports {lo}..{hi} run past 65535; lower --cfs-first-cpuid")
    if lo <= args.tlm_port <= hi:
        parser.error(f"CI_LAB ports {lo}..{hi} (cpuids {args.cfs_first_cpuid}..{args.cfs_first_cpuid + n - 1}) "
                     f"include the telemetry port {args.tlm_port}: CI_LAB would take TO_LAB's telemetry as "
                     "commands; move --cfs-first-cpuid")
    for base, name in ((args.isl_port_base, "--isl-port-base"), (args.ground_port_base, "--ground-port-base")):
        if base <= hi and lo <= base + n - 1:
            parser.error(f"CI_LAB ports {lo}..{hi} overlap the {name} range; move --cfs-first-cpuid or {name}")


def _check_sites(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--sites N: namespaces beside --netns H's, on its bridge, each with its own overhead satellite."""
    if not args.netns and args.runtime != "swarm":
        parser.error(f"--sites {args.sites} needs --netns H (or --runtime swarm on nodes emulated on this machine): "
                     "the ground sites are network namespaces on the bridge of the emulated hosts "
                     "(e.g. --netns 3 --sites 2)")
    if args.netns > netns.max_hosts_with_sites(args.sites):
        parser.error(f"--netns {args.netns} with --sites {args.sites}: the hosts' addresses (.1..) would reach the "
                     f"sites' (.{netns.FIRST_SITE_OCTET - args.sites + 1}..{netns.FIRST_SITE_OCTET}); at most "
                     f"{netns.max_hosts_with_sites(args.sites)} hosts")
    spread = sites.overheads(args.planes, args.sats, args.overhead, args.sites)
    if len(set(spread)) < len(spread):
        parser.error(f"--sites {args.sites} on a {args.planes}x{args.sats} grid: two sites would share an overhead "
                     f"satellite ({spread}); use fewer sites or a larger grid")


def _cfs_exe_problem(exe: Path | None, binary: str, local: bool) -> str | None:
    """What is wrong with --cfs-exe, or None. With --hosts it is a path on the hosts, not checked here."""
    want = "a cFS build's exe/cpu1 directory: <cFS>/build/exe/cpu1 after `make install`, docs/CFS.md step 5"
    if exe is None:
        return f"--runtime cfs needs --cfs-exe DIR ({want})"
    if not local:
        return None
    if not exe.is_dir():
        return f"--cfs-exe {exe} is {'not a directory' if exe.exists() else 'not there'} (want {want})"
    core = exe / binary
    if not core.is_file():
        return f"--cfs-exe {exe} has no {binary} (want {want}; --cfs-binary if the core has another name)"
    if not os.access(core, os.X_OK):
        return f"--cfs-exe {exe}: {binary} is not executable"
    return None


def _unknown_flag(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    """The first flag of argv the parser does not know, with the closest known ones, or None. Checked before
    parsing: argparse would take an unknown flag's value for the optional `action` and name only that value
    (`--base-port 21000`: "invalid choice: '21000'")."""
    known = [o for a in parser._actions for o in a.option_strings]
    for token in argv:
        if token == "--":
            break
        if not token.startswith("-") or token == "-" or token[1:2].isdigit():  # a value, or a negative number
            continue
        flag = token.split("=", 1)[0]
        if flag in known or (flag.startswith("--") and any(o.startswith(flag) for o in known)):  # or abbreviated
            continue
        name = flag.lstrip("-")
        close = [o for o in known if set(name.split("-")) <= set(o.lstrip("-").split("-"))]  # the same words
        by_name = {o.lstrip("-"): o for o in known}
        close = close or [by_name[c] for c in difflib.get_close_matches(name, by_name, n=2, cutoff=0.6)]
        return f"unknown flag {flag}" + (f" (did you mean {' or '.join(close[:2])}?)" if close else "")
    return None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = build_parser()
    unknown = _unknown_flag(parser, sys.argv[1:] if argv is None else argv)
    if unknown:
        parser.error(unknown)
    args = parser.parse_args(argv)
    n = args.planes * args.sats
    if n > MAX_SATELLITES:
        parser.error(f"{n} satellites is more than the launcher's limit of {MAX_SATELLITES}")
    across = args.planes // 2 + args.sats // 2  # the longest shortest path on the torus
    if across > SKYMEM_DEFAULT_TTL:
        parser.error(f"a {args.planes}x{args.sats} grid is {across} ISL hops across, more than the {SKYMEM_DEFAULT_TTL} "
                     "a packet's ttl allows: use a squarer grid")
    one_machine = not (args.netns or args.hosts or args.runtime in ("cfs", "swarm"))
    try:
        args.layout, args.port_warning = ports.choose(n, args.bind, args.isl_port_base, args.ground_port_base,
                                                      args.addresses, one_machine)
    except ValueError as exc:
        parser.error(str(exc))
    if args.overhead is not None:
        try:
            p_, s_ = (int(x) for x in args.overhead.split(","))
        except ValueError:
            parser.error(f"--overhead wants PLANE,SAT, got {args.overhead!r}")
        if not (0 <= p_ < args.planes and 0 <= s_ < args.sats):
            parser.error(f"--overhead {args.overhead} is outside the {args.planes}x{args.sats} grid")
        args.overhead = (p_, s_)
    else:
        args.overhead = (args.planes // 2, args.sats // 2)
    if sum(bool(x) for x in (args.netns, args.hosts and args.runtime != "cfs", args.runtime != "native")) > 1:
        parser.error("choose one of --netns, --hosts, --runtime cfs/docker/swarm (--hosts goes with --runtime cfs)")
    if args.netns and args.netns > n:
        parser.error(f"--netns {args.netns} is more hosts than the {n} satellites")
    if args.sites:
        _check_sites(parser, args)
    if args.hosts and len(args.hosts) > n:
        parser.error(f"--hosts names {len(args.hosts)} hosts for {n} satellites")
    if args.hosts and not args.remote_dir.startswith("/"):  # the start script cds there, then names files in it
        parser.error(f"--remote-dir must be an absolute path on the hosts, got {args.remote_dir!r}")
    if args.runtime == "cfs" and args.action == "start":
        problem = _cfs_exe_problem(args.cfs_exe, args.cfs_binary, local=not args.hosts)
        if problem:  # one line, not parser.error's usage text above it: the usage is not what went wrong
            parser.exit(2, f"{parser.prog}: error: {problem}\n")
        _check_cfs_ports(parser, args, n)
    if args.runtime == "cfs" and args.tlm_address is None and not args.hosts:
        args.tlm_address = cfs.DEFAULT_TLM_ADDRESS
    if args.tlm_address is not None:
        if args.netns or args.runtime in ("docker", "swarm"):
            parser.error("--tlm-address goes with local nodes, --runtime cfs or --hosts")
        last = ipaddress.IPv4Address(args.tlm_address) + (0 if args.hosts else n - 1)
        if not args.hosts and not (ipaddress.IPv4Address(args.tlm_address).is_loopback and last.is_loopback):
            parser.error(f"--tlm-address {args.tlm_address} + {n} satellites leaves 127.0.0.0/8: on one host each "
                         "satellite sends to its own loopback address")
    if (args.container_cpus or args.container_memory_mib) and args.runtime != "docker":
        parser.error("--container-cpus and --container-memory-mib go with --runtime docker")
    if args.container_memory_mib and args.container_memory_mib * 2**20 < args.memory_budget + \
            CONTAINER_MEMORY_MARGIN_MIB * 2**20:
        parser.error(f"--container-memory-mib {args.container_memory_mib} leaves no room: a satellite needs its "
                     f"--memory-budget ({args.memory_budget / 2**20:g} MiB) and {CONTAINER_MEMORY_MARGIN_MIB} MiB more")
    if (args.copy_node or args.ssh_config) and not args.hosts:
        parser.error("--copy-node and --ssh-config go with --hosts")
    if args.copy_node and args.runtime == "cfs":
        parser.error("--copy-node copies the native node; cFS executables come from --cfs-exe on each host")
    if args.ssh_config is not None:
        if not args.ssh_config.is_file():
            parser.error(f"--ssh-config {args.ssh_config} is not a file")
        args.ssh_config = args.ssh_config.resolve()
    if args.runtime == "swarm" and args.bind != "127.0.0.1":
        parser.error("--bind goes with local nodes: on a swarm each satellite binds the address of its node")
    if args.node is not None and not os.access(args.node, os.X_OK):
        parser.error(f"--node {args.node} is not an executable file")
    if args.run_dir is None:
        args.run_dir = args.manifest.parent
    return args
