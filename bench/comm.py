"""Engine communicator benchmark (issue 16), side by side with mpi4py on this machine.

    python -m bench.comm [--quick] [--no-mpi]

zpar: a local cluster of 4 engines, communicators over 2 and 4 of them (one host: ipc,
two-phase collectives). mpi4py: the same kernels (bench/comm_kernels.py, mpi4py's API)
under `mpiexec -n 2` and `-n 4` from the `mpich` wheel, in bench/.venv-mpi (created on first
use: `pip install mpi4py mpich numpy`). Figures are rank 0's medians.
"""

from __future__ import annotations

import argparse
import json
import os
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


def run_zpar(sizes: list[int], quick: bool, params: dict[str, int]) -> dict[int, dict]:
    import cloudpickle

    import zpar

    from . import comm_kernels

    cloudpickle.register_pickle_by_value(comm_kernels)
    os.environ.setdefault("ZPAR_DIR", tempfile.mkdtemp(prefix="zpar-bench-comm-"))
    out = {}
    # ZPAR_BENCH_CURVE=1: the same rows on a --curve cluster (Curve links; docs/security.md)
    curve = os.environ.get("ZPAR_BENCH_CURVE") == "1"
    with zpar.Cluster(n=max(sizes), log_level="WARNING", curve=curve) as rc:
        rc.wait_for_engines(max(sizes), timeout=120)
        for n in sizes:
            dv = rc[:n]
            dv.communicator(name="bench", **params)

            def run(quick=quick):
                from zpar.namespace import current

                return comm_kernels.suite(current()["bench"], quick)

            def free():
                from zpar.namespace import current

                current()["bench"].Free()

            out[n] = dv.apply_sync(run)[0]
            dv.apply_sync(free)
    return out


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


def table(z: dict[int, dict], m: dict[int, dict], sizes: list[int]) -> str:
    lines = ["| figure | " + " | ".join(f"zpar n={n} | mpi4py n={n}" for n in sizes) + " |"]
    lines.append("|---" * (1 + 2 * len(sizes)) + "|")
    for key, label in ROWS:
        cells = []
        for n in sizes:
            for src in (z, m):
                v = src.get(n, {}).get(key)
                cells.append("" if v is None else f"{v:.3g}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--no-mpi", action="store_true", help="zpar only")
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
    z = run_zpar(sizes, args.quick, params)
    m = {} if args.no_mpi else run_mpi(sizes, args.quick)
    print(table(z, m, sizes))
    print(json.dumps({"zpar": z, "mpi4py": m}))


if __name__ == "__main__":
    main()
