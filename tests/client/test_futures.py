"""ReplyFuture keeps the whole concurrent.futures.Future protocol on its lighter condition."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import pytest

from zpar.client.futures import ReplyFuture


def _waited_on(f):
    """Someone waits on f: result()/exception(), concurrent.futures.wait, or a callback."""
    return bool(f._condition._waiters or f._waiters or f._done_callbacks)


def _wait_until(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "nobody came to wait"
        time.sleep(0.001)


def _later(f, value, exc=None):
    """Resolve f from another thread once something waits on it."""

    def run():
        _wait_until(lambda: _waited_on(f))
        f.set_exception(exc) if exc is not None else f.set_result(value)

    t = threading.Thread(target=run)
    t.start()
    return t


def test_result_blocks_until_set_from_another_thread():
    f = ReplyFuture()
    t = _later(f, 42)
    assert f.result(timeout=5) == 42 and f.done()
    t.join()


def test_timeout_then_result_and_exception():
    f = ReplyFuture()
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(timeout=0.01)
    with pytest.raises(concurrent.futures.TimeoutError):
        f.result(timeout=0)
    t = _later(f, None, exc=ValueError("boom"))
    assert isinstance(f.exception(timeout=5), ValueError)
    with pytest.raises(ValueError, match="boom"):
        f.result()
    t.join()


def test_many_waiters_are_all_woken():
    f = ReplyFuture()
    got = []
    waiters = [threading.Thread(target=lambda: got.append(f.result(5))) for _ in range(8)]
    for w in waiters:
        w.start()
    _wait_until(lambda: len(f._condition._waiters or ()) == 8)
    f.set_result("x")
    for w in waiters:
        w.join(5)
    assert got == ["x"] * 8


def test_wait_as_completed_callbacks_and_cancel():
    fs = [ReplyFuture() for _ in range(3)]
    seen = []
    fs[0].add_done_callback(lambda f: seen.append(f.result()))
    threads = [_later(fs[0], 0)]
    done, pending = concurrent.futures.wait(fs, timeout=5, return_when="FIRST_COMPLETED")
    assert done == {fs[0]} and pending == {fs[1], fs[2]}
    threads.append(_later(fs[1], 1))  # resolved once as_completed waits on it
    assert sorted(f.result() for f in concurrent.futures.as_completed(fs[:2], 5)) == [0, 1]
    assert fs[2].cancel() and fs[2].cancelled()
    assert seen == [0]
    for t in threads:
        t.join()


def test_asyncio_wraps_it():
    f = ReplyFuture()

    async def main():
        t = _later(f, "async")
        value = await asyncio.wrap_future(f)
        t.join()
        return value

    assert asyncio.run(main()) == "async"


def test_a_timed_out_waiter_does_not_linger():
    f = ReplyFuture()
    for _ in range(3):
        with pytest.raises(concurrent.futures.TimeoutError):
            f.result(timeout=0.001)
    assert not f._condition._waiters
    f.set_result(1)
    assert f.result() == 1


def test_resolving_a_done_future_again_raises_instead_of_deadlocking():
    """Future.set_result formats repr(self) under its condition for InvalidStateError;
    ReplyFuture's lock is not reentrant, so its repr must not take it."""
    from concurrent.futures import InvalidStateError

    from zpar.client.futures import resolve

    f = ReplyFuture()
    f.set_result(1)
    with pytest.raises(InvalidStateError, match="ReplyFuture"):
        f.set_result(2)
    resolve(f, error=RuntimeError("late"))  # a race lost quietly
    assert f.result() == 1


def test_a_finished_future_is_read_without_its_lock():
    """done / result / exception of a finished ReplyFuture do not take its condition (a
    client reads each future two or three times per result); a pending one still waits."""
    ok, failed, pending = ReplyFuture(), ReplyFuture(), ReplyFuture()
    ok.set_result(41)
    failed.set_exception(ValueError("remote"))
    for fut in (ok, failed, pending):
        fut._condition.acquire()  # another thread holding it must not block these reads
    assert ok.done() and ok.result() == 41 and ok.exception() is None
    assert failed.done() and isinstance(failed.exception(), ValueError)
    with pytest.raises(ValueError, match="remote"):
        failed.result()
    assert not pending.done()
    for fut in (ok, failed, pending):
        fut._condition.release()
    with pytest.raises(concurrent.futures.TimeoutError):
        pending.result(timeout=0.01)


def test_a_resolved_future_lets_go_of_its_request_so_a_dropped_result_is_freed_at_once():
    # PendingRequest.future -> ReplyFuture -> PendingRequest was a cycle: a dropped AsyncResult (and the
    # reply's buffers) waited for the cyclic GC. Resolved, the future no longer points back.
    import gc
    import sys

    from zpar.client.request import PendingRequest, request_of, sent_of

    gc.disable()
    try:
        for resolve_it in (
            lambda f: f.set_result("reply"),
            lambda f: f.set_exception(ValueError("engine died")),
        ):
            request = PendingRequest("m", "task", [b"frames"], submitted=5.0)
            fut = request.future
            assert request_of(fut) is request  # pending: its request is read through it
            resolve_it(fut)
            assert request_of(fut) is None and fut.submitted == 5.0
            assert not sent_of(fut)  # answered before it left (aborted in the window)
            # only this test's name holds it now: freed by its count, no collection needed
            assert sys.getrefcount(request) == 2  # the name and getrefcount's argument
    finally:
        gc.enable()


def test_a_resolved_future_still_says_whether_its_request_was_sent():
    from zpar.client.request import PendingRequest, sent_of

    request = PendingRequest("m", "task", [b"frames"], submitted=5.0)
    assert not sent_of(request.future)
    request.sent = 6.0  # what the I/O thread stamps once zmq has the frames
    assert sent_of(request.future)
    request.future.set_result("reply")
    assert sent_of(request.future) and request.future.sent == 6.0
