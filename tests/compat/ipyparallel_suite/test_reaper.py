"""The suite's clean-up holds when its run is cut short: a runner SIGKILLed (nothing of its
own runs after that) leaves no process its groups started, daemons in sessions of their
own included, and ends nothing else."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import psutil
import pytest

from tests.clusters import wait_until

from . import suite

pytestmark = pytest.mark.cluster

RUNNER = r"""
import os, subprocess, sys, time
from tests.compat.ipyparallel_suite import suite

marker = sys.argv[1]
reaper = suite.start_reaper([marker])
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
env = {**os.environ, suite.MARKER: marker}
child = subprocess.Popen(sleep, env=env)  # a controller of the group
daemon = subprocess.Popen(sleep, env=env, start_new_session=True)  # a daemonised engine
other = subprocess.Popen(sleep)  # not the suite's
print(child.pid, daemon.pid, other.pid, flush=True)
time.sleep(600)
"""


def test_a_runner_killed_leaves_no_process_of_its_groups(tmp_path):
    runner = subprocess.Popen(
        [sys.executable, "-c", RUNNER, str(tmp_path / "outcomes-0.jsonl")],
        cwd=suite.REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    other = None
    try:
        child, daemon, other = map(int, runner.stdout.readline().split())
        runner.send_signal(signal.SIGKILL)
        runner.wait(30)
        wait_until(
            lambda: not any(psutil.pid_exists(p) and _alive(p) for p in (child, daemon)),
            "the group's processes ended by the reaper",
            60,
        )
        assert _alive(other), "the reaper ended a process that was not the suite's"
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
        runner.stdout.close()
        if other is not None and _alive(other):
            os.kill(other, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
