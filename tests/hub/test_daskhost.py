"""The hub's dask service in memory (a recording hub, no sockets): bad arguments are
answered at once, without starting anything; stop with nothing running is fine."""

from __future__ import annotations

from zpar.hub.daskhost import DaskHost
from zpar.wire import Message
from zpar.wire.messages import MsgType


class RecordingHub:
    def __init__(self) -> None:
        self.sent: list[tuple] = []
        self.addresses = type("A", (), {"client": {"task": "tcp://10.1.2.3:5555"}})()

    def send_to(self, idents, msg_type, content, parent=None):
        self.sent.append((idents, msg_type, content))


def request(msg_type, **content):
    return Message([b"client"], {"msg_id": "m1", "msg_type": msg_type}, {}, {}, content)


def test_scheduler_args_must_be_a_map():
    hub = RecordingHub()
    host = DaskHost(hub)
    host.handle(request(MsgType.BECOME_DASK_REQUEST, scheduler_args=[1]))
    [(idents, msg_type, content)] = hub.sent
    assert msg_type == MsgType.BECOME_DASK_REPLY and content["status"] == "error"
    assert "scheduler_args" in content["evalue"] and host.scheduler is None


def test_stop_without_a_scheduler_is_ok_and_the_host_is_the_controllers_ip():
    hub = RecordingHub()
    host = DaskHost(hub)
    host.handle(request(MsgType.STOP_DASK_REQUEST))
    assert hub.sent == [([b"client"], MsgType.STOP_DASK_REPLY, {"status": "ok"})]
    assert host._host() == "10.1.2.3"
