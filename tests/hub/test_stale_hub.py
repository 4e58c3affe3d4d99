"""The hub and an engine it declared dead that lives on (hub/staleheart.py), with inproc
sockets and no processes: its heart's echo gets it told, once per interval, on its signal
line; what it says afterwards is not recorded as a result."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq

from tests.hubrig import hub_rig
from zpar.constants import PING, SIGNAL_SUFFIX
from zpar.hub.hub import EngineRecord, Hub
from zpar.wire import Session
from zpar.wire.messages import MON_MUX_IN, MON_MUX_OUT, MsgType, ReplyStatus

KEY = b"k" * 32
UUID = "0f93c59e-b3c3-4b1e-ba8d-cfa88254e961"


@pytest.fixture
def rig() -> Iterator[tuple[Hub, dict[str, zmq.Socket]]]:
    with hub_rig(KEY) as (hub, sock, events):
        peers = {
            "scheduler": events,
            "signal": sock(
                zmq.DEALER, "inproc://q", bind=False, ident=UUID.encode() + SIGNAL_SUFFIX
            ),
            "heart": sock(zmq.DEALER, "inproc://pong", bind=False, ident=UUID.encode()),
            "monitor": sock(zmq.PUSH, "inproc://m", bind=False),
        }
        yield hub, peers


def _registered_then_declared_dead(hub: Hub) -> None:
    rec = EngineRecord(3, UUID, "host", 123)
    hub.engines[3], hub.by_uuid[UUID.encode()] = rec, rec
    hub.heart.watch(UUID.encode())
    hub.unregister(UUID.encode(), "missed 5 heartbeats")


def _echo(hub: Hub, heart: zmq.Socket) -> None:
    hub.heart.beat()
    heart.send(PING + str(hub.heart.counter).encode())
    deadline = time.monotonic() + 30
    while not hub.heart.pong.poll(10):
        assert time.monotonic() < deadline, "the echo never reached the pong socket"
    hub.heart.handle_pong()


def test_an_unregistered_heart_is_told_on_its_signal_line_once_per_interval(rig):
    hub, peers = rig
    _registered_then_declared_dead(hub)
    _echo(hub, peers["heart"])
    assert peers["signal"].poll(10_000), "the engine was not told"
    msg = Session(KEY).feed(peers["signal"].recv_multipart(), "signal line")
    assert msg is not None and msg.msg_type == MsgType.UNREGISTRATION_NOTIFICATION
    assert msg.content == {"id": 3, "uuid": UUID, "reason": "missed 5 heartbeats"}
    _echo(hub, peers["heart"])  # within the interval: not again
    assert not peers["signal"].poll(200)
    assert hub.stale.told == 1 and 3 not in hub.engines


def test_what_an_unregistered_engine_reports_is_not_recorded_as_its_result(rig):
    hub, peers = rig
    _registered_then_declared_dead(hub)
    client = Session(KEY)
    header, request = client.serialize(MsgType.APPLY_REQUEST, {}, dest=UUID)
    # the engine took the request after it was declared dead, and answered it
    peers["monitor"].send_multipart([MON_MUX_IN, UUID.encode(), b"client-1", *request])
    engine = Session(KEY)
    _, reply = engine.serialize(
        MsgType.APPLY_REPLY,
        {"status": ReplyStatus.OK},
        parent=header,
        metadata={"status": ReplyStatus.OK, "started": time.time(), "completed": time.time()},
    )
    peers["monitor"].send_multipart([MON_MUX_OUT, b"client-1", UUID.encode(), *reply])
    deadline = time.monotonic() + 30
    while header["msg_id"] not in hub.tasks.records or hub.tasks.records[header["msg_id"]].pending:
        assert time.monotonic() < deadline, "the copies never reached the hub"
        hub.monitor.poll(10)
        hub.handle_monitor()
    hub.monitor.poll(200)
    hub.handle_monitor()  # the reply's copy, if it came second
    assert hub.tasks.records[header["msg_id"]].status == "engine_died"
