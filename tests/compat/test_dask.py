"""ipyparallel's ``Client.become_dask`` / ``stop_dask``: a dask.distributed scheduler in
the controller, a worker in each engine, and a distributed.Client connected to them.
Written from ipyparallel 9.2's tests/test_client.py (test_become_dask)."""

from __future__ import annotations

import pytest

from zpar import Reference, error

pytestmark = pytest.mark.cluster

distributed = pytest.importorskip("distributed")  # the test extra installs it


def test_become_dask(rc):
    executor = rc.become_dask()
    try:
        reprs = rc[:].apply_sync(repr, Reference("distributed_worker"))
        for r in reprs:
            assert "Worker" in r
        assert len(executor.scheduler_info()["workers"]) == len(rc.ids)
        squares = executor.map(lambda x: x * x, range(10))
        tot = executor.submit(sum, squares)
        assert tot.result() == 285
        # the engines go on taking zpar tasks while they host dask workers
        assert rc[:].apply_sync(lambda: "zpar") == ["zpar"] * len(rc.ids)
        assert rc.load_balanced_view().map_sync(lambda x: -x, range(4)) == [0, -1, -2, -3]
    finally:
        executor.close()
        rc.stop_dask()
    ar = rc[:].apply_async(lambda x: x, Reference("distributed_worker"))
    with pytest.raises(error.CompositeError) as info:
        ar.get(10)
    assert {e.ename for e in info.value.errors} == {"NameError"}


def test_become_dask_again_after_stop_on_some_engines(rc):
    executor = rc.become_dask(targets=[0], nthreads=2)
    try:
        info = executor.scheduler_info()
        assert [w["nthreads"] for w in info["workers"].values()] == [2]
        assert executor.submit(lambda: 41 + 1).result() == 42
        assert rc[0].apply_sync(lambda: type(dask_worker).__name__) == "Worker"  # noqa: F821
    finally:
        executor.close()
        rc.stop_dask()
    assert rc.become_distributed is not None and rc.stop_distributed is not None
