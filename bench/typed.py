"""``python -m bench.typed [--calls 1000000] [--applies 10000] [--repeat 5] [--amuse-python PY]``

Typed batched calls against apply, on one engine: f(x, y, z) -> float64 over 10^6 calls,
vectorized (one call with whole columns) and plain (one Python call per index), beside
10^4 separate apply calls of the same function. With ``--amuse-python`` (the interpreter of
a venv with amuse-framework, e.g. from scripts/amuse_env.sh) also the same calls through
AMUSE's own client: to a worker AMUSE generates in C, and to ``zpar-amuse-worker``.

Prints calls/s, best and median of the repeats (the machine is shared: expect noise), and
appends one JSON line to bench/results.jsonl unless ``--json-out ''``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

XYZ = [("x", "float64"), ("y", "float64"), ("z", "float64")]
HERE = Path(__file__).resolve().parent


def fxyz(x, y, z):
    return x + y * z


def rates(n: int, times: list[float]) -> dict[str, float]:
    return {"best": n / min(times), "median": n / statistics.median(times)}


def timed(fn: Any, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def measure_zpar(calls: int, applies: int, repeat: int) -> dict[str, Any]:
    import zpar

    rng = np.random.default_rng(0)
    x, y, z = rng.random(calls), rng.random(calls), rng.random(calls)
    expected = x + y * z
    out: dict[str, Any] = {}
    with zpar.Cluster(n=1, timeout=120) as rc:
        e = rc[0]
        e.typed.register(fxyz, args=XYZ, returns="float64", vectorized=True, name="fvec")
        e.typed.register(fxyz, args=XYZ, returns="float64", name="fplain")
        lv = rc.load_balanced_view()
        assert np.allclose(e.typed.fvec(x, y, z), expected)  # warm, and right
        out["vectorized"] = rates(calls, timed(lambda: e.typed.fvec(x, y, z), repeat))
        out["vectorized_lb"] = rates(calls, timed(lambda: lv.typed.fvec(x, y, z), repeat))
        assert np.allclose(e.typed.fplain(x, y, z), expected)
        out["plain"] = rates(calls, timed(lambda: e.typed.fplain(x, y, z), max(1, repeat // 2)))
        xs = x[:applies].tolist()

        def apply_all() -> None:
            ars = [e.apply_async(fxyz, xi, 0.5, 2.0) for xi in xs]
            rc.wait(ars)

        apply_all()
        out["apply"] = rates(applies, timed(apply_all, max(1, repeat // 2)))
    out["mb_each_way"] = {"request": 24 * calls / 1e6, "reply": 8 * calls / 1e6}
    return out


AMUSE_SCRIPT = """
import json, sys, time
import numpy
from amuse.rfi.core import CodeInterface, PythonCodeInterface, legacy_function, LegacyFunctionSpecification

def spec():
    f = LegacyFunctionSpecification()
    for name in "xyz":
        f.addParameter(name, dtype="float64", direction=f.IN)
    f.result_type = "float64"
    f.can_handle_array = True
    return f

class C(CodeInterface):
    include_headers = ["fxyz.h"]
    def __init__(self, worker, **options):
        CodeInterface.__init__(self, name_of_the_worker=worker, **options)
    @legacy_function
    def fvec():
        return spec()

class Z(PythonCodeInterface):
    def __init__(self, worker, **options):
        PythonCodeInterface.__init__(self, name_of_the_worker=worker, **options)
    @legacy_function
    def fvec():
        return spec()

if __name__ == "__main__":
    calls, repeat, c_worker, z_worker = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    rng = numpy.random.default_rng(0)
    x, y, z = rng.random(calls), rng.random(calls), rng.random(calls)
    out = {}
    for key, cls, worker in (("amuse_c_worker", C, c_worker), ("amuse_client_zpar_worker", Z, z_worker)):
        code = cls(worker, channel_type="sockets", redirection="none", use_python_interpreter=False)
        code.fvec(x, y, z)
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            r = code.fvec(x, y, z)
            times.append(time.perf_counter() - t)
        assert numpy.allclose(r, x + y * z)
        code.stop()
        times.sort()
        out[key] = {"best": calls / times[0], "median": calls / times[len(times) // 2]}
    print(json.dumps(out))
"""


def measure_amuse(python: str, calls: int, repeat: int) -> dict[str, Any]:
    """AMUSE's client to a C worker it generates, and to zpar-amuse-worker."""
    with tempfile.TemporaryDirectory() as d:
        dd = Path(d)
        (dd / "bench_amuse.py").write_text(AMUSE_SCRIPT)
        (dd / "bench_zpar_funcs.py").write_text(
            textwrap.dedent(
                """
                import zpar

                @zpar.typed_function(args=[("x", "float64"), ("y", "float64"), ("z", "float64")],
                                     returns="float64", vectorized=True)
                def fvec(x, y, z):
                    return x + y * z
                """
            )
        )
        (dd / "fxyz.h").write_text("double fvec(double x, double y, double z);\n")
        (dd / "fxyz.c").write_text(
            "double fvec(double x, double y, double z) { return x + y * z; }\n"
        )
        env = {**os.environ, "PYTHONPATH": str(dd), "ZPAR_TYPED_MODULES": "bench_zpar_funcs"}
        amusifier = str(Path(python).parent / "amusifier")
        for cmd in (
            [amusifier, "--type=c", "--mode=mpi", "-o", "worker.cc", "bench_amuse.py", "C"],
            ["g++", "-O2", "-DNOMPI", "-I.", "-o", "c_worker", "worker.cc", "fxyz.c"],
        ):
            subprocess.run(cmd, cwd=dd, env=env, check=True, capture_output=True, timeout=300)
        z_worker = str(Path(sys.executable).parent / "zpar-amuse-worker")
        proc = subprocess.run(
            [python, "bench_amuse.py", str(calls), str(repeat), str(dd / "c_worker"), z_worker],
            cwd=dd,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"the AMUSE run failed: {proc.stderr[-2000:]}")
        return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.typed", description=__doc__.split("\n\n")[1])
    p.add_argument("--calls", type=int, default=1_000_000)
    p.add_argument("--applies", type=int, default=10_000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--amuse-python", default="", help="python of a venv with amuse-framework")
    p.add_argument("--json-out", default=str(HERE / "results.jsonl"))
    args = p.parse_args(argv)
    figures = measure_zpar(args.calls, args.applies, args.repeat)
    if args.amuse_python:
        figures.update(measure_amuse(args.amuse_python, args.calls, args.repeat))
    print(f"f(x, y, z) -> float64, {args.calls:,} calls on one engine (calls/s, best / median)")
    for key, v in figures.items():
        if "best" in v:
            n = args.applies if key == "apply" else args.calls
            print(f"  {key:<26} {v['best']:>14,.0f} / {v['median']:>14,.0f}   ({n:,} calls)")
    if args.json_out:
        from .__main__ import git_commit

        row = {
            "bench": "typed",
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "commit": git_commit(),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
            "calls": args.calls,
            **figures,
        }
        with open(args.json_out, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
