"""Runs the workloads on one system, in its own process, and prints one JSON line each.

``python -m bench.runner --system zpar --only W1,W2 --scale quick [--count N]``. Run by
``python -m bench`` with the right interpreter (peers live in their own virtualenv).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

from . import workloads as w

SCALES = {
    # workload: (quick, full)
    "W2": (500, 1000),
    "W3": (2000, 10000),
    "W4": (2000, 10000),
    "W5": (3, 5),
    "W6": (5, 7),
    "W7": (20000, 100000),
}


def emit(system: str, workload: str, figures: dict, seconds: float) -> None:
    print(
        json.dumps(
            {
                "system": system,
                "workload": workload,
                "figures": figures,
                "seconds": round(seconds, 2),
            }
        ),
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--system", required=True)
    p.add_argument("--only", default="W1,W2,W3,W4,W5,W6,W7,W9")
    p.add_argument("--scale", choices=["quick", "full"], default="quick")
    p.add_argument("--count", type=int, default=None, help="override every count (smoke)")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    from .systems import get_system

    system = get_system(args.system)
    col = 0 if args.scale == "quick" else 1

    def count(name: str) -> int:
        return args.count if args.count else SCALES[name][col]

    t = time.perf_counter()
    try:
        figures = w.w1_start(system)
    except Exception:
        emit(args.system, "W1", {"error": traceback.format_exc(limit=3)}, time.perf_counter() - t)
        return 1
    emit(args.system, "W1", figures, time.perf_counter() - t)
    status = 0
    try:
        for name, run in [
            ("W2", lambda: w.w2_latency(system, count("W2"))),
            ("W3", lambda: w.w3_tasks(system, count("W3"))),
            ("W4", lambda: w.w4_map(system, count("W4"))),
            ("W5", lambda: w.w5_bandwidth(system, min(count("W5"), SCALES["W5"][col]))),
            ("W6", lambda: w.w6_scatter_gather(system, min(count("W6"), SCALES["W6"][col]))),
            ("W7", lambda: w.w7_memory(system, count("W7"))),
            ("W9", lambda: w.w9_engine_death(system)),  # last: it kills an engine
        ]:
            if name not in only:
                continue
            if name == "W7" and args.system != "zpar":
                continue  # zpar's flatness check; peers' controller RSS is a W3 figure
            t = time.perf_counter()
            try:
                emit(args.system, name, run(), time.perf_counter() - t)
            except Exception:
                status = 1
                emit(
                    args.system,
                    name,
                    {"error": traceback.format_exc(limit=5)},
                    time.perf_counter() - t,
                )
    finally:
        system.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
