"""client/futurewait.py: waiting on a result's futures, without sockets or threads of ours
(a future is resolved from a timer or before the wait)."""

from __future__ import annotations

import threading
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION, Future

import pytest

from zpar.client import futurewait as fw
from zpar.errors import TimeoutError
from zpar.wire import Message


def reply(status: str = "ok") -> Message:
    return Message([], {"msg_id": "r", "msg_type": "apply_reply"}, {}, {}, {"status": status})


def done(status: str = "ok") -> Future:
    f: Future = Future()
    f.set_result(reply(status))
    return f


def later(f: Future, status: str = "ok") -> threading.Timer:
    """Resolve ``f`` from a timer thread (what the I/O thread does)."""
    t = threading.Timer(0.01, f.set_result, (reply(status),))
    t.start()
    return t


def test_return_when_is_checked_by_name():
    for ok in (None, ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION):
        fw.check_return_when(ok)
    with pytest.raises(ValueError, match="return_when must be one of"):
        fw.check_return_when("SOON")


def test_failed_means_done_with_an_error_or_an_exception():
    pending: Future = Future()
    broken: Future = Future()
    broken.set_exception(RuntimeError("gone"))
    assert (
        not fw.failed(pending)
        and not fw.failed(done())
        and fw.failed(done("error"))
        and fw.failed(broken)
    )


def test_wait_all_says_whether_all_are_done_within_the_timeout():
    pending: Future = Future()
    assert fw.wait_all([done(), done()], 0) is True
    assert fw.wait_all([done(), pending], 0.01) is False
    t = later(pending)
    assert fw.wait_all([done(), pending], None) is True
    t.join()


def test_wait_first_exception_returns_at_the_first_failure():
    pending: Future = Future()
    assert (
        fw.wait_first_exception([done("error"), pending], None) is True
    )  # not waiting for pending
    assert fw.wait_first_exception([done(), pending], 0.01) is False
    t = later(pending, "error")
    assert fw.wait_first_exception([done(), pending], None) is True
    t.join()


def test_wait_for_and_condition_met_follow_return_when():
    pending: Future = Future()
    futs = [done(), pending]
    fw.wait_for(futs, None, FIRST_COMPLETED)  # one is done: returns at once
    assert fw.condition_met(futs, FIRST_COMPLETED) and not fw.condition_met(futs, ALL_COMPLETED)
    assert not fw.condition_met(futs, FIRST_EXCEPTION) and not fw.condition_met(futs, None)
    assert fw.condition_met([done("error"), pending], FIRST_EXCEPTION)
    assert fw.condition_met([], FIRST_COMPLETED)


def test_when_all_done_calls_once_after_the_last():
    calls: list[int] = []
    a: Future = Future()
    b: Future = Future()
    fw.when_all_done([a, b], lambda: calls.append(1))
    a.set_result(reply())
    assert calls == []
    b.set_result(reply())
    assert calls == [1]
    fw.when_all_done([], lambda: calls.append(2))
    assert calls == [1, 2]


def test_wait_sent_times_out_on_an_unsent_request():
    from zpar.client.futures import ReplyFuture

    unsent = ReplyFuture()
    with pytest.raises(TimeoutError, match="Still waiting to be sent"):
        fw.wait_sent([unsent], (), 0.01)
