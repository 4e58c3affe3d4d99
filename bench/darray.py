"""``python -m bench.darray [--n 8000] [--engines 2,4] [--repeat 3] [--systems zpar,dask]``

A 2-d n x n float64 array over 2 and 4 engines (dask: worker processes, one thread each),
the same grid of blocks for both: creation (``ones``: in both systems one value per
section, no memory until needed -- dask's are stride-0 broadcast views, zpar's constant
LocalArrays; and ``fromfunction`` of a ramp, the row that compares materialised arrays),
``a + b`` of two such ramps, ``a.sum()``, ``a.sum(axis=0)`` (left distributed in both: a
DistArray / a persisted dask array), one halo exchange of one cell on every side (dask: ``dask.array.overlap.overlap`` with periodic
boundaries, its ghost-cell step) and ``toarray()`` (dask: ``compute()``). Each figure is the
median of ``--repeat`` runs, in seconds; dask runs in ``bench/.venv-peers``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROWS = ["ones", "fromfunction", "add", "sum", "sum_axis", "halo", "toarray"]


def _timed(f, repeat):
    """Median seconds of ``f(rep)``; each repetition builds something new (dask would
    otherwise find the previous repetition's result under the same key and skip the work)."""
    out = []
    for rep in range(repeat):
        t0 = time.perf_counter()
        f(rep)
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def grid_of(engines: int) -> tuple[int, int]:
    return (2, engines // 2) if engines >= 2 else (1, 1)


def ramp(i, j, offset=0):
    """The benchmark's data: every cell different, computed where it lives."""
    return i * 8192.0 + j + offset


def tilt(i, j):
    return i - j * 1.0


def run_zpar(n: int, engines: int, repeat: int) -> dict[str, float]:
    import zpar

    grid = grid_of(engines)
    layout = {"dist": ("b", "b"), "grid_shape": grid}
    with zpar.Cluster(n=engines, timeout=120) as rc:
        rc.wait_for_engines(engines, timeout=120)
        figures = {}
        held = {}

        def ones(rep):
            held.pop("o", None)
            held["o"] = rc.darray.full((n, n), 1.0 + rep, **layout)

        def create(rep):
            held.pop("a", None)
            held["a"] = rc.darray.fromfunction(
                functools.partial(ramp, offset=rep), (n, n), **layout
            )

        # warm-up, untimed: the engines import zpar.darray and open their communicator
        w = rc.darray.ones((64, 64), padding=((1, 1), (1, 1)), **layout)
        w.exchange_halos()
        w.sum()
        w.sum(axis=0).toarray()
        (w + w).toarray()
        w.free()
        figures["ones"] = _timed(ones, repeat)
        held.pop("o").free()
        figures["fromfunction"] = _timed(create, repeat)
        b = rc.darray.fromfunction(tilt, (n, n), **layout)

        def add(rep):
            held.pop("c", None)
            held["c"] = held["a"] + b

        figures["add"] = _timed(add, repeat)
        figures["sum"] = _timed(lambda rep: held["a"].sum(), repeat)
        figures["sum_axis"] = _timed(lambda rep: held["a"].sum(axis=0).free(), repeat)
        held.pop("c").free()
        b.free()
        h = rc.darray.fromfunction(
            ramp, (n, n), padding=((1, 1), (1, 1)), periodic=(True, True), **layout
        )
        figures["halo"] = _timed(lambda rep: h.exchange_halos(), repeat)
        h.free()
        figures["toarray"] = _timed(lambda rep: held["a"].toarray(), repeat)
        held.pop("a").free()
    return figures


def run_dask(n: int, engines: int, repeat: int) -> dict[str, float]:
    import dask.array as da
    import numpy as np
    from dask.distributed import Client, LocalCluster, wait

    grid = grid_of(engines)
    chunks = (-(-n // grid[0]), -(-n // grid[1]))
    with LocalCluster(
        n_workers=engines, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        with Client(cluster) as client:
            client.wait_for_workers(engines)
            figures = {}
            held = {}

            def persisted(x):
                x = x.persist()
                wait(x)
                return x

            def ones(rep):
                held.pop("o", None)
                held["o"] = persisted(da.full((n, n), 1.0 + rep, chunks=chunks))

            def create(rep):
                held.pop("a", None)
                a = da.fromfunction(ramp, shape=(n, n), chunks=chunks, dtype=float, offset=rep)
                held["a"] = persisted(a)

            # warm-up, untimed: the workers import dask.array's chunk functions
            w = persisted(da.ones((64, 64), chunks=32))
            (w + w).sum().compute()
            persisted(w.sum(axis=0)).compute()
            persisted(da.overlap.overlap(w, depth=1, boundary="periodic")).compute()
            del w
            figures["ones"] = _timed(ones, repeat)
            held.pop("o")
            figures["fromfunction"] = _timed(create, repeat)
            held["b"] = persisted(da.fromfunction(tilt, shape=(n, n), chunks=chunks, dtype=float))

            def add(rep):  # a + b, blockwise, under a key of its own per repetition
                held.pop("c", None)
                c = da.map_blocks(np.add, held["a"], held["b"], dtype=float, name=f"add-{rep}")
                held["c"] = persisted(c)

            figures["add"] = _timed(add, repeat)
            figures["sum"] = _timed(lambda rep: held["a"].sum().compute(), repeat)

            def sum_axis(rep):  # under a key of its own per repetition, as halo below
                s = held["a"].sum(axis=0)
                persisted(s.map_blocks(lambda x: x, dtype=float, name=f"sum0-{rep}"))

            figures["sum_axis"] = _timed(sum_axis, repeat)
            held.pop("c")
            held.pop("b")

            def halo(rep):
                g = da.overlap.overlap(held["a"], depth=1, boundary="periodic")
                persisted(g.map_blocks(lambda x: x, dtype=float, name=f"halo-{rep}"))

            figures["halo"] = _timed(halo, repeat)
            figures["toarray"] = _timed(lambda rep: held["a"].compute(), repeat)
    return figures


def child(args: argparse.Namespace) -> None:
    run = run_zpar if args.system == "zpar" else run_dask
    for engines in args.engines:
        figures = run(args.n, engines, args.repeat)
        print(
            json.dumps(
                {"system": args.system, "engines": engines, "n": args.n, "figures": figures}
            ),
            flush=True,
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.darray", description=__doc__)
    p.add_argument("--n", type=int, default=8000)
    p.add_argument("--engines", default="2,4")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--systems", default="zpar,dask")
    p.add_argument("--system", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.engines = [int(e) for e in str(args.engines).split(",")]
    if args.system:
        child(args)
        return 0
    from .__main__ import ROOT, peers_python

    results: dict[tuple[str, int], dict[str, float]] = {}
    for system in args.systems.split(","):
        python = sys.executable if system == "zpar" else str(peers_python())
        cmd = [python, "-m", "bench.darray", "--system", system, "--n", str(args.n)]
        cmd += ["--engines", ",".join(map(str, args.engines)), "--repeat", str(args.repeat)]
        with tempfile.TemporaryDirectory(prefix="zpar-bench-") as d:
            env = dict(os.environ, PYTHONPATH=str(ROOT), ZPAR_DIR=d)
            proc = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=3600)
        for line in proc.stdout.splitlines():
            if line.startswith("{"):
                row = json.loads(line)
                results[(row["system"], row["engines"])] = row["figures"]
        if proc.returncode:
            print(f"bench.darray: {system} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
    systems = args.systems.split(",")
    print(f"{args.n} x {args.n} float64, median of {args.repeat} (s); ratio = dask / zpar")
    for engines in args.engines:
        print(f"\n{engines} engines   " + "".join(f"{s:>10}" for s in systems) + "     ratio")
        for row in ROWS:
            vals = [results.get((s, engines), {}).get(row) for s in systems]
            cells = "".join(f"{v:10.3f}" if v is not None else f"{'-':>10}" for v in vals)
            ratio = f"{vals[1] / vals[0]:9.1f}x" if len(vals) > 1 and all(vals[:2]) else ""
            print(f"  {row:<12}{cells}{ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
