"""--runtime swarm without a swarm: its arguments, the hosts read from node labels, the stack file
written from a layout, and the manifest recording which node runs each satellite. The live half
(a real five-node swarm) is tests/machines/test_swarm.py, `make test-swarm`."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml

from live import LAUNCHER
from skymemory.launcher import keys, nodes, swarm
from skymemory.launcher.machines import group_by_machine, machine_of
from skymemory.launcher.options import parse_args
from skymemory.orbit.manifest import Manifest, SatelliteEntry


def node(index, address, hostname=None, state="ready", availability="active", label=None) -> dict:
    """One node as `docker node inspect` describes it."""
    labels = {swarm.HOST_LABEL: str(index) if label is None else label} if index is not None or label else {}
    return {"ID": f"id{address}", "Description": {"Hostname": hostname or f"pc{address[-1]}"},
            "Spec": {"Labels": labels, "Availability": availability},
            "Status": {"State": state, "Addr": address}}


def test_hosts_are_the_labelled_nodes_in_label_order():
    manager = node(0, "0.0.0.0", hostname="pc1")
    manager["ManagerStatus"] = {"Addr": "192.168.1.11:2377"}  # a manager may report 0.0.0.0 as its Status.Addr
    found = swarm.hosts_from_nodes([node(2, "192.168.1.13"), node(None, "192.168.1.99"), manager,
                                    node(1, "192.168.1.12")])
    assert [(h.index, h.address, h.hostname) for h in found] == [
        (0, "192.168.1.11", "pc1"), (1, "192.168.1.12", "pc2"), (2, "192.168.1.13", "pc3")]


@pytest.mark.parametrize("nodes_, message", [
    ([node(None, "10.0.0.1")], "no swarm node has the label skymemory.host: give the H hosts 0..H-1"),
    ([node(0, "10.0.0.1"), node(2, "10.0.0.3")], "no swarm node has skymemory.host=1: the labels must number"),
    ([node(0, "10.0.0.1"), node(0, "10.0.0.2")], "swarm nodes pc1 and pc2 both have skymemory.host=0"),
    ([node(None, "10.0.0.1", label="first")], "swarm node pc1 has skymemory.host='first': want a host number"),
    ([node(0, "10.0.0.1", state="down")], "swarm node pc1 (skymemory.host=0) is down/active, not ready/active"),
    ([node(0, "10.0.0.1", availability="drain")], "is ready/drain, not ready/active"),
    ([node(0, "10.0.0.1"), node(1, "10.0.0.1")], "two labelled swarm nodes have the same address"),
])
def test_labels_that_do_not_number_the_hosts_are_one_line(nodes_, message):
    with pytest.raises(ValueError) as err:
        swarm.hosts_from_nodes(nodes_)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_the_stack_places_satellites_as_hosts_would(tmp_path):
    """4x5 over three labelled nodes: each satellite's service constrained to host i*3//20 (the --hosts
    rule), host networking, the key as a read-only secret of the image's user, restarted on any exit."""
    args = parse_args(["--runtime", "swarm", "--planes", "4", "--sats", "5"])
    n, hosts = 20, 3
    entries = [SatelliteEntry(p, s, f"10.0.0.{swarm.host_of(p * 5 + s, n, hosts) + 1}", args.layout.isl_port(p * 5 + s),
                              args.layout.ground_port(p * 5 + s)) for p in range(4) for s in range(5)]
    common = nodes.node_options(args, 1234) + ["--auth-keys", keys.CONTAINER_KEY_FILE]
    jobs = [((e.plane, e.sat), swarm.host_of(e.plane * 5 + e.sat, n, hosts),
             nodes.node_argv("", e, common, args, swarm.PEERS_TARGET)[1:]) for e in entries]
    ground = keys.make_key_file(tmp_path, [(e.plane, e.sat) for e in entries])
    own = {(e.plane, e.sat): keys.satellite_key_file(ground, e.plane, e.sat) for e in entries}
    peers = nodes.write_peers(tmp_path / "peers.txt", entries)
    stack = yaml.safe_load(swarm.stack_text(jobs, peers, own))

    assert stack["networks"]["hostnet"] == {"external": True, "name": "host"}
    # a secret per satellite, its own key file; the ground's (the masters) is none of them
    assert stack["secrets"] == {f"keys-{p}-{s}": {"file": str(f)} for (p, s), f in own.items()}
    assert stack["configs"] == {"peers": {"file": str(peers)}}
    assert len(stack["services"]) == n
    placed = {}
    for e in entries:
        service = stack["services"][f"sat-{e.plane}-{e.sat}"]
        (constraint,) = service["deploy"]["placement"]["constraints"]
        placed.setdefault(constraint, []).append(e.plane * 5 + e.sat)
        assert service["networks"] == ["hostnet"]
        assert service["deploy"]["restart_policy"]["condition"] == "any"
        assert service["secrets"] == [{"source": f"keys-{e.plane}-{e.sat}", "target": "skymem_auth.keys",
                                       "uid": "65534", "gid": "65534", "mode": 0o400}]
        assert service["configs"] == [{"source": "peers", "target": swarm.PEERS_TARGET, "mode": 0o444}]
        command = service["command"]
        assert command[command.index("--bind") + 1] == e.host
        assert command[command.index("--peers") + 1] == swarm.PEERS_TARGET
        assert command[command.index("--auth-keys") + 1] == keys.CONTAINER_KEY_FILE
    # contiguous shares, as --hosts gives ssh hosts: 7, 7 and 6 satellites
    assert placed == {"node.labels.skymemory.host == 0": list(range(0, 7)),
                      "node.labels.skymemory.host == 1": list(range(7, 14)),
                      "node.labels.skymemory.host == 2": list(range(14, 20))}

    insecure = yaml.safe_load(swarm.stack_text(jobs[:1], peers, None))
    assert "secrets" not in insecure and "secrets" not in insecure["services"]["sat-0-0"]


