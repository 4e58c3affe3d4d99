"""The hub's rendezvous service and the hub's service loader, with a recording fake hub."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from zpar.comm.hub import RendezvousService
from zpar.comm.rendezvous import AUTH_HMAC, AUTH_NONE, hmac_proof
from zpar.hub import services
from zpar.wire import Message
from zpar.wire.messages import MsgType

KEY = b"cluster-key"


class FakeHub:
    def __init__(self, key: bytes = KEY) -> None:
        self.session = SimpleNamespace(key=key)
        self.sent: list[tuple[bytes, str, dict]] = []
        self.published: list[tuple[str, dict]] = []

    def send_to(self, idents, msg_type, content, parent=None) -> None:
        self.sent.append((idents[-1], str(msg_type), content))

    def notify(self, msg_type, content) -> None:
        self.published.append((str(msg_type), content))

    def take(self) -> list[tuple[bytes, str, dict]]:
        out, self.sent = self.sent, []
        return out


def msg(ident: bytes, msg_type: MsgType, **content) -> Message:
    header = {"msg_id": "m", "msg_type": str(msg_type)}
    return Message([ident], header, {}, {}, content, [], [])


def join(svc: RendezvousService, hub: FakeHub, ident: bytes, rank: int, size: int, **kw) -> None:
    svc.handle(msg(ident, MsgType.RENDEZVOUS_AUTH_REQUEST, comm_id="c", auth_mask=AUTH_HMAC.bit))
    (_, t, reply) = hub.take()[-1]
    assert t == MsgType.RENDEZVOUS_AUTH_REPLY and reply["which"] == AUTH_HMAC.which
    proof = hmac_proof(KEY, reply["challenge"])
    svc.handle(msg(ident, MsgType.RENDEZVOUS_KEY, comm_id="c", proof=proof))
    svc.handle(msg(ident, MsgType.RENDEZVOUS_IMPI_REQUEST, comm_id="c", rank=rank, size=size, **kw))


def test_service_runs_a_rendezvous_and_answers_later() -> None:
    hub = FakeHub()
    svc = RendezvousService(hub)
    join(svc, hub, b"a", 0, 2)
    assert hub.take() == []  # IMPI answered only once rank 1 is in
    join(svc, hub, b"b", 1, 2)
    assert [(i, t) for i, t, _ in hub.take()] == [
        (b"a", MsgType.RENDEZVOUS_IMPI_REPLY),
        (b"b", MsgType.RENDEZVOUS_IMPI_REPLY),
    ]
    svc.handle(msg(b"b", MsgType.RENDEZVOUS_COLL_REQUEST, comm_id="c", label=5, payload=b"B"))
    svc.handle(msg(b"a", MsgType.RENDEZVOUS_COLL_REQUEST, comm_id="c", label=5, payload=b"A"))
    replies = hub.take()
    assert {i for i, _, _ in replies} == {b"a", b"b"}
    assert all(c["client_mask"] == 3 and c["payloads"] == [b"A", b"B"] for _, _, c in replies)


def test_service_offers_none_only_on_an_insecure_cluster() -> None:
    hub = FakeHub(key=b"")
    svc = RendezvousService(hub)
    svc.handle(msg(b"a", MsgType.RENDEZVOUS_AUTH_REQUEST, comm_id="c", auth_mask=AUTH_HMAC.bit))
    ((_, t, c),) = hub.take()
    assert t == MsgType.RENDEZVOUS_ERROR and "no common authentication method" in c["evalue"]
    svc.handle(msg(b"b", MsgType.RENDEZVOUS_AUTH_REQUEST, comm_id="c", auth_mask=AUTH_NONE.bit))
    ((_, t, c),) = hub.take()
    assert t == MsgType.RENDEZVOUS_AUTH_REPLY and c["which"] == AUTH_NONE.which


def test_service_wrong_key_gets_an_error() -> None:
    hub = FakeHub()
    svc = RendezvousService(hub)
    svc.handle(msg(b"a", MsgType.RENDEZVOUS_AUTH_REQUEST, comm_id="c", auth_mask=AUTH_HMAC.bit))
    challenge = hub.take()[0][2]["challenge"]
    svc.handle(msg(b"a", MsgType.RENDEZVOUS_KEY, comm_id="c", proof=hmac_proof(b"x", challenge)))
    ((_, t, c),) = hub.take()
    assert t == MsgType.RENDEZVOUS_ERROR and "wrong key" in c["evalue"]


def test_engine_lost_fails_the_others_and_tells_clients() -> None:
    hub = FakeHub()
    svc = RendezvousService(hub)
    join(svc, hub, b"a", 0, 2, engine_uuid="ua", who="engine 0")
    join(svc, hub, b"b", 1, 2, engine_uuid="ub", who="engine 1")
    hub.take()
    svc.engine_lost("ub", 1, "stopped heartbeating")
    ((ident, t, c),) = hub.take()
    assert (ident, t, c["missing"]) == (b"a", MsgType.RENDEZVOUS_ERROR, [1])
    assert "engine 1" in c["evalue"] and "stopped heartbeating" in c["evalue"]
    assert hub.published == [(MsgType.RENDEZVOUS_ERROR, c)]
    assert svc.table.comms == {} and dict(svc.by_engine) == {}


def test_tick_fails_a_late_rendezvous_naming_the_missing() -> None:
    hub = FakeHub()
    svc = RendezvousService(hub, timeout=5.0)
    join(svc, hub, b"a", 0, 3)
    hub.take()
    svc.tick(1e12)
    ((ident, t, c),) = hub.take()
    assert t == MsgType.RENDEZVOUS_ERROR and c["missing"] == [1, 2]
    assert "rank(s) 1, 2" in c["evalue"]


@pytest.mark.parametrize(
    "content",
    [
        {"comm_id": ""},
        {"comm_id": 7},
        {"comm_id": "x" * 201},
        {"comm_id": "c", "auth_mask": "all"},
        {"comm_id": "c", "auth_mask": 4, "timeout": -1},
        {"comm_id": "c", "auth_mask": 4, "timeout": True},
        {"comm_id": "c", "auth_mask": 4, "timeout": "60"},
    ],
)
def test_bad_requests_get_errors_not_exceptions(content: dict) -> None:
    hub = FakeHub()
    RendezvousService(hub).handle(msg(b"a", MsgType.RENDEZVOUS_AUTH_REQUEST, **content))
    ((_, t, c),) = hub.take()
    assert t == MsgType.RENDEZVOUS_ERROR and c["evalue"]


def test_commands_for_an_unknown_rendezvous() -> None:
    hub = FakeHub()
    svc = RendezvousService(hub)
    svc.handle(msg(b"a", MsgType.RENDEZVOUS_COLL_REQUEST, comm_id="nope", label=1, payload=b""))
    ((_, t, c),) = hub.take()
    assert t == MsgType.RENDEZVOUS_ERROR and "AUTH first" in c["evalue"]
    svc.handle(msg(b"a", MsgType.RENDEZVOUS_FINI, comm_id="nope"))  # late FINI: silence
    assert hub.take() == []


def test_loader_skips_a_broken_service(monkeypatch, caplog) -> None:
    class Good:
        msg_types = frozenset({"x_request"})

        def __init__(self, hub) -> None:
            self.hub = hub

    def broken(hub):
        raise RuntimeError("cannot start")

    eps = [
        SimpleNamespace(name="good", value="m:Good", load=lambda: Good),
        SimpleNamespace(name="bad", value="m:broken", load=lambda: broken),
    ]
    monkeypatch.setattr(services, "entry_points", lambda group: eps)
    loaded = services.load_services("the hub")
    assert [type(s) for s in loaded] == [Good] and loaded[0].hub == "the hub"
    assert "'bad' (m:broken) failed to load" in caplog.text


def test_rendezvous_service_is_registered_as_an_entry_point() -> None:
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group=services.GROUP) if e.name == "rendezvous"]
    assert ep.load() is RendezvousService
