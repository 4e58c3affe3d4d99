"""ipyparallel/client/view.py: DirectView, LoadBalancedView, BroadcastView, ViewExecutor,
LazyMapIterator, written as ipyparallel users write them."""

from __future__ import annotations

import concurrent.futures
import itertools
import os

import numpy as np
import pytest

import zpar as ipp
from zpar.client.view import LazyMapIterator


def test_len_of_views(rc):
    assert len(rc[:]) == 2 and len(rc[-1]) == 1 and len(rc[[0, 1]]) == 2
    assert len(rc.direct_view()) == 2 and len(rc.load_balanced_view()) == 2


def test_views_default_to_the_clients_block(rc):
    assert rc.block is False and rc[:].block is False
    assert rc.direct_view(block=True).block is True
    assert rc.load_balanced_view(block=True).apply(lambda: 1) == 1


def test_apply_single_and_multi(rc):
    dv = rc[:]
    assert dv.apply_sync(lambda x: x + 1, 1) == [2, 2]
    assert rc[-1].apply_sync(lambda: 5) == 5
    ar = dv.apply_async(lambda: 3)
    assert isinstance(ar, ipp.AsyncResult) and ar.get(timeout=30) == [3, 3]


def test_set_flags_returns_the_view_and_temp_flags_restore(rc):
    dv = rc[:]
    assert dv.set_flags(block=True) is dv and dv.block
    with dv.temp_flags(block=False):
        assert not dv.block
    assert dv.block
    with pytest.raises(KeyError):
        dv.set_flags(bogus=1)


def test_push_pull_get_update_and_item_access(rc):
    dv = rc[:]
    dv.push({"a": 1, "b": 2}, block=True)
    assert dv.pull("a", block=True) == [1, 1]
    assert dv.pull(["a", "b"], block=True) == [[1, 2], [1, 2]]
    assert dv.get("b") == [2, 2]
    dv["c"] = 3
    assert dv["c"] == [3, 3]
    dv.block = True
    dv.update({"d": 4})
    assert rc[0].get("d") == 4
    rc[1].push({"a": 10}, block=True)
    assert dv.pull("a", targets=1, block=True) == 10
    with pytest.raises(TypeError, match="keys must be str"):
        dv.pull(["a", 1])
    with pytest.raises(TypeError, match="Must be a dict"):
        dv.push([("a", 1)])


def test_execute_and_run(rc, tmp_path):
    dv = rc[:]
    ar = dv.execute("x = 6 * 7", block=False)
    ar.get(timeout=30)
    assert dv.pull("x", block=True) == [42, 42]
    script = tmp_path / "script.py"
    script.write_text("y = x + 1\n")
    dv.run(str(script), block=True)
    assert dv["y"] == [43, 43]
    dv.execute("z = 1", targets=0, block=True)
    assert rc[0]["z"] == 1


def test_scatter_gather_blocks_round_robin_and_flatten(rc):
    dv = rc[:]
    assert dv.scatter("xs", list(range(5)), block=True) is None  # as ipyparallel
    assert dv["xs"] == [[0, 1, 2], [3, 4]]
    assert dv.gather("xs", block=True) == [0, 1, 2, 3, 4]
    dv.scatter("rr", list(range(5)), dist="r", block=True)
    assert dv["rr"] == [[0, 2, 4], [1, 3]]
    assert dv.gather("rr", dist="r", block=True) == [0, 1, 2, 3, 4]
    dv.scatter("rank", [0, 1], flatten=True, block=True)
    assert dv["rank"] == [0, 1]  # one element each: pushed as the element itself
    a = np.arange(10.0)
    dv.scatter("a", a, block=True)
    np.testing.assert_array_equal(dv.gather("a", block=True), a)
    dv.scatter("g", (i * i for i in range(4)), block=True)  # an iterable without len
    assert dv.gather("g", block=True) == [0, 1, 4, 9]
    ar = dv.scatter("later", [1, 2])
    ar.get(timeout=30)
    with pytest.raises(ValueError, match="dist"):
        dv.scatter("bad", [1], dist="x")


