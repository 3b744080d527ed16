"""Stopped means stopped (issue 35, scope 6): the launcher's process helpers return only when what they
stopped is gone, or name what is not. Real processes (`sleep`), no doubles."""

from __future__ import annotations

import subprocess
import sys

from skymemory.launcher import processes


def test_terminate_returns_once_every_process_is_gone():
    procs = [subprocess.Popen(["sleep", "600"]) for _ in range(3)]
    try:
        ours = processes.identities(p.pid for p in procs)
        left = processes.terminate({f"p{i}": p.pid for i, p in enumerate(procs)}, "sleep")
        assert left == []
        assert processes.survivors(ours) == []  # gone, not merely signalled
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_a_process_that_ignores_sigterm_is_killed_and_waited_for():
    # it says "ready" once it ignores SIGTERM: terminate then meets a process already running its marker
    stubborn = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
                                 "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"],
                                stdout=subprocess.PIPE, text=True)
    try:
        assert stubborn.stdout.readline() == "ready\n"
        ours = processes.identities([stubborn.pid])
        assert processes.terminate({"stubborn": stubborn.pid}, "SIG_IGN", grace_s=0.3) == []
        assert processes.survivors(ours) == []  # (terminate reaped it: Popen no longer sees its status)
    finally:
        stubborn.kill()
        stubborn.wait()
        stubborn.stdout.close()


def test_wait_gone_names_the_survivors_and_follows_identity_not_the_pid():
    alive = subprocess.Popen(["sleep", "600"])
    try:
        ours = processes.identities([alive.pid])
        assert processes.wait_gone(ours, 0.1) == [alive.pid]  # still running when the bound passed: named
        # the same pid with another start time is another process: not ours, not a survivor
        assert processes.survivors({alive.pid: ours[alive.pid] + 1}) == []
        alive.terminate()
        assert processes.wait_gone(ours, 30.0) == []
    finally:
        alive.kill()
        alive.wait()


def test_identities_skip_what_is_not_running():
    done = subprocess.Popen(["true"])
    done.wait()
    assert processes.identities([done.pid, 0, -1]) == {}


def test_a_process_met_before_its_command_line_is_set_is_still_stopped(monkeypatch):
    # Right after exec the kernel has woken Popen but not yet set the new program's arguments: /proc shows an
    # empty command line for a moment. Seen in CI, where `terminate` then skipped that process and left it
    # running. The double stands for that moment only; the process and the signals are real.
    proc = subprocess.Popen(["sleep", "600"])
    real = processes.cmdline
    empty_reads = iter(range(3))
    monkeypatch.setattr(processes, "cmdline", lambda pid: [] if next(empty_reads, None) is not None else real(pid))
    try:
        ours = processes.identities([proc.pid])
        assert processes.terminate({"p": proc.pid}, "sleep") == []
        assert processes.survivors(ours) == []
    finally:
        proc.kill()
        proc.wait()
