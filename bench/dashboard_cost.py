"""What the dashboard costs the task path: ``python -m bench.dashboard_cost [--runs R]``.

W3 (10,000 load-balanced no-ops: tasks/s, CPU per task) and W7 (the controller's PSS after
10,000 and 50,000 tasks) on a 2-engine cluster, three ways, alternated run by run so the
machine's load falls on each alike: ``off`` (--no-dashboard), ``on`` (the dashboard served,
no page open), ``page`` (headless Chromium on the page during the run, updated twice a
second). Prints min-max per way; docs/benchmarks.md quotes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from . import workloads as w
from .systems.zpar_sys import ZparSystem

REPO = Path(__file__).resolve().parents[1]
MODES = ("off", "on", "page")


class Dashboarded(ZparSystem):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.mode = mode

    def start(self, n: int) -> None:
        import zpar

        settings = {"dashboard": "off"} if self.mode == "off" else {}
        self.cluster = zpar.Cluster(n=n, **settings)
        self.rc = self.cluster.start()
        self._views()


def one_run(mode: str, w3_count: int, checkpoints: list[int]) -> dict[str, Any]:
    system = Dashboarded(mode)
    system.start(2)
    browser = None
    try:
        if mode == "page":
            sys.path.insert(0, str(REPO))
            from tests.dashboard.chromium import Browser

            browser = Browser(system.cluster.dashboard_link)
            browser.wait_for("document.body.dataset.updated")
        w3 = w.w3_tasks(system, w3_count)
        w7 = w.w7_memory(system, checkpoints)
        if browser is not None:  # the page followed the whole run
            bars = browser.eval("document.getElementById('stream').dataset.bars")
        else:
            bars = None
    finally:
        if browser is not None:
            browser.close()
        system.stop()
    return {
        "mode": mode,
        "w3_tasks_per_s": round(w3["tasks_per_s"]),
        "w3_cpu_us_per_task_total": round(w3["cpu_us_per_task_total"], 1),
        "w3_controller_pss_mb": w3["controller_pss_mb"],
        **{f"w7_pss_mb_at_{n}": w7[f"pss_mb_at_{n}"] for n in checkpoints},
        "w7_tasks_per_s": round(w7["tasks_per_s"]),
        "page_bars": bars,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.dashboard_cost")
    p.add_argument("--runs", type=int, default=3, help="runs of each way")
    p.add_argument("--w3", type=int, default=10_000)
    p.add_argument("--w7", default="10000,50000")
    args = p.parse_args(argv)
    checkpoints = [int(x) for x in args.w7.split(",")]
    results: list[dict[str, Any]] = []
    for i in range(args.runs):
        order = MODES if i % 2 == 0 else tuple(reversed(MODES))
        for mode in order:
            r = one_run(mode, args.w3, checkpoints)
            print(json.dumps(r), flush=True)
            results.append(r)
    print("\nmin-max per way:")
    keys = [k for k in results[0] if k not in ("mode", "page_bars")]
    for mode in MODES:
        rows = [r for r in results if r["mode"] == mode]
        spans = {
            k: f"{min(r[k] for r in rows):g}-{max(r[k] for r in rows):g}"
            for k in keys
            if all(r[k] is not None for r in rows)
        }
        print(mode, json.dumps(spans))
    return 0


if __name__ == "__main__":
    sys.exit(main())
