"""The cFS launcher's guard rails, without cFS: ports that never collide, the per-host limit
said before anything starts, a failed boot explained by each instance's first log error, and
--hosts through a stand-in `ssh` that runs the remote scripts on this machine.

(A stand-in core executable plays cFS where one is needed; the real thing is opt-in:
tests/integration/test_cfs_ground.py.)
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skymemory.launcher import cfs_limits, keys, processes, ssh
from skymemory.launcher.options import parse_args
from skymemory.orbit.manifest import Manifest

from live import LAUNCHER, fake_ssh_env, free_first_cpuid, free_port_bases, unsigned_commands_refused


def fake_core(tmp_path: Path, body: str) -> Path:
    exe = tmp_path / "exe"
    exe.mkdir()
    (exe / "cf").mkdir()
    core = exe / "core-cpu1"
    core.write_text("#!/bin/sh\n" + body)
    core.chmod(0o755)
    return exe


def run_launcher(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAUNCHER), *args], capture_output=True, text=True, timeout=120,
                          env=env)


def launch_fake_cfs(exe: Path, tmp_path: Path, sats: int, health_timeout: int) -> subprocess.CompletedProcess:
    """A 1 x SATS cFS launch of a stand-in core, detached, with queue limits it cannot exceed (it makes no queue)."""
    isl, ground = free_port_bases(sats)
    return run_launcher("--runtime", "cfs", "--cfs-exe", str(exe), "--planes", "1", "--sats", str(sats),
                        "--manifest", str(tmp_path / "m.json"), "--isl-port-base", str(isl),
                        "--ground-port-base", str(ground), "--detach", "--health-timeout", str(health_timeout),
                        "--cfs-first-cpuid", free_first_cpuid(sats),
                        "--cfs-queues-per-instance", "1", "--cfs-queue-slots-per-instance", "1",
                        "--cfs-queue-depth", "1")


def test_cfs_ports_are_distinct_and_clear_of_telemetry(tmp_path, capsys):
    exe = fake_core(tmp_path, "exit 0\n")
    args = parse_args(["--runtime", "cfs", "--cfs-exe", str(exe), "--planes", "19", "--sats", "5",
                       "--manifest", str(tmp_path / "m.json")])
    from skymemory.launcher.start import _entries

    entries = _entries(args, lambda i: "127.0.0.1")
    ci = [e.command_port for e in entries]
    assert len(set(ci)) == 95 and ci[0] == 1236 and [e.cpuid for e in entries][:2] == [3, 4]
    assert {e.tlm_port for e in entries} == {1235} and 1235 not in ci
    assert len({e.tlm_host for e in entries}) == 95 and entries[0].tlm_host == "127.0.1.1"
    # cpuid 2 would put a CI_LAB on TO_LAB's port: refused with the reason
    for bad in (["--cfs-first-cpuid", "1"], ["--cfs-first-cpuid", "2"], ["--tlm-address", "10.0.0.1"],
                ["--cfs-first-cpuid", "38767"]):
        with pytest.raises(SystemExit):
            parse_args(["--runtime", "cfs", "--cfs-exe", str(exe), "--planes", "2", "--sats", "2",
                        "--isl-port-base", "40000", "--ground-port-base", "50000", *bad])
        assert "error" in capsys.readouterr().err, bad


def test_more_instances_than_the_host_allows_fail_before_starting(tmp_path):
    fit = cfs_limits.fit(cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
    if fit.instances is None or fit.instances + 1 > 4096:
        pytest.skip("this host bounds no number of cFS instances (CAP_SYS_RESOURCE and ulimit -q unlimited)")
    exe = fake_core(tmp_path, "sleep 30\n")
    want = fit.instances + 1
    isl, ground = free_port_bases(want)
    r = run_launcher("--runtime", "cfs", "--cfs-exe", str(exe), "--planes", "1", "--sats", str(want),
                     "--manifest", str(tmp_path / "m.json"), "--isl-port-base", str(isl),
                     "--ground-port-base", str(ground), "--detach")
    assert r.returncode == 1
    assert f"{want} cFS instances do not fit this host: at most {fit.instances} do" in r.stderr
    assert "fix:" in r.stderr
    assert not list((tmp_path / "logs").glob("*.log")), "nothing may start"


def test_limits_read_from_a_probe():
    text = ("queues_max 256\nmsg_max 10\nMax msgqueue size         819200               819200               bytes\n"
            "CapEff:\t00000000a80425fb\n")
    limits = cfs_limits.HostLimits.parse(text)
    assert limits == cfs_limits.HostLimits(256, 10, 819200, False)
    f = cfs_limits.fit(limits, cfs_limits.InstanceCost())
    assert f.instances == 0 and "msg_max 10" in f.reasons[0]
    f = cfs_limits.fit(cfs_limits.HostLimits(256, 256, 819200, False), cfs_limits.InstanceCost())
    assert f.instances == 20 and "allows 24" in f.reasons[1]  # 33,904 bytes each
    assert cfs_limits.fit(cfs_limits.HostLimits(256, 256, 819200, True), cfs_limits.InstanceCost()).instances == 24
    problem = cfs_limits.problem(24, cfs_limits.HostLimits(256, 256, 819200, False), cfs_limits.InstanceCost())
    assert "at most 20" in problem and "fs.mqueue.queues_max=304" in problem


def test_failed_boot_shows_each_instance_first_log_error(tmp_path):
    tiny = cfs_limits.InstanceCost(1, 1, 1)  # the fake core below creates no queue at all
    assert cfs_limits.problem(3, cfs_limits.HostLimits.local(), tiny) is None
    exe = fake_core(tmp_path, 'echo "CFE_PSP: starting cpuid $2"\n'
                              'echo "OS_QueueCreate_Impl():119:OS_QueueCreate Error. errno = 24 (Too many open files)"\n'
                              'echo "SCH Error creating pipe!"\nexit 1\n')
    r = launch_fake_cfs(exe, tmp_path, 3, health_timeout=20)
    assert r.returncode == 1, r.stderr
    assert "first error line of each failed instance's log" in r.stderr
    assert "OS_QueueCreate Error. errno = 24 (Too many open files)" in r.stderr
    assert "SCH Error" not in r.stderr  # only the first error line
    assert not (tmp_path / "m.json").exists()


# What a real cFS v7.0.0 instance logs when its startup script names SKYMEM "SKYMEM_X" (cFE refuses the table
# file, whose name is SKYMEM.Constellation; the app then exits; a second later cFE's startup sync fails).
RENAMED_APP_LOG = (
    "1980-012-14:03:20.50403 CFE_ES_ParseFileEntry: Loading file: /cf/skymem.so, APP: SKYMEM_X\n"
    "EVS Port1 1980-012-14:03:20.55555 66/1/CFE_TBL 102: LoadFile,app=SKYMEM_X,file=/cf/skymem_tbl.tbl,"
    "tbl=SKYMEM.Constellation:File for wrong table 'SKYMEM.Constellation'\n"
    "EVS Port1 1980-012-14:03:20.55566 66/1/SKYMEM_X 10: SKYMEM: error loading /cf/skymem_tbl.tbl, "
    "RC = 0xFFFFFFFFCC000020\n"
    "1980-012-14:03:20.55571 CFE_ES_ExitApp: Application SKYMEM_X called CFE_ES_ExitApp\n"
    "1980-012-14:03:21.50791 CFE_ES_Main: Startup Sync failed - Applications may not have all initialized\n")


def test_renamed_app_failure_quotes_cfe_cause(tmp_path):
    """An app named otherwise than its table: the one-line reason is cFE's "File for wrong table" line, then the
    app's own error line (which has only a status code), and what the cause means."""
    tiny = cfs_limits.InstanceCost(1, 1, 1)
    assert cfs_limits.problem(2, cfs_limits.HostLimits.local(), tiny) is None
    log = tmp_path / "renamed.log"
    log.write_text(RENAMED_APP_LOG)
    exe = fake_core(tmp_path, f"cat {log}\nexec sleep 60\n")
    r = launch_fake_cfs(exe, tmp_path, 2, health_timeout=600)
    assert r.returncode == 1, r.stderr
    # both instances log the same; the boot stops at the first log found failing, whichever instance's it is
    line = next((x for x in r.stderr.splitlines() if x.startswith(("  0-0: ", "  0-1: "))), None)
    assert line is not None and line[len("  0-0: "):] == (
        "CFE_TBL 102: LoadFile,app=SKYMEM_X,file=/cf/skymem_tbl.tbl,tbl=SKYMEM.Constellation:File for wrong table "
        "'SKYMEM.Constellation' -> SKYMEM_X 10: SKYMEM: error loading /cf/skymem_tbl.tbl, RC = 0xFFFFFFFFCC000020"
    ), r.stderr
    assert "an app's name in the startup script is not the prefix of its table's name" in r.stderr
    assert "Startup Sync failed" not in r.stderr


