"""Strangers on the controller's zmq ports (issue 26, item 2): a process without the key
opens raw tcp connections to every port the controller and its task scheduler listen on,
half of them stopped in the middle of a ZMTP greeting, until both processes are out of
file descriptors (RLIMIT_NOFILE lowered for them). Both stay up, count and log the
refusals, and once the stranger goes a new client runs tasks on every path and a
communicator's rendezvous completes (the positive control)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

import zpar
from tests.clusters import FAST_HB, wait_until
from zpar.cluster.connection import read_connection_file

pytestmark = pytest.mark.cluster

TIMEOUT = 60.0
#: descriptors left to each controller process above what it uses once the cluster runs
SPARE = 48
#: seconds a connection has to finish its handshake (ZPAR_HANDSHAKE_TIMEOUT; 10 by default)
HANDSHAKE = 2.0


def _listening_ports(proc: psutil.Process) -> list[int]:
    return sorted(
        {c.laddr.port for c in proc.net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}
    )


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except (OSError, urllib.error.URLError):
        return False


def _allgather_rank():
    from zpar.namespace import current

    c = current()["comm"]
    return c.allgather(c.rank)


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_HANDSHAKE_TIMEOUT", str(HANDSHAKE))
    c = zpar.Cluster(n=2, timeout=TIMEOUT, log_level="INFO")
    c.start()
    c.client.wait_for_engines(2, timeout=TIMEOUT)
    # every part started (the dashboard's server thread imports as it starts): a flood
    # at start-up is another matter
    link = c.client.controller_status()["dashboard"]
    wait_until(lambda: _answers(link), "the dashboard", TIMEOUT)
    # out of descriptors, the controller closes connections younger than the handshake
    # deadline (strangers mid-handshake): the peers it serves are older than that
    ready = time.monotonic()
    wait_until(lambda: time.monotonic() - ready > HANDSHAKE, "the peers' handshakes", TIMEOUT)
    yield c
    c.stop()


def test_descriptor_flood_on_every_port_is_survived(cluster, tmp_path):
    rc = cluster.client
    controller = psutil.Process(read_connection_file(cluster.url_file).controller_pid)
    procs = [controller, *controller.children()]
    ports = [p for proc in procs for p in _listening_ports(proc)]
    assert len(ports) >= 10, ports  # registration, notification, heartbeats, relays, task
    limits = {}
    for proc in procs:
        limits[proc.pid] = proc.num_fds() + SPARE
        _, hard = proc.rlimit(resource.RLIMIT_NOFILE)
        proc.rlimit(resource.RLIMIT_NOFILE, (limits[proc.pid], hard))
    stranger = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).with_name("stranger.py")),
            "127.0.0.1",
            str(sum(limits.values()) + 200),
            *map(str, ports),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        held = int(stranger.stdout.readline())
        assert held > sum(limits.values()) - sum(p.num_fds() for p in procs) + 1
        # the controller serves its peers meanwhile, and counts what it shed
        wait_until(
            lambda: rc.controller_status()["refused"].get("connections", {}).get("descriptors"),
            "the controller's descriptor refusals in its status",
            TIMEOUT,
        )
        assert rc[:].apply_sync(lambda: "during") == ["during", "during"]
    finally:
        stranger.stdin.close()
        stranger.wait(TIMEOUT)
        stranger.stdout.close()
    assert all(p.is_running() for p in procs)
    # the positive control: a new client (new connections to every port) runs tasks on
    # every path, and a communicator's rendezvous through the hub completes
    with zpar.Client(url_file=cluster.url_file, timeout=TIMEOUT) as c2:
        c2.wait_for_engines(2, timeout=TIMEOUT)
        assert c2.load_balanced_view().apply_sync(lambda: 6 * 7) == 42
        assert c2[:].apply_sync(lambda: "direct") == ["direct", "direct"]
        dv = c2[:]
        info = dv.communicator(timeout=TIMEOUT)
        assert info.size == 2
        assert dv.apply_sync(_allgather_rank) == [[0, 1], [0, 1]]
        # the task scheduler counted its own (reported at most every 0.5 s)
        wait_until(
            lambda: c2.controller_status()["refused"].get("scheduler", {}).get("descriptors"),
            "the task scheduler's descriptor refusals in the status",
            TIMEOUT,
        )
        status = c2.controller_status()["refused"]
    assert status["connections"].get("handshake"), status
    print(status)


def test_connections_past_the_per_address_limit_are_closed(tmp_path, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(tmp_path / "zpar"))
    monkeypatch.setenv("ZPAR_MAX_CONNECTIONS_PER_ADDRESS", "6")
    with zpar.Cluster(n=1, controller_args=FAST_HB, timeout=TIMEOUT, log_level="INFO") as rc:
        rc.wait_for_engines(1, timeout=TIMEOUT)
        registration = int(read_connection_file(rc.url_file).registration.rsplit(":", 1)[1])
        stranger = subprocess.Popen(
            [
                sys.executable,
                str(Path(__file__).with_name("stranger.py")),
                "127.0.0.1",
                "20",
                str(registration),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert int(stranger.stdout.readline()) == 20
            # the client and the launcher hold one each: at least 14 of the 20 are closed
            wait_until(
                lambda: (
                    rc.controller_status()["refused"].get("connections", {}).get("per-address", 0)
                    >= 14
                ),
                "connections past the limit closed",
                TIMEOUT,
            )
            assert rc.load_balanced_view().apply_sync(lambda: 6 * 7) == 42
        finally:
            stranger.stdin.close()
            stranger.wait(TIMEOUT)
            stranger.stdout.close()
