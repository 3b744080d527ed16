"""--runtime cfs: one real cFS core executable per satellite.

Each satellite gets its own working directory (a copy of the cFS exe
directory: cFS keeps shared-memory key files, EEPROM.DAT and ./cf relative to
it) and its own cpuid = index + 1, from which the SkyMemory cFS apps derive
(plane, sat) (docs/CFS.md). The node options go to `<workdir>/cf/skymemory.cfg`
("key = value", the node's option names), which SKYMEM loads into its
constellation table. On stop, the System V shared-memory segments the
instances created are removed.
This backend cannot be exercised without a cFS build; the checks below are the
facts in CFS_NOTES.md (10 message queues per instance, msg_max >= 50).
"""

from __future__ import annotations

import shutil
from pathlib import Path

QUEUES_PER_INSTANCE = 10
MIN_MSG_MAX = 50


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().split()[0])
    except (FileNotFoundError, ValueError, IndexError):
        return None


def check_mqueue_limits(instances: int) -> list[str]:
    """Problems with the POSIX message-queue sysctls for this many cFS instances, with the fix."""
    problems = []
    queues_max = _read_int("/proc/sys/fs/mqueue/queues_max")
    msg_max = _read_int("/proc/sys/fs/mqueue/msg_max")
    need = instances * QUEUES_PER_INSTANCE + 16
    if queues_max is not None and queues_max < need:
        problems.append(f"fs.mqueue.queues_max is {queues_max}; {instances} cFS instances need about {need} "
                        f"queues. Fix: sudo sysctl -w fs.mqueue.queues_max={need}")
    if msg_max is not None and msg_max < MIN_MSG_MAX:
        problems.append(f"fs.mqueue.msg_max is {msg_max}; the cFS software bus needs >= {MIN_MSG_MAX} or it "
                        f"cannot create pipes. Fix: sudo sysctl -w fs.mqueue.msg_max={MIN_MSG_MAX}")
    return problems


def prepare_workdir(exe_dir: Path, work: Path, config: dict[str, str]) -> Path:
    """Copy the cFS exe directory to `work` and write skymemory.cfg; returns the workdir."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(exe_dir, work, symlinks=True)
    # OSAL on the pc-linux PSP maps /cf to ./cf: SKYMEM reads /cf/skymemory.cfg (docs/CFS.md)
    (work / "cf").mkdir(exist_ok=True)
    config_path(work).write_text("".join(f"{k} = {v}\n" for k, v in config.items()))
    return work


def config_path(work: Path) -> Path:
    return work / "cf" / "skymemory.cfg"


def remove_shared_memory(creator_pids: set[int]) -> list[str]:
    """Remove the System V shared-memory segments the stopped cFS instances left behind.

    cFE keeps its reset area in such segments; a later instance can collide with a stale
    one ("Cannot shmget Reset Area"). Only segments whose creator pid is ours are removed.
    """
    import subprocess

    try:
        out = subprocess.run(["ipcs", "-m", "-p"], capture_output=True, text=True, timeout=10).stdout
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return ["ipcs is not available; shared-memory segments of the cFS instances were not checked"]
    errors = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[0].isdigit() and parts[2].isdigit() and int(parts[2]) in creator_pids:
            r = subprocess.run(["ipcrm", "-m", parts[0]], capture_output=True, text=True, timeout=10)
            if r.returncode != 0:
                errors.append(f"ipcrm -m {parts[0]}: {r.stderr.strip()}")
    return errors


def core_argv(binary: str, index: int) -> list[str]:
    cpuid = index + 1
    return [f"./{binary}", "--cpuid", str(cpuid), "--cpuname", f"CPU{cpuid}", "--scid", "66", "--reset", "PO"]


def options_as_config(node_opts: list[str]) -> dict[str, str]:
    """["--memory-budget", "5", ...] -> {"memory-budget": "5", ...} (the node's --config format)."""
    return {node_opts[i][2:]: node_opts[i + 1] for i in range(0, len(node_opts), 2)}
