"""An engine that asks again, under the same uuid, while the hub still holds its first
request (a controller stopped past the engine's registration timeout answers both once it
runs again): it gets the same id, and the id is not held for a request nobody waits for.
Inproc sockets, no processes."""

from __future__ import annotations

from types import SimpleNamespace

from tests.hubrig import hub_rig
from zpar.hub.hub import EngineRecord
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
