"""--hosts a,b,c: satellites spread over machines reached with ssh (the paper's 5 mini PCs).

Each host gets a contiguous share of the satellites. One ssh session per host
writes the peers file into --remote-dir, starts that host's nodes with nohup
(each `--bind <host address> --peers <file>`) and prints "plane-sat pid" lines,
which the launcher stores in the manifest; `stop` kills those pids over ssh and
checks they are gone. Needs key-based ssh (BatchMode: no password prompts).
The node binary is either found on each host (--remote-node, a path or a name on
its PATH) or copied there first from this machine (--copy-node: the same binary,
so the hosts must run the same OS and C library). --ssh-config FILE is passed
to every ssh call (`ssh -F`), for keys and users that are not in ~/.ssh/config.
Unless --insecure, each host first gets the key files of the satellites it runs,
and only those, in a folder inside --remote-dir (copy_keys: mode 0600 from their
creation on); each node gets `--auth-keys` with its own (cFS instances a copy in
their /cf); `stop` removes those copies (remove_files). A host the keys cannot
reach stops the launch.
`status` asks each host which of its pids still run; a host ssh cannot reach is
reported by name.
With --runtime cfs each host copies its share of cFS working directories from
--cfs-exe (a path on that host) and starts one core executable per satellite;
before anything starts, every host's message-queue limits are read over ssh
(cfs_limits.PROBE_SCRIPT), and `stop` also removes the instances' shared memory.
tests/integration/test_launcher.py runs these scripts through a stand-in `ssh`
that executes them on this machine; tests/machines/test_ssh_hosts.py against
real OpenSSH servers (`make test-hosts`).
"""

from __future__ import annotations

import ipaddress
import posixpath
import shlex
import subprocess
from pathlib import Path

from skymemory.launcher.cfs import ERROR_PATTERN, first_error

SSH = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
COPIED_NODE = "skymem_node"  # --copy-node puts the binary here, inside --remote-dir
CFS_KEY = "cf/skymem_auth.keys"  # a cFS instance's copy of the key, in its working directory (keys.CFS_KEY_FILE)


def ssh_argv(destination: str, config: str | None = None) -> list[str]:
    return [*SSH, *(["-F", config] if config else []), destination]


def host_address(destination: str) -> str:
    """user@10.0.0.5 -> 10.0.0.5 (nodes bind this address, so it must be an IPv4 literal)."""
    host = destination.rsplit("@", 1)[-1]
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        raise ValueError(f"--hosts entry {destination!r}: the host part must be an IPv4 address") from None


def start_script(remote_dir: str, peers: str, nodes: list[tuple[str, list[str]]]) -> str:
    """Write the peers file, start every node in the background, print "name pid" per node.

    Exits 3 with a message when the node binary (argv[0] of the first node) is not there."""
    binary = shlex.quote(nodes[0][1][0]) if nodes else "true"
    lines = ["set -e", f"mkdir -p {shlex.quote(remote_dir)}/logs", f"cd {shlex.quote(remote_dir)}",
             f"command -v {binary} >/dev/null || {{ echo \"no node binary {binary} on this host "
             "(pass --copy-node, or --remote-node PATH)\" >&2; exit 3; }",
             "cat > peers.txt <<'SKYMEM_PEERS'", peers.rstrip("\n"), "SKYMEM_PEERS"]
    for name, argv in nodes:
        lines.append(f"nohup {shlex.join(argv)} > logs/{name}.log 2>&1 < /dev/null &")
        lines.append(f"echo {name} $!")
    return "\n".join(lines) + "\n"


