"""The held-replies watchdog without sockets: it sends held replies only while user code
runs, only once they waited its limit, exactly once, and never while the main thread has
the replies (engine.heldreplies)."""

from __future__ import annotations

import threading
import time

import pytest

from zpar.engine.heldreplies import HOLD_LIMIT, HeldReplyWatchdog

pytestmark = pytest.mark.timeout(60)


class Held:
    """A stand-in for ReplySender's held replies: flush empties them, counting sends."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.since: float | None = None
        self.sent: list[list[str]] = []
        self.flushed = threading.Event()
        self.thread: str | None = None

    def hold(self, reply: str) -> None:
        if not self.replies:
            self.since = time.monotonic()
        self.replies.append(reply)

    def flush(self) -> None:
        self.sent.append(self.replies)
        self.replies, self.since = [], None
        self.thread = threading.current_thread().name
        self.flushed.set()


@pytest.fixture
def held():
    return Held()


@pytest.fixture
def make(held):
    made = []

    def factory(limit: float = HOLD_LIMIT) -> HeldReplyWatchdog:
        w = HeldReplyWatchdog(held.flush, lambda: held.since, limit=limit)
        made.append(w)
        return w

    yield factory
    for w in made:
        w.close()


def test_the_bound_is_a_millisecond_or_two():
    assert 0 < HOLD_LIMIT <= 0.002


def test_no_thread_until_a_task_runs_with_replies_held(held, make):
    w = make()
    w.enter(None)
    w.leave()
    assert w._thread is None
    held.hold("a")
    w.enter(held.since)
    assert w._thread is not None and w._thread.is_alive()
    w.leave()


def test_replies_held_over_a_running_task_are_sent_once_by_the_thread(held, make):
    w = make()
    held.hold("a")
    held.hold("b")
    w.enter(held.since)  # the next task runs... for as long as it takes
    assert held.flushed.wait(10), "the watchdog never sent the held replies"
    # still inside the task: nothing more is sent however long it runs
    time.sleep(w.limit * 5)
    w.leave()
    assert held.sent == [["a", "b"]]
    assert held.thread == "zpar-held-replies"
    assert w.flushes == 1 and held.replies == []


def test_nothing_is_sent_by_the_thread_once_the_main_thread_is_back(held, make):
    w = make(limit=0.05)
    held.hold("a")
    w.enter(held.since)
    w.leave()  # the task returned before the limit: the replies are the main thread's
    time.sleep(0.2)  # past the limit: the thread, had it the replies, would send now
    assert held.sent == [] and held.replies == ["a"] and w.flushes == 0


def test_leave_waits_for_a_send_in_progress(make):
    """The main thread cannot take the socket back while the thread is sending on it."""
    in_send = threading.Event()
    release = threading.Event()
    since = [time.monotonic()]

    def slow_flush():
        in_send.set()
        release.wait(10)
        since[0] = None

    w = HeldReplyWatchdog(slow_flush, lambda: since[0], limit=0.0)
    try:
        w.enter(since[0])
        assert in_send.wait(10)
        left = threading.Event()
        t = threading.Thread(target=lambda: (w.leave(), left.set()))
        t.start()
        assert not left.wait(0.2)  # blocked behind the send
        release.set()
        assert left.wait(10)
        t.join(10)
    finally:
        release.set()
        w.close()


def test_a_task_without_replies_held_wakes_nothing(held, make):
    w = make(limit=0.0)
    held.hold("a")
    w.enter(held.since)
    assert held.flushed.wait(10)
    w.leave()
    held.flushed.clear()
    held.hold("b")
    w.enter(None)  # this task runs with nothing held: b was held after it (a test's order)
    time.sleep(0.1)
    w.leave()
    assert not held.flushed.is_set() and held.sent == [["a"]]


def test_the_thread_is_woken_again_for_the_next_held_run(held, make):
    w = make(limit=0.0)
    for name in ("a", "b", "c"):
        held.flushed.clear()
        held.hold(name)
        w.enter(held.since)
        assert held.flushed.wait(10)
        w.leave()
    assert held.sent == [["a"], ["b"], ["c"]] and w.flushes == 3


def test_close_ends_the_thread_even_while_a_task_runs(held, make):
    w = make(limit=600.0)
    held.hold("a")
    w.enter(held.since)
    w.close()
    assert not w._thread.is_alive()
    w.leave()
    assert held.sent == []  # still held: the main thread's to send (Server.loop's finally)
