"""hub/registration.py: an engine's registration to its first heartbeat. The Registrar alone
(no sockets), then through a hub on inproc sockets: an engine that asks again, under the
same uuid, while the hub still holds its first request (a controller stopped past the
engine's registration timeout answers both once it runs again) gets the same id, and the id
is not held for a request nobody waits for. No processes."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.hubrig import hub_rig
from zpar.hub.hub import EngineRecord
from zpar.hub.registration import MAX_PID, Registrar, registration_fields
from zpar.wire.messages import ReplyStatus

KEY = b"k" * 32
UUID = "5b1c7a8e-0d0e-4c52-9d4b-6f0cbbd1a001"


def _ask(hub, uuid: str = UUID, pid: int = 4242, wanted: int = 0) -> dict:
    content = {"uuid": uuid, "hostname": "node1", "pid": pid, "id": wanted, "rank": -1}
    return hub._registration_request(SimpleNamespace(content=content))


def test_asking_again_while_registering_gets_the_same_id_and_keeps_the_old_one_free():
    with hub_rig(KEY) as (hub, _sock, _events):
        old = EngineRecord(0, "a-restarted-engine's-old-uuid", "node1", 4242)
        hub.engines[0], hub.by_uuid[old.uuid.encode()] = old, old
        first = _ask(hub)  # the engine gave up waiting for this one's reply
        again = _ask(hub)
        assert first["status"] == again["status"] == ReplyStatus.OK
        assert first["id"] == again["id"] == 0
        assert list(hub.pending) == [UUID.encode()] and hub.pending[UUID.encode()].id == 0
        # another engine asking for id 0 meanwhile is given a new one
        other = _ask(hub, uuid="another-engine", pid=4343)
        assert other["status"] == ReplyStatus.OK and other["id"] == 1


def test_the_same_uuid_from_another_process_is_still_refused():
    with hub_rig(KEY) as (hub, _sock, _events):
        assert _ask(hub)["status"] == ReplyStatus.OK
        refused = _ask(hub, pid=9999)
        assert refused["status"] == ReplyStatus.ERROR
        assert "already in use by an engine that is registering" in refused["evalue"]
        assert hub.pending[UUID.encode()].pid == 4242


class _Hub:
    """The tables and the unregister call a Registrar is built with, as the Hub gives them."""

    def __init__(self) -> None:
        self.engines: dict[int, EngineRecord] = {}
        self.by_uuid: dict[bytes, EngineRecord] = {}
        self.unregistered: list[tuple[bytes, str]] = []
        self.registrar = Registrar(
            engines=self.engines,
            by_uuid=self.by_uuid,
            unregister=self.unregister,
            engine_addresses={"mux": "tcp://127.0.0.1:1"},
            timeout=5.0,
        )

    def unregister(self, uuid: bytes, reason: str) -> None:
        self.unregistered.append((uuid, reason))
        rec = self.by_uuid.pop(uuid)
        del self.engines[rec.id]

    def register(self, rec: EngineRecord) -> None:
        self.engines[rec.id], self.by_uuid[rec.uuid.encode()] = rec, rec


def _content(uuid: str = UUID, **kw) -> dict:
    return {"uuid": uuid, "hostname": "node1", "pid": 4242, **kw}


@pytest.mark.parametrize(
    ("fields", "wrong"),
    [
        ({"hostname": 3}, "hostname must be a str"),
        ({"hostname": "h" * 256}, "at most 255 chars"),
        ({"pid": -1}, "pid must be an int in 0.."),
        ({"pid": True}, "pid must be an int"),
        ({"pid": MAX_PID + 1}, "pid must be an int"),
        ({"id": "0"}, "id must be an int"),
        ({"rank": 2.5}, "rank must be an int"),
    ],
)
def test_a_field_out_of_bounds_is_named_and_the_engine_refused(fields, wrong):
    assert wrong in registration_fields(_content(**fields))
    hub = _Hub()
    reply = hub.registrar.request(_content(**fields))
    assert reply["status"] == ReplyStatus.ERROR and wrong in reply["evalue"]
    assert reply["ename"] == "RegistrationRefused" and not hub.registrar.pending


@pytest.mark.parametrize("uuid", [None, "", 7, "u" * 256])
def test_an_invalid_uuid_is_refused(uuid):
    reply = _Hub().registrar.request(_content(uuid=uuid))
    assert reply["status"] == ReplyStatus.ERROR and "invalid engine uuid" in reply["evalue"]


def test_ids_count_up_and_the_reply_carries_the_engine_addresses():
    r = _Hub().registrar
    first, second = r.request(_content("a")), r.request(_content("b", pid=1))
    assert (first["id"], second["id"]) == (0, 1) and first["mux"] == "tcp://127.0.0.1:1"
    assert r.pending[b"a"].hostname == "node1" and r.pending[b"a"].rank == -1
    assert r.request(_content("c", pid=2, rank=3))["id"] == 2 and r.pending[b"c"].rank == 3


def test_a_uuid_already_registered_is_refused():
    hub = _Hub()
    hub.register(EngineRecord(0, UUID, "node1", 4242))
    reply = hub.registrar.request(_content())
    assert "already in use by an engine that is registered" in reply["evalue"]


def test_an_engine_restarting_itself_gets_its_old_id_and_its_old_record_goes():
    hub = _Hub()
    hub.register(EngineRecord(3, "old-uuid", "node1", 4242))
    reply = hub.registrar.request(_content(id=3))
    assert reply["id"] == 3 and hub.unregistered == [(b"old-uuid", "restarted")]
    assert hub.registrar.request(_content("next", pid=1))["id"] == 4  # past the id reused


def test_an_id_held_by_another_process_is_not_given_again():
    hub = _Hub()
    hub.register(EngineRecord(3, "old-uuid", "node2", 99))
    assert hub.registrar.request(_content(id=3))["id"] == 0 and not hub.unregistered
    assert hub.registrar.request(_content("b", pid=1, id=0))["id"] == 1  # 0 is pending


def test_admit_takes_the_record_out_of_pending_once():
    r = _Hub().registrar
    r.request(_content())
    rec = r.admit(UUID.encode())
    assert rec is not None and rec.uuid == UUID and not r.pending
    assert r.admit(UUID.encode()) is None


def test_engines_past_their_deadline_are_dropped_and_the_others_kept():
    r = _Hub().registrar
    r.request(_content("late"))
    r.request(_content("early", pid=1))
    r.pending[b"late"].deadline = 10.0
    r.pending[b"early"].deadline = 30.0
    assert [rec.uuid for rec in r.expire(now=20.0)] == ["late"]
    assert list(r.pending) == [b"early"]
    r.request(_content("early", pid=1))  # asked again: its deadline moves on
    assert r.pending[b"early"].deadline > 30.0
