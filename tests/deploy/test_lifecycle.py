"""Cluster lifecycle as a user meets it: double starts, rival controllers, bad arguments,
throwaway clusters' files, a SIGKILLed controller's leftovers (issue 18, second paragraph)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

import zpar
from tests.clusters import wait_until
from zpar.cluster.connection import read_connection_file
from zpar.cluster.ownership import RUNDIR_OWNER

ZPAR = [sys.executable, "-m", "zpar"]


def run(args, timeout=90):
    return subprocess.run([*ZPAR, *args], capture_output=True, text=True, timeout=timeout)


def cluster_processes(zpar_dir: Path) -> list[psutil.Process]:
    """Every zpar process started with this test's ZPAR_DIR (daemons are not our children)."""
    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
        except psutil.Error:
            continue
        if "zpar." in cmd and env.get("ZPAR_DIR") == str(zpar_dir):
            out.append(p)
    return out


@pytest.fixture
def daemon_cluster(zpar_dir):
    """`zpar cluster start -n 1 --daemon`, stopped (and checked gone) afterwards."""
    started = run(["cluster", "start", "-n", "1", "--daemon"])
    assert started.returncode == 0, started.stderr
    yield
    run(["cluster", "stop"])
    procs = cluster_processes(zpar_dir)
    for p in procs:  # only if stop failed: never leave daemons behind
        p.kill()
    assert not procs


def test_second_start_is_refused_and_leaves_the_first_running(zpar_dir, daemon_cluster):
    sec = zpar_dir / "profile_default" / "security" / "zpar-client.json"
    before = read_connection_file(sec)
    pids = {p.pid for p in cluster_processes(zpar_dir)}
    again = run(["cluster", "start", "-n", "1", "--daemon"])
    assert again.returncode == 1
    assert "already running" in again.stderr and "Traceback" not in again.stderr
    # the first cluster: same processes, same connection file, still listed and usable
    assert {p.pid for p in cluster_processes(zpar_dir)} == pids
    assert read_connection_file(sec) == before
    listed = run(["cluster", "list"])
    assert "default" in listed.stdout, listed.stdout
    with zpar.Client(timeout=30) as rc:
        rc.wait_for_engines(1, timeout=30)
        assert rc[:].apply_sync(lambda: 7) == [7]


def test_second_controller_on_the_same_cluster_is_refused(zpar_dir, daemon_cluster):
    sec = zpar_dir / "profile_default" / "security"
    before = {f.name: f.read_bytes() for f in sec.iterdir()}
    rival = run(["controller", "--cluster-id", "default"], timeout=60)
    assert rival.returncode == 1
    assert "already running" in rival.stderr and "Traceback" not in rival.stderr
    assert {f.name: f.read_bytes() for f in sec.iterdir()} == before  # untouched
    # a plain `zpar controller` (no cluster id) is the profile's default cluster too
    rival = run(["controller"], timeout=60)
    assert rival.returncode == 1 and "already running" in rival.stderr
    assert {f.name: f.read_bytes() for f in sec.iterdir()} == before


@pytest.mark.parametrize(
    "args, named",
    [
        (["cluster", "start", "-n", "-1"], "-n"),
        (["cluster", "start", "-n", "two"], "-n"),
        (["cluster", "start", "--profile", "bad/name"], "--profile"),
        (["cluster", "start", "--profile", ""], "--profile"),
        (["cluster", "start", "--log-level", "BOGUS"], "--log-level"),
        (["cluster", "start", "--cluster-id", "../../evil"], "--cluster-id"),
        (["cluster", "stop", "--cluster-id", ".hidden"], "--cluster-id"),
        (["controller", "--profile", "../up"], "--profile"),
        (["controller", "--cluster-id", "a/b"], "--cluster-id"),
        (["engine", "--log-level", "loud"], "--log-level"),
    ],
)
def test_bad_arguments_are_one_line_naming_them(zpar_dir, args, named):
    r = run(args, timeout=30)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert named in lines[0] and "Traceback" not in r.stderr
    assert not any(zpar_dir.parent.glob("evil*")) and not (zpar_dir.parent / "up").exists()


def test_version():
    r = run(["--version"], timeout=30)
    assert r.returncode == 0
    assert r.stdout.strip() == f"zpar {zpar.__version__}"


def test_throwaway_cluster_removes_its_files(zpar_dir):
    with zpar.Cluster(n=1, timeout=60) as rc:
        rc.wait_for_engines(1, timeout=30)
        rc[:].apply_sync(lambda: None)
    pdir = zpar_dir / "profile_default"
    assert not list(pdir.glob("tasks-*")), list(pdir.iterdir())
    assert not list((pdir / "log").iterdir())
    assert not list((pdir / "security").iterdir())
    assert not list((pdir / "clusters").iterdir())


