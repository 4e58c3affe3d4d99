"""Held replies on real engines: the reply of a batch's first task is held while the next
one runs, and still reaches its client while that next task blocks -- for what the client
does only after reading it, or for half a minute (engine.heldreplies)."""

from __future__ import annotations

import os
import time

import pytest

from tests.e2e.conftest import wait_for_files

pytestmark = pytest.mark.timeout(120)

#: Tries at sending two tasks that reach their engine in one batch (the scheduler decides;
#: the first try almost always does it).
TRIES = 5


def quick(x):
    return x


def _watchdog_sends():
    from zpar.engine.engine import this_engine

    engine = this_engine()
    assert engine is not None and engine.server is not None
    return engine.server.replies.watchdog.flushes


def blocked_until(path, started):
    """Runs until ``path`` exists (the test creates it once it has read the reply before
    this task's); says whether the watchdog sent replies meanwhile."""
    before = _watchdog_sends()
    open(started, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.005)
    return _watchdog_sends() - before, os.path.exists(path)


def sleeps_half_a_minute(started, finished, stop):
    """Sleeps 30 s (or until ``stop`` exists, for a quick teardown), then says so."""
    before = _watchdog_sends()
    open(started, "w").close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not os.path.exists(stop):
        time.sleep(0.01)
    open(finished, "w").close()
    return _watchdog_sends() - before


def _one_engine(rc):
    return rc.load_balanced_view(targets=[rc.ids[0]])


def test_a_task_blocked_on_the_client_reading_the_reply_before_it_does_not_hang(rc, tmp_path):
    lv = _one_engine(rc)
    held = 0
    for n in range(TRIES):
        gate, started = str(tmp_path / f"gate{n}"), str(tmp_path / f"started{n}")
        first = lv.apply_async(quick, n)
        second = lv.apply_async(blocked_until, gate, started)
        try:
            assert first.get(timeout=60) == n  # arrives while the second still blocks
            assert not second.ready()
        finally:
            open(gate, "w").close()
        sent, opened = second.get(timeout=60)
        assert opened
        held += sent
        if held:
            break
    assert held, f"in {TRIES} tries no reply was held for the task after it"


def test_a_reply_arrives_while_the_next_task_of_its_batch_sleeps(rc, tmp_path):
    lv = _one_engine(rc)
    held = 0
    for n in range(TRIES):
        started, finished, stop = (str(tmp_path / f"{name}{n}") for name in ("s", "f", "x"))
        first = lv.apply_async(quick, n)
        second = lv.apply_async(sleeps_half_a_minute, started, finished, stop)
        try:
            assert first.get(timeout=25) == n
            wait_for_files(started)
            assert not os.path.exists(finished)  # the first reply came while the second ran
        finally:
            open(stop, "w").close()
        held += second.get(timeout=60)
        if held:
            break
    assert held, f"in {TRIES} tries no reply was held for the task after it"
