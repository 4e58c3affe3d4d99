"""ipyparallel/serialize: can/uncan, Reference, PrePickled, use_pickle & co."""

from __future__ import annotations

import pytest

import zpar as ipp
from zpar.serialize.canning import CannedObject


def test_can_uncan_round_trip_and_rebinds_functions_to_globals():
    def f(x):
        return x + offset  # noqa: F821 - found in the globals given to uncan

    canned = ipp.can({"f": f, "xs": [1, (2, 3)]})
    back = ipp.uncan(canned, {"offset": 10})
    assert back["xs"] == [1, (2, 3)]
    assert back["f"](1) == 11


def test_can_map_is_extensible():
    class Point:
        def __init__(self, x):
            self.x = x

    class CannedPoint(CannedObject):
        def __init__(self, p):
            self.x = p.x

        def get_object(self, g=None):
            return Point(self.x * 2)

    ipp.can_map[Point] = CannedPoint
    try:
        assert ipp.uncan(ipp.can(Point(2))).x == 4
    finally:
        del ipp.can_map[Point]


def test_reference_is_resolved_on_the_engine(rc):
    dv = rc[:]
    dv.push({"a": 5}, block=True)
    rc[1].push({"a": 7}, block=True)
    assert dv.apply_sync(lambda x: x * 2, ipp.Reference("a")) == [10, 14]
    assert dv.apply_sync(lambda x: x, ipp.Reference("a + 1")) == [6, 8]
    with pytest.raises(TypeError, match="illegal name"):
        ipp.Reference(3)
    assert repr(ipp.Reference("a")) == "<Reference: 'a'>"


def test_reference_to_a_missing_name_fails_on_the_engine(rc):
    with pytest.raises(ipp.RemoteError, match="NameError"):
        rc[0].apply_sync(lambda x: x, ipp.Reference("not_defined_anywhere"))


def test_prepickled_arguments(rc):
    data = ipp.PrePickled(list(range(5)))
    assert rc[:].apply_sync(sum, data) == [10, 10]


def test_use_pickle_still_sends_closures_by_value(rc):
    dv = rc[:]
    k = 3

    def add_k(x):
        return x + k

    try:
        ipp.use_pickle()
        assert dv.apply_sync(add_k, 1) == [4, 4]
        assert dv.map_sync(lambda x: x * k, range(4)) == [0, 3, 6, 9]
        dv.use_pickle()
        assert dv.apply_sync(lambda: k) == [3, 3]
    finally:
        ipp.serialize.use_default()
        dv.apply_sync(ipp.serialize.use_default)
    assert dv.apply_sync(add_k, 2) == [5, 5]


def test_use_dill_without_dill_says_so(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_dill(name, *args, **kwargs):
        if name == "dill":
            raise ImportError("No module named 'dill'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_dill)
    with pytest.raises(ImportError, match="pip install"):
        ipp.use_dill()


def test_use_dill_here_and_on_the_engines(rc):
    """ipyparallel's DirectView.use_dill(): dill on both sides (zpar[dill], a test
    dependency)."""
    dv = rc[:]
    # functions as a notebook defines them (dill sends __main__'s by value; this test
    # module's would go by reference, and the engines cannot import it)
    ns = {"__name__": "__main__", "k": 4}
    exec("def add_k(x):\n    return x + k\ntimes_k = lambda x: x * k", ns)
    try:
        dv.use_dill()
        assert dv.apply_sync(ns["add_k"], 1) == [5, 5]
        assert dv.map_sync(ns["times_k"], range(3)) == [0, 4, 8]
    finally:
        ipp.serialize.use_default()
        dv.apply_sync(ipp.serialize.use_default)


def test_pack_and_unpack_apply_message():
    bufs = ipp.pack_apply_message(divmod, (7, 2), {})
    f, args, kwargs = ipp.unpack_apply_message(bufs)
    assert f(*args, **kwargs) == (3, 1)


def test_serialize_object_round_trip_keeps_big_buffers_out_of_band():
    import numpy as np

    a = np.arange(100_000, dtype=np.float64)
    frames = ipp.serialize_object({"a": a})
    assert len(frames) == 2  # the array travels as its own frame
    np.testing.assert_array_equal(ipp.deserialize_object(frames)["a"], a)
