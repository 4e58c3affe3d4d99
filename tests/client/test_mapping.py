"""How a map is chunked and packed (client.mapping, zpar.mapchunk), without sockets: the
chunk messages' frames are unpacked here as an engine unpacks them."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import zpar.serialize
from zpar.client.mapping import (
    AUTO_CHUNKS_PER_ENGINE,
    AUTO_MIN_CHUNK,
    ChunkPacker,
    auto_chunks,
    check_chunksize,
)
from zpar.constants import OOB_THRESHOLD
from zpar.errors import SerializationError
from zpar.mapchunk import map_chunk
from zpar.serialize import unpack_apply


def run_chunk(frames):
    """What an engine does with a chunk's apply_request buffers."""
    f, args, kwargs = unpack_apply(frames)
    return f(*args, **kwargs)


def test_auto_chunks_min_chunk_then_per_engine_cap():
    k, m = AUTO_CHUNKS_PER_ENGINE, AUTO_MIN_CHUNK
    assert auto_chunks(2 * m, 2) == 2  # few elements per engine: one chunk each
    assert auto_chunks(100 * m, 2) == 2 * k  # many: capped per engine
    assert auto_chunks(5 * m, 2) == 5  # in between: chunks of at least m
    assert auto_chunks(m // 2, 8) == 8  # every engine gets work while there is some
    assert auto_chunks(5, 8) == 5  # fewer elements than engines: one task each
    assert auto_chunks(0, 2) == 0
    assert auto_chunks(10, 0) == 1  # no engine registered yet: one chunk waits


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", True, None])
def test_check_chunksize_refuses_non_positive_ints(bad):
    with pytest.raises(ValueError, match="chunksize"):
        check_chunksize(bad)


def test_range_chunks_pickle_in_constant_size():
    small = ChunkPacker(abs, [range(10**3)]).frames(0, 10)
    large = ChunkPacker(abs, [range(10**12)]).frames(10**11, 10**11 + 10**9)
    assert len(small) == len(large) == 1  # one pickle, no buffers
    assert len(large[0]) - len(small[0]) < 32  # O(1): a range is three ints
    f, args, kwargs = unpack_apply(large)
    assert f is map_chunk and args[1] == range(10**11, 10**11 + 10**9)
    assert kwargs == {"start": 10**11}


def test_numpy_chunks_are_views_sent_without_copy():
    a = np.arange(4 * OOB_THRESHOLD // 8, dtype=np.float64)
    n = len(a)
    frames = ChunkPacker(float, [a]).frames(n // 2, n)
    assert len(frames) == 2  # the pickle and the slice's memory, out of band
    assert np.shares_memory(np.frombuffer(frames[1], dtype=np.float64), a)
    out = run_chunk([bytes(f) for f in frames])
    assert out == [float(x) for x in a[n // 2 :]]


def test_list_chunk_is_one_pickle_and_several_sequences_zip():
    words = [f"w{i}" for i in range(100)]
    frames = ChunkPacker(lambda x, y: (x, y), [words, list(range(100))]).frames(40, 60)
    assert len(frames) == 1
    assert run_chunk(frames) == list(zip(words[40:60], range(40, 60), strict=True))


def test_function_is_pickled_once_per_map():
    calls = []

    class Adder:
        """A callable object: pickled once, unpickled afresh by each chunk."""

        def __init__(self, n):
            self.n = n

        def __call__(self, x):
            return x + self.n

        def __reduce__(self):
            calls.append(1)
            return (Adder, (self.n,))

    packer = ChunkPacker(Adder(5), [range(100)])
    assert calls == [1]
    chunks = [packer.frames(i, i + 10) for i in range(0, 100, 10)]
    assert calls == [1], "the function was pickled again for a chunk"
    assert [x for c in chunks for x in run_chunk(c)] == [x + 5 for x in range(100)]


def test_function_with_large_buffers_stays_zero_copy():
    big = np.ones(2 * OOB_THRESHOLD // 8)

    def total(x, arr=big):
        return x + arr.sum()

    frames = ChunkPacker(total, [range(4)]).frames(0, 4)
    assert len(frames) == 2 and np.shares_memory(np.frombuffer(frames[1]), big)
    assert run_chunk([bytes(f) for f in frames]) == [x + float(len(big)) for x in range(4)]


def test_unpicklable_function_is_named_and_nothing_sent():
    import threading

    lock = threading.Lock()

    def uses_lock(x):
        with lock:
            return x

    with pytest.raises(
        SerializationError, match="cannot send the function: .*function.*_thread.lock"
    ):
        ChunkPacker(uses_lock, [range(3)])


def test_map_chunk_names_the_element_that_raised():
    def inverse(x):
        return 1 / x

    assert map_chunk(inverse, [1, 2, 4], start=7) == [1.0, 0.5, 0.25]
    with pytest.raises(ZeroDivisionError) as info:
        map_chunk(inverse, [1, 2, 0, 4], start=100)
    assert info.value.__notes__ == ["(raised by element 102 of the map)"]


def test_pickle_once_honours_the_chosen_pickler():
    try:
        zpar.serialize.use_pickle()
        once = zpar.serialize.pickle_once(abs)
        assert pickle.loads(pickle.dumps(once)) is abs
    finally:
        zpar.serialize.use_default()


def test_an_element_that_cannot_be_pickled_is_named():
    import threading

    items = [1, 2, threading.Lock(), 4]
    packer = ChunkPacker(abs, [items])
    assert run_chunk(packer.frames(0, 2)) == [1, 2]
    with pytest.raises(SerializationError, match="elements 2..3 of the map.*lock"):
        packer.frames(2, 4)


def test_numpy_scalar_results_travel_as_one_array_and_come_back_a_list():
    a = np.linspace(-2, 2, 3000)
    out = map_chunk(abs, a)
    frames = zpar.serialize.serialize_object(out)  # what the engine sends back
    back = zpar.serialize.deserialize_object([bytes(f) for f in frames])
    assert type(back) is list and len(back) == len(a)
    assert all(type(x) is np.float64 for x in back) and back == [abs(x) for x in a]
    assert len(frames[0]) < 9 * len(a)  # the array's bytes, not 3,000 scalar pickles
    ints = zpar.serialize.deserialize_object(
        zpar.serialize.serialize_object(map_chunk(np.int16, [1, 2]))
    )
    assert [type(x) for x in ints] == [np.int16, np.int16] and ints == [1, 2]
    # mixed types stay a plain list, pickled element by element
    mixed = map_chunk(lambda x: x if x else 0.5, np.array([0.0, 1.0]))
    assert type(mixed) is list and mixed == [0.5, 1.0] and type(mixed[1]) is np.float64
