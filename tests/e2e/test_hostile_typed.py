"""Every limit on the typed path (issue 26): time_limit, timeout and abort apply to typed
calls as to apply; a typed_request's call_count is bounded by its frames (or, for a
function without inputs, by MAX_CALLS_WITHOUT_INPUTS); counts refuse booleans."""

from __future__ import annotations

import time

import pytest
import zmq

import zpar
from zpar.typed.invoke import MAX_CALLS_WITHOUT_INPUTS
from zpar.wire import Session
from zpar.wire.messages import MsgType

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]


def nap(s):
    import time

    time.sleep(s)
    return s


def seven():
    return 7


def _register(view):
    view.typed.register(nap, args=[("s", "float64")], returns="float64")
    view.typed.register(seven, returns="int32")


def test_time_limit_interrupts_a_typed_call_on_a_direct_view(rc):
    dv = rc[:]
    _register(dv)
    dv.set_flags(time_limit=1)
    assert dv.typed.nap([0.01, 0.01]).tolist() == [0.01, 0.01]  # positive control
    with pytest.raises(zpar.TaskTimeout, match="time_limit of 1 s"):
        dv.typed.nap([300.0, 300.0])  # ignored before: returned after 300 s
    assert rc[:].apply_sync(lambda: 1) == [1, 1]  # the engines serve on


def test_time_limit_interrupts_a_load_balanced_typed_call(rc):
    _register(rc[:])
    lv = rc.load_balanced_view()
    lv.set_flags(time_limit=1)
    assert lv.typed.nap([0.01]).tolist() == [0.01]
    with pytest.raises(zpar.TaskTimeout):
        lv.typed.nap([300.0])


def test_timeout_and_dependencies_apply_to_a_typed_call(rc):
    _register(rc[:])
    lv = rc.load_balanced_view()
    slow = lv.apply_async(time.sleep, 3)
    with lv.temp_flags(after=slow, timeout=0.3):
        with pytest.raises(zpar.TaskTimeout, match="dependencies"):
            lv.typed.nap([0.01])
    slow.get(30)
    with lv.temp_flags(after=slow):  # positive control: met dependencies, it runs
        assert lv.typed.nap([0.01]).tolist() == [0.01]


def test_abort_of_a_queued_typed_call(rc):
    _register(rc[:])
    blocker = rc[0].apply_async(time.sleep, 2)
    ar = rc[0].typed.nap([0.01], block=False)
    rc.abort(ar.msg_ids, targets=[0])
    with pytest.raises(zpar.TaskAborted):
        ar.get(30)
    blocker.get(30)
    assert rc[0].typed.nap([0.01]).tolist() == [0.01]


@pytest.fixture
def raw(cluster_addresses):
    """(session, send(content, buffers) -> reply content) for raw typed_requests to one
    engine through the MUX relay."""
    info, addrs = cluster_addresses
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    s.connect(addrs["mux"])
    session = Session(info.key)

    def send(uuid, content, buffers=()):
        h = session.send(
            s, MsgType.TYPED_REQUEST, content, buffers=buffers, idents=[uuid.encode()], dest=uuid
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if s.poll(100):
                msg = session.feed(s.recv_multipart())
                if msg is not None and msg.parent_header.get("msg_id") == h["msg_id"]:
                    return msg.content
        raise AssertionError("no typed_reply")

    yield send
    s.close()


def _content(fid, call_count, counts):
    return {"call_id": 1, "function_id": fid, "call_count": call_count, "counts": counts}


def test_call_count_of_a_function_without_inputs_is_bounded(rc, raw):
    _register(rc[:])
    fid = rc[:].typed.signature("seven").function_id
    uuid = rc._io.engines[0]
    ok = raw(uuid, _content(fid, 5, [0] * 6))  # positive control
    assert ok["status"] == "ok" and ok["call_count"] == 5
    for n in (MAX_CALLS_WITHOUT_INPUTS + 1, 2**40, -1, True):
        reply = raw(uuid, _content(fid, n, [0] * 6))
        assert reply["status"] == "error", n  # before: 2**40 calls wedged the engine
        assert "call_count" in reply["evalue"] or "needs int" in reply["evalue"], reply
    assert rc[0].apply_sync(lambda: 3) == 3


def test_call_count_is_bounded_by_what_the_frames_carry(rc, raw):
    import numpy as np

    _register(rc[:])
    fid = rc[:].typed.signature("nap").function_id
    uuid = rc._io.engines[0]
    col = np.zeros(3)
    ok = raw(uuid, _content(fid, 3, [0, 0, 0, 3, 0, 0]), [memoryview(col).cast("B")])
    assert ok["status"] == "ok"  # positive control
    for n in (4, 2**40):
        reply = raw(uuid, _content(fid, n, [0, 0, 0, 3, 0, 0]), [memoryview(col).cast("B")])
        assert reply["status"] == "error" and "the request has 3" in reply["evalue"]
    # a count that is a bool is no count
    reply = raw(uuid, _content(fid, 1, [0, 0, 0, True, 0, 0]), [memoryview(col[:1]).cast("B")])
    assert reply["status"] == "error" and "counts must be" in reply["evalue"]
