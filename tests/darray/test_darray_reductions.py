"""Axis reductions give distributed arrays (as enthought/distarray's do), and constant
sections (``zeros``/``ones``/``full`` without memory until written) go through every
operation: both on a real cluster of 4 engines, against numpy on the same cells."""

from __future__ import annotations

import numpy as np
import pytest

from zpar.darray import DistArray, validate

OPS = ("sum", "min", "max", "mean")


def check_sections(rc, da):
    """Each target holds a valid section of ``da`` and no other engine does."""
    others = [e for e in rc.ids if e not in da.targets]
    for la in rc[da.targets].pull(da.key, block=True):
        assert validate(la.__distarray__()) == (True, "")
    has = rc[others].apply_sync(lambda key: key in globals(), da.key) if others else []
    assert not any(has)


def test_an_axis_reduction_stays_on_the_engines(rc):
    data = np.arange(48.0).reshape(8, 6)
    da = rc.darray.fromarray(data, dist=("b", "c"), grid_shape=(2, 2))
    down = da.sum(axis=0)  # the grid positions at row 0 of the grid keep the result
    assert isinstance(down, DistArray)
    assert down.targets == [da.targets[0], da.targets[1]] and down.grid_shape == (2,)
    assert down.dist == ("c",) and down.shape == (6,)
    check_sections(rc, down)
    np.testing.assert_array_equal(down.toarray(), data.sum(axis=0))
    across = da.max(axis=1)
    assert across.targets == [da.targets[0], da.targets[2]] and across.dist == ("b",)
    np.testing.assert_array_equal(across.toarray(), data.max(axis=1))
    # the result is an ordinary distributed array: arithmetic, reductions, indexing
    assert (down * 2).sum() == 2 * data.sum() and down[3] == data[:, 3].sum()


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_3d_reductions_along_every_axis(rc, axis):
    data = np.arange(135.0).reshape(5, 9, 3) * np.where(np.arange(135) % 3, 1, -1).reshape(5, 9, 3)
    da = rc.darray.fromarray(data, dist=("c", "b", "c"), grid_shape=(2, 2, 1))
    for op in OPS:
        got = getattr(da, op)(axis=axis)
        want = getattr(np, op)(data, axis=axis)
        assert isinstance(got, DistArray) and got.shape == want.shape
        np.testing.assert_allclose(got.toarray(), want, err_msg=f"{op} axis {axis}")
        # reduced twice: a 1-d array, then one number
        np.testing.assert_allclose(got.sum(axis=0).toarray(), want.sum(axis=0))
        assert got.sum(axis=0).sum(axis=0) == pytest.approx(want.sum())


def test_reductions_of_padded_arrays_leave_the_padding_out(rc):
    data = np.arange(120.0).reshape(12, 10)
    da = rc.darray.fromarray(
        data, dist=("b", "b"), grid_shape=(2, 2), padding=((1, 1), (1, 1)), periodic=(True, False)
    )
    da.exchange_halos()  # the periodic rows' boundary padding wraps: row 0 <- 10, 11 <- 1
    after = data.copy()
    after[0], after[11] = data[10], data[1]
    np.testing.assert_array_equal(da.toarray(), after)
    for axis in (0, 1):
        got = da.sum(axis=axis)
        assert got.padding == ((0, 0),)
        check_sections(rc, got)
        np.testing.assert_array_equal(got.toarray(), after.sum(axis=axis))


def test_reduction_dtypes_follow_numpy(rc):
    ints = np.arange(24, dtype=np.int32).reshape(4, 6)
    da = rc.darray.fromarray(ints, dist=("b", "b"))
    for op in OPS:
        got, want = getattr(da, op)(axis=1), getattr(np, op)(ints, axis=1)
        assert got.dtype == want.dtype, op
        np.testing.assert_array_equal(got.toarray(), want)
    flags = rc.darray.fromarray(ints % 3 == 0, dist=("c", "b"))
    np.testing.assert_array_equal(flags.sum(axis=0).toarray(), (ints % 3 == 0).sum(axis=0))
    line = rc.darray.fromarray(np.arange(10), dist=("c",))
    assert line.sum(axis=0) == 45 and line.max(axis=-1) == 9  # 1-d: one number, as numpy
    empty = rc.darray.zeros((0, 4), dist=("b", "n"))
    np.testing.assert_array_equal(empty.sum(axis=0).toarray(), np.zeros(4))
    with pytest.raises(TypeError, match="axis must be an int"):
        da.sum(axis=(0, 1))


CONSTANT_DISTS = [
    (("b", "b"), (2, 2)),
    (("c", "b"), (2, 2)),
    ((("c", 2), "n"), (4, 1)),
    ((("u", [[3, 0], [4, 2, 1]]), ("b", [0, 2, 9])), (2, 2)),
]


@pytest.mark.parametrize("dist, grid", CONSTANT_DISTS)
def test_constant_arrays_through_every_operation(rc, dist, grid):
    layout = {"dist": dist, "grid_shape": grid}
    ramp = np.arange(45.0).reshape(5, 9)
    c = rc.darray.full((5, 9), 2.5, **layout)
    want = np.full((5, 9), 2.5)
    np.testing.assert_array_equal(c.toarray(), want)
    assert c[1, 2] == 2.5 and c[1:4, ::3].tolist() == want[1:4, ::3].tolist()
    for op in OPS:
        assert getattr(c, op)() == pytest.approx(getattr(np, op)(want))
        for axis in (0, 1):
            np.testing.assert_allclose(
                getattr(c, op)(axis=axis).toarray(), getattr(np, op)(want, axis=axis)
            )
    r = rc.darray.fromarray(ramp, **layout)
    np.testing.assert_array_equal((c * r + 1).toarray(), want * ramp + 1)
    z = rc.darray.zeros((5, 9), dtype=np.int64, **layout)
    np.testing.assert_array_equal((z + 3).astype(np.float32).toarray(), np.full((5, 9), 3.0))
    kept = c.copy()
    c += r  # in place: the constant section gets memory
    np.testing.assert_array_equal(c.toarray(), want + ramp)
    np.testing.assert_array_equal(kept.toarray(), want)
    o = rc.darray.ones((5, 9), **layout)

    def poke(section):
        section.ndarray[...] *= 4  # a kernel writing the engine's buffer

    o.apply_local(poke)
    np.testing.assert_array_equal(o.toarray(), np.full((5, 9), 4.0))
    moved = rc.darray.ones((5, 9), **layout).redistribute(dist=("b", "c"), grid_shape=(2, 2))
    np.testing.assert_array_equal(moved.toarray(), np.ones((5, 9)))
    for la in rc[kept.targets].pull(kept.key, block=True):  # the export: real memory
        export = la.__distarray__()
        assert validate(export) == (True, "") and np.all(export["buffer"] == 2.5)


def test_padded_constant_arrays_and_halos(rc):
    h = rc.darray.ones((18,), padding=((1, 1),), periodic=(True,), targets=rc.ids[:2])
    left, right = rc[h.targets].pull(h.key, block=True)
    assert left.ndarray.tolist() == [1] * 9 + [0]  # ghost cell zero until the exchange
    h.exchange_halos()
    np.testing.assert_array_equal(h.toarray(), np.ones(18))
    left, right = rc[h.targets].pull(h.key, block=True)
    assert left.ndarray.tolist() == [1] * 10 and right.ndarray.tolist() == [1] * 10