def test_an_earlier_launch_error_is_not_this_boot_error(tmp_path):
    """A launch after a failed one in the same run directory: the old log's error line is not quoted as this
    boot's cause (this core logs nothing and never answers, so this boot fails on the health check)."""
    (tmp_path / "renamed.log").write_text(RENAMED_APP_LOG)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    isl, ground = free_port_bases(1)
    common = ("--runtime", "cfs", "--planes", "1", "--sats", "1", "--manifest", str(tmp_path / "m.json"),
              "--isl-port-base", str(isl), "--ground-port-base", str(ground), "--detach",
              "--cfs-first-cpuid", free_first_cpuid(1), "--cfs-queues-per-instance", "1",
              "--cfs-queue-slots-per-instance", "1", "--cfs-queue-depth", "1")
    first = fake_core(tmp_path / "a", f"cat {tmp_path / 'renamed.log'}\nexec sleep 60\n")
    r = run_launcher("--cfs-exe", str(first), "--health-timeout", "600", *common)
    assert r.returncode == 1 and "File for wrong table" in r.stderr, r.stderr
    quiet = fake_core(tmp_path / "b", "exec sleep 60\n")
    r = run_launcher("--cfs-exe", str(quiet), "--health-timeout", "3", *common)
    assert r.returncode == 1, r.stderr
    assert "File for wrong table" not in r.stderr and "reported errors while booting" not in r.stderr, r.stderr


