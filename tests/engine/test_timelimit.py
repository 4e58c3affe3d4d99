"""The time_limit watchdog in this process: it interrupts the main thread at the limit,
not before, and says so when disarmed; a stuck task reaches on_stuck."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from zpar.engine.timelimit import TimeLimitWatchdog
from zpar.tasklimits import parse_time_limit, timeout_content


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan"), "1", True, [1]])
def test_malformed_limits_are_named(bad):
    with pytest.raises(ValueError, match="time_limit"):
        parse_time_limit({"time_limit": bad})


def test_absent_limit_and_numbers():
    assert parse_time_limit({}) is None
    assert parse_time_limit({"time_limit": 2}) == 2.0
    assert parse_time_limit(None) is None


@pytest.fixture
def sigint_raises():
    """Python's own SIGINT handler, as an engine has it (Engine installs its own): a test
    process started in the background by a shell without job control inherits SIGINT
    ignored, and Python then keeps it ignored, so the watchdog's interrupt would vanish."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_the_main_thread_is_interrupted_at_its_limit(sigint_raises):
    dog = TimeLimitWatchdog()
    try:
        dog.arm("t1", 0.2)
        with pytest.raises(KeyboardInterrupt):
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                time.sleep(0.01)
        assert dog.disarm() is True
        # a task under its limit: no interrupt, disarm says so
        dog.arm("t2", 30)
        assert dog.disarm() is False
        assert dog.running is None
    finally:
        dog.close()


def test_a_task_ignoring_its_interrupt_reaches_on_stuck(sigint_raises):
    stuck = []
    seen = threading.Event()

    def on_stuck(msg_id, limit):
        stuck.append((msg_id, limit))
        seen.set()

    dog = TimeLimitWatchdog(on_stuck=on_stuck, grace=0.2)  # hard_exit off: pytest's timer
    try:
        dog.arm("t3", 0.1)
        interrupts = 0
        deadline = time.monotonic() + 30
        while not seen.is_set() and time.monotonic() < deadline:
            try:
                time.sleep(0.01)
            except KeyboardInterrupt:
                interrupts += 1  # the task that swallows it
        assert stuck == [("t3", 0.1)] and interrupts == 1
    finally:
        dog.close()


def test_timeout_content_is_a_zpar_task_timeout():
    from zpar.errors import RemoteError, TaskTimeout

    c = timeout_content("m1", 1.5, {"engine_id": 3}, {"traceback": ["tb\n"]})
    err = RemoteError.from_content(c)
    assert isinstance(err, TaskTimeout) and "1.5 s" in str(err) and "m1" in str(err)
