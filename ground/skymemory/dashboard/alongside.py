"""`skymemory dashboard` as a child process beside a running command (what `skymemory demo --dashboard` uses).

A child process, not a thread: the benchmark's model work holds the GIL for
long stretches, and the dashboard must keep polling and pushing while it
does. The child follows the run's event file (it attaches to the
constellation the run announces there), prints its URL once it listens, and
dies with us (PR_SET_PDEATHSIG) even if we are killed. `skymemory bench dashboard`
starts it the same way on a manifest.

    with DashboardProcess("--events", events_path, "--port", 8050) as url:
        print(url)
        ... run the benchmark ...
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import skymemory

_PR_SET_PDEATHSIG = 1
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
URL_PREFIX = "dashboard: "


class DashboardFailed(RuntimeError):
    def __init__(self, message: str, returncode: int | None = None) -> None:
        super().__init__(message)
        self.returncode = returncode  # the child's exit status, None when it did not exit


def _die_with_parent() -> None:  # runs in the child between fork and exec
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class DashboardProcess:
    def __init__(self, *dashboard_args: str | int | Path) -> None:
        """`dashboard_args`: the options of `skymemory dashboard` (--events FILE, --manifest M, --port N, ...)."""
        self.args = [sys.executable, "-m", "skymemory", "dashboard", *map(str, dashboard_args)]
        self.proc: subprocess.Popen | None = None
        self._stderr = None  # a file, not a pipe: nobody drains a pipe during the run, and a full one would block

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> str:
        """Start the child and return its URL; DashboardFailed (with the child's own message) if it cannot listen."""
        package_root = str(Path(skymemory.__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH"))
                                                           if p)}
        self._stderr = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen(self.args, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=env,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                break
            line = self.proc.stdout.readline()
            if line.startswith(URL_PREFIX):
                return line[len(URL_PREFIX):].strip()
            if not line:  # the child ended without listening: say why, in its words
                self.proc.wait(STOP_TIMEOUT_S)
                self._stderr.seek(0)
                why = self._stderr.read().strip().splitlines()
                raise DashboardFailed(why[-1] if why else f"dashboard exited with status {self.proc.returncode}",
                                      self.proc.returncode)
        self.stop()
        raise DashboardFailed(f"the dashboard did not start listening within {START_TIMEOUT_S:.0f} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT_S)
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