def test_map_follows_the_builtin_map(rc):
    for view in (rc[:], rc.load_balanced_view()):
        assert view.map_sync(lambda x: x * 2, (i for i in range(5))) == [0, 2, 4, 6, 8]
        assert view.map_sync(lambda x, y: (x, y), [1, 2, 3], "ab") == [(1, "a"), (2, "b")]
        assert view.map_sync(lambda x: x, []) == []
        assert view.map_sync(lambda x: x, {3}) == [3]
        assert view.map(lambda x: -x, range(3), block=True) == [0, -1, -2]


def test_map_return_exceptions(rc):
    def inv(x):
        return 1 / x

    # as ipyparallel: a chunk that raised stands as one exception in the results
    out = rc[:].map_sync(inv, [1, 0, 2], return_exceptions=True)  # chunks [1, 0], [2]
    assert isinstance(out[0], ipp.RemoteError) and out[1:] == [0.5]
    lv = rc.load_balanced_view()
    out = lv.map_sync(inv, [1, 0, 2], chunksize=1, return_exceptions=True)
    assert out[0] == 1.0 and isinstance(out[1], ipp.RemoteError) and out[2] == 0.5
    for view in (rc[:], lv):
        with pytest.raises(ipp.RemoteError):
            view.map_sync(inv, [1, 0, 2])


def test_lb_map_chunksize_ordered_and_len(rc):
    lv = rc.load_balanced_view()
    amr = lv.map(lambda x: x + 1, range(10), chunksize=3, block=False)
    assert isinstance(amr, ipp.AsyncMapResult) and len(amr) == 10
    assert amr.get(timeout=30) == list(range(1, 11))
    unordered = lv.map_async(lambda x: x, range(6), chunksize=1, ordered=False)
    assert sorted(unordered) == list(range(6))


def test_imap_over_an_infinite_generator(rc):
    lv = rc.load_balanced_view()
    it = lv.imap(lambda x: x * x, itertools.count())
    assert isinstance(it, LazyMapIterator)
    assert [next(it) for _ in range(5)] == [0, 1, 4, 9, 16]
    it.cancel()
    rest = list(it)  # those already sent, then it stops
    # at most one call per engine in flight, and one the consumer thread was sending
    # when cancel() came (it sends as results return, not as the caller iterates)
    assert len(rest) <= len(lv) + 1


def test_imap_unordered_and_return_exceptions(rc):
    lv = rc.load_balanced_view()

    def inv(x):
        return 1 / x

    out = list(lv.imap(inv, [1, 0, 4], ordered=False, return_exceptions=True))
    assert sorted(v for v in out if not isinstance(v, Exception)) == [0.25, 1.0]
    assert sum(isinstance(v, ipp.RemoteError) for v in out) == 1
    assert list(lv.imap(abs, [-1, -2], max_outstanding=1)) == [1, 2]


def test_executor_attribute_and_call(rc):
    lv = rc.load_balanced_view()
    ex = lv.executor
    assert isinstance(ex, concurrent.futures.Executor) and ex is lv.executor
    assert lv.executor() is ex  # callable too
    fut = ex.submit(lambda x: x + 1, 1)
    assert fut.result(timeout=30) == 2
    assert list(ex.map(abs, [-1, -2, -3])) == [1, 2, 3]
    with rc.executor() as e2:
        assert e2.submit(os.getpid).result(timeout=30) in rc[:].apply_sync(os.getpid)


def test_direct_view_executor_map_splits_the_work_over_the_engines(rc):
    # ipyparallel: ViewExecutor.map is view.imap, and a DirectView's imap is
    # iter(map_async(...)): one result per item, not one per engine
    dv = rc[:]
    assert list(dv.imap(lambda x: x * x, range(4))) == [0, 1, 4, 9]
    assert list(dv.executor().map(lambda x: x * x, range(4))) == [0, 1, 4, 9]
    assert list(dv.executor().map(lambda x: x + 1, range(3), timeout=30)) == [1, 2, 3]


def test_broadcast_view_flags(rc):
    bv = rc.broadcast_view(block=True, is_coalescing=True)
    assert bv.block and bv.is_coalescing
    assert bv.apply(lambda: 7) == [7, 7]
    bv.execute("q = 9")
    assert rc[:]["q"] == [9, 9]


