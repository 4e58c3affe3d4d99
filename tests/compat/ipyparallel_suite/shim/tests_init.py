"""ipyparallel's test processes, started as zpar processes (replaces ipyparallel/tests/__init__.py).

ipyparallel 9.2.0's ``tests/__init__.py`` starts ``ipcontroller --profile=iptest`` and
``ipengine --profile=iptest`` through its launcher classes. This file keeps its interface
(``setup``, ``teardown``, ``add_engines``, ``launchers``: the names clienttest.py and the
test files import) and starts ``python -m zpar controller`` / ``python -m zpar engine`` in
profile ``iptest`` instead. The profile lives in ``$ZPAR_DIR``, set under the IPython
directory ipyparallel's conftest makes for each test module, so modules never share a
controller and nothing outlives the module.
"""

import os
import signal
import subprocess
import sys
import time

from ipyparallel import Client
from IPython.paths import get_ipython_dir

SIGKILL = signal.SIGKILL
PROFILE = "iptest"
#: heartbeat period: ipyparallel's tests run their controller with --ping=250 (ms)
HB_PERIOD = 0.25

launchers = []


class TestProcess:
    """One child process, with the part of ipyparallel's launcher interface tests use."""

    def __init__(self, argv, log_path):
        self.args = argv
        self._log = open(log_path, "ab")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        self.pid = self.process.pid

    def poll(self):
        return self.process.poll()

    def signal(self, sig):
        if self.process.poll() is None:
            self.process.send_signal(sig)

    def stop(self):
        self.signal(signal.SIGTERM)
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
        self._log.close()


def _zpar_dir():
    return os.path.join(get_ipython_dir(), "zpar")


def _security_dir(profile):
    return os.path.join(os.environ["ZPAR_DIR"], f"profile_{profile}", "security")


def setup():
    os.environ["ZPAR_DIR"] = _zpar_dir()
    os.makedirs(os.environ["ZPAR_DIR"], exist_ok=True)
    sec = _security_dir(PROFILE)
    files = [os.path.join(sec, f) for f in ("zpar-client.json", "zpar-engine.json")]
    argv = [
        sys.executable,
        "-m",
        "zpar",
        "controller",
        f"--profile={PROFILE}",
        f"--hb-period={HB_PERIOD}",
        "--log-level=DEBUG",
    ]
    cp = TestProcess(argv, os.path.join(os.environ["ZPAR_DIR"], "controller.log"))
    launchers.append(cp)
    tic = time.time()
    while not all(os.path.exists(f) for f in files):
        if cp.poll() is not None:
            raise RuntimeError(f"The test controller exited with status {cp.poll()}")
        if time.time() - tic > 30:
            raise RuntimeError("Timeout waiting for the test controller to start.")
        time.sleep(0.1)
    add_engines(1)


def add_engines(n=1, profile=PROFILE, total=False):
    """add a number of engines to a given profile (as ipyparallel's add_engines)."""
    rc = Client(profile=profile)
    base = len(rc)
    if total:
        n = max(n - base, 0)
    eps = []
    for _ in range(n):
        argv = [
            sys.executable,
            "-m",
            "zpar",
            "engine",
            f"--profile={profile}",
            "--reconnect=0",
            "--log-level=DEBUG",
        ]
        log = os.path.join(os.environ["ZPAR_DIR"], f"engine-{len(launchers)}.log")
        ep = TestProcess(argv, log)
        launchers.append(ep)
        eps.append(ep)
    tic = time.time()
    while len(rc) < base + n:
        if any(ep.poll() is not None for ep in eps):
            raise RuntimeError("A test engine failed to start.")
        if time.time() - tic > 30:
            raise RuntimeError("Timeout waiting for engines to connect.")
        time.sleep(0.1)
    rc.close()
    return eps


def teardown():
    while launchers:
        p = launchers.pop()
        p.stop()
