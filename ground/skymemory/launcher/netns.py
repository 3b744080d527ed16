"""Emulated hosts: network namespaces joined by a bridge (what --netns H builds).

Layout (all names carry a short run tag so two runs never collide):

    root namespace: bridge skb<tag> with 10.77.0.254/24  (the ground station's address)
    namespace skm<tag>-<h>: veth eth0 with 10.77.0.<h+1>/24, lo up
    veth pair sk<tag>v<h> (root side, enslaved to the bridge) <-> eth0 (namespace side)
    with sites (--sites N): namespace skm<tag>-s<k>: eth0 with 10.77.0.<253-k>/24, veth sk<tag>s<k>;
        a ground site runs no satellite (its ground host's processes run there: `ip netns exec`)

Only namespaces, links and addresses this module created are ever removed.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import signal
import subprocess

SUBNET_PREFIX = "10.77.0."
GROUND_ADDRESS = SUBNET_PREFIX + "254"


class NetnsUnavailable(RuntimeError):
    """Namespaces cannot be created here (not root, no `ip`, no permission)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10, check=check)


MAX_SITES = 8
FIRST_SITE_OCTET = 253  # site k at .253-k: below the bridge (.254), above the hosts (.1..)


def host_address(h: int, subnet: str = SUBNET_PREFIX) -> str:
    return f"{subnet}{h + 1}"


def site_address(k: int, subnet: str = SUBNET_PREFIX) -> str:
    """Ground site k's address (--sites): from the top of the /24 down, below the bridge's .254."""
    if not 0 <= k < MAX_SITES:
        raise ValueError(f"site {k}: 0..{MAX_SITES - 1}")
    return f"{subnet}{FIRST_SITE_OCTET - k}"


def max_hosts_with_sites(sites: int) -> int:
    """Hosts (.1..H) that leave the addresses of `sites` sites (.253-sites+1..253) free."""
    return FIRST_SITE_OCTET - sites


