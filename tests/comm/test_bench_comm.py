"""bench/comm.py's kernels (mpi4py's API) still run on a zpar communicator: tiny sizes,
ranks as threads, no figure judged."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from threadranks import run_ranks

KERNELS = Path(__file__).resolve().parents[2] / "bench" / "comm_kernels.py"


def _kernels():
    spec = importlib.util.spec_from_file_location("comm_kernels", KERNELS)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_kernels_run_on_a_zpar_communicator():
    k = _kernels()

    def run(c):
        return [
            k.allreduce(c, 8, 3),
            k.allreduce(c, 1 << 16, 2),
            k.bcast(c, 1 << 16, 2),
            k.pingpong(c, 8, 3),
            k.pingpong(c, 1 << 16, 2),
        ]

    for times in run_ranks(2, run, maxdatalen=8192):
        assert len(times) == 5 and all(t >= 0 for t in times)
