"""Stopping a dockerd with every process it started, for the testbeds (docker_engine.py, swarm_nodes.py).

    engine = Engine(proc.pid, exec_root, namespace="skm1a2b-2")   # proc: dockerd, this process's child
    problems = stop_engine(proc, "node 2", engine)   # [] when all of it went on its own
    left = until_none(still_there, quiet_s=60, most_s=300)   # a bounded, adaptive wait

An engine is more than dockerd's descendants. dockerd starts containerd as its child, and at
exit waits only 10 s for containerd's own stop (which allows itself 15 s) before it goes: a
containerd slower than that (two loaded cores) is then killed by its parent-death signal and may
still be exiting, in dockerd's namespace, when dockerd has been waited for. containerd starts one
shim per container, and the shim detaches (its parent becomes init): it is no descendant, but its
command line names the engine's exec root, and it runs in the engine's network namespace, as do
the containers (host networking). So the engine is: dockerd's descendants, the processes naming
its exec root, and everything in its namespace; each followed by pid and start time
(processes.identities), so a reused pid is never taken for one of them.

`stop_engine` sends dockerd SIGTERM and waits for all of that to be gone, new processes of the
namespace included; what is left once dockerd has gone and nothing has exited for a while is
SIGKILLed and named, and what survives that is named too. Nothing is left silently.

The waits are bounded and adaptive: `until_none` waits `quiet_s` after the last time something
went (a slow machine still making progress is given the time it needs), `most_s` in all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

from skymemory.launcher import netns, processes

STOP_QUIET_S = 60.0  # dockerd's own stop: containers (10 s grace each), the swarm node, containerd (<= 15 s)
STOP_MOST_S = 300.0
KILL_QUIET_S = 30.0  # after SIGKILL: only the kernel's exit work is left
KILL_MOST_S = 60.0


def until_none(left: Callable[[], list], quiet_s: float, most_s: float, every_s: float = 0.2) -> list:
    """Call left() until it returns nothing; give up once nothing has gone for quiet_s, or after most_s in all.
    Returns the last answer (empty when everything went)."""
    start = last_progress = time.monotonic()
    now_left = left()
    while now_left:
        now = time.monotonic()
        if now - last_progress >= quiet_s or now - start >= most_s:
            break
        time.sleep(every_s)
        before, now_left = now_left, left()
        if any(x not in now_left for x in before):
            last_progress = time.monotonic()
    return now_left


def descendants(pid: int) -> list[int]:
    """Every descendant of pid (dockerd's containerd; a container's shim is not one once it detached).

    A child belongs to the thread that forked it: /proc/P/task/P/children lists the main thread's only, and a
    Go program such as dockerd forks from whichever thread runs the goroutine. Every thread's list is read."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except OSError:
            continue
        for task in tasks:
            try:
                kids = [int(k) for k in (task / "children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def naming(text: str) -> list[int]:
    """Live pids whose command line contains text."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and any(text in a for a in processes.cmdline(int(entry.name))):
            pids.append(int(entry.name))
    return pids


def running(ours: dict[int, int]) -> list[int]:
    """The processes of `ours` (pid -> start time) not gone yet. Stricter than processes.survivors: a thread
    group's leader shows as a zombie while its other threads are still exiting (dockerd, a Go program, has
    dozens), and is gone only when it is the last task left."""
    left = []
    for pid, t in ours.items():
        if processes.start_time(pid) != t:
            continue
        try:
            tasks = len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
        if tasks > 1 or not processes.is_zombie(pid):
            left.append(pid)
    return left


def describe(pid: int, names: dict[int, str]) -> str:
    return f"{pid} ({names.get(pid) or ' '.join(processes.cmdline(pid)) or '?'})"


class Engine:
    """The processes of one dockerd (its pid, its exec root, its namespace), followed by identity."""

    def __init__(self, pid: int, exec_root: Path | str, namespace: str | None = None) -> None:
        self.pid, self.exec_root, self.namespace = pid, str(exec_root).rstrip("/") + "/", namespace
        self.ours: dict[int, int] = {}  # pid -> start time
        self.names: dict[int, str] = {}  # pid -> command line, read when first seen (an exiting one has none)

    def scan(self) -> None:
        """Add the engine's processes running now to those followed."""
        pids = {self.pid, *naming(self.exec_root)}
        if processes.start_time(self.pid) == self.ours.get(self.pid, processes.start_time(self.pid)):
            pids.update(descendants(self.pid))  # while dockerd's pid is still dockerd's
        if self.namespace:
            pids.update(netns.namespace_pids(self.namespace))
        for pid, t in processes.identities(pids - set(self.ours)).items():
            self.ours[pid] = t
            self.names[pid] = " ".join(processes.cmdline(pid))[:200]

    def left(self, dockerd: subprocess.Popen) -> list[int]:
        """What is still there: dockerd until it is reaped (this process's child), the others until gone."""
        dockerd.poll()
        self.scan()
        return ([dockerd.pid] if dockerd.returncode is None else []) + [p for p in running(self.ours)
                                                                        if p != dockerd.pid]


def stop_engine(proc: subprocess.Popen, who: str, engine: Engine) -> list[str]:
    """Stop dockerd `proc` (this process's child) and everything of its engine; wait until all of it is gone.
    Returns problems: what had to be killed and what survived, each named by pid and command line."""
    engine.scan()
    problems = []
    if proc.poll() is None:
        proc.terminate()
    left = until_none(lambda: engine.left(proc), STOP_QUIET_S, STOP_MOST_S)
    if left:
        what = "dockerd did not stop on SIGTERM" if proc.poll() is None else "left after dockerd stopped"
        problems.append(f"{who}: {what}: {', '.join(describe(p, engine.names) for p in left)}; killed")
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        left = until_none(lambda: engine.left(proc), KILL_QUIET_S, KILL_MOST_S)
        if left:
            problems.append(f"{who}: survived SIGKILL: {', '.join(describe(p, engine.names) for p in left)}")
    return problems


def report_at_exit(problems: list[str], failing: bool, say: Callable[[str], None]) -> None:
    """What a with-block's stop left behind: raised when the block itself went well, only said when it failed (its
    own error is the one to see)."""
    if problems and not failing:
        raise RuntimeError("; ".join(problems))
    for problem in problems:
        say(problem)
