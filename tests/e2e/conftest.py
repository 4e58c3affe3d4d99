"""Real clusters on 127.0.0.1 for end-to-end tests."""

from __future__ import annotations

import os

import pytest

import zpar
from tests.clusters import (
    FAST_HB,
    module_cluster,
    ready_client,
    shipped_by_value,
    wait_until,
)

__all__ = ["FAST_HB", "wait_for_files", "wait_until"]  # the e2e tests import these from here


def wait_for_files(*paths, timeout=20.0):
    """Until every path exists: tasks say they started by creating a file."""
    wait_until(lambda: all(os.path.exists(p) for p in paths), f"never created: {paths}", timeout)


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    yield from shipped_by_value(request.module)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two engines shared by a module's tests (each test starts from a cleared namespace)."""
    yield from module_cluster(
        tmp_path_factory, "zpar-module", 2, controller_args=FAST_HB, timeout=60, log_level="INFO"
    )


@pytest.fixture
def rc(cluster):
    return ready_client(cluster, 2, timeout=30)


@pytest.fixture
def make_cluster():
    """Factory for a private cluster (tests that kill engines or the controller)."""
    started = []

    def make(n=2, **kw):
        kw.setdefault("controller_args", FAST_HB)
        kw.setdefault("log_level", "INFO")  # a failure's message carries the log tails
        c = zpar.Cluster(n=n, **kw)
        c.start()
        started.append(c)
        return c

    yield make
    for c in started:
        c.stop()


@pytest.fixture(scope="module")
def cluster_addresses(cluster):
    """(ConnectionInfo, connection_reply content) of the module's cluster, asked of the hub."""
    import zmq

    from zpar.cluster.connection import read_connection_file
    from zpar.wire import Session
    from zpar.wire.messages import MsgType

    info = read_connection_file(cluster.url_file)
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(info.registration)
        session = Session(info.key)
        session.send(s, MsgType.CONNECTION_REQUEST, {})
        assert s.poll(10_000), "the hub did not answer a connection request"
        reply = session.feed(s.recv_multipart())
        assert reply is not None
        return info, reply.content
    finally:
        s.close()


@pytest.fixture
def pg_database(tmp_path):
    """(URL of a fresh PostgreSQL database, a function that kills its server)."""
    import os
    import shutil
    import socket
    import subprocess
    import tempfile
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "scripts" / "pg_test_server.sh"
    base = tempfile.mkdtemp(prefix="zpar-pg-")
    os.chmod(base, 0o755)
    data = os.path.join(base, "pg")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.run(
        [str(script), "start", data, str(port)], capture_output=True, text=True, timeout=600
    )
    if p.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be installed or started: {p.stderr.strip()[-500:]}")

    def stop():
        subprocess.run([str(script), "stop", data], capture_output=True, timeout=60)

    yield p.stdout.strip().splitlines()[-1], stop
    stop()
    shutil.rmtree(base, ignore_errors=True)
