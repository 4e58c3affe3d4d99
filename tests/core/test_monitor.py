"""The hub's monitor records: each round-trips through a batch; malformed events are named."""

from __future__ import annotations

import msgpack
import pytest

from zpar.wire.messages import MON_TASK_BATCH
from zpar.wire.monitor import TaskDest, TaskIn, TaskOut, TaskRetry, pack_batch, unpack_batch

EVENTS = [
    TaskIn(b"client", {"msg_id": "m", "msg_type": "apply_request"}, {"retries": 1}),
    TaskDest("m", "engine-uuid"),
    TaskIn(b"client", {"msg_id": "m3", "msg_type": "apply_request"}, {}, "engine-uuid"),
    TaskOut("engine-uuid", b"client", "m", {"status": "ok"}, {"status": "ok"}, [b"result"]),
    TaskOut("", b"client", "m2", {}, {"status": "error"}),
    TaskRetry("m", "engine-uuid", "engine 0 died"),
]


def test_every_record_round_trips_through_a_batch():
    kind, data = pack_batch(EVENTS)
    assert kind == MON_TASK_BATCH
    assert list(unpack_batch(data)) == EVENTS


def test_packing_does_not_copy_or_change_the_records():
    header = {"msg_id": "m", "msg_type": "apply_request"}
    event = TaskIn(b"c", header, {})
    pack_batch([event])
    assert event.header is header


@pytest.mark.parametrize(
    "raw",
    [
        ["nope", 1],
        ["dest", "m"],  # a field missing
        ["dest", "m", 5],  # a field of the wrong type
        ["in", b"c", "not a map", {}],
        [],
        "not a list",
    ],
)
def test_malformed_events_are_named_not_raised(raw):
    good = ["dest", "m", "e"]
    out = list(unpack_batch(msgpack.packb([raw, good])))
    assert isinstance(out[0], str) and out[1] == TaskDest("m", "e")


def test_a_batch_that_is_not_a_list_is_named():
    assert list(unpack_batch(msgpack.packb({"a": 1}))) == ["a task batch must be a list"]