def test_view_wrappers_of_client_methods(rc):
    dv = rc[:]
    dv.block = True
    ar = dv.apply_async(lambda: 1)
    assert dv.wait([ar], timeout=30)
    status = dv.queue_status()
    assert set(status) >= {0, 1, "unassigned"}
    assert set(rc[0].queue_status()) >= {"queue", "completed", "tasks"}  # one engine alone
    assert dv.get_result(ar).get() == [1, 1]
    dv.spin()  # nothing to do: I/O runs in a thread
    dv.clear()
    with pytest.raises(ipp.RemoteError, match="NameError"):
        rc[0].apply_sync(lambda: undefined_after_clear)  # noqa: F821


def test_lb_flags_through_set_flags(rc):
    lv = rc.load_balanced_view()
    lv.set_flags(retries=1, timeout=0, targets=[1])  # timeout 0: none, as ipyparallel
    assert lv.timeout is None and lv.retries == 1
    assert lv.apply_sync(os.getpid) == rc[1].apply_sync(os.getpid)
    with pytest.raises(ValueError, match="retries"):
        lv.set_flags(retries=-1)


def test_retries_beyond_the_engines_end_with_the_error_not_a_hang(rc):
    # ipython/ipython#7368: with more retries than engines the task waited forever
    def bad():
        raise ValueError("always")

    lv = rc.load_balanced_view(retries=5)
    ar = lv.apply_async(bad)
    with pytest.raises(ipp.RemoteError, match="always"):
        ar.get(timeout=60)


def test_references_as_functions_and_nested_attributes(rc):
    dv = rc[:]
    dv.scatter("n", rc.ids, flatten=True, block=True)
    dv.execute("f = lambda x, y: x * y", block=True)
    f = ipp.Reference("f")
    assert dv.map_sync(f, [1, 2, 3, 4], [4, 3, 2, 1]) == [4, 6, 6, 4]
    dv.execute("g = lambda x: n * x", block=True)
    assert dv.apply_sync(ipp.Reference("g"), 10) == [0, 10]
    rc[-1].execute("class A: pass\na = A()\na.b = 128", block=True)
    assert rc[-1].apply_sync(lambda x: x.b, ipp.Reference("a")) == 128


def test_an_engine_that_is_gone_is_an_index_error(rc):
    with pytest.raises(IndexError):
        rc[7]
    with pytest.raises(ipp.EngineError):  # zpar's own error, too
        rc[7]


def test_pushed_interactive_functions_see_the_engine_namespace(rc):
    @ipp.interactive
    def geta():
        return a  # noqa: F821 - defined on the engine later

    v = rc[-1]
    v.block = True
    v["f"] = geta
    with pytest.raises(ipp.RemoteError, match="NameError"):
        v.execute("b = f()")
    v.execute("a = 5")
    v.execute("b = f()")
    assert v["b"] == 5


def test_importer_and_sync_imports(rc):
    v = rc[-1]
    with v.importer:
        import json  # noqa: F401

    @ipp.interactive
    def dumps(x):
        return globals()["json"].dumps(x)  # the engine's json, imported by the importer

    assert v.apply_sync(dumps, [1]) == "[1]"


def test_bad_sequences_are_refused_with_a_clear_error(rc):
    with pytest.raises(TypeError, match="sequence or an iterable"):
        rc[:].scatter("x", 5)
    with pytest.raises(TypeError, match="sequence or an iterable"):
        rc[:].map_sync(abs, 5)
    with pytest.raises(TypeError, match="sequence or an iterable"):
        rc.load_balanced_view().map_async(abs, None)


# -- issue 24: behaviours pinned from ipyparallel 9.2.0's own tests and code ------------