def test_the_manifest_records_which_node_runs_each_satellite(tmp_path):
    backend = {"kind": "swarm", "stack": "skymemabc123", "stack_file": "x.yml", "docker_host": "",
               "nodes": [{"label": 0, "id": "a", "hostname": "pc1", "address": "10.0.0.1"},
                         {"label": 1, "id": "b", "hostname": "pc2", "address": "10.0.0.2"}]}
    m = Manifest(planes=1, sats=3, runtime="swarm", backend=backend,
                 satellites=[SatelliteEntry(0, 0, "10.0.0.1", 20000, 30000), SatelliteEntry(0, 1, "10.0.0.1", 20001, 30001),
                             SatelliteEntry(0, 2, "10.0.0.2", 20002, 30002)])
    back = Manifest.load(m.save(tmp_path / "m.json"))
    assert back.runtime == "swarm" and back.backend == backend
    assert machine_of(back, back.satellites[2]) == "swarm node pc2 (10.0.0.2)"
    assert {k: len(v) for k, v in group_by_machine(back).items()} == {"swarm node pc1 (10.0.0.1)": 2,
                                                                     "swarm node pc2 (10.0.0.2)": 1}


@pytest.mark.parametrize("extra, message", [
    (["--netns", "2"], "choose one of --netns, --hosts, --runtime cfs/docker/swarm"),
    (["--hosts", "10.0.0.1,10.0.0.2"], "choose one of --netns, --hosts, --runtime cfs/docker/swarm"),
    (["--bind", "10.0.0.1"], "--bind goes with local nodes: on a swarm each satellite binds the address of its node"),
    (["--tlm-address", "127.0.0.2"], "--tlm-address goes with local nodes, --runtime cfs or --hosts"),
    (["--addresses", "per-satellite"], "--addresses per-satellite is for satellites on this machine's loopback"),
    (["--container-cpus", "0.5"], "--container-cpus and --container-memory-mib go with --runtime docker"),
])
def test_arguments_that_do_not_go_with_swarm_are_one_line(extra, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        parse_args(["--runtime", "swarm", "--planes", "2", "--sats", "2", *extra])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_.value.code == 2 and error.startswith("launch_constellation.py: error: ") and message in error


def test_without_the_docker_cli_the_launch_is_one_line_and_leaves_nothing(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path / "empty")}  # no docker on it
    r = subprocess.run([sys.executable, str(LAUNCHER), "--runtime", "swarm", "--planes", "2", "--sats", "2",
                        "--manifest", str(tmp_path / "m.json"), "--quiet"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        "launch_constellation: the docker CLI is not installed"], r.stderr
    assert not (tmp_path / "m.json").exists()
