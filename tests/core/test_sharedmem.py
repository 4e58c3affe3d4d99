"""The same-host data plane in one process: segments, holds, the receiver's view, the wire.

Across processes (an engine, SIGKILLed sides) in tests/e2e/test_samehost_arrays.py.
"""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

from zpar import sharedmem
from zpar.errors import RemoteProtocolError
from zpar.serialize import deserialize_object, serialize_object
from zpar.sharedmem import carrier
from zpar.sharedmem.receipts import PAGE, SegmentGone
from zpar.sharedmem.segment import SLOTS, process_start
from zpar.wire import HEAD_FRAMES, SegmentRef, Session, is_descriptor

pytestmark = pytest.mark.skipif(not sharedmem.enabled(), reason="needs Linux memfd and /proc")

KEY = b"secret-key"
ME = (os.getpid(), process_start(os.getpid()))
BIG = carrier.SHM_MIN_BYTES


@pytest.fixture(autouse=True)
def fresh_carrier(monkeypatch):
    """Each test with a pool and receipts of its own, closed after it."""
    from zpar.sharedmem.pool import Pool
    from zpar.sharedmem.receipts import Receipts

    monkeypatch.setattr(carrier, "_pool", Pool())
    monkeypatch.setattr(carrier, "_receipts", Receipts())
    yield
    gc.collect()
    carrier._pool.close()


def _send(obj, session=None):
    """obj's frames as a same-host sender signs them for this process."""
    session = session or Session(KEY)
    buffers = sharedmem.outbound(serialize_object(obj), ME)
    _, frames = session.serialize("apply_request", {}, buffers=buffers)
    return frames


def _receive(frames, session=None, own=False):
    """What a receiver gets: checked, then the segments taken (as another process would
    when ``own`` is False: no adoption of the return hold)."""
    msg = (session or Session(KEY)).unpack(frames)
    if own:
        sharedmem.inbound(msg)
    else:
        for i, t in enumerate(msg.tags):
            if type(t) is list:
                msg.buffers[i] = carrier._receipts.take(t)
    return msg


def _segment():
    (seg,) = carrier._pool.segments.values()
    return seg


