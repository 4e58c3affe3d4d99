"""The README's commands, as a new user types them, in real subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil


def _run(args, env, timeout=90):
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)


def test_readme_cluster_start_job_stop(zpar_dir):
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    zpar = [sys.executable, "-m", "zpar"]
    started = _run([*zpar, "cluster", "start", "-n", "2", "--daemon"], env)
    try:
        assert started.returncode == 0, started.stderr
        assert "2/2 engines registered" in started.stderr
        job = _run(
            [
                sys.executable,
                "-c",
                "import zpar, numpy as np; rc = zpar.Client(); "
                "print(rc[:].apply_sync(np.sum, np.arange(10)))",
            ],
            env,
        )
        assert job.returncode == 0, job.stderr
        assert (
            job.stdout.strip() == "[np.int64(45), np.int64(45)]" or job.stdout.strip() == "[45, 45]"
        )
        listed = _run([*zpar, "cluster", "list"], env)
        # launcher, controller and 2 engines; 2 of 2 engines registered
        assert "default" in listed.stdout and " 4  " in listed.stdout, listed.stdout
        assert " 2/2 " in listed.stdout, listed.stdout
    finally:
        stopped = _run([*zpar, "cluster", "stop"], env)
    assert stopped.returncode == 0, stopped.stderr
    assert "4 processes" in stopped.stderr
    # daemonised processes are not our children: look for them by their command line
    leftovers = [
        p
        for p in psutil.process_iter(["cmdline", "environ"])
        if p.info["cmdline"]
        and "zpar." in " ".join(p.info["cmdline"])
        and (p.info["environ"] or {}).get("ZPAR_DIR") == str(zpar_dir)
    ]
    assert not leftovers


def test_cluster_stop_without_cluster_says_so(zpar_dir):
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    r = _run([sys.executable, "-m", "zpar", "cluster", "stop"], env)
    assert r.returncode == 3
    assert "no cluster" in r.stderr


def test_client_without_controller_names_the_missing_file(zpar_dir):
    import pytest

    import zpar

    with pytest.raises(zpar.ZparError, match="does not exist"):
        zpar.Client(timeout=0.2)


def test_manual_controller_and_engine_commands(zpar_dir):
    """`zpar controller` + `zpar engine --wait` (engine first: it waits for the file)."""
    import zpar

    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    zpar_cmd = [sys.executable, "-m", "zpar"]
    log = open(zpar_dir.parent / "manual.log", "wb")
    engine = subprocess.Popen(
        [*zpar_cmd, "engine", "--profile", "manual", "--wait", "60"], env=env, stderr=log
    )
    controller = subprocess.Popen(
        [
            *zpar_cmd,
            "controller",
            "--profile",
            "manual",
            "--ip",
            "127.0.0.1",
            "--location",
            "localhost",
        ],
        env=env,
        stderr=log,
    )
    try:
        rc = zpar.Client(profile="manual", timeout=60)
        with rc:
            rc.wait_for_engines(1, timeout=60)
            assert rc[0].apply_sync(os.getpid) == engine.pid
            rc.shutdown(hub=True)
        assert controller.wait(20) == 0
        assert engine.wait(20) == 0
        assert not (zpar_dir / "profile_manual" / "security" / "zpar-client.json").exists()
    finally:
        for p in (engine, controller):
            if p.poll() is None:
                p.kill()
                p.wait()
        log.close()


def test_bad_controller_arguments_are_named(zpar_dir):
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    r = _run([sys.executable, "-m", "zpar", "controller", "--hb-period", "0"], env)
    assert r.returncode == 2 and "--hb-period must be > 0" in r.stderr
    r = _run([sys.executable, "-m", "zpar", "controller", "--scheme", "fastest"], env)
    assert r.returncode == 2 and "fastest" in r.stderr
