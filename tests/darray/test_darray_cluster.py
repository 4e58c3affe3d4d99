"""Distributed arrays on a real cluster of 4 engines: constructors, the engine-side
LocalArrays, toarray, indexing, elementwise operations and adopting foreign exporters,
each against numpy on the same data."""

from __future__ import annotations

import numpy as np
import pytest

from zpar.darray import DistArray, InconsistentExport, LocalArray, validate
from zpar.errors import RemoteError

FULL = np.arange(45.0).reshape(5, 9)

DISTS = [
    (("b", "b"), (2, 2)),
    (("b", "c"), (2, 2)),
    (("c", "c"), (2, 2)),
    ((("b", [0, 1, 5]), ("b", [0, 2, 9])), (2, 2)),
    ((("c", 2), ("c", 2)), (2, 2)),
    ((("u", [[3, 0], [4, 2, 1]]), ("u", [[2, 3, 7, 1], [6, 5, 8, 0, 4]])), (2, 2)),
    (("b", "n"), (4, 1)),
    (("n", "c"), (1, 4)),
]


@pytest.mark.parametrize("dist, grid", DISTS)
def test_fromarray_round_trip_and_engine_sections(rc, dist, grid):
    da = rc.darray.fromarray(FULL, dist=dist, grid_shape=grid)
    assert da.shape == (5, 9) and da.dtype == np.float64 and da.grid_shape == grid
    assert da.targets == rc.ids
    np.testing.assert_array_equal(da.toarray(), FULL)
    las = rc[da.targets].pull(da.key, block=True)
    assert all(isinstance(la, LocalArray) for la in las)
    seen = np.zeros(FULL.shape, dtype=int)
    for rank, la in enumerate(las):
        export = la.__distarray__()
        assert validate(export) == (True, "")
        assert la.grid_coords == tuple(int(c) for c in np.unravel_index(rank, grid))
        gi = [m.global_indices() for m in la.maps]
        np.testing.assert_array_equal(la.ndarray, FULL[np.ix_(*gi)])
        seen[np.ix_(*gi)] += 1
    assert np.all(seen == 1)
    da.free()


def test_constructors(rc):
    z = rc.darray.zeros((6, 4), dist=("c", "b"))
    o = rc.darray.ones((6, 4), dtype=np.int32, dist=("b", "c"))
    f = rc.darray.full((3, 5), 7.5, dist="b", grid_shape=(4, 1))
    e = rc.darray.empty((8,), dist=("c", 3))
    g = rc.darray.fromfunction(
        lambda i, j: 10 * i + j, (5, 9), dtype=np.int64, dist=(("c", 2), "b")
    )
    np.testing.assert_array_equal(z.toarray(), np.zeros((6, 4)))
    np.testing.assert_array_equal(o.toarray(), np.ones((6, 4), dtype=np.int32))
    assert o.dtype == np.int32
    np.testing.assert_array_equal(f.toarray(), np.full((3, 5), 7.5))
    assert e.toarray().shape == (8,) and e.dist == (("c", 3),)
    np.testing.assert_array_equal(
        g.toarray(), np.fromfunction(lambda i, j: 10 * i + j, (5, 9), dtype=np.int64)
    )
    assert "dist=(('c', 2), 'b')" in repr(g) and g.key in repr(g)
    long = rc.darray.fromfunction(lambda i: i * 0.5, (3_000_001,), dist="c")  # several row blocks
    np.testing.assert_array_equal(long[::1_000_000], [0.0, 500_000.0, 1_000_000.0, 1_500_000.0])
    assert long.sum() == np.arange(3_000_001).sum() * 0.5
    scalar = rc.darray.fromfunction(lambda: 5.0, (), targets=rc.ids[:1])
    assert scalar.shape == () and scalar.toarray() == 5.0 and scalar.sum() == 5.0


def test_targets_subset_and_repr(rc):
    ids = rc.ids[1:3]
    da = rc.darray.fromarray(np.arange(10), dist=("b",), targets=ids)
    assert da.targets == ids and da.grid_shape == (2,)
    las = rc[ids].pull(da.key, block=True)
    assert [la.ndarray.tolist() for la in las] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert repr(da) == (
        f"DistArray(shape=(10,), dtype=int64, dist=('b',), grid_shape=(2,), targets={ids}, key={da.key!r})"
    )


