"""The --netns backend on a host whose firewall is set up the way Docker's defaults set it.

A Docker engine started with its defaults sets the iptables FORWARD policy to DROP, makes the
DOCKER-USER chain (FORWARD jumps there first) and turns on net.bridge.bridge-nf-call-iptables,
after which the frames a bridge passes between namespaces are dropped. This test sets exactly
that, without starting such an engine (it would create its docker0 bridge network), and puts it
all back afterwards; the host's firewall must end as it was:
- the launcher adds an ACCEPT rule for its bridge in DOCKER-USER, the ISLs between namespaces
  carry a block, and `stop` removes the rule;
- where the firewall drops the traffic anyway (a DROP before FORWARD's jump to DOCKER-USER, which
  the rule cannot override), the launcher says so and tears everything down.
Part of `make test-containers` (SKYMEM_LIVE=containers).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from skymemory.launcher import firewall, keys, netns
from skymemory.orbit.manifest import Manifest

from commands import firewall_state, launcher, opt_in, show
from live import free_port_bases, unsigned_commands_refused

pytestmark = opt_in("containers", "make test-containers")


def iptables(*args: str) -> None:
    subprocess.run(["iptables", "-w", "5", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def docker_default_firewall():
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        pytest.skip("needs root and iptables (make test-containers installs it)")
    why = netns.probe()
    if why:
        pytest.skip(why)
    if not firewall.BRIDGE_NF.exists():
        pytest.skip("br_netfilter is not loaded here, so bridged frames never meet iptables")
    before = firewall_state()
    tables_before = nft_tables()
    bridge_nf = firewall.BRIDGE_NF.read_text().strip()
    policy = next(line.split()[2] for line in subprocess.run(["iptables", "-S", "FORWARD"], capture_output=True,
                                                              text=True).stdout.splitlines() if line.startswith("-P"))
    made_chain = subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True).returncode != 0
    try:
        if made_chain:  # as dockerd makes it: an empty chain that FORWARD jumps to first
            iptables("-N", "DOCKER-USER")
            iptables("-A", "DOCKER-USER", "-j", "RETURN")
            iptables("-I", "FORWARD", "1", "-j", "DOCKER-USER")
        iptables("-P", "FORWARD", "DROP")
        firewall.BRIDGE_NF.write_text("1")
        yield
    finally:
        iptables("-P", "FORWARD", policy)
        if made_chain:
            iptables("-D", "FORWARD", "-j", "DOCKER-USER")
            iptables("-F", "DOCKER-USER")
            iptables("-X", "DOCKER-USER")
        firewall.BRIDGE_NF.write_text(bridge_nf)
        for table in nft_tables() - tables_before:  # iptables-nft made it for the rules above: empty again
            subprocess.run(["nft", "delete", "table", *table.split()], capture_output=True)
    assert firewall_state() == before, "the firewall is not as it was before the test"


def nft_tables() -> set[str]:
    """"ip filter", ... where the nftables tool is there (iptables-nft creates a table on its first rule)."""
    if shutil.which("nft") is None:
        return set()
    listed = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    return {line.removeprefix("table ").strip() for line in listed.splitlines() if line.startswith("table ")}


def launch_3x3(tmp_path):
    isl, ground = free_port_bases(9)
    return launcher("--planes", "3", "--sats", "3", "--netns", "3", "--manifest", str(tmp_path / "m.json"),
                    "--isl-port-base", str(isl), "--ground-port-base", str(ground), "--detach",
                    "--health-timeout", "60")


def test_netns_through_dockers_default_firewall(docker_default_firewall, tmp_path):
    r = launch_3x3(tmp_path)
    print(show(r))
    assert r.returncode == 0, show(r)
    m = Manifest.load(tmp_path / "m.json")
    try:
        rule = m.backend["firewall_rule"]
        assert rule == {"chain": "DOCKER-USER", "bridge": m.backend["bridge"]}
        assert f"-A DOCKER-USER -i {rule['bridge']} -o {rule['bridge']} -j ACCEPT" in subprocess.run(
            ["iptables", "-S", "DOCKER-USER"], capture_output=True, text=True).stdout
        from skymemory.store.constellation import ConstellationBlockStore

        # one per namespace, relayed: the ISLs cross the bridge the firewall guards
        with ConstellationBlockStore.from_manifest(m, [(0, 0), (1, 1), (2, 2)], route="relay") as store:
            payload = os.urandom(60_000)
            assert store.get_block(store.put_block(b"f" * 32, payload)) == payload
        # keyed: the namespaces share this machine's files, so each node reads its own key file in the run directory
        for e in m.satellites:
            argv = Path(f"/proc/{e.pid}/cmdline").read_bytes().split(b"\0")
            assert argv[argv.index(b"--auth-keys") + 1].decode() == str(keys.satellite_key_file(m.auth_key_file,
                                                                                               e.plane, e.sat))
        before, after = unsigned_commands_refused(m, (1, 1))
        print(f"satellite (1, 1) in {m.satellites[4].netns}: 2 unsigned commands refused, "
              f"auth_failures {before} -> {after}")
    finally:
        r = launcher("stop", "--manifest", str(tmp_path / "m.json"))
    print(show(r))
    assert r.returncode == 0, show(r)
    assert m.backend["bridge"] not in subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout


def test_a_firewall_that_still_drops_is_named(docker_default_firewall, tmp_path):
    drop = ["FORWARD", "-i", "skb+", "-o", "skb+", "-j", "DROP"]  # before FORWARD's jump to DOCKER-USER
    namespaces_before = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    rules_before = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
    iptables("-I", *drop)
    try:
        r = launch_3x3(tmp_path)
    finally:
        iptables("-D", *drop)
    print(show(r))
    assert r.returncode == 1 and "ISLs between namespaces carry nothing" in r.stderr, show(r)
    assert "ACCEPT rule for the bridge was added" in r.stderr
    assert not (tmp_path / "m.json").exists()
    assert subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout == rules_before
    namespaces_after = set(subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split())
    assert not {ns for ns in namespaces_after - namespaces_before if ns.startswith("skm")}