@pytest.mark.parametrize("case", ["missing", "no-core", "a-file", "core-not-executable"])
def test_wrong_cfs_exe_is_one_line(tmp_path, case):
    """A --cfs-exe that is not a cFS exe directory: one line naming it and what is wrong, no usage text."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "core-cpu1").write_text("")
    exe = {"missing": tmp_path / "nowhere", "no-core": tmp_path / "empty", "a-file": tmp_path / "build" / "core-cpu1",
           "core-not-executable": tmp_path / "build"}[case]
    r = run_launcher("--runtime", "cfs", "--cfs-exe", str(exe), "--planes", "1", "--sats", "2",
                     "--manifest", str(tmp_path / "m.json"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "usage:" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"launch_constellation.py: error: --cfs-exe {exe}"), r.stderr


def test_instance_logging_an_error_stops_the_boot_without_waiting(tmp_path):
    """A failing instance may keep running (its lab apps spinning on broken pipes at real-time
    priority): the launcher reads the logs while it waits and stops at the first error line."""
    tiny = cfs_limits.InstanceCost(1, 1, 1)
    assert cfs_limits.problem(2, cfs_limits.HostLimits.local(), tiny) is None
    exe = fake_core(tmp_path, 'echo "OS_QueueCreate_Impl():119:OS_QueueCreate Error. errno = 28 (No space left on '
                              'device)"\nexec sleep 60\n')
    r = launch_fake_cfs(exe, tmp_path, 2, health_timeout=600)
    assert r.returncode == 1, r.stderr
    assert "cFS instance(s) reported errors while booting" in r.stderr
    assert "errno 28 (ENOSPC): the host's fs.mqueue.queues_max is used up" in r.stderr
    assert "did not answer a NOOP" not in r.stderr


@pytest.fixture
def fake_ssh(tmp_path):
    return fake_ssh_env(tmp_path)


def test_hosts_over_ssh_start_put_get_stop(node_path, tmp_path, fake_ssh):
    """Native nodes on two "hosts" (127.0.0.2, 127.0.0.3) through the ssh scripts, keyed: each satellite's own
    key file is copied into --remote-dir (mode 0600), the nodes take only signed commands, `stop` removes the
    copies."""
    isl, ground = free_port_bases(4, host="127.0.0.2")
    manifest = tmp_path / "m.json"
    remote_keys = tmp_path / "remote" / keys.REMOTE_KEY_DIR
    r = run_launcher("--hosts", "127.0.0.2,127.0.0.3", "--planes", "2", "--sats", "2", "--manifest", str(manifest),
                     "--remote-dir", str(tmp_path / "remote"), "--remote-node", str(node_path),
                     "--isl-port-base", str(isl), "--ground-port-base", str(ground), "--detach", "--quiet",
                     "--health-timeout", "30", env=fake_ssh)
    assert r.returncode == 0, r.stderr
    assert "without authentication" not in r.stderr
    m = Manifest.load(manifest)
    try:
        assert [e.host for e in m.satellites] == ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"]
        assert m.auth_key_file == str(tmp_path / keys.KEY_FILE_NAME)  # the ground's own copy
        for e in m.satellites:  # its own file, not the ground's (the masters)
            copy = Path(keys.remote_key_file(str(tmp_path / "remote"), e.plane, e.sat))
            assert stat.S_IMODE(copy.stat().st_mode) == 0o600
            assert copy.read_bytes() == keys.satellite_key_file(m.auth_key_file, e.plane, e.sat).read_bytes()
        assert sorted(p.name for p in remote_keys.iterdir()) == ["0-0.keys", "0-1.keys", "1-0.keys", "1-1.keys"]
        unsigned_commands_refused(m, (1, 1))
        from skymemory.store.constellation import ConstellationBlockStore

        with ConstellationBlockStore.from_manifest(m, [(0, 0), (1, 1)]) as store:
            payload = os.urandom(30_000)
            rec = store.put_block(b"h" * 32, payload)
            assert store.get_block(rec) == payload
    finally:
        r = subprocess.run([sys.executable, str(LAUNCHER), "stop", "--manifest", str(manifest)], capture_output=True,
                           text=True, timeout=60, env=fake_ssh)
    assert r.returncode == 0, r.stderr
    assert not any(processes.alive(e.pid) for e in m.satellites)
    assert not remote_keys.exists()


def test_a_host_the_key_cannot_reach_stops_the_launch(node_path, tmp_path, fake_ssh):
    """The key file cannot be written on a host (its --remote-dir is under a plain file): the launch says so
    and stops; nothing is left running unauthenticated."""
    (tmp_path / "not-a-dir").write_text("")
    isl, ground = free_port_bases(4, host="127.0.0.2")
    r = run_launcher("--hosts", "127.0.0.2,127.0.0.3", "--planes", "2", "--sats", "2", "--manifest",
                     str(tmp_path / "m.json"), "--remote-dir", str(tmp_path / "not-a-dir" / "remote"),
                     "--remote-node", str(node_path), "--isl-port-base", str(isl), "--ground-port-base", str(ground),
                     "--detach", "--quiet", env=fake_ssh)
    assert r.returncode == 1
    assert f"cannot be copied to 127.0.0.2:{tmp_path / 'not-a-dir' / 'remote'}" in r.stderr, r.stderr
    assert "the launch stops rather than run unauthenticated" in r.stderr
    assert not (tmp_path / "m.json").exists()


def test_cfs_start_script_gives_each_instance_the_key_0600(tmp_path):
    """cFS on --hosts: each instance's /cf gets a copy of its own key file (mode 0600 even where --cfs-exe
    brought a world-readable one); run here with sh, the stand-in core printing what it finds."""
    exe = fake_core(tmp_path, "stat -c '%a' cf/skymem_auth.keys; cat cf/skymem_auth.keys\n")
    (exe / "cf" / "skymem_auth.keys").write_text("stale\n")
    (exe / "cf" / "skymem_auth.keys").chmod(0o644)
    remote = tmp_path / "remote"
    remote.mkdir()
    own = Path(keys.remote_key_file(str(remote), 0, 0))
    own.parent.mkdir()
    own.write_text("0 " + "ab" * 32 + "\n")
    own.chmod(0o600)
    script = ssh.cfs_start_script(str(remote), str(exe), "core-cpu1", [("0-0", ["./core-cpu1"], "plane = 0\n")],
                                  keys.remote_key_dir(str(remote)))
    r = subprocess.run(["sh", "-s"], input=script, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    log = remote / "logs" / "0-0.log"
    deadline = time.monotonic() + 30  # the core runs in the background: a bound on waiting for its two lines
    while log.read_text().count("\n") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert log.read_text() == "600\n0 " + "ab" * 32 + "\n"


def test_cfs_over_hosts_refused_per_host_before_starting(tmp_path, fake_ssh):
    """Each host's share is checked against that host's limits, read over ssh, before anything starts."""
    fit = cfs_limits.fit(cfs_limits.HostLimits.local(), cfs_limits.InstanceCost())
    if fit.instances is None or 2 * (fit.instances + 1) > 4096:
        pytest.skip("this host bounds no number of cFS instances")
    exe = fake_core(tmp_path, "sleep 30\n")
    want = 2 * (fit.instances + 1)  # one more than fits on each of the two "hosts"
    isl, ground = free_port_bases(want)
    r = run_launcher("--runtime", "cfs", "--cfs-exe", str(exe), "--hosts", "127.0.0.2,127.0.0.3", "--planes", "2",
                     "--sats", str(want // 2), "--manifest", str(tmp_path / "m.json"), "--remote-dir",
                     str(tmp_path / "remote"), "--isl-port-base", str(isl), "--ground-port-base", str(ground),
                     "--detach", env=fake_ssh)
    assert r.returncode == 1
    assert f"do not fit 127.0.0.2: at most {fit.instances}" in r.stderr
    assert f"do not fit 127.0.0.3: at most {fit.instances}" in r.stderr
    assert not (tmp_path / "remote" / "cfs").exists(), "nothing may start"
