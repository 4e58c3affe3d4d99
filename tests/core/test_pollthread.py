"""zpar.wire.pollthread: a polling thread ended through its inproc pair, never by a sleep."""

from __future__ import annotations

import threading

import zmq

from zpar.wire.pollthread import PollThread


def _loop(seen: list[str], started: threading.Event):
    def run(wake: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(wake, zmq.POLLIN)
        started.set()
        while True:
            if wake in dict(poller.poll()):
                seen.append("woken")
                return

    return run


def test_stop_wakes_the_thread_and_closes_the_pair():
    ctx = zmq.Context()
    try:
        seen: list[str] = []
        started = threading.Event()
        t = PollThread(ctx, "zpar-test-poll", _loop(seen, started)).start()
        assert started.wait(10)
        assert t._thread.name == "zpar-test-poll" and t._thread.daemon
        t.stop()
        assert seen == ["woken"]
        assert not t._thread.is_alive()
        assert t._wake.closed and t._stop.closed
        t.stop()  # twice: nothing more
    finally:
        ctx.term()


def test_stop_before_start_closes_both_ends():
    ctx = zmq.Context()
    try:
        t = PollThread(ctx, "zpar-test-poll", lambda wake: None)
        t.stop()
        assert t._wake.closed and t._stop.closed and t._thread.ident is None
    finally:
        ctx.term()


def test_a_terminated_context_ends_the_thread_quietly():
    ctx = zmq.Context()
    other = ctx.socket(zmq.PAIR)
    other.setsockopt(zmq.LINGER, 0)
    other.bind("inproc://zpar-test-poll-other")
    errors: list[BaseException] = []
    started = threading.Event()

    def run(wake: zmq.Socket) -> None:
        try:
            started.set()
            other.recv()  # blocks until the context terminates
        except BaseException as e:
            errors.append(e)
            other.close(linger=0)
            raise

    t = PollThread(ctx, "zpar-test-poll", run).start()
    assert started.wait(10)
    t._stop.close(linger=0)  # the owner's end, as stop() would leave it
    ctx.term()  # returns once the thread closed its sockets (other, then wake)
    t._thread.join(10)
    assert not t._thread.is_alive()
    assert [type(e) for e in errors] == [zmq.ContextTerminated]
    assert t._wake.closed
