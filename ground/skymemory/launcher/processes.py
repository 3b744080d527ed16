"""Local node processes: start in one process group, pid files, liveness, stop and verify.

Every node the launcher starts on this machine joins one process group (the
first node leads it) that is not the terminal's foreground group, and gets a pid file `<run_dir>/pids/<plane>-<sat>.pid`. In the
foreground the nodes also get PR_SET_PDEATHSIG (through setpriv, or a
preexec hook where setpriv is missing), so they die with the launcher
even if it is killed with SIGKILL. `stop` signals by pid file, checks each pid
still runs the node it started (its /proc cmdline), escalates to SIGKILL after
a grace period and verifies nothing is left.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

# setpriv (util-linux) sets the parent-death signal and execs the command, so the child needs
# no Python preexec_fn (which forces a slow fork per process: 1,584 nodes boot much faster).
SETPRIV = shutil.which("setpriv")

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class ProcessGroup:
    """Starts commands in a single new process group and records their pid files."""

    def __init__(self, run_dir: Path, die_with_parent: bool) -> None:
        self.run_dir = run_dir
        self.pid_dir = run_dir / "pids"
        self.log_dir = run_dir / "logs"
        self.pid_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.die_with_parent = die_with_parent
        self.pgid = 0
        self.procs: dict[str, subprocess.Popen] = {}

    def start(self, name: str, argv: list[str], cwd: Path | None = None, env: dict | None = None) -> int:
        log = open(self.log_dir / f"{name}.log", "ab")
        try:
            kwargs = dict(stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=env,
                          close_fds=True)
            # the first node leads a new process group, the others join it; the group is never the
            # terminal's foreground group, so a Ctrl-C reaches only the launcher, which tears down
            kwargs["process_group"] = self.pgid
            if self.die_with_parent:
                if SETPRIV:
                    argv = [SETPRIV, "--pdeathsig", "TERM", "--", *argv]
                else:
                    kwargs["preexec_fn"] = _die_with_parent
            proc = subprocess.Popen(argv, **kwargs)
        finally:
            log.close()
        if self.pgid == 0:
            self.pgid = proc.pid
        self.procs[name] = proc
        (self.pid_dir / f"{name}.pid").write_text(f"{proc.pid}\n")
        return proc.pid

    def dead(self) -> dict[str, int]:
        """Processes that already exited: name -> exit code."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}


def busy_udp_port(host: str, ports: list[int]) -> int | None:
    """The first port in `ports` that cannot be bound on host (None when all are free)."""
    busy = first_busy_udp([(host, port) for port in ports])
    return busy[1] if busy else None


def first_busy_udp(addresses: list[tuple[str, int]]) -> tuple[str, int] | None:
    """The first (host, port) that cannot be bound now (None when all are free)."""
    import socket

    for address in addresses:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            s.bind(address)
        except OSError:
            return address
        finally:
            s.close()
    return None


def free_port_bases(n: int, *, host: str = "127.0.0.1", seed: int | None = None) -> tuple[int, int]:
    """(ISL base, ground base) whose n ports each are all free on host right now.

    Picked at random (other constellations, tests or users may hold ports) in 2000..9999: below
    the kernel's ephemeral range (launcher/ports.py), away from the launcher's default bases
    20000/30000, so a test run never lands on a constellation started by hand, and from the C
    tests' 10000..19999.
    """
    import os
    import random
    import time

    if n > 4000:
        raise ValueError(f"{n} satellites: free_port_bases picks ranges of at most 4000 ports")
    rng = random.Random(seed if seed is not None else os.getpid() ^ time.time_ns())
    for _ in range(100):
        isl, ground = rng.randrange(2000, 6000 - n + 1), rng.randrange(6000, 10000 - n + 1)
        if busy_udp_port(host, list(range(isl, isl + n))) is None and \
                busy_udp_port(host, list(range(ground, ground + n))) is None:
            return isl, ground
    raise RuntimeError(f"no free range of {n} UDP ports found on {host}")


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0") if a]


def is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):  # ESRCH: the process went while being read
        return False


def alive(pid: int, marker: str | None = None) -> bool:
    """True when pid runs and (if marker is given) its command line contains marker."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    if is_zombie(pid):
        return False
    return marker is None or any(marker in a for a in settled_cmdline(pid))


def settled_cmdline(pid: int, settle_s: float = 1.0) -> list[str]:
    """cmdline(pid), read again while it is empty and the process lives, for at most settle_s. A process
    that has just exec'd shows an empty command line for a moment: the kernel closes the close-on-exec pipe
    Popen waits on before it sets the new program's arguments, so a stop right after a start saw no marker
    and left that process running (CI, 2 loaded cores). A process on its way out also loses its command line,
    then turns zombie or goes: both end the wait."""
    deadline = time.monotonic() + settle_s
    while True:
        args = cmdline(pid)
        if args or time.monotonic() >= deadline or start_time(pid) is None or is_zombie(pid):
            return args
        time.sleep(0.01)


def parent_pid(pid: int) -> int:
    """The parent of pid (0 when it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return 0


def read_pid_files(pid_dir: Path) -> dict[str, int]:
    pids = {}
    if pid_dir.is_dir():
        for f in sorted(pid_dir.glob("*.pid")):
            try:
                pids[f.stem] = int(f.read_text().strip())
            except ValueError:
                continue
    return pids


def start_time(pid: int) -> int | None:
    """When `pid` started (clock ticks since boot, /proc/PID/stat field 22); None when there is no such process.
    A pid with the same start time is the same process: a reused pid has another."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def identities(pids) -> dict[int, int]:
    """Each live pid of `pids` with its start time: what `survivors` follows, taken while the processes are
    known to be ours (once one has exited, its pid may belong to another process)."""
    ours = {p: start_time(p) for p in pids if p and p > 0}
    return {p: t for p, t in ours.items() if t is not None}


def survivors(ours: dict[int, int]) -> list[int]:
    """The processes of `ours` (identities) still running: same pid and start time, not a zombie. Followed by
    start time, not by command line: a process on its way out has already lost its command line."""
    return [p for p, t in ours.items() if start_time(p) == t and not is_zombie(p)]


def wait_gone(ours: dict[int, int], timeout_s: float, reap: bool = False) -> list[int]:
    """Until every process of `ours` is gone, or timeout_s passed; the survivors. `reap`: collect whatever
    children of this process exited meanwhile (the launcher, whose children the nodes are; a library caller
    leaves its other children's exit status to their owners)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if reap:
            _reap()
        left = survivors(ours)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.05)


def terminate(pids: dict[str, int], marker: str, grace_s: float = 5.0) -> list[int]:
    """SIGTERM every live pid running `marker`, SIGKILL what is left after grace_s; return survivors.

    Only the processes found running `marker` at the start are ours (once a node has exited, its pid
    may already belong to another process: 16,384 nodes use half of a default pid space). Each is
    followed until it is gone or a zombie (`survivors`): returning earlier left nodes running a moment
    after the caller was told none were."""
    ours = identities(p for p in pids.values() if alive(p, marker))
    for pid in ours:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for pid in wait_gone(ours, grace_s, reap=True):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return wait_gone(ours, 2.0, reap=True)


def _reap() -> None:
    """Collect exited children of ours (when the launcher itself started them)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
