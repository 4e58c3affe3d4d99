"""``python -m bench.scale [--engines 2,8,32,64] [--count 5000]``: load-balanced no-op tasks
through clusters of growing size, on this machine.

Prints, per engine count: tasks/s (wall), and the task scheduler's own CPU time per task
(user + system, from its process): the scheduling cost, which should stay flat as engines
are added even when the wall rate falls because 64 engines share 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import psutil

from . import tasks


def scheduler_process(cluster) -> psutil.Process:
    controller = psutil.Process(cluster.launcher.controller.pid)
    for child in controller.children():
        if "zpar.schedulers" in " ".join(child.cmdline()):
            return child
    raise RuntimeError("no task scheduler process under the controller")


def measure(n: int, count: int) -> dict[str, float]:
    import zpar

    cluster = zpar.Cluster(n=n, timeout=300)
    rc = cluster.start()
    try:
        lv = rc.load_balanced_view()
        lv.map_sync(tasks.noop, range(4 * n), chunksize=1)  # warm every engine
        sched = scheduler_process(cluster)
        cpu0 = sum(sched.cpu_times()[:2])
        t = time.perf_counter()
        ars = [lv.apply_async(tasks.noop) for _ in range(count)]
        rc.wait(ars)
        dt = time.perf_counter() - t
        cpu = sum(sched.cpu_times()[:2]) - cpu0
        used = len({ar.engine_id for ar in ars})
    finally:
        cluster.stop()
    return {
        "engines": n,
        "tasks_per_s": count / dt,
        "scheduler_cpu_us_per_task": cpu / count * 1e6,
        "engines_used": used,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__)
    p.add_argument("--engines", default="2,8,32,64")
    p.add_argument("--count", type=int, default=5000)
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="zpar-scale-") as d:
        os.environ["ZPAR_DIR"] = d
        for n in [int(x) for x in args.engines.split(",")]:
            print(f"scale: {n} engines…", file=sys.stderr, flush=True)
            rows.append(measure(n, args.count))
            print(json.dumps(rows[-1]), flush=True)
    print(f"\n{'engines':>8} {'tasks/s':>9} {'sched CPU µs/task':>18} {'engines used':>13}")
    for r in rows:
        print(
            f"{r['engines']:>8} {r['tasks_per_s']:>9.0f} {r['scheduler_cpu_us_per_task']:>18.1f}"
            f" {r['engines_used']:>13}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
