"""MonitorCopies: what an engine tells the hub about direct calls arrives, in order, and a
stopping engine sends what it still holds; copies queued within an interval travel packed
in one monitor batch, a copy with a large result alone, and a call does not wake the
copy thread while an interval runs."""

from __future__ import annotations

import time

import zmq

from zpar.engine.monitorcopies import COPY_INTERVAL, MonitorCopies
from zpar.wire.copybatch import COPY_BATCH_MAX, COPY_PACK_MAX, unpack_copies
from zpar.wire.messages import MON_COPY_BATCH


def _pair(name):
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"inproc://{name}")
    return ctx, pull


def _recv(pull, timeout_ms=5000):
    assert pull.poll(timeout_ms), "nothing arrived"
    return pull.recv_multipart()


def _copies(pull, n):
    """The next ``n`` copies, batches opened, with the number of messages they came in."""
    got, messages = [], 0
    while len(got) < n:
        frames = _recv(pull)
        messages += 1
        if frames[0] == MON_COPY_BATCH:
            got.extend(unpack_copies(frames[1]))
        else:
            got.append(frames)
    assert len(got) == n, f"{len(got) - n} copies more than sent"
    return got, messages


def test_a_lone_copy_goes_at_once_and_a_burst_in_order():
    ctx, pull = _pair("copies-order")
    copies = MonitorCopies(ctx, "inproc://copies-order")
    copies.start()
    try:
        copies.put([b"mux_in", b"1"])
        assert _recv(pull) == [b"mux_in", b"1"]
        for i in range(600):
            copies.put([b"mux_out", str(i).encode(), bytes(10)])
        got, messages = _copies(pull, 600)
        assert [c[1] for c in got] == [str(i).encode() for i in range(600)]
        assert got[0] == [b"mux_out", b"0", bytes(10)]
        # packed: at least 600 / COPY_BATCH_MAX messages, far fewer than one per copy
        assert -(-600 // COPY_BATCH_MAX) <= messages < 600
        assert not pull.poll(int(COPY_INTERVAL * 3000))  # nothing more, nothing twice
        assert copies.sent_copies == 601
    finally:
        copies.stop()
        pull.close(linger=0)


def test_a_copy_too_large_to_pack_travels_alone_in_its_place():
    ctx, pull = _pair("copies-large")
    copies = MonitorCopies(ctx, "inproc://copies-large")
    big = [b"mux_out", b"c", b"e", b"x" * (COPY_PACK_MAX + 1)]
    copies.put([b"mux_in", b"first"])  # starts an interval: what follows waits for it
    copies.put([b"mux_out", b"before"])
    copies.put([b"mux_out", b"also before"])
    copies.put(big)
    copies.put([b"mux_out", b"after"])
    copies.put([b"mux_out", b"also after"])
    copies.start()
    try:
        messages = [_recv(pull) for _ in range(3)]
        assert messages[0][0] == MON_COPY_BATCH
        before = unpack_copies(messages[0][1])
        assert [c[1] for c in before] == [b"first", b"before", b"also before"]
        assert messages[1] == big
        assert [c[1] for c in unpack_copies(messages[2][1])] == [b"after", b"also after"]
    finally:
        copies.stop()
        pull.close(linger=0)


def test_a_put_wakes_the_thread_only_when_it_sleeps_without_a_deadline():
    copies = MonitorCopies(zmq.Context.instance(), "inproc://copies-unused")  # not started
    copies.put([b"mux_in", b"0"])  # quiet: the thread must be woken
    assert copies._armed and copies._wake.is_set()
    copies._wake.clear()  # as the thread does when it wakes; it keeps its deadline
    copies.put([b"mux_out", b"0"])
    copies.put([b"mux_in", b"1"])
    assert not copies._wake.is_set()  # queued for the turn the deadline brings
    assert [c[1] for c in copies._queue] == [b"0", b"0", b"1"]


def test_after_a_quiet_interval_the_next_copy_goes_at_once():
    ctx, pull = _pair("copies-wake")
    copies = MonitorCopies(ctx, "inproc://copies-wake")
    copies.start()
    try:
        copies.put([b"mux_in", b"0"])
        assert _recv(pull) == [b"mux_in", b"0"]
        deadline = time.monotonic() + 30
        while copies._armed:  # an interval with no copy: the thread sleeps without deadline
            assert time.monotonic() < deadline, "the thread never went quiet"
            time.sleep(COPY_INTERVAL)
        copies.put([b"mux_in", b"1"])
        assert _recv(pull) == [b"mux_in", b"1"]
    finally:
        copies.stop()
        pull.close(linger=0)


def test_stop_sends_what_is_still_queued():
    ctx, pull = _pair("copies-stop")
    copies = MonitorCopies(ctx, "inproc://copies-stop")
    copies.start()
    try:
        copies.put([b"first"])
        assert _recv(pull) == [b"first"]
        copies.put([b"held"])  # within the interval of the first: held back...
        copies.stop()  # ...until the engine stops, which sends it
        assert _recv(pull) == [b"held"]
        assert not copies._thread.is_alive()
    finally:
        pull.close(linger=0)
