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
    # workload: (quick, full, scale)
    "W2": (500, 1000, 1000),
    "W3": (2000, 10000, 10000),
    "W4": (2000, 10000, 10000),
    "W5": (3, 5, 5),
    "W6": (5, 7, 7),
}
#: W7's checkpoints: the controller's memory is read after this many tasks in all
W7_CHECKPOINTS = {
    "quick": [5_000, 20_000],
    "full": [10_000, 100_000],
    "scale": [10_000, 100_000, 1_000_000],
}
#: the engine count of the W3x8 row (W3 again, on a cluster of its own)
W3X8_ENGINES = 8


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
    p.add_argument("--only", default="W1,W2,W3,W4,W5,W6,W7,W10,W9,W3x8")
    p.add_argument("--scale", choices=["quick", "full", "scale"], default="quick")
    p.add_argument("--count", type=int, default=None, help="override every count (smoke)")
    args = p.parse_args(argv)
    only = set(args.only.split(","))
    from .systems import get_system

    system = get_system(args.system)
    col = ["quick", "full", "scale"].index(args.scale)
    supported = getattr(system, "workloads", None)  # None: every workload
    checkpoints = [args.count] if args.count else W7_CHECKPOINTS[args.scale]

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
            ("W7", lambda: w.w7_memory(system, checkpoints)),
            ("W10", lambda: w.w10_balance(system, "full" if col else "quick")),
            ("W9", lambda: w.w9_engine_death(system)),  # last: it kills an engine
        ]:
            if name not in only or (supported is not None and name not in supported):
                continue
            if name == "W7" and args.system not in ("zpar", "ray"):
                continue  # zpar's flatness check beside ray; the others' is a W3 figure
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
    if "W3x8" in only and (supported is None or "W3x8" in supported):
        status |= w3_engines(args.system, W3X8_ENGINES, count("W3"))
    return status


def w3_engines(name: str, engines: int, count: int) -> int:
    """W3 again on a cluster of ``engines`` engines of its own (row W3x8)."""
    from .systems import get_system

    system = get_system(name)
    t = time.perf_counter()
    try:
        system.start(engines)
        emit(name, "W3x8", w.w3_tasks(system, count), time.perf_counter() - t)
        return 0
    except Exception:
        emit(name, "W3x8", {"error": traceback.format_exc(limit=5)}, time.perf_counter() - t)
        return 1
    finally:
        system.stop()


if __name__ == "__main__":
    sys.exit(main())
