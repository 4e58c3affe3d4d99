"""A load-balanced map without chunksize is one task per element, as ipyparallel's
(chunksize=1, ipyparallel/client/view.py LoadBalancedView.map and asyncresult.py
AsyncMapResult): results stream as elements finish, a slow element holds back no other
engine, progress, abort, errors and metadata move per element; chunksize=N keeps its
meaning. zpar sends several elements to a request underneath (zpar.elements).

No timed assertions: elements finish when the test says so (a file they wait for), and the
test waits for what it expects (progress, a marker) under a deadline, then asserts order.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.e2e.conftest import wait_for_files, wait_until
from zpar.errors import CompositeError, RemoteError, TaskAborted

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

#: seconds after which a test opens its gate itself, so that a map the old way (contiguous
#: chunks) ends instead of hanging; the test then fails on what it saw before
SAFETY = 45.0


def engine_of(x):
    import os

    return x, os.getpid()


def blocked_if(gate, slow, x):
    """x at once, except element ``slow``, which waits for ``gate``."""
    if x == slow:
        open(gate + ".started", "w").close()
        while not os.path.exists(gate):
            time.sleep(0.005)
    return x


def fail_on(bad, x):
    if x in bad:
        raise ValueError(f"element {x} is bad")
    return x


class Gate:
    """A file the test creates to let the slow element finish; opened by a timer after
    SAFETY seconds whatever happens (then ``forced`` is set: the test saw a hang)."""

    def __init__(self, path):
        self.path = str(path)
        self.forced = False
        self._timer = threading.Timer(SAFETY, self._force)
        self._timer.daemon = True
        self._timer.start()

    def _force(self):
        self.forced = True
        self.open()

    def open(self):
        open(self.path, "w").close()

    def is_open(self):
        return os.path.exists(self.path)

    def close(self):
        self._timer.cancel()
        self.open()


def test_first_result_of_an_uneven_map_arrives_before_the_slow_element_ends(rc, tmp_path):
    # ipyparallel's itermapresult example: iterate as results arrive
    lv = rc.load_balanced_view()
    gate = Gate(tmp_path / "gate")
    try:
        n = 400
        ar = lv.map_async(blocked_if, [gate.path] * n, [1] * n, range(n))
        it = iter(ar)
        first = next(it)
        assert first == 0
        assert not gate.is_open() and not ar.ready(), "the first result waited for the slow one"
    finally:
        gate.close()
    assert [first, *it] == list(range(n))
    assert not gate.forced


def test_a_slow_element_holds_back_no_element_another_engine_can_run(rc, tmp_path):
    lv = rc.load_balanced_view()
    gate = Gate(tmp_path / "gate")
    try:
        n = 2000
        # element 0 blocks its engine: every other one must still finish, on the other
        ar = lv.map_async(blocked_if, [gate.path] * n, [0] * n, range(n), ordered=False)
        wait_for_files(gate.path + ".started")
        wait_until(lambda: ar.progress >= n - 1 or gate.forced, "elements held back", SAFETY + 5)
        assert ar.progress == n - 1 and not gate.forced, ar.progress
        assert not ar.ready()
        engines = ar.engine_id  # per element; the blocked one's still unknown
        assert engines[0] is None and len(engines) == n
        slow_engine = [e for e in engines[1:] if e is not None]
        assert len(slow_engine) == n - 1
    finally:
        gate.close()
    assert sorted(ar) == list(range(n))
    assert ar.get(timeout=60) == list(range(n))


def test_progress_moves_per_element(rc, tmp_path):
    lv = rc.load_balanced_view(targets=[0])  # one engine: every element in one request
    gate = Gate(tmp_path / "gate")
    try:
        ar = lv.map_async(blocked_if, [gate.path] * 6, [3] * 6, range(6))
        wait_for_files(gate.path + ".started")
        wait_until(lambda: ar.progress >= 3 or gate.forced, "progress by element", SAFETY + 5)
        assert ar.progress == 3 and len(ar) == 6 and not gate.forced
        assert ar.engine_id[:3] == [0, 0, 0] and ar.engine_id[3:] == [None] * 3
    finally:
        gate.close()
    assert ar.get(timeout=60) == list(range(6)) and ar.progress == 6


def test_abort_aborts_the_unstarted_elements_one_by_one(rc, tmp_path):
    lv = rc.load_balanced_view(targets=[0])
    gate = Gate(tmp_path / "gate")
    try:
        ar = lv.map_async(blocked_if, [gate.path] * 8, [2] * 8, range(8))
        wait_for_files(gate.path + ".started")  # elements 0, 1 done, 2 running
        wait_until(lambda: ar.progress >= 2 or gate.forced, "elements 0 and 1", SAFETY + 5)
        assert not gate.forced
        ar.abort()
        # the engine is busy in element 2: its unstarted ones are taken back and aborted
        wait_until(lambda: ar.progress >= 7 or gate.forced, "unstarted aborted", SAFETY + 5)
        assert ar.progress == 7 and not gate.forced and not ar.ready()
    finally:
        gate.close()
    out = ar.get(timeout=60, return_exceptions=True)
    assert out[:3] == [0, 1, 2], out  # done, or running when the abort came
    assert all(isinstance(e, TaskAborted) for e in out[3:]), out
    assert ar.progress == 8 and len(out) == 8
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=30)
    assert len(info.value.errors) == 5


def test_errors_per_element_and_ipyparallel_shape(rc):
    lv = rc.load_balanced_view()
    ar = lv.map_async(fail_on, [{3, 700}] * 1000, range(1000))
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=60)
    assert [e.ename for e in info.value.errors] == ["ValueError", "ValueError"]
    out = ar.get(timeout=30, return_exceptions=True)
    assert len(out) == 1000 and out[:3] == [0, 1, 2] and out[4:700] == list(range(4, 700))
    assert isinstance(out[3], RemoteError) and "element 3 is bad" in str(out[3])
    # iteration raises at the failed element, after delivering those before it
    it = iter(lv.map_async(fail_on, [{2}] * 5, range(5)))
    assert next(it) == 0 and next(it) == 1
    with pytest.raises(CompositeError):
        next(it)
    # as ipyparallel's chunksize=1: one msg_id, engine_id, metadata per element
    ok = lv.map_async(engine_of, range(50))
    assert ok.get(timeout=30)[7][0] == 7
    assert len(ok) == len(ok.msg_ids) == len(set(ok.msg_ids)) == 50
    assert len(ok.engine_id) == 50 and set(ok.engine_id) <= set(rc.ids)
    assert all(md["status"] == "ok" for md in ok.metadata)
    # split: one part per element, each valued [chunk] as ipyparallel's (here [[x]])
    parts = ok.split()
    assert len(parts) == 50 and [a.get() for a in parts[:3]] == [[[v]] for v in ok.get()[:3]]
    assert ok.successful() and ok.progress == 50


def test_chunksize_keeps_its_meaning(rc):
    lv = rc.load_balanced_view()
    ar = lv.map_async(engine_of, range(10), chunksize=4)
    assert len(ar.msg_ids) == 3 and len(ar) == 10  # ceil(10 / 4) tasks, as ipyparallel
    assert [x for x, _ in ar.get(timeout=30)] == list(range(10))
    assert len(ar.engine_id) == 3
    ar = lv.map_async(fail_on, [{5}] * 10, range(10), chunksize=4)
    out = ar.get(timeout=30, return_exceptions=True)
    assert out[:4] == [0, 1, 2, 3] and isinstance(out[4], RemoteError) and out[5:] == [8, 9]


def test_many_maps_and_tasks_interleaved_on_a_busy_cluster(rc):
    lv = rc.load_balanced_view()
    maps = [lv.map_async(abs, range(-n, 0)) for n in (1, 5, 300, 4000, 2)]
    tasks = [lv.apply_async(abs, -i) for i in range(20)]
    assert [m.get(timeout=60) for m in maps] == [
        list(range(n, 0, -1)) for n in (1, 5, 300, 4000, 2)
    ]
    assert [t.get(timeout=60) for t in tasks] == list(range(20))
    # a task after a map of elements waits for all its elements (its requests' ids)
    slow = lv.map_async(engine_of, range(3000))
    with lv.temp_flags(after=slow):
        dependent = lv.apply_async(abs, -1)
    assert dependent.get(timeout=60) == 1 and slow.ready()


def fail_first_time(marker, x):
    """x, except element 3 raises the first time it runs (anywhere)."""
    if x == 3 and not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("element 3 fails once")
    return x


def test_retries_per_element(rc, tmp_path):
    lv = rc.load_balanced_view()
    marker = str(tmp_path / "failed-once")
    with lv.temp_flags(retries=1):
        ar = lv.map_async(fail_first_time, [marker] * 20, range(20))
    assert ar.get(timeout=60) == list(range(20)) and os.path.exists(marker)
    assert ar.successful() and ar.progress == 20
    # without retries the element's failure stands, the others are delivered
    os.remove(marker)
    out = lv.map_async(fail_first_time, [marker] * 20, range(20)).get(
        timeout=60, return_exceptions=True
    )
    assert (
        isinstance(out[3], RemoteError) and out[:3] == [0, 1, 2] and out[4:] == list(range(4, 20))
    )


def test_element_ids_name_their_request_for_wait_and_abort(rc, tmp_path):
    lv = rc.load_balanced_view(targets=[0])
    gate = Gate(tmp_path / "gate")
    try:
        ar = lv.map_async(blocked_if, [gate.path] * 6, [1] * 6, range(6))
        wait_for_files(gate.path + ".started")
        assert not rc.wait(ar.msg_ids[2:], timeout=0.2)  # element ids: their request
        rc.abort(ar.msg_ids[4], block=False)  # that element alone (tests/e2e/test_element_abort.py)
        assert rc.wait(ar.msg_ids[4], timeout=SAFETY) and not gate.forced
    finally:
        gate.close()
    out = ar.get(timeout=60, return_exceptions=True)
    assert out[:4] == [0, 1, 2, 3] and out[5] == 5 and isinstance(out[4], TaskAborted), out
    assert rc.wait(ar.msg_ids, timeout=30)
