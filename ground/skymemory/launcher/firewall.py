"""Letting the emulated hosts' bridged traffic through a firewall that drops forwarded packets.

Docker started with its defaults sets the iptables FORWARD policy to DROP and turns on
net.bridge.bridge-nf-call-iptables: from then on the frames a Linux bridge passes between two
of its ports go through iptables' FORWARD chain as well, and are dropped. The namespaces of
--netns (and the emulated mini PCs of the ssh tests) reach each other through such a bridge
(the ISLs between hosts), so before any node starts:

allow_bridge(bridge) -> rule or None
    When bridged frames are filtered (bridge-nf-call-iptables = 1), `iptables` is there and its
    FORWARD chain could drop them (a policy other than ACCEPT, or any rule), insert
    "-i BRIDGE -o BRIDGE -j ACCEPT" at the top of DOCKER-USER where Docker made that chain (the
    chain Docker keeps for its users' rules, evaluated before its own), else at the top of
    FORWARD. Returns what `remove` needs (the launcher keeps it in the manifest), or None when
    nothing was added (an open FORWARD chain is left untouched).
remove(rule) -> problems
    Delete exactly that rule (`stop` does this); nothing else in the firewall is touched.
filtering_note() -> str
    One sentence on why bridged traffic may still be dropped here, for the launcher's error.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

BRIDGE_NF = Path("/proc/sys/net/bridge/bridge-nf-call-iptables")


def bridged_frames_filtered() -> bool:
    try:
        return BRIDGE_NF.read_text().strip() == "1"
    except OSError:  # br_netfilter not loaded: bridges forward without asking iptables
        return False


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["iptables", "-w", "5", *args], capture_output=True, text=True, timeout=30)


def _spec(bridge: str) -> list[str]:
    return ["-i", bridge, "-o", bridge, "-j", "ACCEPT"]


def forward_chain_open() -> bool:
    """FORWARD accepts everything: policy ACCEPT and no rule (listing creates no table)."""
    listed = _iptables("-S", "FORWARD")
    lines = listed.stdout.splitlines()
    return listed.returncode == 0 and lines == ["-P FORWARD ACCEPT"]


def allow_bridge(bridge: str) -> dict | None:
    if not bridged_frames_filtered() or shutil.which("iptables") is None or forward_chain_open():
        return None
    chain = "DOCKER-USER" if _iptables("-S", "DOCKER-USER").returncode == 0 else "FORWARD"
    r = _iptables("-I", chain, "1", *_spec(bridge))
    if r.returncode != 0:
        raise RuntimeError(f"iptables -I {chain} 1 {' '.join(_spec(bridge))} failed: {r.stderr.strip()}")
    return {"chain": chain, "bridge": bridge}


def remove(rule: dict | None) -> list[str]:
    if not rule:
        return []
    r = _iptables("-D", rule["chain"], *_spec(rule["bridge"]))
    if r.returncode != 0 and "does a matching rule exist" not in r.stderr and "Bad rule" not in r.stderr:
        return [f"iptables -D {rule['chain']} {' '.join(_spec(rule['bridge']))} failed: {r.stderr.strip()}"]
    return []


def filtering_note() -> str:
    if not bridged_frames_filtered():
        return "net.bridge.bridge-nf-call-iptables is off, so iptables is not what drops it here"
    if shutil.which("iptables") is None:
        return ("net.bridge.bridge-nf-call-iptables = 1 (as Docker sets it) sends bridged frames through iptables' "
                "FORWARD chain, and `iptables` is not installed to add an ACCEPT rule for the bridge")
    return ("net.bridge.bridge-nf-call-iptables = 1 (as Docker sets it) sends bridged frames through the FORWARD "
            "chain; an ACCEPT rule for the bridge was added, so another rule or an nftables table drops them")