def test_empty_local_buffer_size_3_cyclic_over_4(rc):
    da = rc.darray.fromarray(np.array([1.0, 2.0, 3.0]), dist=("c",))
    las = rc[da.targets].pull(da.key, block=True)
    assert [la.ndarray.shape for la in las] == [(1,), (1,), (1,), (0,)]
    assert validate(las[3].__distarray__()) == (True, "")
    np.testing.assert_array_equal(da.toarray(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal((da * 2).toarray(), [2.0, 4.0, 6.0])


@pytest.mark.parametrize("dist, grid", DISTS[:6])
def test_getitem_elements_and_slices(rc, dist, grid):
    da = rc.darray.fromarray(FULL, dist=dist, grid_shape=grid)
    for index in [
        (0, 0),
        (4, 8),
        (-1, -2),
        (2, slice(None)),
        (slice(1, 4), 3),
        (slice(None, None, 2), slice(1, 8, 3)),
        (slice(None), slice(None)),
        (Ellipsis, 5),
        3,
        (slice(3, 1),),
    ]:
        got = da[index]
        want = FULL[index]
        np.testing.assert_array_equal(got, want)
        assert np.shape(got) == np.shape(want), index
    with pytest.raises(IndexError):
        da[5, 0]
    with pytest.raises(TypeError):
        da[[1, 2]]


def test_elementwise_against_numpy(rc):
    a_np = np.arange(45.0).reshape(5, 9) - 20
    b_np = np.linspace(1, 3, 45).reshape(5, 9)
    for dist in [("b", "b"), ("c", ("c", 2)), (("u", [[3, 0], [4, 2, 1]]), "c")]:
        a = rc.darray.fromarray(a_np, dist=dist, grid_shape=(2, 2))
        b = rc.darray.fromarray(b_np, dist=dist, grid_shape=(2, 2))
        cases = {
            "a + b": (a + b, a_np + b_np),
            "a - 1": (a - 1, a_np - 1),
            "2 * a": (2 * a, 2 * a_np),
            "a / b": (a / b, a_np / b_np),
            "a ** 2": (a**2, a_np**2),
            "-a": (-a, -a_np),
            "abs": (abs(a), abs(a_np)),
            "sin": (np.sin(a), np.sin(a_np)),
            "maximum": (np.maximum(a, b), np.maximum(a_np, b_np)),
            "a > b": (a > b, a_np > b_np),
            "hypot": (np.hypot(a, 3.0), np.hypot(a_np, 3.0)),
        }
        for name, (got, want) in cases.items():
            assert got.dtype == want.dtype, name
            np.testing.assert_allclose(got.toarray(), want, err_msg=name)
            assert got.dim_data == a.dim_data
    a += 1
    np.testing.assert_array_equal(a.toarray(), a_np + 1)
    np.multiply(a, 2, out=a)
    np.testing.assert_array_equal(a.toarray(), (a_np + 1) * 2)


def test_ufuncs_with_two_outputs(rc):
    a_np = np.linspace(-7.5, 9.25, 45).reshape(5, 9)
    for make in (
        lambda: rc.darray.fromarray(a_np, dist=("b", "c"), grid_shape=(2, 2)),
        lambda: rc.darray.full((5, 9), -7.5, dist=("b", "c"), grid_shape=(2, 2)),  # constant
    ):
        a = make()
        ref = a.toarray()
        for name, got, want in (
            ("divmod", divmod(a, 2), divmod(ref, 2)),
            ("modf", np.modf(a), np.modf(ref)),
            ("frexp", np.frexp(a), np.frexp(ref)),
        ):
            assert isinstance(got, tuple) and len(got) == 2, name
            for g, w in zip(got, want, strict=True):
                assert isinstance(g, DistArray) and g.dtype == w.dtype, name
                np.testing.assert_array_equal(g.toarray(), w, err_msg=name)


def test_elementwise_refuses_different_distributions(rc):
    a = rc.darray.zeros((6, 6), dist=("b", "b"))
    b = rc.darray.zeros((6, 6), dist=("c", "c"))
    with pytest.raises(ValueError, match="distributed the same way"):
        a + b
    with pytest.raises(TypeError):
        a + np.ones((6, 6))


def test_bad_requests_name_what_is_wrong(rc):
    with pytest.raises(ValueError, match="repeat an index"):
        rc.darray.zeros((4,), dist=(("u", [[0], [1], [2, 2], [3]]),))
    with pytest.raises(ValueError, match="grid_shape \\(2, 3\\) has 6 positions for 4 engines"):
        rc.darray.zeros((4, 6), dist=("b", "b"), grid_shape=(2, 3))
    with pytest.raises(ValueError, match="dist has 1 entries"):
        rc.darray.zeros((4, 6), dist=(("c", 2),))


# -- adopting what another library exports -----------------------------------------------


class ForeignSection:
    """Not ours: a minimal exporter as another library would write it (1-d block over the
    engines, plain lists where the protocol allows any buffer)."""

    def __init__(self, data, rank, nprocs, size, start, padding=(0, 0)):
        self.data = np.asarray(data, dtype=float)
        self.meta = {
            "dist_type": "b",
            "size": size,
            "proc_grid_size": nprocs,
            "proc_grid_rank": rank,
            "start": start,
            "stop": start + len(self.data),
            "padding": padding,
        }

    def __distarray__(self):
        return {
            "__version__": "0.10.0",
            "buffer": memoryview(self.data),
            "dim_data": (dict(self.meta), {}),
        }


def make_foreign(rank, nprocs, size, start, stop, padding=(0, 0)):
    data = np.arange(start, stop, dtype=float).reshape(-1, 1) * np.array([[1.0, -1.0]])
    obj = ForeignSection(data, rank, nprocs, size, start, padding)
    obj.meta["stop"] = stop
    return obj


def put_foreign(rc, bounds, name="section", **kw):
    n = len(rc.ids)
    for rank, eid in enumerate(rc.ids):
        rc[eid].apply_sync(
            _store_foreign, name, rank, n, bounds[-1], bounds[rank], bounds[rank + 1], kw
        )


def _store_foreign(name, rank, n, size, start, stop, kw):
    globals()[name] = make_foreign(rank, n, size, start, stop, **kw)


def test_from_engines_adopts_a_foreign_exporter(rc):
    put_foreign(rc, [0, 3, 4, 8, 10])
    da = rc.darray.from_engines("section")
    assert da.shape == (10, 2) and da.dist == (("b", [0, 3, 4, 8, 10]), "n")
    want = np.arange(10.0).reshape(-1, 1) * np.array([[1.0, -1.0]])
    np.testing.assert_array_equal(da.toarray(), want)
    np.testing.assert_array_equal((da * 3).toarray(), want * 3)
    # shared, not copied: writing through the DistArray changes the foreign object's memory
    da += 1
    assert rc[rc.ids[0]].apply_sync(_first_value, "section") == 1.0


def _first_value(name):
    return float(globals()[name].data[0, 0])


def test_from_engines_refuses_inconsistent_exports(rc):
    put_foreign(rc, [0, 3, 4, 8, 10])
    rc[rc.ids[2]].apply_sync(_tamper_start, "section", 5)
    with pytest.raises(InconsistentExport) as info:
        rc.darray.from_engines("section")
    assert info.value.engine == rc.ids[1] and "must be adjacent" in info.value.rule
    rc[rc.ids[2]].apply_sync(_tamper_start, "section", 4)
    rc[rc.ids[3]].apply_sync(_set_padding, "section", [0, 0])
    with pytest.raises(InconsistentExport) as info:
        rc.darray.from_engines("section")
    assert info.value.engine == rc.ids[3] and "must be a tuple" in info.value.rule
    rc[rc.ids[0]].apply_sync(_store_plain, "section")
    with pytest.raises(InconsistentExport, match="without __distarray__") as info:
        rc.darray.from_engines("section")
    assert info.value.engine == rc.ids[0]


def _tamper_start(name, start):
    obj = globals()[name]
    obj.meta["stop"] += start - obj.meta["start"]
    obj.meta["start"] = start


def _set_padding(name, padding):
    globals()[name].meta["padding"] = padding


def _store_plain(name):
    globals()[name] = [1, 2, 3]


def test_remote_errors_surface(rc):
    da = rc.darray.zeros((4,))
    da.free()
    with pytest.raises(RemoteError, match="freed"):
        da.toarray()


# -- engine to engine: reductions, halos, redistribution over zpar.comm --------------------


@pytest.mark.parametrize("dist, grid", DISTS)
def test_reductions_against_numpy(rc, dist, grid):
    data = FULL * np.where(np.arange(45) % 4, 1.0, -1.0).reshape(5, 9)
    da = rc.darray.fromarray(data, dist=dist, grid_shape=grid)
    for name in ("sum", "min", "max", "mean"):
        assert getattr(da, name)() == pytest.approx(getattr(np, name)(data)), name
        for axis in (0, 1, -1):
            got = getattr(da, name)(axis=axis)
            assert isinstance(got, DistArray)  # stays on the engines
            want = getattr(np, name)(data, axis=axis)
            assert got.shape == want.shape and got.dtype == want.dtype
            np.testing.assert_allclose(got.toarray(), want, err_msg=f"{name} axis {axis}")


def test_reductions_with_empty_sections_and_errors(rc):
    da = rc.darray.fromarray(np.array([4, -2, 9], dtype=np.int64), dist=("c",))
    assert (da.sum(), da.min(), da.max(), da.mean()) == (11, -2, 9, 11 / 3)
    empty = rc.darray.zeros((0, 3), dist=("b", "n"))
    assert empty.sum() == 0
    with pytest.raises(ValueError, match="zero-size array"):
        empty.min()
    with pytest.raises(ValueError, match="axis 2 is out of bounds"):
        da.sum(axis=2)
    assert (np.sum(da), np.min(da), np.max(da), np.mean(da)) == (11, -2, 9, 11 / 3)
    np.testing.assert_array_equal(np.sum(rc.darray.ones((3, 4), dist="c"), axis=0), [3, 3, 3, 3])
    with pytest.raises(TypeError, match="does not take dtype"):
        np.sum(da, dtype=np.float32)
    with pytest.raises(TypeError, match="does not take keepdims"):
        da.max(keepdims=True)


@pytest.mark.parametrize("periodic", [False, True])
def test_padded_block_18_over_2_engines_exchange_halos(rc, periodic):
    ids = rc.ids[:2]
    da = rc.darray.fromarray(
        np.arange(18.0), dist=("b",), padding=((1, 1),), periodic=(periodic,), targets=ids
    )
    left, right = rc[ids].pull(da.key, block=True)
    assert left.dim_data[0]["padding"] == (1, 1) and left.dim_data[0]["stop"] == 10
    assert left.ndarray.tolist() == list(range(9)) + [0] and right.ndarray.tolist() == [0] + list(
        range(9, 18)
    )
    da.exchange_halos()
    left, right = rc[ids].pull(da.key, block=True)
    assert left.ndarray.tolist()[1:] == list(range(1, 10)) and right.ndarray.tolist()[:-1] == list(
        range(8, 17)
    )
    assert (left.ndarray[0], right.ndarray[-1]) == ((16, 1) if periodic else (0, 17))
    np.testing.assert_array_equal(
        da.toarray(), [16.0 if periodic else 0.0, *range(1, 17), 1.0 if periodic else 17.0]
    )


def test_exchange_halos_2d_periodic_on_engines(rc):
    interior = np.arange(60.0).reshape(6, 10)
    full = np.zeros((8, 12))
    full[1:-1, 1:-1] = interior
    da = rc.darray.fromarray(
        full, dist=("b", "b"), grid_shape=(2, 2), padding=((1, 1), (1, 1)), periodic=(True, True)
    )
    da.exchange_halos()
    wrapped = np.pad(interior, 1, mode="wrap")
    for la in rc[da.targets].pull(da.key, block=True):
        (r0, r1), (c0, c1) = [(m.start, m.stop) for m in la.maps]
        np.testing.assert_array_equal(la.ndarray, wrapped[r0:r1, c0:c1])


@pytest.mark.parametrize("src, dst", [(0, 1), (1, 4), (5, 3), (2, 6), (7, 0)])
def test_redistribute_against_numpy(rc, src, dst):
    da = rc.darray.fromarray(FULL, dist=DISTS[src][0], grid_shape=DISTS[src][1])
    moved = da.redistribute(dist=DISTS[dst][0], grid_shape=DISTS[dst][1])
    assert moved.targets == da.targets and moved.key != da.key
    np.testing.assert_array_equal(moved.toarray(), FULL)
    fresh = rc.darray.fromarray(FULL, dist=DISTS[dst][0], grid_shape=DISTS[dst][1])
    assert moved.dim_data == fresh.dim_data or all(
        np.array_equal(a["indices"], b["indices"])
        for ra, rb in zip(moved.dim_data, fresh.dim_data, strict=True)
        for a, b in zip(ra, rb, strict=True)
        if "indices" in a
    )
    got = [la.ndarray for la in rc[moved.targets].pull(moved.key, block=True)]
    want = [la.ndarray for la in rc[fresh.targets].pull(fresh.key, block=True)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_communicator_reopened_when_the_engines_lost_it(rc):
    da = rc.darray.ones((8, 8), dist=("b", "b"))
    assert da.sum() == 64
    from zpar.darray.commlink import communicator_key

    name = communicator_key(rc, da.targets)
    rc[da.targets].execute(f"{name}.Free(); del {name}", block=True)
    assert da.sum() == 64  # a new communicator, opened on the way
    assert communicator_key(rc, da.targets) != name


def test_collectives_after_rc_clear(rc):
    da = rc.darray.fromarray(np.arange(16.0).reshape(4, 4), dist=("b", "b"))
    assert da.sum() == 120
    saved = rc[da.targets].pull(da.key, block=True)
    rc.clear(block=True)  # every namespace emptied: the sections and the communicator
    for rank, eid in enumerate(da.targets):  # put the sections back, not the communicator
        rc[eid].push({da.key: saved[rank]}, block=True)
    assert da.sum() == 120 and da.max(axis=0).toarray().tolist() == [12, 13, 14, 15]
