"""No cluster is ever stranded (issue 27, item 3): every profile listed and stopped, a
controller started by hand recorded and stopped by the command its refusal prints, a
``zpar.Cluster()`` whose owner was SIGKILLed gone within seconds, a stale connection file
refused at once, a misspelt profile refused, settings taking the types users pass."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest

import zpar
from tests.clusters import wait_until
from zpar.cluster.connection import read_connection_file
from zpar.errors import ConnectionFileError

pytestmark = pytest.mark.cluster

ZPAR = [sys.executable, "-m", "zpar"]


def run(args, timeout=90, **kw):
    return subprocess.run([*ZPAR, *args], capture_output=True, text=True, timeout=timeout, **kw)


def processes_of(zpar_dir: Path) -> list[psutil.Process]:
    """Every zpar process started with this test's ZPAR_DIR."""
    out = []
    for p in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            env = p.info["environ"] or {}
            if "zpar" in cmd and env.get("ZPAR_DIR") == str(zpar_dir):
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
        except psutil.Error:
            continue
    return out


@pytest.fixture
def reaper(zpar_dir):
    """Whatever a test leaves running under its ZPAR_DIR is killed (and the test fails)."""
    yield
    left = processes_of(zpar_dir)
    for p in left:
        p.kill()
    assert not left, [p.cmdline() for p in left]


def test_list_and_stop_all_cover_every_profile(zpar_dir, reaper):
    for profile in ("default", "other"):
        r = run(["cluster", "start", "-n", "1", "--daemon", "--profile", profile])
        assert r.returncode == 0, r.stderr
    listed = run(["cluster", "list"])
    assert re.search(r"^default\s+default\s", listed.stdout, re.M), listed.stdout
    assert re.search(r"^other\s+default\s", listed.stdout, re.M), listed.stdout
    only = run(["cluster", "list", "--profile", "other"])
    assert "other" in only.stdout and not re.search(r"^default\s", only.stdout, re.M)
    stopped = run(["cluster", "stop", "--all"])
    assert stopped.returncode == 0, stopped.stderr
    assert "profile 'default'" in stopped.stderr and "profile 'other'" in stopped.stderr
    wait_until(lambda: not processes_of(zpar_dir), "every process stopped", 30)
    assert run(["cluster", "list"]).stdout.count("\n") == 1  # the header alone


def test_a_controller_started_by_hand_is_listed_and_stopped_by_its_own_command(zpar_dir, reaper):
    env = {**os.environ, "ZPAR_DIR": str(zpar_dir)}
    run(["profile", "create", "hand"])
    log = open(zpar_dir / "hand.log", "wb")
    first = subprocess.Popen([*ZPAR, "controller", "--profile", "hand"], stdout=log, stderr=log)
    try:
        client_file = zpar_dir / "profile_hand" / "security" / "zpar-client.json"
        wait_until(client_file.exists, "the controller's connection file")
        second = run(["controller", "--profile", "hand"], env=env)
        assert second.returncode == 1
        m = re.search(r"stop it first: (zpar cluster stop [^\n]*)", second.stderr)
        assert m, second.stderr
        listed = run(["cluster", "list"], env=env)
        assert re.search(r"^hand\s+default\s+manual\s", listed.stdout, re.M), listed.stdout
        stop = run(shlex.split(m.group(1))[1:], env=env)  # the command, word for word
        assert stop.returncode == 0, stop.stderr
        assert first.wait(30) == 0
        # README: the store is tasks-<cluster id>.db
        assert (zpar_dir / "profile_hand" / "tasks-default.db").exists()
        assert not (zpar_dir / "profile_hand" / "tasks.db").exists()
        assert run(["cluster", "list"], env=env).stdout.count("\n") == 1
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
        log.close()


OWNER = textwrap.dedent(
    """
    import sys, zpar
    c = zpar.Cluster(n=2, cluster_id="owned")
    c.start()
    print("up", flush=True)
    sys.stdin.read()
    """
)


def test_a_sigkilled_owner_takes_its_cluster_with_it(zpar_dir, reaper):
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout.readline().strip() == "up"
        procs = [p for p in processes_of(zpar_dir) if p.pid != owner.pid]
        assert len(procs) >= 3  # a controller (and its scheduler) and two engines
        # the controller's own record: listed and stoppable by its cluster id meanwhile
        assert "owned" in run(["cluster", "list"]).stdout
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        gone, alive = psutil.wait_procs(procs, timeout=15)
        assert not alive, [p.cmdline() for p in alive]
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        owner.stdout.close()
        owner.stdin.close()
    assert "owned" not in run(["cluster", "list"]).stdout


def test_a_client_given_a_dead_controllers_file_says_so_at_once(zpar_dir, reaper):
    r = run(["cluster", "start", "-n", "0", "--daemon"])
    assert r.returncode == 0, r.stderr
    client_file = zpar_dir / "profile_default" / "security" / "zpar-client.json"
    saved = client_file.read_text()
    pid = read_connection_file(client_file).controller_pid
    stop = run(["cluster", "stop"])
    assert stop.returncode == 0, stop.stderr
    wait_until(lambda: not psutil.pid_exists(pid), "the controller gone")
    stale = zpar_dir / "stale.json"
    stale.write_text(saved)
    with pytest.raises(ConnectionFileError) as e:
        zpar.Client(url_file=stale, timeout=600)  # refused before any wait
    assert str(stale) in str(e.value) and f"pid {pid}" in str(e.value)
    assert "no longer running" in str(e.value)


@pytest.mark.parametrize(
    "args",
    [
        ["config", "show", "--profile", "defualt"],
        ["cluster", "stop", "--profile", "defualt"],
        ["cluster", "engines", "-n", "1", "--profile", "defualt"],
        ["cluster", "status", "--profile", "defualt"],
    ],
)
def test_a_misspelt_profile_is_refused_not_created(zpar_dir, reaper, args):
    run(["profile", "create", "mine"])
    r = run(args)
    assert r.returncode == 3, r.stderr
    assert "no profile 'defualt'" in r.stderr and "default" in r.stderr and "mine" in r.stderr
    assert not (zpar_dir / "profile_defualt").exists()


def test_settings_take_the_types_users_pass_and_errors_say_where(zpar_dir, reaper):
    assert zpar.Cluster(log_level=10).launcher.log_level == "DEBUG"
    assert zpar.Cluster(log_level="debug").launcher.log_level == "DEBUG"
    with pytest.raises(ValueError, match=r"zpar\.Cluster\(log_level=\.\.\.\)") as e:
        zpar.Cluster(log_level=7)
    assert "flag" not in str(e.value)
    r = run(["cluster", "start", "-n", "0", "--set", "nosuch=1"])
    assert r.returncode == 1 and "--set nosuch=1" in r.stderr, r.stderr
    assert "flag --nosuch" not in r.stderr
