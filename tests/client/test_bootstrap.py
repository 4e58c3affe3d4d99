"""client/bootstrap.py: where a client finds its connection file, and how it joins the
cluster from the hub's connection_reply. A stand-in sender and I/O part, no sockets."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from zpar.client.bootstrap import CHANNELS, cluster_url_file, connection_file, join
from zpar.cluster.connection import ConnectionInfo, pid_namespace, write_connection_file
from zpar.errors import ConnectionFileError, TimeoutError
from zpar.wire.messages import MsgType

ADDRS = {name: f"tcp://127.0.0.1:{5000 + i}" for i, name in enumerate(CHANNELS)}


def test_a_cluster_id_has_a_file_of_its_own_beside_the_profiles_default():
    default = cluster_url_file("default", None)
    assert default.name == "zpar-client.json" and default.parent.name == "security"
    named = cluster_url_file("default", "abc", who="engine")
    assert named == default.parent / "cluster-abc" / "zpar-engine.json"


def test_the_file_named_is_read(tmp_path: Path):
    path = write_connection_file(tmp_path / "c.json", ConnectionInfo("tcp://127.0.0.1:9", "ab"))
    found, info = connection_file(str(path), None, None, None, "default", 1.0)
    assert found == path and info.registration == "tcp://127.0.0.1:9" and info.key == "ab"


def test_a_file_left_by_a_dead_controller_is_refused_naming_its_pid(tmp_path: Path):
    info = ConnectionInfo(
        "tcp://127.0.0.1:9", "ab", controller_pid=2**22 + 1, controller_pidns=pid_namespace()
    )
    path = write_connection_file(tmp_path / "c.json", info)
    with pytest.raises(ConnectionFileError, match=str(2**22 + 1)):
        connection_file(None, path, None, None, "default", 1.0)


class _IO:
    def __init__(self, subscribed: bool = True) -> None:
        self.channels: dict[str, str] = {}
        self.engines: dict[int, str] = {}
        self.subscribed = threading.Event()
        if subscribed:
            self.subscribed.set()

    def add_channels(self, channels: dict[str, str]) -> None:
        self.channels.update(channels)

    def apply_snapshot(self, engines: dict[int, str]) -> None:
        self.engines = engines


class _Sender:
    """Answers each connection_request with the next of ``replies``."""

    def __init__(self, *replies: dict) -> None:
        self.replies = list(replies)
        self.asked: list[str] = []

    def query(self, msg_type: str, content: dict, timeout: float) -> SimpleNamespace:
        self.asked.append(msg_type)
        return SimpleNamespace(content=self.replies.pop(0))


def test_join_connects_every_channel_then_learns_the_engines_once_subscribed():
    io = _IO()
    sender = _Sender(
        {**ADDRS, "iopub": "tcp://127.0.0.1:6000", "engines": {}},
        {**ADDRS, "engines": {"0": "u0", "3": "u3"}, "task_scheme": "leastload"},
    )
    assert join(sender, io, 1.0) == "leastload"
    assert sender.asked == [MsgType.CONNECTION_REQUEST] * 2
    assert io.channels == ADDRS and io.iopub_addr == "tcp://127.0.0.1:6000"
    assert io.engines == {0: "u0", 3: "u3"} and io.direct_dir is None


def test_join_without_a_subscription_names_the_notification_address():
    sender = _Sender({**ADDRS, "engines": {}})
    with pytest.raises(TimeoutError, match=ADDRS["notification"]):
        join(sender, _IO(subscribed=False), 0.01)
