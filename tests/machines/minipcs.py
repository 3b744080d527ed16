"""Emulated mini PCs for the --hosts (ssh) backend: network namespaces, each running a real sshd.

    with MiniPCs(5, workdir) as pcs:
        pcs.destinations        # ["10.78.0.1", ..., "10.78.0.5"]: --hosts
        pcs.ssh_config          # an `ssh -F` file: user root, the key made here, the hosts' keys
        pcs.remote_dir          # --remote-dir: each host sees its own directory at this path
        pcs.stop_sshd(3); pcs.start_sshd(3)   # a host dropping out of the network and back

What it builds (and `close` removes, in reverse):
- a bridge and one namespace per host on 10.78.0.0/24 (skymemory.launcher.netns.build, the
  --netns backend's builder; host h at 10.78.0.<h+1>, this machine at 10.78.0.254), and,
  where the firewall would drop the hosts' bridged traffic, an ACCEPT rule for that bridge;
- a client key and a host key (ssh-keygen), an authorized_keys and a known_hosts naming them;
- in each namespace an OpenSSH server (`sshd -D`, its own config) listening on that host's
  address only; before it starts, a directory of `workdir` is bind-mounted over `remote_dir`
  in the server's mount namespace, so what a host's sessions write there (the copied node
  binary, logs, peers) lands on that host's own "disk".
Everything started here is stopped by pid; only the namespaces and bridge made here are removed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from skymemory.launcher import firewall, netns

SUBNET = "10.78.0."  # not --netns's 10.77.0.: a --netns run may be up beside this testbed
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"

SSHD_CONFIG = """\
ListenAddress {address}
Port 22
HostKey {dir}/host_key
PidFile {dir}/sshd-{h}.pid
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# the keys live in a temporary directory under /tmp (world-writable), which StrictModes refuses
StrictModes no
MaxStartups 50
LogLevel ERROR
"""

CLIENT_CONFIG = """\
Host {pattern}
  User root
  IdentityFile {dir}/id_ed25519
  IdentitiesOnly yes
  UserKnownHostsFile {dir}/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  LogLevel ERROR
"""


class MiniPCs:
    def __init__(self, count: int, workdir: Path) -> None:
        self.count = count
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)
        self.record: dict = {}
        self.rule: dict | None = None
        self.sshd: dict[int, subprocess.Popen] = {}
        self.made_privsep_dir = False
        self.remote_dir = str(self.dir / "remote")
        self.destinations = [netns.host_address(h, SUBNET) for h in range(count)]
        self.ssh_config = str(self.dir / "ssh_config")

    # ---- building -----------------------------------------------------------------
    def __enter__(self) -> "MiniPCs":
        try:
            self._keys()
            self.record = netns.build(self.count, subnet=SUBNET)
            self.rule = firewall.allow_bridge(self.record["bridge"])
            Path(self.remote_dir).mkdir(exist_ok=True)
            if not os.path.isdir("/run/sshd"):  # Debian's sshd refuses to start without its privsep directory
                os.makedirs("/run/sshd", mode=0o755)
                self.made_privsep_dir = True
            for h in range(self.count):
                (self.dir / f"pc{h}").mkdir(exist_ok=True)
                (self.dir / f"sshd-{h}.conf").write_text(
                    SSHD_CONFIG.format(address=self.destinations[h], dir=self.dir, h=h))
                self.start_sshd(h)
        except BaseException:
            self.close()
            raise
        return self

    def _keys(self) -> None:
        for name in ("id_ed25519", "host_key"):
            if not (self.dir / name).exists():
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"skymemory-test-{name}",
                                "-f", str(self.dir / name)], check=True, capture_output=True)
        (self.dir / "authorized_keys").write_text((self.dir / "id_ed25519.pub").read_text())
        (self.dir / "authorized_keys").chmod(0o600)
        host_key = (self.dir / "host_key.pub").read_text().split()[:2]
        (self.dir / "known_hosts").write_text("".join(f"{d} {' '.join(host_key)}\n" for d in self.destinations))
        Path(self.ssh_config).write_text(CLIENT_CONFIG.format(pattern=f"{SUBNET}*", dir=self.dir))

    def start_sshd(self, h: int, timeout_s: float = 30.0) -> None:
        """Start host h's sshd (its own disk mounted first) and wait until it accepts connections."""
        ns = self.record["namespaces"][h]
        mount_and_serve = (f"mount --bind {self.dir}/pc{h} {self.remote_dir} && "
                           f"exec {SSHD} -D -e -f {self.dir}/sshd-{h}.conf")
        log = open(self.dir / f"sshd-{h}.log", "ab")
        try:
            self.sshd[h] = subprocess.Popen([*netns.exec_prefix(ns), "sh", "-c", mount_and_serve],
                                            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        deadline = time.monotonic() + timeout_s
        while not _accepts(self.destinations[h], 22):
            if self.sshd[h].poll() is not None:
                raise RuntimeError(f"sshd of {self.destinations[h]} exited ({self.sshd[h].returncode}): "
                                   + (self.dir / f"sshd-{h}.log").read_text(errors="replace")[-500:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd of {self.destinations[h]} does not accept connections after {timeout_s} s")
            time.sleep(0.05)

    def stop_sshd(self, h: int) -> None:
        proc = self.sshd.pop(h, None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    # ---- looking inside -------------------------------------------------------------
    def ssh(self, h: int, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run(["ssh", "-F", self.ssh_config, self.destinations[h], command],
                              capture_output=True, text=True, timeout=timeout)

    def processes(self, h: int) -> list[int]:
        """Pids in host h's namespace other than its sshd (what a test started there and left)."""
        ours = {p.pid for p in self.sshd.values()}
        return [p for p in netns.namespace_pids(self.record["namespaces"][h]) if p not in ours]

    # ---- tearing down -----------------------------------------------------------------
    def close(self) -> list[str]:
        """Stop the sshds, then anything left in the namespaces; remove what was built. Returns problems."""
        problems = []
        for h in list(self.sshd):
            self.stop_sshd(h)
        for h, ns in enumerate(self.record.get("namespaces", [])):  # the sshds are stopped: anything left is a test's
            left = netns.kill_namespace_processes(ns)
            if left:
                problems.append(f"{self.destinations[h]}: processes left {left}; killed")
        if self.rule:
            problems += firewall.remove(self.rule)
            self.rule = None
        if self.record:
            problems += netns.teardown(self.record)
            self.record = {}
        if self.made_privsep_dir:
            shutil.rmtree("/run/sshd", ignore_errors=True)
            self.made_privsep_dir = False
        return problems

    def __exit__(self, *exc) -> None:
        self.close()


def _accepts(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False
