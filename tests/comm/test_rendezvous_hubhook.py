"""The hub's extension point (hub/services.py hooks in hub/hub.py), on a Hub built in this
process over inproc sockets: services load on the first message the hub does not know,
take their msg_types, reply later by identity, hear of lost engines, and cannot kill it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq

from tests.hubrig import hub_rig
from zpar.hub import hub as hubmod
from zpar.hub.hub import EngineRecord, Hub
from zpar.wire import Session
from zpar.wire.messages import MsgType

KEY = b"k" * 32


#: message types the test service takes (types must be zpar's own: receivers refuse others)
PROBE = MsgType.RENDEZVOUS_COLL_REQUEST
BOOM = MsgType.RENDEZVOUS_DONE_REQUEST


class Recorder:
    """A service that records what it is given and answers on demand."""

    msg_types = frozenset({PROBE, BOOM})

    def __init__(self, hub) -> None:
        self.hub = hub
        self.got: list = []
        self.lost: list = []
        self.ticks = 0

    def handle(self, msg) -> None:
        if msg.msg_type == BOOM:
            raise RuntimeError("service bug")
        self.got.append(msg)

    def tick(self, now: float) -> None:
        self.ticks += 1

    def engine_lost(self, uuid: str, engine_id: int, reason: str) -> None:
        self.lost.append((uuid, engine_id, reason))


@pytest.fixture
def rig(monkeypatch) -> Iterator[tuple[Hub, zmq.Socket, Session, list]]:
    loads: list = []

    def load(hub):
        loads.append(hub)
        return [Recorder(hub)]

    monkeypatch.setattr(hubmod, "load_services", load)
    with hub_rig(KEY) as (hub, sock, _):
        member = sock(zmq.DEALER, "inproc://q", bind=False, ident=b"member-1")
        yield hub, member, Session(KEY), loads


def deliver(hub: Hub, member: zmq.Socket, session: Session, msg_type: str) -> None:
    session.send(member, msg_type, {"x": 1})
    deadline = time.monotonic() + 30
    while not hub.query.poll(10):
        assert time.monotonic() < deadline
    hub.handle_query()


def test_services_load_lazily_once_and_take_their_types(rig) -> None:
    hub, member, session, loads = rig
    assert loads == [] and hub.services == []  # nothing at start-up
    deliver(hub, member, session, MsgType.QUEUE_REQUEST)  # the hub's own: no loading
    assert loads == []
    assert member.poll(10_000)
    session.feed(member.recv_multipart())
    deliver(hub, member, session, PROBE)
    assert len(loads) == 1
    (service,) = hub.services
    assert [m.msg_type for m in service.got] == [PROBE]
    assert service.got[0].idents == [b"member-1"]
    assert not member.poll(200)  # the service did not answer yet, nor did the hub
    hub.send_to([b"member-1"], MsgType.RENDEZVOUS_COLL_REPLY, {"late": True})  # later
    assert member.poll(10_000)
    reply = session.feed(member.recv_multipart())
    assert reply.msg_type == MsgType.RENDEZVOUS_COLL_REPLY and reply.content == {"late": True}
    deliver(hub, member, session, PROBE)
    assert len(loads) == 1 and len(service.got) == 2


def test_a_failing_service_does_not_kill_the_hub(rig, caplog) -> None:
    hub, member, session, _ = rig
    deliver(hub, member, session, BOOM)
    assert "service failed on" in caplog.text
    deliver(hub, member, session, PROBE)
    assert len(hub.services[0].got) == 1


def test_unknown_types_still_get_the_hubs_error(rig) -> None:
    hub, member, session, loads = rig
    deliver(hub, member, session, MsgType.EXECUTE_REQUEST)  # neither the hub's nor a service's
    assert len(loads) == 1  # looked for a service once
    assert member.poll(10_000)
    reply = session.feed(member.recv_multipart())
    assert reply.content["status"] == "error" and "execute_request" in reply.content["evalue"]


def test_services_hear_of_lost_engines_and_ticks(rig) -> None:
    hub, member, session, _ = rig
    deliver(hub, member, session, PROBE)
    (service,) = hub.services
    rec = EngineRecord(4, "uuid-4", "host", 123)
    hub.engines[4], hub.by_uuid[b"uuid-4"] = rec, rec
    hub.unregister(b"uuid-4", "stopped heartbeating")
    assert service.lost == [("uuid-4", 4, "stopped heartbeating")]
    hub.tick_services(time.monotonic())
    assert service.ticks == 1
