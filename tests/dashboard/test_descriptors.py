"""The dashboard survives running out of file descriptors: a process of its own whose
limit is a few descriptors above what it uses is flooded with connections; once they
close, the dashboard answers again (asyncio's accept loop backs off on EMFILE and retries;
dashboard/service.py)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.clusters import wait_until

pytestmark = pytest.mark.cluster

SERVER = r"""
import os, resource, sys, time, urllib.request
from collections import deque
from types import SimpleNamespace
from zpar.dashboard import Dashboard
from zpar.hub.records import TaskTable
from zpar.hub.status import RefusalBook

class Hub:
    tasks = TaskTable(); engines = {}; refusals = RefusalBook(); services = []
    def attach_feed(self, maxlen):
        self.feed = self.tasks.feed = deque(maxlen=maxlen)
        return self.feed

d = Dashboard(Hub(), "127.0.0.1:0", key="k" * 64)
d.start()
# a first request: the web server is loaded and serving before the limit is lowered
urllib.request.urlopen(d.url + "api/state?token=" + d.token, timeout=30).read()
used = len(os.listdir("/proc/self/fd"))
resource.setrlimit(resource.RLIMIT_NOFILE, (used + 8, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
print(d.url, d.token, flush=True)
sys.stdin.read()  # until the test closes our stdin
d.stop()
"""


def test_descriptor_exhaustion_is_survived(tmp_path):
    # its log to a file: asyncio logs each refused accept, which would fill a pipe
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    held: list[socket.socket] = []
    try:
        url, token = proc.stdout.readline().split()
        host, port = url.split("//")[1].rstrip("/").split(":")
        for _ in range(40):  # far past the 8 spare descriptors
            held.append(socket.create_connection((host, int(port)), timeout=10))
        # the server ran out: asyncio logs each accept refused for want of a descriptor
        wait_until(
            lambda: (
                "Too many open files" in (tmp_path / "server.log").read_text()
                or proc.poll() is not None
            ),
            "the dashboard out of descriptors",
            60,
        )
        assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
        for s in held:
            s.close()
        held.clear()
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}api/state?token={token}", timeout=5) as r:
                    assert json.loads(r.read())["engine_count"] == 0
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the dashboard did not come back: {e}") from e
                time.sleep(0.2)
        assert proc.poll() is None
    finally:
        for s in held:
            s.close()
        proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        proc.stdout.close()
        log.close()
    err = (tmp_path / "server.log").read_text()
    assert proc.returncode == 0, err[-2000:]
    assert "Too many open files" in err  # it did run out
