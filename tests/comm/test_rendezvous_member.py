"""comm.member against a small hub of its own on 127.0.0.1: a ROUTER and the real
rendezvous service in a thread (no cluster), and against a hub without the service."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
import zmq

from zpar.comm.hub import RendezvousService
from zpar.comm.member import RendezvousFailed, RendezvousMember
from zpar.wire import Session
from zpar.wire.messages import MsgType

KEY = b"k" * 32


class MiniHub:
    """The registration ROUTER and the hub methods a service uses."""

    def __init__(self, with_service: bool = True) -> None:
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.url = f"tcp://127.0.0.1:{port}"
        self.session = Session(KEY)
        self.service = RendezvousService(self, timeout=30.0) if with_service else None
        self.stop = threading.Event()
        self.lost: list[tuple[str, int, str]] = []  # engine deaths, handled by the hub thread
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def send_to(self, idents, msg_type, content, parent=None) -> None:
        self.session.send(self.router, msg_type, content, parent=parent, idents=idents)

    def notify(self, msg_type, content) -> None:
        pass

    def _run(self) -> None:
        while not self.stop.is_set():
            while self.lost:  # the socket belongs to this thread: engine deaths go here
                self.service.engine_lost(*self.lost.pop())
            if not self.router.poll(20):
                continue
            msg = self.session.feed(self.router.recv_multipart())
            if msg is None:
                continue
            if self.service is not None:
                self.service.handle(msg)
            else:  # what Hub.handle_query answers for a type it does not handle
                reply = msg.msg_type.removesuffix("_request") + "_reply"
                self.send_to(
                    msg.idents,
                    reply,
                    {"status": "error", "evalue": f"the hub does not handle {msg.msg_type!r}"},
                )

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        self.router.close()
        self.ctx.term()


@pytest.fixture
def hub() -> Iterator[MiniHub]:
    h = MiniHub()
    yield h
    h.close()


def in_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_members_exchange_and_skip_labels(hub: MiniHub) -> None:
    def rank1():
        with RendezvousMember(hub.url, KEY, "c", 1, 2, timeout=30.0) as m:
            # skips label 10: its answer (mask 0x1) reaches this member and is passed over
            got = m.coll(20, b"B20")
            m.done()
            return got

    t, out = in_thread(rank1)
    with RendezvousMember(hub.url, KEY, "c", 0, 2, timeout=30.0) as m:
        assert m.coll(10, b"A10") == (0x1, [b"A10", None])
        assert m.coll(20, b"A20") == (0x3, [b"A20", b"B20"])
        with pytest.raises(ValueError, match="ascend"):
            m.coll(15, b"")
        m.done()
        assert m.lost() == []
    t.join(30)
    assert out == {"value": (0x3, [b"A20", b"B20"])}


def test_member_lost_after_done_is_reported(hub: MiniHub) -> None:
    a = None

    def rank0():
        nonlocal a
        a = RendezvousMember(hub.url, KEY, "c", 0, 2, timeout=30.0, engine_uuid="ua")
        a.done()

    t, out = in_thread(rank0)
    b = RendezvousMember(hub.url, KEY, "c", 1, 2, timeout=30.0, engine_uuid="ub", who="engine 9")
    b.done()
    t.join(30)
    assert "error" not in out
    hub.lost.append(("ub", 9, "stopped heartbeating"))  # as the hub's heart would
    assert a.socket.poll(30_000)
    assert a.lost() == [1]
    with pytest.raises(RendezvousFailed, match=r"rank 1 \(engine 9\) vanished before FINI"):
        a.coll(1, b"")
    a.fini()
    b.fini()


def test_member_against_a_hub_without_the_service() -> None:
    h = MiniHub(with_service=False)
    try:
        with pytest.raises(RendezvousFailed, match="does not handle 'rendezvous_auth_request'"):
            RendezvousMember(h.url, KEY, "c", 0, 1, timeout=30.0)
    finally:
        h.close()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"rank": 2, "size": 2}, "out of range"),
        ({"auth": "password"}, "auth must be"),
        ({"comm_id": ""}, "comm_id"),
        ({"timeout": 0}, "timeout"),
    ],
)
def test_member_arguments_checked_before_any_message(kw: dict, match: str) -> None:
    args = {"comm_id": "c", "rank": 0, "size": 1, **kw}
    with pytest.raises(ValueError, match=match):
        RendezvousMember(
            "tcp://127.0.0.1:1",
            KEY,
            args.pop("comm_id"),
            args.pop("rank"),
            args.pop("size"),
            **args,
        )


def test_from_engine_outside_an_engine() -> None:
    with pytest.raises(RuntimeError, match="inside a registered zpar engine"):
        RendezvousMember.from_engine("c", 0, 1)


def test_message_types_of_the_member_are_the_services() -> None:
    assert MsgType.RENDEZVOUS_FINI in RendezvousService.msg_types
