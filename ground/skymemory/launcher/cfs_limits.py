"""How many cFS instances one Linux host can run: its POSIX message-queue limits.

Every cFE software-bus pipe is a POSIX message queue (OSAL's mq_open; OSAL unlinks
it at once, so /dev/mqueue never lists it). Three kernel limits decide how many
instances start on one host:

* fs.mqueue.queues_max: queues on the whole host. Past it mq_open fails with ENOSPC
  ("OS_QueueCreate Error. errno = 28" in the instance's log). A process holding
  CAP_SYS_RESOURCE is exempt.
* RLIMIT_MSGQUEUE (`ulimit -q`): bytes of queues one user may hold, over all that
  user's processes. Past it mq_open fails with EMFILE ("errno = 24"). A queue costs
  maxmsg * (msgsize + 96) bytes on 64-bit Linux: the kernel charges a message
  header and a priority-tree node (48 bytes each) per message slot.
* fs.mqueue.msg_max: the deepest one queue may be (the deepest stock pipe holds 50).

Per instance, a stock cFS v7.0.0 mission with the SkyMemory apps (strace of
mq_open) creates 12 queues of 8-byte messages, 326 slots in all: 33,904 bytes. A
mission with more apps uses more: --cfs-queues-per-instance and
--cfs-queue-slots-per-instance say so.

`HostLimits.local()` reads this host, `HostLimits.parse(probe output)` another one
(PROBE_SCRIPT run over ssh); `fit()` says how many instances fit and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

QUEUES_PER_INSTANCE = 12
SLOTS_PER_INSTANCE = 326
MESSAGE_BYTES = 8  # a pipe carries pointers to software-bus buffers
KERNEL_BYTES_PER_SLOT = 96
RESERVED_QUEUES = 16  # for other programs on the host, whose queues cannot be counted
DEEPEST_PIPE = 50  # TO_LAB's telemetry pipe
CAP_SYS_RESOURCE = 24

# Prints what HostLimits.parse reads; plain sh, for a host reached over ssh.
PROBE_SCRIPT = ("for f in queues_max msg_max; do echo \"$f $(cat /proc/sys/fs/mqueue/$f 2>/dev/null)\"; done\n"
                "grep -E '^Max msgqueue size' /proc/self/limits\n"
                "grep -E '^CapEff' /proc/self/status\n")


@dataclass(frozen=True)
class InstanceCost:
    queues: int = QUEUES_PER_INSTANCE
    slots: int = SLOTS_PER_INSTANCE
    depth: int = DEEPEST_PIPE  # the deepest software-bus pipe: fs.mqueue.msg_max must allow it

    @property
    def bytes(self) -> int:
        return self.slots * (MESSAGE_BYTES + KERNEL_BYTES_PER_SLOT)


@dataclass(frozen=True)
class HostLimits:
    queues_max: int | None  # None: not readable
    msg_max: int | None
    msgqueue_bytes: int | None  # soft RLIMIT_MSGQUEUE; None: unlimited or not readable
    sys_resource: bool  # CAP_SYS_RESOURCE: queues_max and msg_max do not apply

    @classmethod
    def local(cls) -> "HostLimits":
        def read(path: str) -> str:
            try:
                return Path(path).read_text()
            except OSError:
                return ""

        return cls.parse(f"queues_max {read('/proc/sys/fs/mqueue/queues_max')}\n"
                         f"msg_max {read('/proc/sys/fs/mqueue/msg_max')}\n"
                         + read("/proc/self/limits") + read("/proc/self/status"))

    @classmethod
    def parse(cls, text: str) -> "HostLimits":
        """Reads the lines of PROBE_SCRIPT (or /proc/self/limits and /proc/self/status themselves)."""
        values: dict[str, int | None] = {}
        sys_resource = False
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("queues_max", "msg_max"):
                values[words[0]] = int(words[1]) if words[1].isdigit() else None
            elif line.startswith("Max msgqueue size") and len(words) >= 4:
                values["msgqueue_bytes"] = int(words[3]) if words[3].isdigit() else None  # soft limit
            elif words[:1] == ["CapEff:"] and len(words) == 2:
                sys_resource = bool(int(words[1], 16) >> CAP_SYS_RESOURCE & 1)
        return cls(values.get("queues_max"), values.get("msg_max"), values.get("msgqueue_bytes"), sys_resource)


@dataclass(frozen=True)
class Fit:
    instances: int | None  # None: no limit known
    reasons: list[str]  # one line per limit: what it allows
    fixes: list[str]  # how to raise the binding limits


def fit(limits: HostLimits, cost: InstanceCost) -> Fit:
    """How many instances of this cost the host can start, with one line per limit that bounds it."""
    bounds: list[int] = []
    reasons, fixes = [], []
    if limits.msg_max is not None and not limits.sys_resource and limits.msg_max < cost.depth:
        bounds.append(0)
        reasons.append(f"fs.mqueue.msg_max {limits.msg_max} is below the deepest software-bus pipe ({cost.depth})")
        fixes.append(f"sudo sysctl -w fs.mqueue.msg_max={cost.depth}")
    if limits.sys_resource:
        reasons.append("fs.mqueue.queues_max does not apply (CAP_SYS_RESOURCE)")
    elif limits.queues_max is not None:
        n = max(0, (limits.queues_max - RESERVED_QUEUES) // cost.queues)
        bounds.append(n)
        reasons.append(f"fs.mqueue.queues_max {limits.queues_max} allows {n} ({cost.queues} queues each, "
                       f"{RESERVED_QUEUES} left for other programs)")
    if limits.msgqueue_bytes is not None:
        n = limits.msgqueue_bytes // cost.bytes
        bounds.append(n)
        reasons.append(f"ulimit -q {limits.msgqueue_bytes} bytes allows {n} ({cost.bytes:,} bytes each: "
                       f"{cost.slots} message slots x {MESSAGE_BYTES + KERNEL_BYTES_PER_SLOT} bytes)")
    else:
        reasons.append("ulimit -q is unlimited")
    return Fit(min(bounds) if bounds else None, reasons, fixes)


def problem(wanted: int, limits: HostLimits, cost: InstanceCost, where: str = "this host") -> str | None:
    """Why `wanted` instances cannot start on the host (with the fix), or None when they fit."""
    f = fit(limits, cost)
    if f.instances is None or wanted <= f.instances:
        return None
    fixes = list(f.fixes)
    if not limits.sys_resource and limits.queues_max is not None:
        need = wanted * cost.queues + RESERVED_QUEUES
        if need > limits.queues_max:
            fixes.append(f"sudo sysctl -w fs.mqueue.queues_max={need}")
    if limits.msgqueue_bytes is not None and wanted * cost.bytes > limits.msgqueue_bytes:
        fixes.append(f"ulimit -q {wanted * cost.bytes} (as root, or raise msgqueue in /etc/security/limits.conf)")
    return (f"{wanted} cFS instances do not fit {where}: at most {f.instances} do.\n  "
            + "\n  ".join(f.reasons) + "\n  fix: " + "; ".join(fixes) + ", or spread them with --hosts")


def summary(limits: HostLimits, cost: InstanceCost, where: str = "this host") -> str:
    f = fit(limits, cost)
    n = "any number of" if f.instances is None else str(f.instances)
    return f"{where} fits {n} cFS instances: " + "; ".join(f.reasons)
