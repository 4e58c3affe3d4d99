"""MonitorCopies: what an engine tells the hub about direct calls arrives, in order, and a
stopping engine sends what it still holds."""

from __future__ import annotations

import zmq

from zpar.engine.monitorcopies import COPY_INTERVAL, MonitorCopies


def _pair(name):
    ctx = zmq.Context.instance()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"inproc://{name}")
    return ctx, pull


def _recv(pull, timeout_ms=5000):
    assert pull.poll(timeout_ms), "nothing arrived"
    return pull.recv_multipart()


def test_a_lone_copy_goes_at_once_and_a_burst_in_order():
    ctx, pull = _pair("copies-order")
    copies = MonitorCopies(ctx, "inproc://copies-order")
    copies.start()
    try:
        copies.put([b"mux_in", b"1"])
        assert _recv(pull) == [b"mux_in", b"1"]
        for i in range(200):
            copies.put([b"mux_out", str(i).encode(), bytes(10)])
        got = [_recv(pull)[1] for _ in range(200)]
        assert got == [str(i).encode() for i in range(200)]
        assert not pull.poll(int(COPY_INTERVAL * 3000))  # nothing more, nothing twice
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