def test_view_history_lists_what_the_view_sent(rc):
    """ipyparallel's View.history (save_ids): each view keeps the msg_ids it sent; the
    client's history has every view's."""
    dv, lv = rc[:], rc.load_balanced_view()
    ar = dv.apply_async(lambda: 1)
    lar = lv.apply_async(lambda: 2)
    dv.execute("x = 1", block=True)
    dv.push({"y": 2}, block=True)
    mar = lv.map_async(lambda x: x, range(3))
    assert list(dv.history[:2]) == ar.msg_ids
    assert len(dv.history) == 2 + 2 + 2  # apply, execute, push: one per engine each
    # a default map is one task per element (ipyparallel: one apply each): its elements'
    # msg_ids, in order, in both histories
    assert list(lv.history) == [lar.msg_id, *mar.msg_ids] and len(mar.msg_ids) == 3
    assert rc.history[-3:] == mar.msg_ids
    assert set(dv.history) | set(lv.history) <= set(rc.history)
    assert lv.wait(timeout=30) and not lv.outstanding and lv.results == rc.results
    assert mar.get() == [0, 1, 2]


def test_map_elements_from_the_history(rc):
    """ipyparallel's histories hold a default map's tasks: each index of rc.history names
    one element, which wait(), get_result() and the view's outstanding take as such."""
    lv = rc.load_balanced_view()
    ar = lv.map_async(lambda x: x * 10, range(5))
    assert rc.history[-5:] == ar.msg_ids
    assert set(lv.outstanding) <= set(ar.msg_ids)
    assert rc.wait([rc.history[-1], -2], timeout=30)
    ar.get(timeout=30)
    # each element's task answers a list of one (ipyparallel's chunk of one)
    assert rc.get_result(rc.history[-2]).get(timeout=30) == [30]
    assert rc.get_result(-1).get(timeout=30) == [40]
    assert not lv.outstanding
    chunked = lv.map_async(lambda x: x, range(4), chunksize=2)  # chunks: one task each
    assert list(lv.history)[-2:] == chunked.msg_ids and len(chunked.msg_ids) == 2
    chunked.get(timeout=30)


def test_imap_submits_before_iteration_and_refills_as_results_arrive(rc):
    """ipyparallel 9's LoadBalancedView.imap: max_outstanding calls start at once, and one
    more each time one finishes, whether or not the caller iterates."""
    lv = rc.load_balanced_view()
    gen = lv.imap(lambda x: x, itertools.count(), max_outstanding=3)
    assert len(lv.history) >= 3  # sent before imap returns, before any iteration
    first = [next(gen) for _ in range(5)]
    gen.cancel()
    assert first == [0, 1, 2, 3, 4]
    rc.wait(timeout=30)
    # refills follow answers, not iteration (ipyparallel's consume_callback), so how many
    # went out before cancel depends on speed; after cancel and the last answers, none more
    sent = len(lv.history)
    assert sent >= 5
    rc.wait(timeout=30)
    assert len(lv.history) == sent


def test_executor_shutdown_waits_for_its_maps(rc):
    """ipyparallel's test_executor_context: leaving ``with executor`` waits until every
    map submitted all its calls, and for the calls."""
    view = rc.load_balanced_view()
    with view.executor as ex:
        ex.submit(lambda: 1)
        m = ex.map(lambda x: x, range(10))
    assert len(view.history) == 11 and not view.outstanding
    assert list(m) == list(range(10))


def test_nested_getitem_and_setitem(rc):
    """ipyparallel's test_nested_getitem_setitem: keys that are not plain names are
    evaluated (get) or assigned (set) on the engine."""
    view = rc[-1]
    view.execute("class A: pass\na = A()\na.b = 128", block=True)
    assert view["a.b"] == 128
    view["a.b"] = 0
    assert view.apply_sync(lambda x: x.b, ipp.Reference("a")) == 0 and view["a.b"] == 0
    view["d"] = {}
    view["d['k']"] = 5
    assert view["d"] == {"k": 5} and view["d['k'] + 1"] == 6


def test_sync_imports_prints_what_it_imports(rc, capsys):
    view = rc[-1]
    with view.sync_imports():
        import json  # noqa: F401
        from os import path  # noqa: F401
    out = capsys.readouterr().out
    assert "importing json on engine(s)" in out and "importing path from os on engine(s)" in out
    assert view.apply_sync(ipp.interactive(lambda: "json" in globals() and "path" in globals()))
    with view.sync_imports(quiet=True):
        import csv  # noqa: F401
    assert capsys.readouterr().out == ""


