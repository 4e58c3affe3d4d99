"""Timing kernels for bench/comm.py, written once against mpi4py's API: the same code runs
on mpi4py's ``MPI.COMM_WORLD`` and on a zpar communicator (same method names)."""

from __future__ import annotations

import time

import numpy as np


def _timed(comm, fn, reps):
    """Median seconds per call of fn() on rank 0, every rank in step (a barrier first)."""
    comm.Barrier()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    comm.Barrier()
    return float(np.median(times))


def allreduce(comm, nbytes, reps):
    a = np.ones(max(1, nbytes // 8))
    b = np.empty_like(a)
    return _timed(comm, lambda: comm.Allreduce(a, b), reps)


def bcast(comm, nbytes, reps):
    a = np.ones(nbytes // 8)
    return _timed(comm, lambda: comm.Bcast(a, root=0), reps)


def pingpong(comm, nbytes, reps):
    """Half a round trip between ranks 0 and 1 (the others wait)."""
    buf = np.ones(max(1, nbytes // 8))
    r = comm.Get_rank()

    def once():
        if r == 0:
            comm.Send(buf, dest=1, tag=1)
            comm.Recv(buf, source=1, tag=2)
        elif r == 1:
            comm.Recv(buf, source=0, tag=1)
            comm.Send(buf, dest=0, tag=2)

    return _timed(comm, once, reps) / 2


def pingpong_obj(comm, reps):
    """Half a round trip of a Python float between ranks 0 and 1 (mpi4py's lower-case
    send/recv, as a user's script does it: pickled)."""
    r = comm.Get_rank()

    def once():
        if r == 0:
            comm.send(1.0, dest=1, tag=1)
            comm.recv(source=1, tag=2)
        elif r == 1:
            x = comm.recv(source=0, tag=1)
            comm.send(x, dest=0, tag=2)

    return _timed(comm, once, reps) / 2


def suite(comm, quick=False):
    """Every figure of issue 16's benchmark for this communicator's size."""
    n = comm.Get_size()
    k = 3 if quick else 1
    out = {
        "size": n,
        "allreduce_8B_us": allreduce(comm, 8, 2000 // k) * 1e6,
        "allreduce_8MB_ms": allreduce(comm, 8 << 20, 20 // k) * 1e3,
        "bcast_100MB_ms": bcast(comm, 100 << 20, 5 if not quick else 2) * 1e3,
    }
    if n >= 2:
        out["pingpong_8B_us"] = pingpong(comm, 8, 2000 // k) * 1e6
        out["pingpong_obj_us"] = pingpong_obj(comm, 2000 // k) * 1e6
        t = pingpong(comm, 64 << 20, 10 // k)
        out["bandwidth_64MB_GBps"] = (64 << 20) / t / 1e9
    return out