@pytest.mark.parametrize(
    "a",
    [
        np.arange(BIG // 8, dtype=np.float64),
        np.arange(BIG // 4, dtype=np.int32).reshape(512, -1),
        np.asfortranarray(np.ones((512, BIG // 1024), dtype=np.float32)),
        np.zeros(BIG, dtype=np.dtype([("x", "<f4"), ("y", "u1")])),
    ],
    ids=["float64", "int32-2d", "fortran", "structured"],
)
def test_received_array_keeps_dtype_shape_order_and_is_writable(a):
    frames = _send(a)
    assert [len(f) for f in frames[HEAD_FRAMES + 1 :]] == [0]  # the buffer left the frames
    b = deserialize_object(_receive(frames).buffers)
    assert b.dtype == a.dtype and b.shape == a.shape and b.strides == a.strides
    assert b.flags.writeable and b.flags.f_contiguous == a.flags.f_contiguous
    np.testing.assert_array_equal(b, a)


def test_small_buffers_stay_frames():
    a = np.arange(BIG // 8 - 1, dtype=np.float64)
    frames = _send(a)
    assert frames[-1].nbytes == a.nbytes and not carrier._pool.segments


def test_a_receiver_writes_into_its_own_copy_only():
    a = np.arange(BIG // 8, dtype=np.float64)
    frames = _send(a)
    b1 = deserialize_object(_receive(frames).buffers)
    b2 = deserialize_object(_receive(_send(a)).buffers)
    b1[:] = -1
    assert a[5] == 5 and b2[5] == 5  # neither the sender nor another receipt sees it


def test_the_hold_goes_with_the_last_reference():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    seg = _segment()
    part = b[10:20]  # a view keeps it
    del b
    gc.collect()
    assert seg.held()
    del part
    gc.collect()
    assert not seg.held()


def test_a_free_segment_is_reused_and_its_kept_mapping_sees_the_new_bytes():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    b[0] = 42.0  # a page of the kept mapping is now this process's copy
    del b
    gc.collect()
    c = deserialize_object(_receive(_send(a * 2)).buffers)
    assert len(carrier._pool.segments) == 1 and carrier._receipts.count() == 1
    np.testing.assert_array_equal(c, a * 2)  # the written page was dropped, not reused


def _pages(b):
    """Per page of array ``b``: (mapped in this process, written by it), from
    /proc/self/pagemap."""
    addr = b.ctypes.data
    first, last = addr // PAGE, (addr + b.nbytes - 1) // PAGE
    fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    try:
        e = np.frombuffer(os.pread(fd, (last - first + 1) * 8, first * 8), dtype=np.uint64)
    finally:
        os.close(fd)
    present = (e >> np.uint64(63)) == 1
    return present, present & ((e >> np.uint64(61)) & np.uint64(1) == 0)


def test_a_received_buffer_is_mapped_as_it_is_read_not_ahead():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    present, _ = _pages(b)
    assert not present.any()  # nothing mapped ahead: a buffer passed on unread costs nothing
    assert b[-1] == a[-1] and b[: PAGE // 8].sum() == a[: PAGE // 8].sum()
    present, written = _pages(b)
    assert present[0] and present[-1] and not written.any()


def test_a_kept_mapping_drops_only_the_pages_written():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    assert b.sum() == a.sum()  # every page mapped
    b[0] = 42.0  # the first page is this process's copy now
    _, written = _pages(b)
    assert written[0] and not written[1:].any()
    del b
    gc.collect()
    c = deserialize_object(_receive(_send(a * 2)).buffers)
    present, written = _pages(c)
    assert not written.any() and not present[0] and present[1:].all()
    np.testing.assert_array_equal(c, a * 2)


def test_a_held_segment_is_not_rewritten():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    c = deserialize_object(_receive(_send(a + 1)).buffers)
    assert len(carrier._pool.segments) == 2
    assert b[1] == 1 and c[1] == 2


def test_a_buffer_received_unwritten_goes_back_to_its_owner_by_name():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    back = sharedmem.outbound(serialize_object(b), ME)
    assert type(back[1]) is SegmentRef and back[1].desc[2] == _segment().token
    again = sharedmem.outbound(serialize_object(b), ME)  # the return hold is spent: a copy
    assert len(carrier._pool.segments) == 2 and type(again[1]) is SegmentRef
    del again
    _, frames = Session(KEY).serialize("apply_reply", {}, buffers=back)
    c = deserialize_object(_receive(frames, own=True).buffers)
    np.testing.assert_array_equal(c, a)


def test_a_written_buffer_is_copied_not_named_back():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    first = _segment().token
    b[-1] = 0.5
    back = sharedmem.outbound(serialize_object(b), ME)
    assert type(back[1]) is SegmentRef and back[1].desc[2] != first


def test_a_dead_receivers_holds_are_freed_by_the_sweep():
    a = np.arange(BIG // 8, dtype=np.float64)
    frames = sharedmem.outbound(serialize_object(a), (2**22 + 7, 1))  # no such process
    seg = _segment()
    assert seg.held()
    sharedmem.sweep()
    assert not seg.held()
    del frames


def test_a_segment_is_closed_once_idle(monkeypatch):
    import time

    from zpar.sharedmem import pool

    a = np.arange(BIG // 8, dtype=np.float64)
    del a  # nothing sent: one made, free at once
    carrier._pool.acquire(BIG)
    carrier._pool.sweep(now=time.monotonic())
    assert len(carrier._pool.segments) == 1
    carrier._pool.sweep(now=time.monotonic() + pool.IDLE_RELEASE + 1)
    assert not carrier._pool.segments


def test_every_slot_taken_falls_back_to_a_frame():
    view = sharedmem.shared_array((BIG // 8,), np.float64)
    holds = [sharedmem.outbound(serialize_object(view), ME) for _ in range(SLOTS // 2)]
    assert all(type(h[1]) is SegmentRef for h in holds)  # a hold and a return hold each
    over = sharedmem.outbound(serialize_object(view), ME)
    assert type(over[1]) is memoryview and len(carrier._pool.segments) == 1


def test_shared_array_crosses_without_a_copy():
    s = sharedmem.shared_array((BIG // 8,), np.float64)
    assert s.flags.writeable and not s.any()
    s[:] = 3.0
    frames = _send(s)
    assert len(carrier._pool.segments) == 1  # its own segment: nothing copied
    b = deserialize_object(_receive(frames).buffers)
    s[0] = 7.0  # the receiver reads the shared pages as they are
    assert b[0] == 7.0 and b[1] == 3.0
    b[1] = -1.0  # and a page it writes is its own
    assert s[1] == 3.0


def test_shared_array_refuses_objects():
    with pytest.raises(TypeError, match="Python objects"):
        sharedmem.shared_array(3, object)


def test_descriptor_is_signed():
    frames = _send(np.arange(BIG // 8, dtype=np.float64))
    s = Session(KEY)
    env = bytearray(frames[2])
    env[-3] ^= 1  # a bit of the descriptor (the envelope's tail)
    with pytest.raises(RemoteProtocolError, match="signature"):
        s.unpack([*frames[:2], bytes(env), *frames[3:]])


def test_a_descriptors_frame_must_be_empty():
    frames = _send(np.arange(BIG // 8, dtype=np.float64))
    with pytest.raises(RemoteProtocolError) as e:
        Session(KEY).unpack([*frames[:-1], b"x"])
    assert e.value.reason in ("bad-buffer", "bad-signature")


@pytest.mark.parametrize(
    "desc",
    [
        [1, 2, b"short", 0, 1, 0, 1, 1, 2],
        [1, 2, b"t" * 16, -1, 1, 0, 1, 1, 2],
        [1, 2, b"t" * 16, 0, 1, 99, 1, 1, 2],
        [1, 2, b"t" * 16, 0, "1", 0, 1, 1, 2],
        [1, 2, b"t" * 16, 0, 1, 0, 1, 1],
    ],
)
def test_malformed_descriptors_are_refused(desc):
    assert not is_descriptor(desc)
    s = Session(KEY)
    _, frames = s.serialize("apply_request", {}, buffers=[SegmentRef(desc)])
    with pytest.raises(RemoteProtocolError, match="descriptor"):
        s.unpack(frames)


def test_a_released_hold_cannot_be_taken_again():
    frames = _send(np.arange(BIG // 8, dtype=np.float64))
    b = deserialize_object(_receive(frames).buffers)
    del b
    gc.collect()
    with pytest.raises(SegmentGone, match="let go"):
        _receive(frames)


def test_a_segment_of_a_dead_process_cannot_be_opened():
    with pytest.raises(SegmentGone, match="cannot open"):
        carrier._receipts.take([2**22 + 7, 5, b"t" * 16, 0, 8, 0, 1, 0, 0])


def test_release_all_lets_go_of_every_hold_before_an_exec():
    a = np.arange(BIG // 8, dtype=np.float64)
    b = deserialize_object(_receive(_send(a)).buffers)
    seg = _segment()
    assert seg.held()
    sharedmem.carrier.release_all()
    assert not seg.held()
    del b
