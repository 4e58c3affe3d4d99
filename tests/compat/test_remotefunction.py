"""ipyparallel/client/remotefunction.py: remote, parallel, RemoteFunction, ParallelFunction."""

from __future__ import annotations

import os

import numpy as np
import pytest

import zpar as ipp


def test_remote_decorator_function_and_method(rc):
    dv = rc[:]

    @ipp.remote(dv, block=True)
    def pid():
        import os

        return os.getpid()

    assert isinstance(pid, ipp.RemoteFunction) and pid.__name__ == "pid"
    assert sorted(pid()) == sorted(dv.apply_sync(os.getpid))

    @dv.remote(block=False)
    def later(x):
        return x * 2

    assert later(4).get(timeout=30) == [8, 8]


def test_parallel_decorator_splits_and_joins(rc):
    dv = rc[:]

    @ipp.parallel(dv, block=True)
    def double(xs):
        return [2 * x for x in xs]

    assert isinstance(double, ipp.ParallelFunction)
    assert double(range(7)) == [2 * x for x in range(7)]
    with pytest.raises(ValueError, match="equal length"):
        double([1, 2], [1])


def test_parallel_map_is_elementwise(rc):
    dv = rc[:]

    @dv.parallel(block=True)
    def inc(x):
        return x + 1

    assert inc.map(range(5)) == [1, 2, 3, 4, 5]
    assert inc.map(x for x in range(3)) == [1, 2, 3]


@pytest.mark.cluster  # engines told apart by their pids: one process each
def test_parallel_round_robin_and_numpy(rc):
    dv = rc[:]

    @dv.parallel("r", block=True)
    def where(xs):
        import os

        return [(x, os.getpid()) for x in xs]

    out = where(list(range(6)))
    assert [x for x, _ in out] == list(range(6))
    pids = {x: p for x, p in out}
    assert pids[0] == pids[2] == pids[4] != pids[1]

    @dv.parallel(block=True)
    def square(a):
        return a**2

    a = np.arange(10.0)
    np.testing.assert_array_equal(square(a), a**2)


def test_parallel_on_a_load_balanced_view_with_chunksize(rc):
    lv = rc.load_balanced_view()

    @lv.parallel(block=True, chunksize=5)
    def total(xs):
        return [sum(xs)]

    assert total(list(range(10))) == [10, 35]


def test_remote_function_flags(rc):
    dv = rc[:]

    @ipp.remote(dv, block=True, targets=[1])
    def pid():
        import os

        return os.getpid()

    assert pid() == [rc[1].apply_sync(os.getpid)]
    assert dv.targets == "all" or dv.targets == [0, 1]


def test_remote_function_keeps_name_doc_and_keywords(rc):
    @ipp.remote(rc[-1], block=True)
    def foo(x, y=5):
        """multiply x * y"""
        return x * y

    assert foo.__name__ == "foo"
    assert "RemoteFunction" in foo.__doc__ and "multiply x" in foo.__doc__
    assert (foo(5), foo(2, 3), foo(x=5, y=2)) == (25, 6, 10)


def test_parallel_function_joins_list_results_and_maps_with_defaults(rc):
    @ipp.parallel(rc[:2], block=True)
    def twice(x):
        """repeat x"""
        return x * 2

    assert "ParallelFunction" in twice.__doc__
    assert twice([1, 2, 3, 4]) == [1, 2, 1, 2, 3, 4, 3, 4]

    @ipp.parallel(rc.load_balanced_view(), block=True)
    def mul(x, y=5):
        return x * y

    assert mul.map([1, 2, 3]) == [5, 10, 15]
    assert mul.map([1, 2, 3], [1, 2, 3]) == [1, 4, 9]