def test_throwaway_cluster_keeps_files_when_asked(zpar_dir):
    c = zpar.Cluster(n=1, timeout=60, keep_files=True)
    with c:
        pass
    pdir = zpar_dir / "profile_default"
    assert list(pdir.glob(f"tasks-{c.cluster_id}.db"))
    assert list((pdir / "log").glob(f"{c.cluster_id}-*.log"))


def test_named_cluster_keeps_its_store(zpar_dir):
    with zpar.Cluster(n=0, cluster_id="kept", timeout=60):
        pass
    assert (zpar_dir / "profile_default" / "tasks-kept.db").exists()


def _rundir_of(pid: int) -> Path:
    for d in Path(tempfile.gettempdir()).glob("zpar-*"):
        try:
            if int((d / RUNDIR_OWNER).read_text()) == pid:
                return d
        except (OSError, ValueError):
            continue
    raise AssertionError(f"no run directory owned by {pid}")


@pytest.mark.parametrize("noticer", [["cluster", "list"], ["cluster", "stop"]])
def test_sigkilled_controller_leaves_nothing_behind(zpar_dir, noticer):
    started = run(["cluster", "start", "-n", "0", "--daemon"])
    assert started.returncode == 0, started.stderr
    client_file = zpar_dir / "profile_default" / "security" / "zpar-client.json"
    pid = read_connection_file(client_file).controller_pid
    rundir = _rundir_of(pid)
    controller = psutil.Process(pid)
    scheduler = controller.children()
    os.kill(pid, signal.SIGKILL)
    psutil.wait_procs([controller, *scheduler], timeout=30)  # the scheduler follows its parent
    # the daemon launcher may notice and clean up before the noticer runs: either way, after
    # the noticer nothing may be left
    r = run(noticer)
    # its launcher may have noticed first and stopped the cluster: then stop finds none
    assert r.returncode in ((0, 3) if noticer[1] == "stop" else (0,)), r.stderr
    assert "Traceback" not in r.stderr
    assert not rundir.exists()
    assert not client_file.exists()
    assert not list((zpar_dir / "profile_default" / "clusters").iterdir())
    # and the cluster can be started again
    again = run(["cluster", "start", "-n", "0", "--daemon"])
    assert again.returncode == 0, again.stderr
    assert run(["cluster", "stop"]).returncode == 0


def test_cluster_engines_adds_engines_that_stop_with_the_cluster(zpar_dir, daemon_cluster):
    added = run(["cluster", "engines", "-n", "2", "--daemon"])
    assert added.returncode == 0, added.stderr
    with zpar.Client(timeout=30) as rc:
        rc.wait_for_engines(3, timeout=60)
    listed = run(["cluster", "list"])
    assert " 3/3 " in listed.stdout, listed.stdout
    engines = [p for p in cluster_processes(zpar_dir) if "zpar.engine" in " ".join(p.cmdline())]
    assert len(engines) == 3
    stopped = run(["cluster", "stop"])
    assert stopped.returncode == 0, stopped.stderr
    assert not psutil.wait_procs(engines, timeout=20)[1]
    assert not list((zpar_dir / "profile_default" / "clusters").iterdir())


def test_cluster_engines_without_a_cluster_says_so(zpar_dir):
    r = run(["cluster", "engines", "-n", "1"])
    assert r.returncode == 1
    assert "no running cluster 'default'" in r.stderr and "Traceback" not in r.stderr


def test_daemon_with_keep_replaces_engines(zpar_dir):
    started = run(["cluster", "start", "-n", "1", "--daemon", "--keep"])
    try:
        assert started.returncode == 0, started.stderr
        with zpar.Client(timeout=30) as rc:
            rc.wait_for_engines(1, timeout=30)
            victim = rc[0].apply_sync(os.getpid)
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: rc.ids and rc.ids != [0], "a replacement engine", 60)
            assert rc[rc.ids[0]].apply_sync(os.getpid) != victim
        log = (zpar_dir / "profile_default" / "log" / "default-launcher.log").read_text()
        assert f"(pid {victim}) exited with code -9" in log and "restarting it" in log
    finally:
        run(["cluster", "stop"])
    assert not cluster_processes(zpar_dir)


def test_sigkilled_standalone_controller_rundir_is_swept(zpar_dir):
    ctl = subprocess.Popen([*ZPAR, "controller", "--profile", "solo"], stderr=subprocess.DEVNULL)
    try:
        f = zpar_dir / "profile_solo" / "security" / "zpar-client.json"
        wait_until(f.exists, "the controller's connection file")
        rundir = _rundir_of(ctl.pid)
        children = psutil.Process(ctl.pid).children()
        ctl.kill()
        ctl.wait()
        psutil.wait_procs(children, timeout=30)
        assert run(["cluster", "list"]).returncode == 0
        assert not rundir.exists()
    finally:
        if ctl.poll() is None:
            ctl.kill()
            ctl.wait()
