"""toarray through shared memory (darray.shmgather): engines of the client's host write
their cells in place; the result equals numpy's for every distribution, the file is gone
afterwards, and an engine that cannot see the file sends its cells instead."""

from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from tests.darray.test_darray_cluster import DISTS, FULL
from zpar.darray import engine, shmgather


def _leftovers() -> list[str]:
    return glob.glob(os.path.join(shmgather.SHM_DIR, "zpar-gather-*"))


def test_small_arrays_use_the_sockets():
    with shmgather.shared_result((4, 4), np.dtype(np.float64)) as shared:
        assert shared is None


def test_a_shared_result_outlives_its_file():
    before = set(_leftovers())
    with shmgather.shared_result((512, 512), np.dtype(np.float64)) as shared:
        assert shared is not None
        path, out = shared
        assert os.stat(path).st_mode & 0o077 == 0  # private to this user
        assert shmgather.write_into(path, out.shape, out.dtype, [slice(0, 2), slice(0, 512)], 7.0)
    assert set(_leftovers()) == before
    assert out.flags.writeable and np.all(out[:2] == 7.0) and np.all(out[2:] == 0)


def test_write_into_a_missing_file_says_so():
    assert not shmgather.write_into("/dev/shm/zpar-gather-none", (2,), np.dtype("f8"), [], 1.0)


@pytest.fixture
def always_shared(monkeypatch):
    monkeypatch.setattr(shmgather, "SHM_GATHER_MIN_BYTES", 1)


@pytest.mark.parametrize("dist, grid", DISTS)
def test_toarray_in_place_equals_numpy(rc, always_shared, dist, grid):
    before = set(_leftovers())
    da = rc.darray.fromarray(FULL, dist=dist, grid_shape=grid)
    np.testing.assert_array_equal(da.toarray(), FULL)
    assert set(_leftovers()) == before
    da.free()


def test_toarray_in_place_of_padded_and_constant_arrays(rc, always_shared):
    a = rc.darray.fromfunction(
        lambda i, j: i * 100.0 + j, (12, 10), padding=((1, 1), (0, 0)), periodic=(True, False)
    )
    np.testing.assert_array_equal(
        a.toarray(), np.fromfunction(lambda i, j: i * 100.0 + j, (12, 10))
    )
    c = rc.darray.full((6, 7), 3.5)
    np.testing.assert_array_equal(c.toarray(), np.full((6, 7), 3.5))
    big = rc.darray.fromfunction(lambda i, j: i * 1000.0 + j, (700, 300), dtype=np.float32)
    np.testing.assert_array_equal(
        big.toarray(), np.fromfunction(lambda i, j: i * 1000.0 + j, (700, 300), dtype=np.float32)
    )
    for d in (a, c, big):
        d.free()


def test_an_engine_that_cannot_see_the_file_sends_its_cells(rc):
    da = rc.darray.fromarray(FULL, dist=("b", "n"), grid_shape=(4, 1))
    cells = rc[da.targets[0]].apply_sync(
        engine.owned_into, da.key, "/dev/shm/zpar-gather-elsewhere", FULL.shape,
        FULL.dtype, [slice(0, 2), slice(0, 9)],
    )  # fmt: skip
    np.testing.assert_array_equal(cells, FULL[:2])
    da.free()
