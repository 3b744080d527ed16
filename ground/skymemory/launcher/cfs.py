"""--runtime cfs: one real cFS core executable per satellite.

Each satellite gets its own working directory (a copy of the cFS exe
directory: cFS keeps shared-memory key files, EEPROM.DAT and ./cf relative to
it) and its own cpuid. The node options go to `<workdir>/cf/skymemory.cfg`
("key = value", the node's option names, plus `first-cpuid` and, over several
machines, `hosts`), which SKYMEM loads into its constellation table; satellite
index i runs as cpuid first_cpuid + i (docs/CFS.md).

Ports of the stock lab apps, fixed when the mission is built:
  CI_LAB listens on ci_lab_base + cpuid - 1 (CI_LAB_MISSION_BASE_UDP_PORT, 1234), on every address;
  TO_LAB sends to its enable-output address, port to_lab_port (TO_LAB_TLM_PORT, 1235).
So cpuid 2 would put a CI_LAB on TO_LAB's port and swallow every instance's telemetry:
the launcher starts cpuids at --cfs-first-cpuid (3) and gives each satellite on one
host its own telemetry address (127.0.1.1 + index), so a ground system can bind one
per instance. On stop, the System V shared-memory segments the instances created are
removed. How many instances fit one host: cfs_limits.
"""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from pathlib import Path

DEFAULT_FIRST_CPUID = 3
DEFAULT_CI_LAB_BASE = 1234
DEFAULT_TO_LAB_PORT = 1235
DEFAULT_TLM_ADDRESS = "127.0.1.1"
ERROR_PATTERN = "error|errno|fail"  # a healthy boot logs no line like this; a failing one does at once
_ERROR_LINE = re.compile(ERROR_PATTERN, re.I)
# cFE's table service explains a failed load in its own event, just above the app's error line (which has only
# the status code): "EVS Port1 <time> 66/1/CFE_TBL 102: LoadFile,app=SKYMEM_X,file=/cf/skymem_tbl.tbl,
# tbl=SKYMEM.Constellation:File for wrong table 'SKYMEM.Constellation'". A healthy load says ":Successful load".
# Such a line is an error line itself: TO_LAB's own line after it ("Can't load table") matches no error pattern.
_CFE_CAUSE = re.compile(r"\bCFE_TBL \d+: \w+,app=[^,]*,(?:file=[^,]*,)?tbl=[^:]*:(?!Successful)")
_EVS_PREFIX = re.compile(r"^EVS Port\d+ (?:[\d:.-]+ )?\d+/\d+/")  # "EVS Port1 <time> 66/1/": says nothing here
CAUSE_LOOKAHEAD = 3  # lines below cFE's cause where the failing app's own error line may be


def cpuid(first_cpuid: int, index: int) -> int:
    return first_cpuid + index


def ci_lab_port(ci_lab_base: int, cpuid_: int) -> int:
    """The UDP port a stock CI_LAB of this cpuid listens on."""
    return ci_lab_base + cpuid_ - 1


def tlm_address(base: str, index: int, spread: bool) -> str:
    """Where satellite `index` sends telemetry: base + index on one host; base itself (the ground) over --hosts."""
    return base if spread else str(ipaddress.IPv4Address(base) + index)


def prepare_workdir(exe_dir: Path, work: Path, config: dict[str, str]) -> Path:
    """Copy the cFS exe directory to `work` and write skymemory.cfg; returns the workdir."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(exe_dir, work, symlinks=True)
    # OSAL on the pc-linux PSP maps /cf to ./cf: SKYMEM reads /cf/skymemory.cfg (docs/CFS.md)
    (work / "cf").mkdir(exist_ok=True)
    config_path(work).write_text(config_text(config))
    return work


def config_path(work: Path) -> Path:
    return work / "cf" / "skymemory.cfg"


def config_text(config: dict[str, str]) -> str:
    return "".join(f"{k} = {v}\n" for k, v in config.items())


def remove_shared_memory(creator_pids: set[int]) -> list[str]:
    """Remove the System V shared-memory segments the stopped cFS instances left behind.

    cFE keeps its reset area in such segments; a later instance can collide with a stale
    one ("Cannot shmget Reset Area"). Only segments whose creator pid is ours are removed.
    """
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


def core_argv(binary: str, cpuid_: int) -> list[str]:
    return [f"./{binary}", "--cpuid", str(cpuid_), "--cpuname", f"CPU{cpuid_}", "--scid", "66", "--reset", "PO"]


def options_as_config(node_opts: list[str]) -> dict[str, str]:
    """["--memory-budget", "5", ...] -> {"memory-budget": "5", ...} (the node's --config format)."""
    return {node_opts[i][2:]: node_opts[i + 1] for i in range(0, len(node_opts), 2)}


def _is_error(line: str) -> bool:
    return bool(_ERROR_LINE.search(line) or _CFE_CAUSE.search(line))


def failing(logs: dict[str, str]) -> list[str]:
    """Names whose log already reports an error: such an instance never becomes healthy, and its
    lab apps may spin on their broken pipes at real-time priority, so the boot is stopped at once."""
    return [name for name, text in logs.items() if any(map(_is_error, text.splitlines()))]


def first_error(log_text: str) -> str | None:
    """The first line of an instance's log that reports an error (a healthy boot has none). Where it is
    cFE's explanation of a failed table load, the app's own error line below it follows it:
    "CFE_TBL 102: ...:File for wrong table 'SKYMEM.Constellation' -> SKYMEM_X 10: SKYMEM: error loading ..."."""
    lines = [_EVS_PREFIX.sub("", line).strip() for line in log_text.splitlines()]
    for i, line in enumerate(lines):
        if _CFE_CAUSE.search(line):
            then = next((later for later in lines[i + 1:i + 1 + CAUSE_LOOKAHEAD] if _ERROR_LINE.search(later)), None)
            return f"{line} -> {then}" if then else line
        if _ERROR_LINE.search(line):
            return line
    return None


# What a cause in an instance's log means: mq_open errnos (cfs_limits explains the limits), cFE's refusals.
ERRNO_HINTS = {
    "errno = 28": "errno 28 (ENOSPC): the host's fs.mqueue.queues_max is used up",
    "errno = 24": "errno 24 (EMFILE): the user's message-queue bytes (ulimit -q) are used up",
    "errno = 22": "errno 22 (EINVAL): a pipe is deeper than fs.mqueue.msg_max",
    "File for wrong table": "File for wrong table: an app's name in the startup script is not the prefix of its "
                            "table's name (SKYMEM, ISL_ROUTER; the lab apps as their tables say: docs/CFS.md step 3)",
}


def first_errors(lines_by_name: dict[str, str | None], limit: int = 24) -> str:
    """'  name: first error line' per failed instance (at most `limit`), then what its errno means."""
    lines = [f"  {name}: {line or '(no error line in its log)'}" for name, line in lines_by_name.items()]
    if len(lines) > limit:
        lines = lines[:limit] + [f"  ... and {len(lines) - limit} more"]
    hints = [hint for key, hint in ERRNO_HINTS.items() if any(key in (v or "") for v in lines_by_name.values())]
    return "\n".join(lines + [f"  {h}" for h in hints])
