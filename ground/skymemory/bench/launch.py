"""Boot a local constellation for a benchmark run, and always tear it down.

The launcher (`skymemory.launcher`, tools/launch_constellation.py) runs in the
foreground as our child process: it boots the nodes, health-checks them, writes
the manifest, and tears everything down when it gets SIGTERM/SIGINT. Its nodes
die with it (PR_SET_PDEATHSIG), and it dies with us (we set the same on it), so
an error, Ctrl-C or even SIGKILL of the benchmark leaves no node process behind.

    with LocalConstellation(planes=19, sats=5, profile=PROFILES["laser"], run_dir=d) as c:
        store = ConstellationBlockStore.from_manifest(c.manifest, servers)
"""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import skymemory
from skymemory.launcher import processes
from skymemory.orbit.manifest import Manifest

from .profiles import LinkProfile

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
PACKAGE_ROOT = Path(skymemory.__file__).resolve().parents[1]  # the directory holding `skymemory/`


class LaunchFailed(RuntimeError):
    pass


def ports_free(first: int, count: int, host: str = "127.0.0.1") -> bool:
    """True when UDP ports first..first+count-1 can all be bound on host right now."""
    for port in range(first, first + count):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


# A benchmark's constellation listens on ISL ports ISL_BASE+k.. and ground ports GROUND_BASE+k..,
# both below Linux's ephemeral range (32768..60999), where any client socket could take a port first.
ISL_BASE, GROUND_BASE, PORT_SPAN = 20000, 26000, 6000


def free_port_offset(n: int, start: int = 1000, step: int = 250, avoid: set[int] = frozenset()) -> int:
    """An offset k such that ISL ports ISL_BASE+k.. and ground ports GROUND_BASE+k.. for n satellites are free.

    Other constellations (tests, other users) may run on this machine at the same time.
    """
    offset = start
    while offset + n <= PORT_SPAN:
        if offset not in avoid and ports_free(ISL_BASE + offset, n) and ports_free(GROUND_BASE + offset, n):
            return offset
        offset += max(step, n)
    raise LaunchFailed(f"no free block of {n} UDP ports found for a constellation")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class LocalConstellation:
    """A constellation of native nodes on loopback, owned by this process."""

    def __init__(
        self,
        *,
        planes: int,
        sats: int,
        profile: LinkProfile,
        run_dir: Path,
        port_offset: int = 0,
        node: Path | None = None,
        chunk_size: int = 6144,
        memory_budget: int = 64 * 1024 * 1024,
        boot_timeout_s: float = 120.0,
        stop_timeout_s: float = 30.0,
        insecure: bool = False,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        n = planes * sats
        if port_offset < 0:
            raise ValueError(f"port offset must be >= 0, got {port_offset}")
        if port_offset + n > PORT_SPAN:
            raise ValueError(f"port offset {port_offset} makes the ISL ports of {n} satellites overlap the ground ports")
        self.planes, self.sats, self.profile = planes, sats, profile
        self.run_dir = Path(run_dir).resolve()
        self.manifest_path = self.run_dir / "manifest.json"
        self.port_offset = port_offset
        self.node = node
        self.chunk_size = chunk_size
        self.memory_budget = memory_budget
        self.boot_timeout_s = boot_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.insecure = insecure  # launched without its key (benchmarks compare the two)
        self.extra_args = tuple(extra_args)  # any other launcher option (e.g. --netns 3 --sites 2)
        self.proc: subprocess.Popen | None = None
        self.manifest: Manifest | None = None
        self.boot_s = 0.0

    def argv(self) -> list[str]:
        args = [
            sys.executable, "-m", "skymemory.launcher",
            "start", "--planes", str(self.planes), "--sats", str(self.sats),
            "--manifest", str(self.manifest_path), "--run-dir", str(self.run_dir),
            "--isl-port-base", str(ISL_BASE + self.port_offset), "--ground-port-base", str(GROUND_BASE + self.port_offset),
            "--chunk-size", str(self.chunk_size), "--memory-budget", str(self.memory_budget),
            "--health-timeout", repr(self.boot_timeout_s), *self.profile.launcher_args(),
        ]
        if self.node is not None:
            args += ["--node", str(self.node)]
        if self.insecure:
            args.append("--insecure")
        return args + list(self.extra_args)

    def start(self) -> Manifest:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
        log = open(self.run_dir / "launcher.log", "wb")
        started = time.monotonic()
        try:
            self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                         env=env, preexec_fn=_die_with_parent)
        finally:
            log.close()
        try:
            self._wait_ready(started + self.boot_timeout_s + 30.0)
            self.manifest = Manifest.load(self.manifest_path)
        except BaseException:
            self.stop()
            raise
        self.boot_s = time.monotonic() - started
        return self.manifest

    def _wait_ready(self, deadline: float) -> None:
        """Until the launcher prints `manifest: PATH` (every satellite answered a NOOP)."""
        assert self.proc is not None and self.proc.stdout is not None
        out = b""
        while b"manifest:" not in out:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LaunchFailed(f"the constellation did not become healthy in time; see {self.run_dir}/launcher.log")
            ready, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if ready:
                data = os.read(self.proc.stdout.fileno(), 4096)
                if not data:  # launcher exited
                    break
                out += data
            elif self.proc.poll() is not None:
                break
        if b"manifest:" not in out:
            self.proc.wait(5)
            raise LaunchFailed(f"the launcher exited with code {self.proc.returncode}:\n{self.log_tail()}")

    def log_tail(self, lines: int = 8) -> str:
        try:
            text = (self.run_dir / "launcher.log").read_text(errors="replace")
        except FileNotFoundError:
            return "(no launcher log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> list[int]:
        """SIGTERM the launcher (it stops and verifies every node); escalate if it hangs. Returns only once every
        satellite process is gone (SIGKILLed after stop_timeout_s): the pids of any that still are, logged."""
        proc, self.proc = self.proc, None
        if proc is None:
            return []
        # the nodes, identified while they are surely ours: checked below whatever the launcher did
        nodes = processes.identities(e.pid for e in self.manifest.satellites) if self.manifest else {}
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stdout is not None:
            proc.stdout.close()
        if self.manifest_path.exists():  # the launcher died before cleaning up: stop by pid files
            from skymemory import launcher

            launcher.stop(self.manifest_path, quiet=True)
        left = processes.wait_gone(nodes, self.stop_timeout_s)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = processes.wait_gone(nodes, 5.0)
        if left:
            log.error("satellite processes %s survived the stop of %s", left, self.run_dir)
        return left

    def __enter__(self) -> "LocalConstellation":
        if self.proc is None:  # boot() returns one already started
            self.start()
        return self

    def __exit__(self, exc_type, *exc) -> None:
        left = self.stop()
        if left and exc_type is None:
            raise LaunchFailed(f"satellite processes {left} survived the stop of {self.run_dir}")


