"""The dashboard's start-up holds while the controller is out of file descriptors (issue
26, item 2): a flood on the controller's ports can exhaust them just when the first page
makes the dashboard load its web server, whose modules and event loop need descriptors.
The dashboard, in a process of its own, is started; the process then holds every
descriptor it may open (as a stranger's connections do), and strangers connect to the
dashboard (raw, and half an HTTP request) while a page is asked for. The web server
cannot start: the dashboard says so and tries again; once the descriptors are free, the
page is served (before dashboard/service.py's retry, its thread ended there for good)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request

import pytest

from tests.clusters import wait_until

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0

SERVER = r"""
import logging, os, resource, sys
from collections import deque
from zpar.dashboard import Dashboard
from zpar.hub.records import TaskTable
from zpar.hub.status import RefusalBook

logging.basicConfig(level=logging.INFO)

class Hub:
    tasks = TaskTable(); engines = {}; refusals = RefusalBook(); services = []
    def attach_feed(self, maxlen):
        self.feed = self.tasks.feed = deque(maxlen=maxlen)
        return self.feed

assert "aiohttp" not in sys.modules  # nothing of the web server loaded before a page
d = Dashboard(Hub(), "127.0.0.1:0", key="k" * 64)
d.start()
used = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
held = []
while True:  # every descriptor left, as a flood's connections take them
    try:
        held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        break
print(d.url, d.token, flush=True)
sys.stdin.readline()  # the test saw the web server fail to start
for fd in held:
    os.close(fd)
print("released", flush=True)
sys.stdin.read()  # until the test closes our stdin
d.stop()
"""


def _get(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def test_start_up_out_of_descriptors_holds(tmp_path):
    log_path = tmp_path / "server.log"
    log = open(log_path, "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    strangers: list[socket.socket] = []
    answers: list[dict | None] = []
    try:
        url, token = proc.stdout.readline().split()
        host, port = url.split("//")[1].rstrip("/").split(":")
        for i in range(20):
            s = socket.create_connection((host, int(port)), timeout=10)
            if i % 2:
                s.sendall(b"GET /api/state HT")  # half a request
            strangers.append(s)
        page = threading.Thread(
            target=lambda: answers.append(_get(f"{url}api/state?token={token}")), daemon=True
        )
        page.start()
        wait_until(
            lambda: (
                "could not start" in log_path.read_text()
                or "stopped on an error" in log_path.read_text()
                or proc.poll() is not None
            ),
            "the dashboard's web server failing to start",
            TIMEOUT,
        )
        assert proc.poll() is None, log_path.read_text()[-2000:]
        assert "stopped on an error" not in log_path.read_text(), log_path.read_text()[-3000:]
        proc.stdin.write("go\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "released"
        for s in strangers:
            s.close()
        strangers.clear()
        # the positive control: the page is served once descriptors are free
        wait_until(
            lambda: (_get(f"{url}api/state?token={token}") or {}).get("engine_count") == 0,
            "the dashboard serving after the flood",
            TIMEOUT,
        )
        page.join(TIMEOUT)
        assert proc.poll() is None
    finally:
        for s in strangers:
            s.close()
        proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        log.close()
    err = log_path.read_text()
    assert proc.returncode == 0, err[-2000:]
    assert "Too many open files" in err  # it did run out
