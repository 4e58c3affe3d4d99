"""Constant sections (``zeros``/``ones``/``full``/``empty`` without communication padding):
no memory until something writes or exports, every operation on them equal to numpy's on
the same cells, on one engine's namespace (no cluster)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from zpar.darray import LocalArray, bufferpool, engine, validate


def dim(size, grid=1, rank=0, start=0, stop=None, padding=None):
    dd = {
        "dist_type": "b",
        "size": size,
        "proc_grid_size": grid,
        "proc_grid_rank": rank,
        "start": start,
        "stop": size if stop is None else stop,
    }
    if padding:
        dd["padding"] = padding
    return dd


DIM = (dim(512), dim(300))  # 1.2 MB of float64: large enough for the buffer pool
SHAPE = (512, 300)


def test_a_constant_section_holds_no_memory_until_exported(ns):
    engine.allocate("a", DIM, "<f8", 1.5, False)
    la = ns["a"]
    assert la.memory is None and la.constant_value == 1.5
    assert la.shape == SHAPE and la.dtype == np.float64 and "constant" in repr(la)
    view = la.values
    assert view.strides == (0, 0) and not view.flags.writeable
    export = la.__distarray__()  # the protocol's buffer: real memory, writable
    assert validate(export) == (True, "")
    assert export["buffer"] is la.memory and export["buffer"].flags.writeable
    np.testing.assert_array_equal(export["buffer"], np.full(SHAPE, 1.5))
    assert la.constant_value is None  # from now on an ordinary section
    la.ndarray[0, 0] = 7.0
    assert la.values[0, 0] == 7.0


def test_communication_padding_means_memory_at_once(ns):
    padded = (dim(20, 2, 0, 0, 11, (1, 1)), dim(4))
    engine.allocate("a", padded, "<f8", 3.0, False)
    la = ns["a"]
    assert la.memory is not None
    assert la.ndarray[:10].tolist() == [[3.0] * 4] * 10 and la.ndarray[10].tolist() == [0] * 4
    with pytest.raises(ValueError, match="communication padding"):
        LocalArray.constant((11, 4), 1.0, "<f8", padded)


def test_empty_gets_memory_on_first_read(ns):
    engine.allocate("e", DIM, "<i4", 0, True)
    la = ns["e"]
    assert la.memory is None and la.constant_value is None and la.dtype == np.int32
    assert la.values.shape == SHAPE and la.memory is not None


CASES = [
    ("<i4", 1, np.add, 1.5),  # int32 + a Python float: float64
    ("<f4", 2.0, np.multiply, 3.0),  # float32 * a Python float stays float32
    ("<f8", 0.5, np.sin, None),
    ("<i8", 7, np.floor_divide, 2),
    ("<f8", 1.0, np.less, 2),
    ("|b1", True, np.logical_not, None),
]


@pytest.mark.parametrize("dtype, fill, ufunc, scalar", CASES)
def test_constant_op_constant_is_constant_and_equals_numpy(ns, dtype, fill, ufunc, scalar):
    engine.allocate("a", DIM, dtype, fill, False)
    operands = [engine.Ref("a")] + ([] if scalar is None else [scalar])
    got_dtype = engine.elementwise("c", ufunc, operands, {})
    want = ufunc(np.full(SHAPE, fill, dtype), *([] if scalar is None else [scalar]))
    c = ns["c"]
    assert c.memory is None and got_dtype == str(want.dtype) and c.dtype == want.dtype
    np.testing.assert_array_equal(c.values, want)


def test_two_constants_and_a_mixed_operation(ns):
    engine.allocate("a", DIM, "<f8", 2.0, False)
    engine.allocate("b", DIM, "<f8", 3.0, False)
    engine.elementwise("c", np.add, [engine.Ref("a"), engine.Ref("b")], {})
    assert ns["c"].memory is None and ns["c"].constant_value == 5.0
    ramp = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    engine.place("r", DIM, "<f8", ramp)
    engine.elementwise("d", np.subtract, [engine.Ref("r"), engine.Ref("a")], {})
    np.testing.assert_array_equal(ns["d"].ndarray, ramp - 2.0)
    assert ns["a"].memory is None  # read through its stride-0 view, never filled


def test_in_place_on_a_constant(ns):
    engine.allocate("a", DIM, "<f8", 1.0, False)
    engine.elementwise(None, np.add, [engine.Ref("a"), 1], {"out": engine.Ref("a")})
    assert ns["a"].memory is None and ns["a"].constant_value == 2.0
    ramp = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE)
    engine.place("r", DIM, "<f8", ramp)
    engine.elementwise(None, np.add, [engine.Ref("a"), engine.Ref("r")], {"out": engine.Ref("a")})
    np.testing.assert_array_equal(ns["a"].ndarray, ramp + 2.0)
    engine.allocate("i", DIM, "<i8", 1, False)
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):
        np.add(np.ones(3, np.int64), 1.5, out=np.ones(3, np.int64))  # numpy refuses ...
    with pytest.raises(TypeError, match="Cannot cast ufunc 'add' output"):  # ... so do we
        engine.elementwise(None, np.add, [engine.Ref("i"), 1.5], {"out": engine.Ref("i")})
    assert ns["i"].constant_value == 1


def test_gather_take_astype_copy(ns):
    engine.allocate("a", DIM, "<f8", 4.0, False)
    cell = engine.owned("a")
    assert cell.shape == () and cell == 4.0  # one value: the client broadcasts it
    assert engine.take("a", [slice(2, 5), slice(0, 3)]).tolist() == [[4.0] * 3] * 3
    engine.astype("a", "b", "<i2")
    assert ns["b"].memory is None and ns["b"].dtype == np.int16 and ns["b"].constant_value == 4
    engine.copy("a", "c")
    ns["c"].ndarray[0, 0] = -1.0
    assert ns["a"].constant_value == 4.0 and ns["c"].ndarray[0, 0] == -1.0
    assert ns["a"].memory is None


def test_freeing_constants_and_pickling(ns):
    engine.allocate("a", DIM, "<f8", 4.0, False)
    engine.free(["a"])
    assert bufferpool._pool == []  # nothing to keep
    engine.allocate("b", DIM, "<f8", 4.0, False)
    assert ns["b"].ndarray[0, 0] == 4.0  # filled now
    engine.free(["b"])
    assert len(bufferpool._pool) == 1
    engine.allocate("c", DIM, "<f8", 9.0, False)
    back = pickle.loads(pickle.dumps(ns["c"]))  # what rc[...].pull(key) sends
    assert back.memory is None and back.dim_data == ns["c"].dim_data
    np.testing.assert_array_equal(back.ndarray, np.full(SHAPE, 9.0))


def test_ufuncs_with_two_outputs(ns):
    engine.allocate("a", DIM, "<f8", 7.5, False)
    ramp = np.arange(np.prod(SHAPE), dtype=float).reshape(SHAPE) / 3
    engine.place("r", DIM, "<f8", ramp)
    assert engine.elementwise(("q", "m"), np.divmod, [engine.Ref("a"), 2], {}) == [
        "float64",
        "float64",
    ]
    assert ns["q"].constant_value == 3.0 and ns["m"].constant_value == 1.5
    assert engine.elementwise(("f", "e"), np.frexp, [engine.Ref("r")], {}) == [
        "float64",
        "int32",
    ]
    mantissa, exponent = np.frexp(ramp)
    np.testing.assert_array_equal(ns["f"].ndarray, mantissa)
    np.testing.assert_array_equal(ns["e"].ndarray, exponent)