def run_script(destination: str, script: str, timeout: float = 60, config: str | None = None) -> str:
    r = subprocess.run([*ssh_argv(destination, config), "sh", "-s"], input=script, capture_output=True, text=True,
                       timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"ssh {destination} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def copy_node(destination: str, local_binary: str, remote_dir: str, config: str | None = None) -> str:
    """Copy the node binary into remote_dir on that host; returns its path there.

    Written beside the target and renamed over it, so nodes already running the old file
    (a host sharing this machine's disk, or a restart) are not disturbed."""
    target = f"{remote_dir}/{COPIED_NODE}"
    tmp = shlex.quote(target) + ".new.$$"  # $$: the remote shell's pid, so two copies never share a file
    command = (f"mkdir -p {shlex.quote(remote_dir)} && cat > {tmp} && chmod 755 {tmp} && "
               f"mv -f {tmp} {shlex.quote(target)}")
    with open(local_binary, "rb") as f:
        r = subprocess.run([*ssh_argv(destination, config), command], stdin=f, capture_output=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(f"copying {local_binary} to {destination}:{target} failed ({r.returncode}): "
                           f"{r.stderr.decode(errors='replace').strip()}")
    return target


def copy_keys(destination: str, files: dict[str, str], config: str | None = None) -> None:
    """Copy key files to that host, {path there: path here}, in one ssh call.

    umask 077 before any file exists, so none is ever readable by anyone else, not even while it is
    written; each written beside its target and renamed over it, like copy_node. The keys travel in
    the script on ssh's stdin, never on a command line."""
    lines = ["set -e", "umask 077"]
    for k, (target, local) in enumerate(files.items()):
        text = Path(local).read_text()
        if "SKYMEM_KEYS_EOF" in text:
            raise ValueError(f"{local} is not a key file")
        tmp = f"{shlex.quote(target)}.new.$$"
        lines += [f"mkdir -p {shlex.quote(posixpath.dirname(target) or '.')}", f"cat > {tmp} <<'SKYMEM_KEYS_EOF'",
                  text.rstrip("\n"), "SKYMEM_KEYS_EOF", f"chmod 600 {tmp}", f"mv -f {tmp} {shlex.quote(target)}"]
    run_script(destination, "\n".join(lines) + "\n", timeout=60, config=config)


def remove_files(destination: str, paths: list[str], config: str | None = None) -> None:
    """rm -f these files on that host (raises RuntimeError when ssh cannot reach it)."""
    run_script(destination, f"rm -f {' '.join(shlex.quote(p) for p in paths)}\n", timeout=30, config=config)


def parse_pids(output: str) -> dict[str, int]:
    pids = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            pids[parts[0]] = int(parts[1])
    return pids


# A process counts as alive while /proc shows it in any state but zombie (Z): a killed process
# whose parent is gone waits there for init, which may take its time.
_ALIVE = "alive() { s=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -c1); [ -n \"$s\" ] && [ \"$s\" != Z ]; }\n"


def alive_pids(destination: str, pids: list[int], config: str | None = None) -> list[int]:
    """Which of these pids still run on that host (raises RuntimeError when ssh cannot reach it)."""
    plist = " ".join(str(p) for p in pids)
    out = run_script(destination, _ALIVE + f"for p in {plist}; do alive $p && echo $p; done; true\n", timeout=30,
                     config=config)
    return [int(x) for x in out.split() if x.isdigit()]


def stop_remote(destination: str, pids: list[int], grace_s: int = 5, config: str | None = None) -> list[int]:
    """SIGTERM, wait, SIGKILL; returns pids still alive afterwards."""
    plist = " ".join(str(p) for p in pids)
    script = (_ALIVE + f"kill {plist} 2>/dev/null || true\n"
              f"for i in $(seq {grace_s * 10}); do left=0; for p in {plist}; do alive $p && left=1; "
              f"done; [ $left = 0 ] && break; sleep 0.1; done\n"
              f"kill -9 {plist} 2>/dev/null || true\n"
              f"for i in $(seq 50); do left=0; for p in {plist}; do alive $p && left=1; done; "
              f"[ $left = 0 ] && break; sleep 0.1; done\n"
              f"for p in {plist}; do alive $p && echo $p; done; true\n")
    out = run_script(destination, script, timeout=grace_s + 30, config=config)
    return [int(x) for x in out.split() if x.isdigit()]


def failing(destination: str, remote_dir: str, names: list[str], config: str | None = None) -> list[str]:
    """Which of these satellites' logs on that host already report an error (cfs.failing's rule)."""
    files = " ".join(shlex.quote(f"{n}.log") for n in names)
    out = run_script(destination, f"cd {shlex.quote(remote_dir)}/logs && grep -l -i -E '{ERROR_PATTERN}' {files} "
                                  "2>/dev/null; true\n", timeout=30, config=config)
    return [line[:-len(".log")] for line in out.split() if line.endswith(".log")]


def cfs_start_script(remote_dir: str, exe: str, binary: str, jobs: list[tuple[str, list[str], str]],
                     key_dir: str | None = None) -> str:
    """Per satellite (name, core argv, skymemory.cfg text): a fresh copy of `exe`, its config, the core started.

    key_dir (a folder on the host, from copy_keys): each instance's own file, key_dir/NAME.keys, copied to
    its /cf, mode 0600 (umask 077)."""
    d = shlex.quote(remote_dir)
    lines = ["set -e", f"mkdir -p {d}/logs {d}/cfs", f"cd {d}",
             f"[ -x {shlex.quote(exe)}/{shlex.quote(binary)} ] || {{ echo 'no {exe}/{binary} here' >&2; exit 3; }}"]
    for name, argv, config in jobs:
        work = f"cfs/{shlex.quote(name)}"
        lines += [f"rm -rf {work}", f"cp -r {shlex.quote(exe)} {work}", f"mkdir -p {work}/cf",
                  f"cat > {work}/cf/skymemory.cfg <<'SKYMEM_CFG'", config.rstrip("\n"), "SKYMEM_CFG"]
        if key_dir:  # rm first: cp onto a file that --cfs-exe brought would keep that file's mode
            own = shlex.quote(f"{key_dir}/{name}.keys")
            lines += [f"rm -f {work}/{CFS_KEY}", f"(umask 077 && cp {own} {work}/{CFS_KEY})"]
        lines += [f"(cd {work} && exec nohup {shlex.join(argv)} > ../../logs/{name}.log 2>&1 < /dev/null) &",
                  f"echo {name} $!"]
    return "\n".join(lines) + "\n"


def first_errors(destination: str, remote_dir: str, names: list[str],
                 config: str | None = None) -> dict[str, str | None]:
    """The first error line of each named satellite's log on that host (cfs.first_error's rule)."""
    script = f"cd {shlex.quote(remote_dir)}/logs\n" + "".join(
        f"echo '== {n}'; cat {shlex.quote(n)}.log 2>/dev/null || true\n" for n in names)
    out = run_script(destination, script, config=config)
    logs: dict[str, list[str]] = {}
    current = None
    for line in out.splitlines():
        if line.startswith("== ") and line[3:] in names:
            current = logs.setdefault(line[3:], [])
        elif current is not None:
            current.append(line)
    return {n: first_error("\n".join(logs.get(n, []))) for n in names}


def log_tail(destination: str, remote_dir: str, name: str, lines: int = 5, config: str | None = None) -> str:
    """The last lines of one satellite's log on that host."""
    out = run_script(destination, f"tail -n {int(lines)} {shlex.quote(remote_dir)}/logs/{shlex.quote(name)}.log "
                                  "2>/dev/null || echo '(no log)'\n", timeout=30, config=config)
    return out.rstrip("\n")


def remove_shared_memory(destination: str, pids: list[int], config: str | None = None) -> list[str]:
    """ipcrm the System V segments created by these (stopped) pids on that host; returns errors."""
    wanted = " ".join(str(p) for p in pids)
    script = (f"for id in $(ipcs -m -p 2>/dev/null | awk -v pids='{wanted}' "
              "'BEGIN {n = split(pids, p, \" \"); for (i = 1; i <= n; i++) mine[p[i]] = 1} "
              "$1 ~ /^[0-9]+$/ && ($3 in mine) {print $1}'); do ipcrm -m $id || echo \"ipcrm -m $id failed\"; done\n")
    out = run_script(destination, script, config=config)
    return [line for line in out.splitlines() if line.strip()]
