"""Real clusters on 127.0.0.1 for end-to-end tests."""

from __future__ import annotations

import os
import time

import cloudpickle
import pytest

import zpar

#: fast heartbeats so a dead engine is noticed within a second in tests
FAST_HB = ["--hb-period", "0.1", "--hb-misses", "4"]


def wait_until(condition, what, timeout=20.0):
    """Poll ``condition`` until true; fail naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(0.01)


def wait_for_files(*paths, timeout=20.0):
    """Until every path exists: tasks say they started by creating a file."""
    wait_until(lambda: all(os.path.exists(p) for p in paths), f"never created: {paths}", timeout)


@pytest.fixture(autouse=True, scope="module")
def _ship_test_module_by_value(request):
    """Engines cannot import test modules: send their functions by value, as a notebook's."""
    cloudpickle.register_pickle_by_value(request.module)
    yield
    cloudpickle.unregister_pickle_by_value(request.module)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two engines shared by a module's tests (each test starts from a cleared namespace)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ZPAR_DIR", str(tmp_path_factory.mktemp("zpar-module")))
    c = zpar.Cluster(n=2, controller_args=FAST_HB, timeout=60, log_level="INFO")
    c.start()
    yield c
    c.stop()
    mp.undo()


@pytest.fixture
def rc(cluster):
    client = cluster.client
    client.wait_for_engines(2, timeout=30)
    client.clear(block=True)
    return client


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

    from zpar.connection import read_connection_file
    from zpar.messages import MsgType
    from zpar.wire import Session

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