def boot(*, planes: int, sats: int, profile: LinkProfile, run_dir: Path, node: Path | None = None,
         chunk_size: int = 6144, avoid: set[int] = frozenset(), attempts: int = 3,
         memory_budget: int = 64 * 1024 * 1024, extra_args: tuple[str, ...] = ()) -> LocalConstellation:
    """A started LocalConstellation on free ports; retried on other ports if a boot fails.

    Ports are checked free just before the launch, but another program may take
    them in between (tests of other parts run side by side): then try elsewhere.
    """
    tried = set(avoid)
    for attempt in range(1, attempts + 1):
        offset = free_port_offset(planes * sats, avoid=tried)
        tried.add(offset)
        sky = LocalConstellation(planes=planes, sats=sats, profile=profile, run_dir=run_dir, port_offset=offset,
                                 node=node, chunk_size=chunk_size, memory_budget=memory_budget,
                                 extra_args=extra_args)
        try:
            sky.start()
            return sky
        except LaunchFailed:
            if attempt == attempts:
                raise
    raise AssertionError("unreachable")


def boot_per_profile(profiles, *, planes: int, sats: int, work_dir: Path, stack, log, node: Path | None = None,
                     chunk_size: int = 6144, memory_budget: int = 64 * 1024 * 1024,
                     booted=None) -> list[tuple[LinkProfile, LocalConstellation]]:
    """One constellation per link profile, each on ports of its own and stopped when `stack` (an ExitStack)
    closes; `booted(profile, sky)` is called as each one is up."""
    used: set[int] = set()
    skies = []
    for profile in profiles:
        log(f"booting a {planes}x{sats} constellation, profile {profile.name}: {profile.description}; "
            f"{memory_budget / 2**20:.0f} MiB per satellite")
        sky = boot(planes=planes, sats=sats, profile=profile, run_dir=work_dir / f"sky-{profile.name}", node=node,
                   chunk_size=chunk_size, avoid=used, memory_budget=memory_budget)
        stack.callback(sky.stop)
        used.add(sky.port_offset)
        log(f"  {planes * sats} satellites healthy in {sky.boot_s:.1f} s (ground ports "
            f"{GROUND_BASE + sky.port_offset}..{GROUND_BASE + sky.port_offset + planes * sats - 1})")
        if booted is not None:
            booted(profile, sky)
        skies.append((profile, sky))
    return skies

