"""The time_limit flag on a live cluster: a task past its limit is interrupted and fails
with TaskTimeout; one that ignores the interrupt gets its TaskTimeout from an engine that
then restarts under the same id."""

from __future__ import annotations

import os

import pytest

import zpar
from tests.e2e.conftest import wait_until


def _sleep(seconds):
    import time

    time.sleep(seconds)
    return seconds


def _stubborn(seconds):
    """Swallows every KeyboardInterrupt: only a restart ends it."""
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            time.sleep(0.05)
        except KeyboardInterrupt:
            pass
    return "finished"


def test_a_task_past_its_limit_fails_with_task_timeout(rc):
    view = rc.load_balanced_view(time_limit=1)
    ar = view.apply_async(_sleep, 120)
    with pytest.raises(zpar.TaskTimeout, match="time_limit of 1 s"):
        ar.get(timeout=60)
    # under its limit a task is untouched, and the engine serves on (no restart)
    pids = rc[:].apply_sync(os.getpid)
    assert view.apply_sync(_sleep, 0.01) == 0.01
    e0 = rc[0]
    with e0.temp_flags(time_limit=0.5):  # the calling-thread path
        with pytest.raises(zpar.TaskTimeout):
            e0.apply_sync(_sleep, 120)
    assert rc[:].apply_sync(os.getpid) == pids
    with pytest.raises(ValueError, match="time_limit"):
        view.set_flags(time_limit=-1)


def test_a_task_ignoring_its_interrupt_restarts_the_engine(make_cluster):
    c = make_cluster(n=1)
    rc = c.client
    rc[0].execute("marker = 1", block=True)
    pid = rc[0].apply_sync(os.getpid)
    ar = rc.direct_view(0)
    ar.set_flags(time_limit=0.5)
    ar = ar.apply_async(_stubborn, 600)
    with pytest.raises(zpar.TaskTimeout):
        ar.get(timeout=60)

    def fresh_engine_up():
        try:
            return rc.ids == [0] and rc[0].apply_sync(lambda: "marker" in globals()) is False
        except zpar.EngineError:
            return False  # the old engine's death announced after its TaskTimeout

    wait_until(fresh_engine_up, "engine 0 back with a fresh namespace", timeout=60)
    assert rc[0].apply_sync(os.getpid) == pid  # restarted in place (exec): same process
