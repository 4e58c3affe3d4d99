"""ray through its public API: ``ray.init(num_cpus=n)`` (a local head node with its
defaults), one remote function per workload function, tasks for calls and ``ray.put`` /
``ray.get`` for W5's push and pull.

ray has no addressable engines: its "engines" are the worker processes the raylet starts
for the n CPUs, and a task goes wherever the raylet places it. Its controller is every
process the head node starts (gcs_server, raylet, dashboard, log and autoscaler monitors,
the raylet's agents), i.e. this driver's descendants that are not workers.
"""

from __future__ import annotations

import os
import time
from typing import Any

import psutil

#: the workloads ray has an equivalent for: no addressable engine holds pushed data (W6's
#: scatter to each engine has no meaning), W2 is a task round trip
WORKLOADS = {"W1", "W2", "W3", "W3x8", "W4", "W5", "W7", "W9", "W10"}


def _is_worker(p: psutil.Process) -> bool:
    """A ray worker process: its title is ``ray::IDLE`` or ``ray::<task>`` (the raylet's
    agents are ``ray::DashboardAgent`` and ``ray::RuntimeEnvAgent``), or, before it sets
    its title, ``python .../default_worker.py``."""
    try:
        argv = p.cmdline() or [p.name()]
    except psutil.Error:
        return False
    first = argv[0].split()[0] if argv[0] else ""
    if first.startswith("ray::"):
        return not first.endswith("Agent")
    return len(argv) > 1 and argv[1].endswith("default_worker.py")


class RaySystem:
    name = "ray"
    workloads = WORKLOADS

    def start(self, n: int) -> None:
        import ray

        ray.init(num_cpus=n)
        self.n = n
        self._remote: dict[Any, Any] = {}
        # W1 ends when n workers have answered (as the others' W1 ends when the client sees
        # its n engines registered): one concurrent task per CPU until n distinct pids
        self._engines = self._distinct_pids(n)

    def _distinct_pids(self, n: int) -> list[int]:
        import ray

        slow = self.remote(_hold)
        pids: set[int] = set()
        deadline = time.monotonic() + 120
        while len(pids) < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"ray started {len(pids)} of {n} workers in 120 s")
            pids.update(ray.get([slow.remote(0.05) for _ in range(n)]))
        return sorted(pids)

    def stop(self) -> None:
        import ray

        ray.shutdown()

    def remote(self, f: Any) -> Any:
        """The ray remote function for ``f`` (made once, as a user would decorate it)."""
        r = self._remote.get(f)
        if r is None:
            import ray

            r = self._remote[f] = ray.remote(f)
        return r

    def controller_processes(self) -> list[psutil.Process]:
        me = psutil.Process()
        return [p for p in me.children(recursive=True) if not _is_worker(p)]

    def engine_pids(self) -> list[int]:
        return list(self._engines)

    def call(self, f: Any, *args: Any) -> Any:
        import ray

        return ray.get(self.remote(f).remote(*args))

    def submit(self, f: Any, *args: Any) -> Any:
        return self.remote(f).remote(*args)

    def result(self, handle: Any, timeout: float | None = None) -> Any:
        import ray

        return ray.get(handle, timeout=timeout)

    def imap(self, f: Any, seq: Any) -> Any:
        """Results in order as they arrive: a remote call per element, each got in turn."""
        import ray

        r = self.remote(f)
        refs = [r.remote(x) for x in seq]
        return (ray.get(ref) for ref in refs)

    def map(self, f: Any, seq: Any, chunksize: int | None = None) -> list[Any]:
        import ray

        if chunksize is None:
            r = self.remote(f)
            return ray.get([r.remote(x) for x in seq])
        # ray has no map chunksize: one task per chunk, as a user would
        from bench.tasks import run_chunk

        seq = list(seq)
        chunks = [seq[i : i + chunksize] for i in range(0, len(seq), chunksize)]
        r = self.remote(run_chunk)
        out = ray.get([r.remote(f, c) for c in chunks])
        return [x for chunk in out for x in chunk]

    def push(self, name: str, value: Any) -> None:
        import ray

        self._pushed = ray.put(value)

    def pull(self, name: str) -> Any:
        import ray

        return ray.get(self._pushed)


def _hold(seconds: float) -> int:
    """Keep a worker busy a moment so that concurrent calls land on distinct workers."""
    time.sleep(seconds)
    return os.getpid()
