"""Extension points (issue 12, "Shape"): a capability installed as its own distribution
adds a message type, a hub query and an engine socket through entry points, without a
line of zpar changed (tests/extpkg/zpar_ext_demo.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import zmq

from tests.clusters import module_cluster
from zpar.cluster.launchers.hubquery import HubLine
from zpar.errors import ZparError

EXTPKG = Path(__file__).resolve().parents[1] / "extpkg"

ENTRY_POINTS = """\
[zpar.message_types]
demo = zpar_ext_demo:MESSAGE_TYPES

[zpar.hub_queries]
demo_echo_request = zpar_ext_demo:echo_query

[zpar.engine_sockets]
demo = zpar_ext_demo:engine_sockets
"""


def install_demo(site: Path) -> None:
    """What pip would leave for a package declaring these entry points: a dist-info."""
    info = site / "zpar_ext_demo-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zpar-ext-demo\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    install_demo(site)
    # the controller and engines are other processes: they find it on their path
    path = [str(site), str(EXTPKG), *filter(None, [os.environ.get("PYTHONPATH")])]
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(EXTPKG))
        yield from module_cluster(
            tmp_path_factory,
            "zpar-ext",
            2,
            env={"PYTHONPATH": os.pathsep.join(path)},
            wait_timeout=60,
        )
    sys.modules.pop("zpar_ext_demo", None)


def test_a_capability_query_is_answered_by_the_hub(cluster):
    import zpar_ext_demo  # noqa: F401 - registers its message types in this process

    line = HubLine(cluster.client.url_file)
    try:
        reply = line.request("demo_echo_request", {"text": "hello"}, timeout=30)
        assert reply["echo"] == "hello"
        assert reply["engines"] == sorted(cluster.client.ids)
        # a query that raises is answered with its error, and the hub goes on
        with pytest.raises(ZparError, match="TypeError: text must be a str"):
            line.request("demo_echo_request", {"text": 3}, timeout=30)
        assert line.request("demo_echo_request", {"text": "again"}, timeout=30)["echo"] == "again"
    finally:
        line.close()
    assert cluster.client.queue_status()  # the built-in queries still answer


def _ask(port: int, text: bytes) -> bytes:
    ctx = zmq.Context.instance()
    req = ctx.socket(zmq.REQ)
    req.linger = 0
    req.rcvtimeo = 30_000
    try:
        req.connect(f"tcp://127.0.0.1:{port}")
        req.send(text)
        return req.recv()
    finally:
        req.close()


def test_each_engine_serves_a_capability_socket(cluster):
    rc = cluster.client
    for eid in rc.ids:
        port = rc[eid].apply_sync(lambda: __import__("zpar_ext_demo").PORT)
        assert isinstance(port, int)
        assert _ask(port, b"ping") == f"pong ping from engine {eid}".encode()
        served = rc[eid].apply_sync(lambda: list(__import__("zpar_ext_demo").SERVED))
        assert served[-1] == b"ping"


def test_a_task_can_watch_a_socket_at_run_time(cluster):
    rc = cluster.client
    eid = rc.ids[0]
    port = rc[eid].apply_sync(lambda: __import__("zpar_ext_demo").watch_one_more())
    assert _ask(port, b"x") == b"late x"
    # the engine still runs tasks after serving it
    assert rc[eid].apply_sync(lambda: 6 * 7) == 42
