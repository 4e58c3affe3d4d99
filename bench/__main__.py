"""``python -m bench [--quick|--full|--scale] [--only W2,W3] [--systems zpar,ipyparallel,...]``

Runs every system in turn (each in its own process: zpar with this interpreter, the peers
with the interpreter of their pinned virtualenv, created on first use), prints one table of
medians with zpar's ratio against the best peer, and appends the figures as JSON lines.
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

from . import report
from .report import TARGETS, format_cpu, format_table

ROOT = Path(__file__).resolve().parent.parent
VENV = Path(__file__).resolve().parent / ".venv-peers"
PEERS = [
    "ipyparallel==9.2.0",
    "dask[distributed]==2025.11.0",
    "ray==2.60.0",
    "numpy",
    "psutil",
]
SYSTEMS = ["zpar", "ipyparallel", "dask", "ray", "zmq"]


def peers_python() -> Path:
    """The peers' interpreter, creating their virtualenv (pinned versions) if needed."""
    py = VENV / "bin" / "python"
    stamp = VENV / "pinned.txt"
    if py.exists() and stamp.exists() and stamp.read_text() == "\n".join(PEERS):
        return py
    print(f"bench: creating {VENV} with {', '.join(PEERS)} (once)", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", *PEERS], check=True)
    stamp.write_text("\n".join(PEERS))
    return py


def run_system(system: str, only: str, scale: str, count: int | None) -> list[dict]:
    if system == "zmq":
        from . import raw_zmq

        figures = raw_zmq.run(count or (500 if scale == "quick" else 1000))
        return [{"system": "zmq", "workload": "W8", "figures": figures, "seconds": 0}]
    python = Path(sys.executable) if system == "zpar" else peers_python()
    cmd = [str(python), "-m", "bench.runner", "--system", system, "--only", only, "--scale", scale]
    if count:
        cmd += ["--count", str(count)]
    with tempfile.TemporaryDirectory(prefix="zpar-bench-") as d:
        env = dict(os.environ, PYTHONPATH=bench_path(d))
        env["ZPAR_DIR"] = d  # a private profile: never touches the user's clusters
        env["IPYTHONDIR"] = d
        proc = subprocess.run(cmd, cwd=d, env=env, capture_output=True, text=True, timeout=1800)
    rows = []
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rows.append(json.loads(line))
    if proc.returncode != 0 and not rows:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        print(f"bench: {system} failed (exit {proc.returncode}):\n{tail}", file=sys.stderr)
    return rows


def bench_path(tmp: str) -> str:
    """A directory holding only ``bench`` (a link to this package), for PYTHONPATH: the
    runner and every system's workers import bench.tasks from it. Not the repository root,
    whose top-level folders (communicator/, typed/, ...) would shadow PyPI packages of the same
    name in the peers' virtualenv (ipykernel imports ``comm``)."""
    path = Path(tmp) / "path"
    path.mkdir()
    (path / "bench").symlink_to(Path(__file__).resolve().parent, target_is_directory=True)
    return str(path)


def git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="small counts, < 3 min (default)")
    mode.add_argument("--full", action="store_true", help="the issue's counts, < 15 min")
    mode.add_argument(
        "--scale",
        action="store_true",
        help="W7 to 1,000,000 tasks (controller PSS at 10k, 100k, 1M), zpar only by default",
    )
    p.add_argument("--only", default=None, help="workloads (default: all; W7 with --scale)")
    p.add_argument("--systems", default=None, help=f"default: {','.join(SYSTEMS)} (--scale: zpar)")
    p.add_argument("--count", type=int, default=None, help="override counts (smoke runs)")
    p.add_argument("--json-out", default=str(ROOT / "bench" / "results.jsonl"))
    args = p.parse_args(argv)
    scale = "full" if args.full else "scale" if args.scale else "quick"
    if args.systems is None:
        args.systems = "zpar" if args.scale else ",".join(SYSTEMS)
    if args.only is None:
        args.only = "W1,W7" if args.scale else "W1,W2,W3,W4,W5,W6,W7,W8,W10,W9,W3x8"
    systems = [s for s in args.systems.split(",") if s]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        p.error(f"unknown systems {sorted(unknown)}; choose from {SYSTEMS}")
    only = args.only
    rows: list[dict] = []
    for system in systems:
        if system == "zmq" and "W8" not in only.split(","):
            continue
        print(f"bench: running {system} ({scale})", file=sys.stderr, flush=True)
        rows.extend(run_system(system, only, scale, args.count))
    stamp = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "commit": git_commit(),
        "scale": scale,
        "machine": f"{platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}",
    }
    if args.json_out:
        with open(args.json_out, "a") as f:
            for r in rows:
                f.write(json.dumps({**stamp, **r}) + "\n")
        if Path(args.json_out).resolve() == report.RESULTS:
            report.update_docs(report.DOC, report.RESULTS)  # docs/benchmarks.md's table
    print(format_table(rows, TARGETS))
    cpu = format_cpu(rows)
    if cpu:
        print("\nW3 CPU per task, by process (us; noisy: the machine's 2 cores are shared)")
        print(cpu)
    failed = [r for r in rows if "error" in r["figures"]]
    for r in failed:
        print(f"\n{r['system']} {r['workload']} failed:\n{r['figures']['error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
