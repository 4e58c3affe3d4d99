"""The hub reads an engine's direct-call copies packed in one monitor batch
(zpar.wire.copybatch.pack_copies) exactly as it reads them one by one: each copy checked on its
own, a forged one refused while the others are recorded, a malformed batch dropped whole
without harm to what follows."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import zmq

from tests.hubrig import hub_rig
from zpar.hub.hub import EngineRecord, Hub
from zpar.wire import Session
from zpar.wire.copybatch import pack_copies
from zpar.wire.messages import MON_COPY_BATCH, MON_MUX_IN, MON_MUX_OUT, MsgType, ReplyStatus

KEY = b"k" * 32
UUID = "5d7c1a4e-0b6f-4f8e-9d61-1f2b3c4d5e6f"


@pytest.fixture
def rig() -> Iterator[tuple[Hub, zmq.Socket]]:
    with hub_rig(KEY) as (hub, sock, _):
        monitor = sock(zmq.PUSH, "inproc://m", bind=False)
        rec = EngineRecord(0, UUID, "host", 123)
        hub.engines[0], hub.by_uuid[UUID.encode()] = rec, rec
        yield hub, monitor


def _call(client: Session, engine: Session, n: int) -> tuple[str, list[bytes], list[bytes]]:
    """A direct call's two copies: (msg_id, request copy, reply copy)."""
    header, request = client.serialize(MsgType.APPLY_REQUEST, {}, dest=UUID)
    now = time.time()
    _, reply = engine.serialize(
        MsgType.APPLY_REPLY,
        {"status": ReplyStatus.OK},
        parent=header,
        metadata={"status": ReplyStatus.OK, "started": now, "completed": now},
        buffers=[f"result {n}".encode()],
    )
    ident = UUID.encode()
    return (
        header["msg_id"],
        [MON_MUX_IN, ident, b"client-1", *request],
        [MON_MUX_OUT, b"client-1", ident, *reply],
    )


def _read_until(hub: Hub, done) -> None:
    deadline = time.monotonic() + 30
    while not done():
        assert time.monotonic() < deadline, "the copies never reached the hub's records"
        hub.monitor.poll(10)
        hub.handle_monitor()


def test_a_batch_of_copies_is_recorded_like_copies_sent_alone(rig):
    hub, monitor = rig
    client, engine = Session(KEY), Session(KEY)
    calls = [_call(client, engine, n) for n in range(5)]
    copies = [c for _, req, rep in calls for c in (req, rep)]
    monitor.send_multipart(pack_copies(copies))
    records = hub.tasks.records
    _read_until(hub, lambda: all(m in records and not records[m].pending for m, _, _ in calls))
    for msg_id, _, _ in calls:
        rec = records[msg_id]
        assert rec.status == ReplyStatus.OK and rec.queue == "mux" and rec.engine_uuid == UUID


def test_a_forged_copy_in_a_batch_is_refused_and_the_others_recorded(rig):
    hub, monitor = rig
    client, engine, forger = Session(KEY), Session(KEY), Session(b"x" * 32)
    good = _call(client, engine, 1)
    forged = _call(forger, forger, 2)  # signed with another key
    replayed = good[1]  # the same request copy twice: refused as a replay
    monitor.send_multipart(pack_copies([good[1], forged[1], replayed, forged[2], good[2]]))
    records = hub.tasks.records
    _read_until(hub, lambda: good[0] in records and not records[good[0]].pending)
    assert forged[0] not in records
    assert hub.copies.refused["bad-signature"] == 2
    assert hub.copies.refused["replayed"] == 1
    assert records[good[0]].status == ReplyStatus.OK


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xc1 not msgpack",
        b"\x93\x01\x02\x03",  # a list of ints
        b"\x91\x92\xa6mux_in\xa1x",  # a copy of str, not bin
        b"\x91\x91\xc4\x07ctl_out",  # a kind no engine copies
    ],
)
def test_a_malformed_batch_is_dropped_and_the_hub_goes_on(rig, garbage):
    hub, monitor = rig
    monitor.send_multipart([MON_COPY_BATCH, garbage])
    msg_id, request, reply = _call(Session(KEY), Session(KEY), 0)
    monitor.send_multipart(request)  # alone, after it
    monitor.send_multipart(reply)
    records = hub.tasks.records
    _read_until(hub, lambda: msg_id in records and not records[msg_id].pending)
    assert records[msg_id].status == ReplyStatus.OK
