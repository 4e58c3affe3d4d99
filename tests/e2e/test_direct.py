"""DirectView on two real engines: apply, map, push/pull, scatter/gather, execute."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import zpar


def test_apply_sync_on_all_engines(rc):
    assert rc.ids == [0, 1]
    assert rc[:].apply_sync(np.sum, np.arange(10)) == [45, 45]


def test_apply_single_engine_returns_value_and_metadata(rc):
    ar = rc[1].apply_async(lambda x: x * 2, 21)
    assert ar.get(timeout=10) == 42
    assert ar.engine_id == 1
    md = ar.metadata
    assert md["submitted"] <= md["started"] <= md["completed"]
    assert md["engine_id"] == 1 and md["stdout"] == "" and md["stderr"] == ""


def test_views_by_index_slice_step_and_list(rc):
    import os

    pids = rc[:].apply_sync(os.getpid)
    assert rc[::2].apply_sync(os.getpid) == [pids[0]]
    assert rc[1:].apply_sync(os.getpid) == [pids[1]]
    assert rc[[1, 0]].apply_sync(os.getpid) == [pids[1], pids[0]]
    assert rc[0].apply_sync(os.getpid) == pids[0]
    dv = rc[:]
    dv.block = True
    assert dv.apply(lambda: 3) == [3, 3]
    dv.block = False
    assert dv.apply(lambda: 3).get(timeout=10) == [3, 3]


def test_interactive_function_sees_pushed_names(rc):
    dv = rc[:]
    dv.push({"a": 5}, block=True)

    def use_a(x):
        return a + x  # noqa: F821 - defined on the engines by push

    assert dv.apply_sync(use_a, 1) == [6, 6]
    assert dv.pull("a", block=True) == [5, 5]
    dv["b"] = [1, 2]
    assert dv["b"] == [[1, 2], [1, 2]]
    assert dv.pull(["a", "b"], block=True) == [[5, [1, 2]], [5, [1, 2]]]


def test_pull_missing_name_raises_remote_error(rc):
    with pytest.raises(zpar.RemoteError) as info:
        rc[0].pull("nope", block=True)
    assert "nope" in str(info.value)


def test_direct_map_in_order(rc):
    assert rc[:].map_sync(lambda x, y: x + y, range(7), range(7)) == [2 * i for i in range(7)]


def test_map_unequal_lengths_stops_at_the_shortest_as_builtin_map(rc):
    # ipyparallel 9.2 follows the builtin map here (issue 14)
    assert rc[:].map_sync(lambda x, y: x + y, [1, 2, 3], [10, 20]) == [11, 22]


def test_scatter_gather_numpy(rc):
    dv = rc[:]
    x = np.arange(1_000_001, dtype=np.float64)
    dv.scatter("x", x, block=True)
    sizes = [len(part) for part in dv.pull("x", block=True)]
    assert sizes == [500_001, 500_000]
    back = dv.gather("x", block=True)
    np.testing.assert_array_equal(back, x)


def test_scatter_gather_list(rc):
    dv = rc[:]
    dv.scatter("seq", list(range(5)), block=True)
    assert dv.gather("seq", block=True) == [0, 1, 2, 3, 4]


def test_execute_defines_names(rc):
    dv = rc[:]
    dv.execute("import math\nz = math.sqrt(16)", block=True)
    assert dv["z"] == [4.0, 4.0]


def test_remote_exception_carries_traceback(rc):
    def failing():
        raise KeyError("missing-thing")

    with pytest.raises(zpar.RemoteError) as info:
        rc[0].apply_sync(failing)
    err = info.value
    assert err.ename == "KeyError"
    assert "missing-thing" in err.evalue
    assert "failing" in err.traceback
    assert err.engine_id == 0


def test_exceptions_on_two_engines_make_a_composite_error(rc):
    with pytest.raises(zpar.CompositeError) as info:
        rc[:].apply_sync(lambda: 1 / 0)
    assert len(info.value.errors) == 2
    with pytest.raises(zpar.RemoteError, match="ZeroDivisionError"):
        info.value.raise_exception(1)


def test_stdout_is_on_the_result(rc):
    def talk():
        print("hello from the engine")
        import sys

        print("to stderr", file=sys.stderr)
        return 1

    ar = rc[0].apply_async(talk)
    assert ar.get(timeout=10) == 1
    assert "hello from the engine" in ar.stdout
    assert "to stderr" in ar.stderr


def test_unserializable_argument_fails_before_sending(rc):
    import threading

    before = len(rc.history)
    with pytest.raises(zpar.SerializationError, match="argument 0"):
        rc[0].apply_sync(print, threading.Lock())
    assert len(rc.history) == before


def test_unknown_target_is_a_clear_error(rc):
    with pytest.raises(zpar.EngineError, match="not registered"):
        rc[7]


def test_awaitable_in_asyncio(rc):
    async def main():
        return await rc[:].apply_async(lambda: 3)

    assert asyncio.run(main()) == [3, 3]


def test_engines_on_this_host_are_reached_directly_and_the_hub_still_knows(rc):
    import time

    uuid0 = rc._io.engines[0]
    ar = rc[0].apply_async(lambda: 7)
    assert ar.get(timeout=10) == 7
    assert rc._io.private_address(uuid0) is not None, "no direct route to a local engine"
    assert rc._io.has_channel(f"direct:{uuid0}"), "no direct socket to a local engine"
    deadline = time.monotonic() + 10
    while True:  # the hub hears of it from the engine's monitor copy, a moment later
        try:
            if rc.result_status(ar)["completed"] == ar.msg_ids:
                break
        except RuntimeError:  # not heard of yet
            pass
        assert time.monotonic() < deadline, "the hub did not hear of the direct call"
        time.sleep(0.02)
    assert rc.get_result(ar.msg_ids[0]).get(timeout=5) == 7