def probe() -> str | None:
    """None when namespaces can be created, else the reason they cannot."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root or with CAP_NET_ADMIN + CAP_SYS_ADMIN)"
    name = f"skmprobe{secrets.token_hex(3)}"
    try:
        r = _ip("netns", "add", name, check=False)
    except FileNotFoundError:
        return "the `ip` command (iproute2) is not installed"
    if r.returncode != 0:
        return f"`ip netns add` failed: {r.stderr.strip()}"
    _ip("netns", "del", name, check=False)
    return None


def _join(ns: str, veth: str, bridge: str, address: str, record: dict, key: str, prefixlen: int = 24) -> None:
    """A namespace with eth0 (`address`/prefixlen) on the bridge, through the veth pair `veth`; recorded as made."""
    _ip("netns", "add", ns)
    record[key].append(ns)
    _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}p")
    record["veths"].append(veth)
    _ip("link", "set", f"{veth}p", "netns", ns)
    _ip("link", "set", veth, "master", bridge)
    _ip("link", "set", veth, "up")
    _ip("-n", ns, "link", "set", f"{veth}p", "name", "eth0")
    _ip("-n", ns, "addr", "add", f"{address}/{prefixlen}", "dev", "eth0")
    _ip("-n", ns, "link", "set", "eth0", "up")
    _ip("-n", ns, "link", "set", "lo", "up")


def build(hosts: int, tag: str | None = None, subnet: str = SUBNET_PREFIX, sites: int = 0) -> dict:
    """Create the bridge, `hosts` namespaces and `sites` ground-site namespaces; returns the record
    `teardown` needs (sites: "site_namespaces" and "site_addresses", site k's at index k).

    `subnet` is the first three octets of the /24 ("10.77.0."): host h gets .h+1, site k .253-k, the bridge .254."""
    if not 1 <= hosts <= 250:
        raise ValueError("1..250 emulated hosts")
    if not 0 <= sites <= MAX_SITES or hosts > max_hosts_with_sites(sites):
        raise ValueError(f"0..{MAX_SITES} ground sites, and hosts + sites <= {FIRST_SITE_OCTET}")
    in_use = _ip("-4", "-o", "addr", "show", check=False).stdout
    if f" {subnet}" in in_use:
        raise NetnsUnavailable(f"{subnet}0/24 is already in use on this host (another --netns run?)")
    tag = tag or secrets.token_hex(2)
    bridge = f"skb{tag}"
    ground = f"{subnet}254"
    record = {"tag": tag, "bridge": bridge, "namespaces": [], "veths": [], "ground_address": ground}
    if sites:
        record.update(site_namespaces=[], site_addresses=[site_address(k, subnet) for k in range(sites)])
    try:
        _ip("link", "add", bridge, "type", "bridge")
        record["bridge_created"] = True
        _ip("addr", "add", f"{ground}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for h in range(hosts):
            _join(f"skm{tag}-{h}", f"sk{tag}v{h}", bridge, host_address(h, subnet), record, "namespaces")
        for k in range(sites):
            _join(f"skm{tag}-s{k}", f"sk{tag}s{k}", bridge, site_address(k, subnet), record, "site_namespaces")
    except subprocess.CalledProcessError as exc:
        teardown(record)
        raise NetnsUnavailable(f"{' '.join(exc.cmd)} failed: {exc.stderr.strip()}") from None
    return record


def bridge_for(addresses: list[str]) -> tuple[str, ipaddress.IPv4Interface] | None:
    """The bridge of this machine (root namespace) whose subnet holds every one of `addresses` (machines
    emulated as namespaces on it, e.g. swarm nodes), with its address; None when there is none."""
    r = _ip("-j", "-4", "addr", "show", "type", "bridge", check=False)
    try:
        links = json.loads(r.stdout or "[]") if r.returncode == 0 else []
    except json.JSONDecodeError:
        return None
    wanted = [ipaddress.IPv4Address(a) for a in addresses]
    for link in links:
        for info in link.get("addr_info", []):
            iface = ipaddress.IPv4Interface(f"{info['local']}/{info['prefixlen']}")
            if wanted and all(a in iface.network for a in wanted):
                return link["ifname"], iface
    return None


def join_sites(bridge: str, iface: ipaddress.IPv4Interface, used: list[str], sites: int,
               tag: str | None = None) -> dict:
    """`sites` ground-site namespaces on an existing bridge (left as it is) whose address is `iface`: their
    addresses from the top of its subnet down, missing the bridge's and `used`. Returns the record `teardown`
    needs (it removes the namespaces and veths only)."""
    if not 1 <= sites <= MAX_SITES:
        raise ValueError(f"1..{MAX_SITES} ground sites")
    taken = {iface.ip, *(ipaddress.IPv4Address(a) for a in used)}
    free = [a for a in reversed(list(iface.network.hosts())) if a not in taken][:sites]
    if len(free) < sites:
        raise NetnsUnavailable(f"{iface.network} has no {sites} free addresses for the ground sites")
    tag = tag or secrets.token_hex(2)
    record = {"tag": tag, "bridge": bridge, "namespaces": [], "veths": [], "site_namespaces": [],
              "site_addresses": [str(a) for a in free]}
    try:
        for k, address in enumerate(free):
            _join(f"skm{tag}-s{k}", f"sk{tag}s{k}", bridge, str(address), record, "site_namespaces",
                  iface.network.prefixlen)
    except subprocess.CalledProcessError as exc:
        teardown(record)
        raise NetnsUnavailable(f"{' '.join(exc.cmd)} failed: {exc.stderr.strip()}") from None
    return record


def exec_prefix(namespace: str) -> list[str]:
    return ["ip", "netns", "exec", namespace]


def teardown(record: dict) -> list[str]:
    """Remove what `build` created; returns error messages (empty when clean)."""
    errors = []
    for veth in record.get("veths", []):
        r = _ip("link", "del", veth, check=False)  # deleting one end removes the pair
        if r.returncode != 0 and "Cannot find" not in r.stderr:
            errors.append(r.stderr.strip())
    for ns in record.get("namespaces", []) + record.get("site_namespaces", []):
        r = _ip("netns", "del", ns, check=False)
        if r.returncode != 0 and "No such file" not in r.stderr:
            errors.append(r.stderr.strip())
    if record.get("bridge_created"):
        r = _ip("link", "del", record["bridge"], check=False)
        if r.returncode != 0 and "Cannot find" not in r.stderr:
            errors.append(r.stderr.strip())
    return errors


def namespace_exists(namespace: str) -> bool:
    return os.path.exists(f"/run/netns/{namespace}")


def namespace_pids(namespace: str) -> list[int]:
    r = _ip("netns", "pids", namespace, check=False)
    return [int(x) for x in r.stdout.split()] if r.returncode == 0 else []


def kill_namespace_processes(namespace: str) -> list[int]:
    """SIGKILL whatever still runs in the namespace (before it is deleted); returns the pids that were left."""
    left = namespace_pids(namespace)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left
