"""`from_engines` checks an exporter's claims before allocating (issue 26): an unstructured
dimension claiming a size its indices do not cover is InconsistentExport, not a 1.6 GB
allocation or a MemoryError, and the sections adopted on the engines are freed."""

from __future__ import annotations

import resource

import numpy as np
import pytest

from zpar.darray import InconsistentExport, LocalArray

pytestmark = pytest.mark.cluster


class Claims:
    """An exporter of 3 values on an unstructured dimension whose ``size`` is whatever it
    is told (indices rank*3 .. rank*3+2)."""

    def __init__(self, rank, nprocs, size):
        self.data = np.arange(3.0) + 3 * rank
        self.meta = {
            "dist_type": "u",
            "size": size,
            "proc_grid_size": nprocs,
            "proc_grid_rank": rank,
            "indices": np.arange(3 * rank, 3 * rank + 3, dtype=np.int64),
        }

    def __distarray__(self):
        return {"__version__": "0.10.0", "buffer": memoryview(self.data), "dim_data": (self.meta,)}


def _put(name, rank, n, size):
    globals()[name] = Claims(rank, n, size)


def _local_arrays():
    from zpar import namespace

    return sorted(k for k, v in namespace.current().items() if isinstance(v, LocalArray))


def _maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@pytest.mark.parametrize("size", [2 * 10**8, 10**12], ids=["2e8", "1e12"])
def test_an_unstructured_size_past_its_indices_is_refused_before_allocating(rc, size):
    n = len(rc.ids)
    for rank, eid in enumerate(rc.ids):
        rc[eid].apply_sync(_put, "claims", rank, n, 3 * n)
    before = rc[:].apply_sync(_local_arrays)
    da = rc.darray.from_engines("claims")  # positive control: the true size is adopted
    np.testing.assert_array_equal(da.toarray(), np.arange(3.0 * n))
    da.free()
    for rank, eid in enumerate(rc.ids):
        rc[eid].apply_sync(_put, "claims", rank, n, size)
    rss = _maxrss_mb()
    with pytest.raises(InconsistentExport, match="must cover its size"):
        rc.darray.from_engines("claims")
    assert _maxrss_mb() - rss < 200  # before: +1.6 GB for 2e8, MemoryError for 1e12
    assert rc[:].apply_sync(_local_arrays) == before  # the adopted sections were freed
