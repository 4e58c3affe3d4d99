"""Engine communicator benchmark (issue 16), side by side with mpi4py on this machine.

    python -m bench.comm [--quick] [--runs R] [--no-mpi] [--json-out FILE]

zpar: a local cluster of 4 engines, communicators over 2 and 4 of them (one host: ipc,
two-phase collectives). mpi4py: the same kernels (bench/comm_kernels.py, mpi4py's API)
under `mpiexec -n 2` and `-n 4` from the `mpich` wheel, in bench/.venv-mpi (created on first
use: `pip install mpi4py mpich numpy`). Each of the R runs measures zpar, then mpi4py, then
the C floor (bench/shmfloor.py: two C processes bouncing 8 bytes through a shared page,
spinning and through a futex), so the three share the same minutes of a noisy machine.
Figures are rank 0's medians per run; the table gives min-max over the runs, and each run
appends its figures to bench/results.jsonl (workloads "comm n=2", "comm n=4", "comm floor"),
zpar's with rank 0's waits over the run by phase (lane_room_waits: pause-spun with room,
lane_yield_waits: yielded, lane_sleeps: slept on the futex), which say how busy the host
was for the figures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-mpi"

ROWS = [
    ("allreduce_8B_us", "Allreduce 8 B (us)"),
    ("allreduce_8MB_ms", "Allreduce 8 MB float64 (ms)"),
    ("pingpong_8B_us", "ping-pong latency 8 B, half round trip (us)"),
    ("pingpong_obj_us", "ping-pong of a Python float (send/recv), half round trip (us)"),
    ("bandwidth_64MB_GBps", "ping-pong bandwidth 64 MB (GB/s)"),
    ("bcast_100MB_ms", "Bcast 100 MB (ms)"),
]


def run_zpar(sizes: list[int], quick: bool, params: dict[str, int], runs: int, between) -> list:
    """zpar's figures for each run: {n: figures}; ``between(i)`` runs after zpar's run i
    (mpi4py and the floor, in the same minutes)."""
    import cloudpickle

    import zpar

    from . import comm_kernels

    cloudpickle.register_pickle_by_value(comm_kernels)
    os.environ.setdefault("ZPAR_DIR", tempfile.mkdtemp(prefix="zpar-bench-comm-"))
    out = []
    # ZPAR_BENCH_CURVE=1: the same rows on a --curve cluster (Curve links; docs/security.md)
    curve = os.environ.get("ZPAR_BENCH_CURVE") == "1"
    with zpar.Cluster(n=max(sizes), log_level="WARNING", curve=curve) as rc:
        rc.wait_for_engines(max(sizes), timeout=120)
        views = {}
        for n in sizes:
            views[n] = rc[:n]
            views[n].communicator(name=f"bench{n}", **params)

        for i in range(runs):
            figs = {}
            for n in sizes:

                def run(name=f"bench{n}", quick=quick):
                    from zpar.namespace import current

                    comm = current()[name]
                    lane = comm._links.lane
                    kinds = ("room_waits", "yield_waits", "sleeps")
                    before = [getattr(lane, k, 0) for k in kinds]
                    figs = comm_kernels.suite(comm, quick)
                    # how rank 0's waits went (docs/communicator.md, "The spin is chosen by
                    # the host's runnable tasks"): spun with room, yielded, slept
                    for k, b in zip(kinds, before, strict=True):
                        figs[f"lane_{k}"] = getattr(lane, k, 0) - b
                    return figs

                figs[n] = views[n].apply_sync(run)[0]
                figs[n]["lane_compiled"] = views[n].apply_sync(_compiled)[0]
            out.append(figs)
            between(i)
        for n in sizes:

            def free(name=f"bench{n}"):
                from zpar.namespace import current

                current()[name].Free()

            views[n].apply_sync(free)
    return out


def _compiled() -> bool:
    from zpar.comm import lane

    return bool(lane.COMPILED)


def ensure_venv() -> Path | None:
    py = VENV / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "mpi4py", "mpich", "numpy"])
        if r.returncode:
            return None
    return py


def run_mpi(sizes: list[int], quick: bool) -> dict[int, dict]:
    py = ensure_venv()
    if py is None:
        return {}
    out = {}
    for n in sizes:
        cmd = [str(VENV / "bin" / "mpiexec"), "-n", str(n), str(py), str(HERE / "comm_mpi.py")]
        if quick:
            cmd.append("--quick")
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode:
            print(f"mpi4py -n {n} failed: {r.stderr[-2000:]}", file=sys.stderr)
            continue
        out[n] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def run_floor() -> dict[str, float]:
    """The C ping-pong of bench/shmfloor.py, once each way (half round trip, us)."""
    from . import shmfloor

    figs = shmfloor.pingpong_figures(50_000)
    return {k.replace("_ns", "_us"): v / 1000 for k, v in figs.items()}


def _span(values: list[float]) -> str:
    if not values:
        return ""
    lo, hi = min(values), max(values)
    return f"{lo:.3g}" if f"{lo:.3g}" == f"{hi:.3g}" else f"{lo:.3g}-{hi:.3g}"


def table(z: list[dict], m: list[dict], floor: list[dict], sizes: list[int]) -> str:
    lines = ["| figure (min-max over runs) | " + " | ".join(
        f"zpar n={n} | mpi4py n={n}" for n in sizes) + " |"]  # fmt: skip
    lines.append("|---" * (1 + 2 * len(sizes)) + "|")
    for key, label in ROWS:
        cells = []
        for n in sizes:
            for src in (z, m):
                cells.append(_span([r[n][key] for r in src if key in r.get(n, {})]))
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for key in floor[0] if floor else []:
        lines.append(f"| C floor: {key} (us) | {_span([f[key] for f in floor])} |")
    return "\n".join(lines)


def record(path: str, quick: bool, z: dict, m: dict, floor: dict) -> None:
    """One JSON line per (system, workload) of this run, as bench/__main__.py writes."""
    from .__main__ import git_commit

    base = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "scale": "quick" if quick else "full",
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
        "load": list(os.getloadavg()),
        "command": "python -m bench.comm" + (" --quick" if quick else ""),
    }
    rows = [("zpar", f"comm n={n}", f) for n, f in z.items()]
    rows += [("mpi4py", f"comm n={n}", f) for n, f in m.items()]
    if floor:
        rows.append(("C", "comm floor", floor))
    with open(path, "a") as f:
        for system, workload, figures in rows:
            f.write(json.dumps({**base, "system": system, "workload": workload,
                                "figures": figures}) + "\n")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--runs", type=int, default=1, help="runs, zpar and mpi4py alternating")
    ap.add_argument("--no-mpi", action="store_true", help="zpar only")
    ap.add_argument("--json-out", default=str(HERE / "results.jsonl"), help="'' for none")
    ap.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="NAME=INT",
        help="a communicator parameter, e.g. maxdatalen=1048576 (repeatable)",
    )
    args = ap.parse_args(argv)
    params = {k: int(v) for k, v in (p.split("=", 1) for p in args.param)}
    sizes = [2, 4]
    m: list[dict] = []
    floor: list[dict] = []

    def between(i: int) -> None:
        m.append({} if args.no_mpi else run_mpi(sizes, args.quick))
        try:
            floor.append(run_floor())
        except (OSError, subprocess.CalledProcessError) as e:
            print(f"no C floor: {e}", file=sys.stderr)

    z = run_zpar(sizes, args.quick, params, args.runs, between)
    if args.json_out:
        for i, zi in enumerate(z):
            record(args.json_out, args.quick, zi, m[i], floor[i] if i < len(floor) else {})
    print(table(z, m, floor, sizes))
    print(json.dumps({"zpar": z, "mpi4py": m, "floor": floor}))


if __name__ == "__main__":
    main()
