"""Maps on two real engines (client.mapping): each shape of input the builtin map takes,
the default chunking, errors naming the element that raised, progress, iteration while
running and abort, as ipyparallel's users expect them (its LoadBalancedView.map: ordered
results, an AsyncMapResult iterable before it is done, a failed chunk standing as one
exception with return_exceptions, CompositeError otherwise)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import zpar
from tests.e2e.conftest import wait_for_files
from zpar.client.mapping import auto_chunks
from zpar.errors import CompositeError, RemoteError, TaskAborted


def pair(x, y):
    return (x, y)


def triple(x, y, z):
    return x + y + z


def inverse(x):
    return 1 / x


def wait_for(path, x):
    """x, once ``path`` exists (so a test decides when this element finishes)."""
    while not os.path.exists(path):
        time.sleep(0.01)
    return x


def mark_then_sleep(path, seconds):
    open(path, "w").close()
    time.sleep(seconds)
    return path


def views(rc):
    """Every map path: load balanced by default chunking and by chunks of 3, direct."""
    lv = rc.load_balanced_view()
    return [
        ("lb default", lambda f, *s, **kw: lv.map_async(f, *s, **kw)),
        ("lb chunksize=3", lambda f, *s, **kw: lv.map_async(f, *s, chunksize=3, **kw)),
        ("direct", lambda f, *s, **kw: rc[:].map_async(f, *s, **kw)),
    ]


def test_several_sequences_zip_as_the_builtin_map(rc):
    xs, ys, zs = range(50), [i * 10 for i in range(50)], tuple(range(100, 150))
    for name, m in views(rc):
        ar = m(triple, xs, ys, zs)
        assert ar.get(timeout=30) == list(map(triple, xs, ys, zs)), name
        assert len(ar) == 50, name


def test_uneven_lengths_stop_at_the_shortest(rc):
    for name, m in views(rc):
        assert m(pair, range(10), "abcd").get(timeout=30) == list(map(pair, range(10), "abcd"))
        assert m(pair, "abcd", range(10)).get(timeout=30) == list(map(pair, "abcd", range(10))), (
            name
        )


def test_iterators_without_len_are_read_first(rc):
    for name, m in views(rc):
        assert m(abs, (i - 5 for i in range(10))).get(timeout=30) == [5, 4, 3, 2, 1, 0, 1, 2, 3, 4]
        assert m(abs, iter([-1, -2])).get(timeout=30) == [1, 2], name
        assert m(pair, map(abs, [-3, 3]), {"k": 1}.keys()).get(timeout=30) == [(3, "k")], name


def test_dicts_and_sets_map_over_their_elements(rc):
    d = {"a": 1, "bb": 2, "ccc": 3}
    for name, m in views(rc):
        assert m(len, d).get(timeout=30) == list(map(len, d)), name
        assert m(pair, d, d.values()).get(timeout=30) == list(map(pair, d, d.values())), name
        assert sorted(m(abs, {-1, -2}).get(timeout=30)) == [1, 2], name


def test_numpy_arrays(rc):
    a = np.linspace(-1, 1, 5000)
    rows = np.arange(12.0).reshape(4, 3)
    for name, m in views(rc):
        out = m(abs, a).get(timeout=30)
        assert len(out) == len(a) and np.array_equal(np.array(out), np.abs(a)), name
        assert type(out) is list and all(type(x) is np.float64 for x in out), name
        assert m(np.sum, rows).get(timeout=30) == [3.0, 12.0, 21.0, 30.0], name
        assert m(pair, a[:3], rows).get(timeout=30)[2][0] == a[2], name


def test_empty_sequences(rc):
    for name, m in views(rc):
        ar = m(abs, [])
        assert ar.get(timeout=30) == [] and len(ar) == 0, name
        assert m(pair, range(5), []).get(timeout=30) == [], name
        assert list(m(abs, ())) == [], name


def test_default_chunking_of_a_load_balanced_map(rc):
    lv = rc.load_balanced_view()
    for n in (1, 2, 999, 2000, 10_001, 50_000):
        ar = lv.map_async(abs, range(-n, 0))
        # one task per element for the user (ipyparallel's chunksize=1), few requests
        assert len(ar.msg_ids) == n and len(ar.request_ids) == auto_chunks(n, len(rc.ids)), n
        assert ar.get(timeout=60) == list(range(n, 0, -1))
        assert len(ar) == n and ar.progress == n
    # chunksize=1 is ipyparallel's default: one task per element
    assert len(lv.map_async(abs, range(7), chunksize=1).msg_ids) == 7
    # a view restricted to some engines chunks for those
    ar = rc.load_balanced_view(targets=[1]).map_async(abs, range(-2000, 0))
    assert len(ar.request_ids) == auto_chunks(2000, 1) == 1
    assert ar.get(timeout=30) == list(range(2000, 0, -1)) and ar.engine_id == [1] * 2000


def test_failing_element_fails_alone_by_default(rc):
    # ipyparallel's default (chunksize=1): one failed element, the others delivered
    lv = rc.load_balanced_view()
    values = [1.0] * 2000
    values[1234] = 0
    ar = lv.map_async(inverse, values)
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=30)
    (err,) = info.value.errors
    assert isinstance(err, RemoteError) and err.ename == "ZeroDivisionError"
    out = ar.get(timeout=30, return_exceptions=True)
    assert len(out) == 2000 and out[:1234] == [1.0] * 1234 and out[1235:] == [1.0] * 765
    assert isinstance(out[1234], RemoteError) and ar.metadata[1234]["status"] == "error"
    assert ar.metadata[1233]["status"] == "ok"


def test_failing_element_is_named_and_its_chunk_fails_whole(rc):
    lv = rc.load_balanced_view()
    values = [1.0] * 2000
    values[1234] = 0
    ar = lv.map_async(inverse, values, chunksize=1000)  # chunks fail whole, as ipyparallel's
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=30)
    (err,) = info.value.errors
    assert isinstance(err, RemoteError) and err.ename == "ZeroDivisionError"
    assert "element 1234 of the map" in err.traceback
    # as ipyparallel: with return_exceptions, the failed chunk stands as one exception
    out = ar.get(timeout=30, return_exceptions=True)
    assert len(out) == 1000 + 1 and out[:1000] == [1.0] * 1000
    assert isinstance(out[1000], RemoteError) and out[1000].traceback == err.traceback
    out = lv.map_sync(inverse, [1, 0, 2], chunksize=1, return_exceptions=True)
    assert out[0] == 1.0 and isinstance(out[1], RemoteError) and out[2] == 0.5
    with pytest.raises(RemoteError, match="ZeroDivisionError"):
        rc[:].map_sync(inverse, [1, 0, 2])


def test_iteration_and_progress_while_running(rc, tmp_path):
    lv = rc.load_balanced_view()
    gate = str(tmp_path / "gate")
    started = str(tmp_path / "open")
    open(started, "w").close()
    ar = lv.map_async(wait_for, [started] * 2 + [gate] * 4, range(6), chunksize=2)
    try:
        it = iter(ar)
        assert next(it) == 0 and next(it) == 1  # the first chunk, before the others end
        assert not ar.ready() and ar.progress == 2 and len(ar) == 6
    finally:
        open(gate, "w").close()
    assert list(it) == [2, 3, 4, 5] and ar.progress == 6
    unordered = lv.map_async(abs, range(-6, 0), chunksize=1, ordered=False)
    assert sorted(unordered) == [1, 2, 3, 4, 5, 6]


def test_abort_a_map_stops_its_unstarted_chunks(rc, tmp_path):
    lv = rc.load_balanced_view()
    marks = [tmp_path / "a", tmp_path / "b"]
    blockers = [lv.apply_async(mark_then_sleep, str(m), 2) for m in marks]
    wait_for_files(*marks)  # both engines busy: the map's chunks wait
    ar = lv.map_async(abs, range(-8, 0), chunksize=2)
    ar.abort()
    out = ar.get(timeout=30, return_exceptions=True)
    assert len(out) == 4 and all(isinstance(e, TaskAborted) for e in out), out
    assert ar.progress == 8 == len(ar)
    with pytest.raises(CompositeError) as info:
        ar.get(timeout=30)
    assert all(isinstance(e, TaskAborted) for e in info.value.errors)
    rc.wait(blockers)


def plus_offset(x):
    return x + offset  # noqa: F821 - a name of the engines' namespace (pushed)


def test_mapped_function_sees_the_engine_namespace_as_applied_ones_do(rc):
    # ipyparallel uncans a map's function with the engine's namespace as its globals
    rc[:].push({"offset": 100}, block=True)
    assert rc[:].apply_sync(plus_offset, 1) == [101, 101]
    for name, m in views(rc):
        assert m(plus_offset, range(5)).get(timeout=30) == [100, 101, 102, 103, 104], name


def test_map_refuses_bad_arguments_before_sending(rc):
    lv = rc.load_balanced_view()
    for bad in (0, -3, 2.5):
        with pytest.raises(ValueError, match="chunksize"):
            lv.map_async(abs, range(3), chunksize=bad)
    with pytest.raises(zpar.SerializationError, match="not callable"):
        lv.map_async(42, range(3))
    with pytest.raises(TypeError, match="unexpected"):
        lv.map_async(abs, range(3), chunk_size=2)
    sent = len(rc.history)
    with pytest.raises(zpar.SerializationError, match="elements 2..2 of the map"):
        lv.map_async(abs, [1, 2, threading.Lock()], chunksize=2)
    assert len(rc.history) == sent, "a map that could not be packed sent some chunks"