def test_use_cloudpickle_and_use_pickle_decide_whose_globals_win(rc):
    """ipyparallel's test_use_cloudpickle: after view.use_cloudpickle() a function from
    __main__ sees the client's values; after view.use_pickle(), the engine's only."""
    import sys

    import zpar.serialize

    main = sys.modules["__main__"]
    view = rc[:]
    view["_a"] = "engine"

    @ipp.interactive
    def get_a():
        return _a  # noqa: F821

    try:
        assert view.apply_sync(get_a) == ["engine", "engine"]  # zpar's default: the engine's
        view.use_cloudpickle()
        main._a = "client"
        assert view.apply_sync(get_a) == ["client", "client"]
        view.execute("del _a", block=True)
        assert view.apply_sync(get_a) == ["client", "client"]
        view.use_pickle()
        with pytest.raises(ipp.RemoteError, match="NameError"):
            view.apply_sync(get_a)
    finally:
        del main._a
        zpar.serialize.use_default()
        view.apply_sync(zpar.serialize.use_default)


def test_a_blocking_call_waits_behind_earlier_requests_to_its_engine(rc):
    """ipyparallel's test_px_nonblocking: a non-blocking execute then a pull of the same
    engine see the execute done (the fast same-host path must not overtake it)."""
    v = rc[-1:]
    for i in range(20):
        v.execute(f"a = {i}", block=False)
        assert v.pull("a", block=True) == [i]


def test_broadcast_map_goes_after_earlier_broadcasts(rc):
    """ipyparallel's test_map_reference on a BroadcastView: a function defined by a
    non-blocking broadcast execute is there when the map (sent another way) runs."""
    bv = rc.broadcast_view()
    for i in range(5):
        bv.execute(f"f{i} = lambda x, y: x * y + {i}")
        assert bv.map_sync(ipp.Reference(f"f{i}"), [1, 2], [3, 4]) == [3 + i, 8 + i]


def test_broadcast_view_runs_its_requests_in_the_order_sent(rc):
    """ipyparallel's test_apply_reference on a (coalescing) BroadcastView: a scatter, an
    execute, an apply and a map sent without waiting run in that order on every engine
    (each request of the view takes the task scheduler's path; a scatter's parts went
    through the MUX relay and an engine could run the apply before them)."""
    bv = rc.broadcast_view(is_coalescing=True)
    for i in range(10):
        bv.scatter("n", [10 * i + e for e in rc.ids], flatten=True)
        bv.execute("f = lambda x: n * x")
        assert bv.apply_sync(ipp.Reference("f"), 5) == [5 * (10 * i + e) for e in rc.ids]
        bv.scatter("part", list(range(4)))
        assert bv.map_sync(ipp.Reference("f"), [1, 1]) == [10 * i + e for e in rc.ids]
        assert bv.gather("part", block=True) == [0, 1, 2, 3]


def test_broadcast_view_sends_every_request_through_the_task_scheduler(rc, monkeypatch):
    """The channel of each request a BroadcastView makes, a different payload per engine
    (scatter, gather, map, a one-engine blocking call) included: the task scheduler's."""
    sender = rc.sender
    channels = []
    send, apply = sender.send, sender.apply

    def recording_send(channel, *args, **kwargs):
        channels.append((channel, kwargs.get("broadcast")))
        return send(channel, *args, **kwargs)

    def recording_apply(channel, *args, **kwargs):
        channels.append((channel, None))
        return apply(channel, *args, **kwargs)

    monkeypatch.setattr(sender, "send", recording_send)
    monkeypatch.setattr(sender, "apply", recording_apply)
    monkeypatch.setattr(sender, "call_here", lambda *a, **kw: channels.append(("here", None)))
    a, b = rc.ids[:2]
    bv = rc.broadcast_view([a, b], block=True)
    bv.scatter("x", [1, 2])
    assert bv.gather("x") == [1, 2]
    assert bv.map(abs, [-1, -2]) == [1, 2]
    bv.execute("y = 1")
    assert bv.apply(abs, -1) == [1, 1]
    assert rc.broadcast_view(b).apply_sync(abs, -1) == [1]  # a list of one, as ipyparallel
    assert channels == [("task", [a]), ("task", [b])] * 3 + [("task", [a, b])] * 2 + [("task", [b])]
