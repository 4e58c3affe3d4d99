"""Paired before/after runs of bench.comm: this tree against another checkout, alternating.

    python -m bench.comm_vs --base /work/main --base-python /work/venvs/main/bin/python \
        [--runs R] [--full]

Each of the R rounds runs ``python -m bench.comm --quick`` (zpar, mpi4py + MPICH and the C
floor, in the same minutes) first in the base checkout, then in this one, so both sides
share the machine's drift; the table gives each figure's min-max over the rounds for the
base's zpar, this tree's zpar and mpi4py (from both sides' runs), with the load averages
seen. Microsecond figures on a loaded host say little: quote the load beside them. This
tree's runs append to its bench/results.jsonl, as bench.comm does; the base's append
nowhere (its checkout is not this run's to change).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .comm import ROWS, _span

HERE = Path(__file__).resolve().parent


def run_once(tree: Path, python: str, quick: bool, record: bool) -> dict:
    """One bench.comm run in ``tree``: {"zpar": {n: figures}, "mpi4py": ..., "floor": ...};
    its rows go to tree's bench/results.jsonl only when ``record``."""
    cmd = [python, "-m", "bench.comm", "--runs", "1"] + (["--quick"] if quick else [])
    if not record:
        cmd += ["--json-out", ""]
    r = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=1800)
    if r.returncode:
        raise RuntimeError(f"bench.comm in {tree} failed:\n{r.stderr[-3000:]}")
    out = json.loads(r.stdout.strip().splitlines()[-1])
    return {k: v[0] if v else {} for k, v in out.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="the other checkout (its bench/ is run)")
    ap.add_argument("--base-python", default=sys.executable, help="python with base installed")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--full", action="store_true", help="bench.comm without --quick")
    args = ap.parse_args(argv)
    base, mine = Path(args.base).resolve(), HERE.parent
    sides: dict[str, list[dict]] = {"base": [], "this": []}
    loads = []
    for _ in range(args.runs):
        loads.append(os.getloadavg()[0])
        # the other checkout's files are not ours to change: its runs are not recorded
        sides["base"].append(run_once(base, args.base_python, not args.full, False))
        sides["this"].append(run_once(mine, sys.executable, not args.full, True))
    sizes = ["2", "4"]
    head = " | ".join(f"base n={n} | this n={n} | mpi4py n={n}" for n in sizes)
    lines = [f"| figure (min-max, {args.runs} rounds) | {head} |", "|---" * 7 + "|"]
    for key, label in ROWS:
        cells = []
        for n in sizes:
            for vals in (
                [r["zpar"].get(n, {}).get(key) for r in sides["base"]],
                [r["zpar"].get(n, {}).get(key) for r in sides["this"]],
                [r["mpi4py"].get(n, {}).get(key) for s in sides.values() for r in s],
            ):
                cells.append(_span([v for v in vals if v is not None]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    floors = [r["floor"] for s in sides.values() for r in s if r.get("floor")]
    for key in floors[0] if floors else []:
        lines.append(f"| C floor: {key} | {_span([f[key] for f in floors])} |")
    print("\n".join(lines))
    print(f"load average (1 min) at each round's start: {', '.join(f'{x:.1f}' for x in loads)}")
    print(json.dumps({"loads": loads, **sides}))


if __name__ == "__main__":
    main()
