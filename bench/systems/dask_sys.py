"""dask.distributed through its public API: a LocalCluster of worker processes, one thread
each (the closest match to two engines)."""

from __future__ import annotations

import os
from typing import Any

import psutil


class DaskSystem:
    name = "dask"

    def start(self, n: int) -> None:
        from distributed import Client, LocalCluster

        self.cluster = LocalCluster(
            n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
        )
        self.client = Client(self.cluster)
        self.client.wait_for_workers(n)
        self.workers = sorted(self.client.scheduler_info()["workers"])

    def stop(self) -> None:
        try:
            self.client.close()
        finally:
            self.cluster.close()

    def controller_processes(self) -> list[psutil.Process]:
        # the scheduler runs inside this process with LocalCluster: report this process's
        # own RSS minus nothing (an upper bound); workers are excluded
        return [psutil.Process(os.getpid())]

    def engine_pids(self) -> list[int]:
        pids = self.client.run(os.getpid)
        return [pids[w] for w in self.workers]

    def call(self, f: Any, *args: Any) -> Any:
        return self.client.submit(f, *args, pure=False, workers=[self.workers[0]]).result()

    def submit(self, f: Any, *args: Any) -> Any:
        return self.client.submit(f, *args, pure=False)

    def submit_to(self, engine: int, f: Any, *args: Any) -> Any:
        return self.client.submit(f, *args, pure=False, workers=[self.workers[engine]])

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        return handle.result(timeout=timeout)

    def imap(self, f: Any, seq: Any) -> Any:
        """Results in order as they arrive: client.map, each future's result in turn."""
        return (fut.result() for fut in self.client.map(f, seq, pure=False))

    def map(self, f: Any, seq: Any, chunksize: int | None = None) -> list[Any]:
        if chunksize is None:
            return self.client.gather(self.client.map(f, seq, pure=False))
        # dask has no map chunksize: submit one task per chunk, as a user would
        from bench.tasks import run_chunk

        seq = list(seq)
        chunks = [seq[i : i + chunksize] for i in range(0, len(seq), chunksize)]
        out = self.client.gather(self.client.map(run_chunk, [f] * len(chunks), chunks, pure=False))
        return [x for chunk in out for x in chunk]

    def push(self, name: str, value: Any) -> None:
        self._pushed = self.client.scatter(value, workers=[self.workers[0]], direct=True)

    def pull(self, name: str) -> Any:
        return self._pushed.result()

    def scatter_gather(self, a: Any) -> Any:
        import numpy as np

        parts = np.array_split(a, len(self.workers))
        futures = [
            self.client.scatter(p, workers=[w], direct=True)
            for p, w in zip(parts, self.workers, strict=True)
        ]
        return np.concatenate(self.client.gather(futures, direct=True))
