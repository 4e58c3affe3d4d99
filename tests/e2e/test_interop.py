"""Code written for concurrent.futures or joblib runs on the cluster unchanged."""

from __future__ import annotations

import concurrent.futures
import os

import pytest

import zpar
from zpar.client.executor import ViewExecutor


def _square(x):
    return x * x


def _fail(x):
    raise ValueError(f"bad {x}")


def test_executor_submit_map_and_errors(rc):
    with ViewExecutor(rc.load_balanced_view()) as ex:
        futs = [ex.submit(_square, i) for i in range(20)]
        assert [f.result(timeout=20) for f in futs] == [i * i for i in range(20)]
        assert list(ex.map(_square, range(10))) == [i * i for i in range(10)]
        assert list(ex.map(pow, range(10), [2] * 12, chunksize=3)) == [i * i for i in range(10)]
        bad = ex.submit(_fail, 3)
        with pytest.raises(zpar.RemoteError, match="bad 3"):
            bad.result(timeout=20)
        done, _ = concurrent.futures.wait([ex.submit(os.getpid) for _ in range(8)], timeout=20)
        assert len(done) == 8
    with pytest.raises(RuntimeError, match="shut down"):
        ex.submit(_square, 1)


def test_executor_rejects_bad_chunksize(rc):
    with pytest.raises(ValueError, match="chunksize"):
        ViewExecutor(rc[:]).map(_square, [1], chunksize=0)


def test_joblib_backend_runs_on_engines(rc):
    joblib = pytest.importorskip("joblib", reason="joblib is a test extra")
    from zpar.client.joblib_backend import register_joblib_backend

    register_joblib_backend("zpar-test", view=rc.load_balanced_view())
    with joblib.parallel_backend("zpar-test"):
        out = joblib.Parallel()(joblib.delayed(_square)(i) for i in range(50))
        pids = set(joblib.Parallel()(joblib.delayed(os.getpid)() for _ in range(50)))
    assert out == [i * i for i in range(50)]
    assert pids <= set(rc[:].apply_sync(os.getpid)) and os.getpid() not in pids
