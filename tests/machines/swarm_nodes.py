"""Five emulated mini PCs joined in one Docker Swarm, for --runtime swarm (make test-swarm).

    with SwarmNodes(5, workdir, image_archive) as swarm:   # image_archive: `docker save` of the image
        swarm.manager_host      # DOCKER_HOST of the manager (node 0): what the launcher is run with
        swarm.docker(h, "ps")   # the docker CLI against node h's own engine
        swarm.addresses         # ["10.79.0.1", ..., "10.79.0.5"]

What it builds (and `close` removes, in reverse, by pid and by name):
- a bridge and one network namespace per host on 10.79.0.0/24 (skymemory.launcher.netns.build;
  host h at 10.79.0.<h+1>, this machine, the ground, at 10.79.0.254) and, where the firewall
  would drop bridged traffic, an ACCEPT rule for that bridge (firewall.allow_bridge);
- in each namespace its own dockerd, started with `nsenter --net=/var/run/netns/NS` (not `ip
  netns exec`, which remounts /sys without the cgroup mounts dockerd needs), with its own
  --data-root, --exec-root, --pidfile and socket, host networking only (--bridge=none
  --iptables=false --ip-masq=false --ip-forward=false);
- the image loaded into every engine from an archive (`docker save` of the engine that built it,
  `docker load` into each: nodes without a registry);
- a swarm: `docker swarm init --advertise-addr 10.79.0.1` on node 0 (the one manager), `docker
  swarm join` with the worker token on the others, each node labelled skymemory.host=h.
`close` stops each node's engine as one (engines.stop_engine: dockerd, its containerd, the shims
and containers in its namespace, all five at once) and waits until all of it is gone, with a
deadline that moves out while processes are still going; it kills and names what outlives that,
and whatever else is in the namespaces; it checks no mount is left under the work directory and
removes the namespaces, bridge and rule it made. It returns what it had to clean up. `leftovers`
then looks for anything of the nodes still there: an engine's process, a process (or a thread,
or an open file) in one of the namespaces, a mount of one, a name in `ip netns list`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from skymemory.launcher import firewall, netns, processes, swarm

import engines

SUBNET = "10.79.0."  # neither --netns's 10.77.0. nor the ssh mini PCs' 10.78.0.
DOCKERD_FLAGS = ["--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false"]


def say(message: str) -> None:
    print(f"[swarm testbed] {message}", file=sys.stderr, flush=True)


class SwarmNodes:
    def __init__(self, count: int, workdir: Path, image_archive: Path) -> None:
        self.count = count
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.image_archive = Path(image_archive)
        self.record: dict = {}
        self.rule: dict | None = None
        self.dockerd: dict[int, subprocess.Popen] = {}
        self.engines: dict[int, engines.Engine] = {}  # what close() stopped, followed by identity
        self.held: dict[str, tuple[int, int]] = {}  # namespace -> (fd, inode): held open by close() for leftovers()
        self.addresses = [netns.host_address(h, SUBNET) for h in range(count)]
        # short paths: containerd's sockets live under the exec root, and a socket path has 108 bytes at most
        self.run_root = Path(f"/run/skmswarm-{os.getpid()}")

    def socket(self, h: int) -> str:
        return f"unix://{self.run_root}/h{h}/docker.sock"

    @property
    def manager_host(self) -> str:
        return self.socket(0)

    def namespace(self, h: int) -> str:
        return self.record["namespaces"][h]

    def docker(self, h: int, *args: str, timeout: float = 120, check: bool = False) -> subprocess.CompletedProcess:
        r = swarm.docker(self.socket(h), *args, timeout=timeout)
        if check and r.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} on node {h} failed: {r.stderr.strip()}")
        return r

    # ---- building -----------------------------------------------------------------
    def __enter__(self) -> "SwarmNodes":
        try:
            self.record = netns.build(self.count, subnet=SUBNET)
            self.rule = firewall.allow_bridge(self.record["bridge"])
            t = time.monotonic()
            for h in range(self.count):
                self._start_dockerd(h)
            say(f"{self.count} dockerds up in {time.monotonic() - t:.1f} s")
            t = time.monotonic()
            for h in range(self.count):
                self.docker(h, "load", "-i", str(self.image_archive), timeout=600, check=True)
            say(f"the image loaded into {self.count} engines in {time.monotonic() - t:.1f} s")
            t = time.monotonic()
            self._form_swarm()
            say(f"swarm of {self.count} nodes (1 manager) formed and labelled in {time.monotonic() - t:.1f} s")
        except BaseException:
            for problem in self.close():
                say(problem)
            raise
        return self

    def exec_root(self, h: int) -> Path:
        return self.run_root / f"h{h}" / "exec"

    def _start_dockerd(self, h: int, timeout_s: float = 120.0) -> None:
        root = self.run_root / f"h{h}"
        root.mkdir(parents=True, exist_ok=True)
        data = self.dir / f"pc{h}"
        data.mkdir(exist_ok=True)
        argv = ["nsenter", f"--net=/var/run/netns/{self.namespace(h)}", "dockerd", *DOCKERD_FLAGS,
                "--data-root", str(data), "--exec-root", str(self.exec_root(h)), "--pidfile", str(root / "dockerd.pid"),
                "-H", self.socket(h)]
        log = open(self.dir / f"dockerd-{h}.log", "ab")
        try:
            # nsenter execs dockerd: the pid is dockerd's own
            self.dockerd[h] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while self.docker(h, "info", "--format", "{{.ID}}", timeout=15).returncode != 0:
            if self.dockerd[h].poll() is not None:
                raise RuntimeError(f"dockerd of node {h} exited ({self.dockerd[h].returncode}):\n"
                                   + (self.dir / f"dockerd-{h}.log").read_text(errors="replace")[-1500:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"dockerd of node {h} does not answer after {timeout_s:g} s")
            time.sleep(0.2)

    def _form_swarm(self) -> None:
        manager = self.addresses[0]
        self.docker(0, "swarm", "init", "--advertise-addr", manager, "--listen-addr", f"{manager}:2377",
                    check=True)
        token = self.docker(0, "swarm", "join-token", "-q", "worker", check=True).stdout.strip()
        for h in range(1, self.count):
            self.docker(h, "swarm", "join", "--token", token, "--advertise-addr", self.addresses[h],
                        "--listen-addr", f"{self.addresses[h]}:2377", f"{manager}:2377", check=True)
        for h in range(self.count):
            node_id = self.docker(h, "info", "--format", "{{.Swarm.NodeID}}", check=True).stdout.strip()
            self.docker(0, "node", "update", "--label-add", f"{swarm.HOST_LABEL}={h}", node_id, check=True)

    # ---- looking inside -------------------------------------------------------------
    def containers(self, h: int, stack: str) -> list[str]:
        """Names of node h's containers of the stack, running or not."""
        r = self.docker(h, "ps", "-a", "--filter", f"label={swarm.STACK_LABEL}={stack}", "--format", "{{.Names}}",
                        check=True)
        return r.stdout.split()

    def processes(self, h: int) -> list[int]:
        """Pids in node h's namespace other than its dockerd and the containerd it started."""
        ours = self.dockerd.get(h)
        keep = set()
        if ours is not None and ours.poll() is None:
            keep = {ours.pid, *engines.descendants(ours.pid)}
        return [p for p in netns.namespace_pids(self.namespace(h)) if p not in keep]

    # ---- tearing down -----------------------------------------------------------------
    def close(self) -> list[str]:
        """Stop the engines, then anything left in the namespaces; remove what was built. Returns problems."""
        problems = []
        for h, proc in list(self.dockerd.items()):
            if proc.poll() is None:
                left = self.docker(h, "ps", "-aq", timeout=30).stdout.split()
                if left:
                    problems.append(f"node {h}: {len(left)} containers left; removed")
                    self.docker(h, "rm", "-f", *left, timeout=120)
        if self.dockerd:
            t = time.monotonic()
            with ThreadPoolExecutor(len(self.dockerd)) as pool:
                stopped = {h: pool.submit(self._stop_engine, h, proc) for h, proc in self.dockerd.items()}
            for h, future in stopped.items():
                problems += future.result()
                del self.dockerd[h]
            say(f"{len(stopped)} engines stopped, every process of theirs gone, in {time.monotonic() - t:.1f} s")
        for h, ns in enumerate(self.record.get("namespaces", [])):
            left = {pid: " ".join(processes.cmdline(pid)) for pid in netns.kill_namespace_processes(ns)}
            if left:
                problems.append(f"node {h}: processes left in {ns}: {left}; killed")
                gone = processes.identities(left)
                if engines.until_none(lambda: engines.running(gone), engines.KILL_QUIET_S, engines.KILL_MOST_S):
                    problems.append(f"node {h}: survived SIGKILL in {ns}: {engines.running(gone)}")
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                  if line.split()[1].startswith((str(self.dir), str(self.run_root)))]
        for target in sorted(mounts, key=len, reverse=True):
            # dockerd leaves its bind mount of the namespace it ran in (<exec-root>/netns/default) at exit
            if not target.endswith("/exec/netns/default"):
                problems.append(f"mount left: {target}; unmounted")
            subprocess.run(["umount", "-l", target], capture_output=True)
        shutil.rmtree(self.run_root, ignore_errors=True)
        for h in range(self.count):  # the engines' data (image layers): a few hundred MB each
            shutil.rmtree(self.dir / f"pc{h}", ignore_errors=True)
        if self.rule:
            problems += firewall.remove(self.rule)
            self.rule = None
        if self.record:
            for ns in self.record.get("namespaces", []):
                self._hold(ns)
            problems += netns.teardown(self.record)
            self.record = {}
        return problems

    def _stop_engine(self, h: int, proc: subprocess.Popen) -> list[str]:
        engine = engines.Engine(proc.pid, self.exec_root(h), self.namespace(h))
        self.engines[h] = engine
        return engines.stop_engine(proc, f"node {h}", engine)

    def _hold(self, ns: str) -> None:
        """Keep the namespace itself (not its name) while leftovers() looks for what else holds it: its inode
        cannot be given to a new namespace meanwhile."""
        try:
            fd = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
        except OSError:
            return
        self.held[ns] = (fd, os.fstat(fd).st_ino)

    def leftovers(self) -> list[str]:
        """What is left of the nodes after close(): their engines' processes, any process, thread or open file in
        their namespaces (found by inode), a mount of one or under the work directory, a name in `ip netns
        list`. Empty when nothing is; the namespaces held for the look are let go."""
        found = []
        for h, engine in sorted(self.engines.items()):
            left = engines.running(engine.ours)
            if left:
                found.append(f"node {h}: engine processes alive: "
                             + ", ".join(engines.describe(p, engine.names) for p in left))
        inodes = {f"net:[{ino}]": ns for ns, (_, ino) in self.held.items()}
        mine = {f"/proc/{os.getpid()}/fd/{fd}" for fd, _ in self.held.values()}
        holders: dict[tuple[str, int], str] = {}  # (namespace, pid) -> the first of its links found there
        for path in _namespace_links():
            try:
                target = os.readlink(path)
            except OSError:
                continue
            if target in inodes and path not in mine:
                holders.setdefault((inodes[target], int(path.split("/")[2])), path)
        found += [f"{ns} held by {path} ({' '.join(processes.cmdline(pid)) or '?'})"
                  for (ns, pid), path in sorted(holders.items())]
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            root, target = fields[3], fields[4]
            if (root in inodes or target.startswith((str(self.dir), str(self.run_root)))
                    or any(target == f"/run/netns/{ns}" for ns in self.held)):
                found.append(f"mount left: {target} ({root})")
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        found += [f"namespace still listed: {ns}" for ns in self.held if ns in listed]
        for fd, _ in self.held.values():
            os.close(fd)
        self.held = {}
        return found

    def __exit__(self, kind, *exc) -> None:
        engines.report_at_exit(self.close(), kind is not None, say)



def _namespace_links():
    """/proc/PID/task/TID/ns/net of every thread and /proc/PID/fd/N of every open file: what can hold a namespace."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            tasks = [t.name for t in (entry / "task").iterdir()]
            fds = [f.name for f in (entry / "fd").iterdir()]
        except OSError:
            continue
        for tid in tasks:
            yield f"/proc/{entry.name}/task/{tid}/ns/net"
        for fd in fds:
            yield f"/proc/{entry.name}/fd/{fd}"
