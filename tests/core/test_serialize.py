"""Serialization: large buffers leave the pickle as zero-copy views; bad input is named."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from zpar.constants import OOB_THRESHOLD
from zpar.errors import SerializationError
from zpar.serialize import deserialize_object, pack_apply, serialize_object, unpack_apply


def test_large_array_travels_out_of_band_without_copy():
    arr = np.arange(OOB_THRESHOLD, dtype=np.float64)
    frames = serialize_object(arr)
    assert len(frames) == 2
    assert np.shares_memory(np.frombuffer(frames[1], dtype=np.float64), arr)
    back = deserialize_object([frames[0], bytearray(frames[1])])
    np.testing.assert_array_equal(back, arr)


def test_received_array_is_a_view_on_the_frame():
    arr = np.arange(1 << 16, dtype=np.int64)
    stream, buf = serialize_object(arr)
    frame = bytearray(buf)
    back = deserialize_object([stream, frame])
    back[0] = 42
    assert np.frombuffer(frame, dtype=np.int64)[0] == 42


def test_small_objects_stay_in_band():
    frames = serialize_object({"a": np.arange(10), "b": b"x" * 100})
    assert len(frames) == 1
    assert deserialize_object(frames)["b"] == b"x" * 100


def test_non_contiguous_arrays_are_copied_in_band():
    arr = np.arange(1 << 18, dtype=np.float64)[::2]
    frames = serialize_object(arr)
    np.testing.assert_array_equal(deserialize_object(frames), arr)


def test_lambda_and_closure_round_trip():
    k = 3
    f, args, kwargs = unpack_apply(pack_apply(lambda x, y=1: x * k + y, (2,), {"y": 5}))
    assert f(*args, **kwargs) == 11


def test_unserializable_argument_is_named_before_sending():
    lock = threading.Lock()
    with pytest.raises(SerializationError, match="argument 1: _thread.lock") as e:
        pack_apply(print, (1, lock))
    assert "Nothing was sent" in str(e.value)


def test_unserializable_keyword_argument_is_named():
    with pytest.raises(SerializationError, match="keyword argument 'lock'"):
        pack_apply(print, (), {"lock": threading.Lock()})


def test_non_callable_is_refused():
    with pytest.raises(SerializationError, match="not callable"):
        pack_apply(42)


def test_empty_or_wrong_frames_are_refused():
    with pytest.raises(SerializationError, match="no frames"):
        deserialize_object([])
    with pytest.raises(SerializationError, match=r"\(f, args, kwargs\)"):
        unpack_apply(serialize_object([1, 2]))


SCALE = 2
MUTABLE = [1]


def _uses_scale(x):
    return x * SCALE


def _uses_mutable(x):
    return x + MUTABLE[0]


@pytest.fixture
def by_value():
    """Pickle this module's functions by value, as a notebook's would be."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_cached_function_pickle_follows_rebound_globals(by_value):
    global SCALE
    from zpar import serialize

    f, args, _ = unpack_apply(pack_apply(_uses_scale, (3,)))
    assert f(*args) == 6 and f is not _uses_scale  # rebuilt from its code
    assert _uses_scale in serialize._fn_cache
    SCALE = 5
    try:
        f, args, _ = unpack_apply(pack_apply(_uses_scale, (3,)))
        assert f(*args) == 15
    finally:
        SCALE = 2


def test_functions_reading_mutable_globals_are_never_cached(by_value):
    from zpar import serialize

    before = MUTABLE[0]
    pack_apply(_uses_mutable, (1,))
    MUTABLE[0] = 10
    try:
        f, args, _ = unpack_apply(pack_apply(_uses_mutable, (1,)))
        assert f(*args) == 11
    finally:
        MUTABLE[0] = before
    assert _uses_mutable not in serialize._fn_cache


def test_plain_values_take_the_standard_pickle_and_the_rest_cloudpickle(monkeypatch):
    import pickle

    import zpar.serialize as ser

    class Local:  # not importable by reference: must travel by value
        def __init__(self):
            self.x = 7

    used = []
    real_dumps = pickle.dumps
    monkeypatch.setattr(
        ser.pickle, "dumps", lambda *a, **k: used.append("pickle") or real_dumps(*a, **k)
    )
    plain = [None, 3, "s", (1, 2.5, b"x"), {"a": [1, 2]}, np.arange(4), ser._PickledFunction(b"")]
    for value in plain:
        assert ser._plain(value), value
    for value in (Local(), [lambda: 1], np.array([object()]), {1: 2}, [[[[1]]]], True.__class__):
        assert not ser._plain(value), value
    used.clear()
    assert deserialize_object(serialize_object((1, "two", np.arange(3))))[1] == "two"
    assert used == ["pickle"]
    used.clear()
    back = deserialize_object(serialize_object([Local(), lambda: 41]))
    assert back[0].x == 7 and back[1]() == 41 and used == []  # cloudpickle, by value


def test_importable_functions_travel_by_reference_through_the_standard_pickle():
    """A module-level function of an importable module is written by its name (as
    cloudpickle would), by the standard pickle, without a fingerprint;
    registered for pickling by value, the same function travels by value again."""
    import pickle
    import sys

    import cloudpickle

    from zpar import serialize

    stream = pack_apply(_uses_scale, (3,), {"k": 1})[0]
    assert b"_uses_scale" in stream and _uses_scale.__code__.co_code not in stream
    f, args, kwargs = unpack_apply([stream])
    assert f is _uses_scale and args == (3,) and kwargs == {"k": 1}
    assert pickle.loads(stream) == pickle.loads(cloudpickle.dumps((_uses_scale, (3,), {"k": 1})))
    assert serialize._by_reference(_uses_scale)
    assert not serialize._by_reference(_check_pickles_by_value_when_nested())
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        assert not serialize._by_reference(_uses_scale)
        f, _, _ = unpack_apply(pack_apply(_uses_scale, (3,)))
        assert f is not _uses_scale and f(3) == 6  # rebuilt from its code
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_a_function_rebound_in_its_module_travels_by_value():
    """The module no longer names the function (a notebook redefined it under another
    name, a decorator replaced it): by reference would run the other one, so it goes by
    value."""
    global _uses_scale
    from zpar import serialize

    original = _uses_scale
    _uses_scale = _uses_mutable
    try:
        assert not serialize._by_reference(original)
        f, args, _ = unpack_apply(pack_apply(original, (3,)))
        assert f is not original and f(*args) == 6
    finally:
        _uses_scale = original


def _check_pickles_by_value_when_nested():
    def inner(x):
        return x

    return inner
