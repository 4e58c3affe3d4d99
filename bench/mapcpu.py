"""CPU of each process per load-balanced map and per task: ``python -m bench.mapcpu
[--maps N] [--tasks N] [--repeat R] [--json]``.

Why: a W4 row is the median of a few maps of about 3 ms each, and on a loaded host one
map slowed by a neighbour moves it; the CPU each process (client, hub, task scheduler,
each engine) spends on a fixed workload barely moves with the load. This runs, on one
``zpar.Cluster(n=2)``, ``--maps`` default maps of 2,000 elements (W4's call), a tenth as
many with ``chunksize=100``, and ``--tasks`` no-op ``apply_async`` (W3's), ``--repeat``
times, and prints each process's user + system CPU per map (per task for W3) in µs, with
the rate. For comparing commits in alternating runs (docs/benchmarks.md, "Before/after
issue 25"), not as a target.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import psutil

from . import tasks
from .workloads import _processes_by_role, _pss


def _cpu(p: psutil.Process) -> float:
    """CPU seconds of a process's live threads: the scheduler's ns counts
    (/proc/<pid>/task/*/schedstat) where Linux has them, else psutil's (10 ms ticks: a
    process's CPU over a few hundred maps moves by whole ticks)."""
    total = 0
    try:
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            with open(f"/proc/{p.pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        t = p.cpu_times()
        return t.user + t.system
    return total * 1e-9


def _measure(system: Any, fn: Callable[[], None], n: int) -> dict[str, float]:
    roles = _processes_by_role(system)
    before = {role: _cpu(p) for role, p in roles.items()}
    t = time.perf_counter()
    fn()
    dt = time.perf_counter() - t
    out = {role: (_cpu(p) - before[role]) / n * 1e6 for role, p in roles.items()}
    out["total"] = sum(out.values())
    out["per_s"] = n / dt
    return out


def run(maps: int = 300, tasks_n: int = 6000, repeat: int = 2) -> dict[str, Any]:
    from .systems.zpar_sys import ZparSystem

    system = ZparSystem()
    system.start(2)
    try:
        system.map(tasks.identity, range(10))  # the function known on every engine
        seq = range(2000)
        chunked = max(1, maps // 10)

        def w4() -> None:
            for _ in range(maps):
                system.map(tasks.identity, seq)

        def w4c() -> None:
            for _ in range(chunked):
                system.map(tasks.identity, seq, chunksize=100)

        def w3() -> None:
            handles = [system.submit(tasks.noop) for _ in range(tasks_n)]
            for h in handles:
                system.result(h)

        runs: dict[str, list[dict[str, float]]] = {"W4": [], "W4 chunksize=100": [], "W3": []}
        for _ in range(repeat):
            runs["W4"].append(_measure(system, w4, maps))
            runs["W4 chunksize=100"].append(_measure(system, w4c, chunked))
            runs["W3"].append(_measure(system, w3, tasks_n))
        out: dict[str, Any] = {
            name: {k: statistics.median(r[k] for r in rs) for k in rs[0]}
            for name, rs in runs.items()
        }
        out["controller_pss_mb"] = _pss(system.controller_processes())
        return out
    finally:
        system.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--maps", type=int, default=300, help="default maps of 2,000 elements")
    p.add_argument("--tasks", type=int, default=6000, help="W3's no-op tasks")
    p.add_argument("--repeat", type=int, default=2, help="measures of each (median)")
    p.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    args = p.parse_args()
    res = run(args.maps, args.tasks, args.repeat)
    if args.json:
        print(json.dumps(res))
        return
    for name in ("W4", "W4 chunksize=100", "W3"):
        r = res[name]
        unit = "task" if name == "W3" else "map"
        roles = "  ".join(f"{k} {v:.0f}" for k, v in r.items() if k not in ("total", "per_s"))
        print(f"{name:17s} {r['total']:8.0f} us/{unit} ({roles}); {r['per_s']:.0f} {unit}s/s")
    print(f"controller PSS {res['controller_pss_mb']:.1f} MB")


if __name__ == "__main__":
    main()
