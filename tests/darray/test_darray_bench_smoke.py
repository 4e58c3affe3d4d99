"""bench/darray.py still runs (zpar only, a tiny array: no figures are judged here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


def test_bench_darray_runs_tiny():
    cmd = [
        sys.executable,
        "-m",
        "bench.darray",
        "--systems",
        "zpar",
        "--n",
        "64",
        "--engines",
        "2",
        "--repeat",
        "1",
    ]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    rows = [line.split()[0] for line in p.stdout.splitlines() if line.startswith("  ")]
    assert rows == ["ones", "fromfunction", "add", "sum", "sum_axis", "halo", "toarray"], (
        p.stdout + p.stderr[-2000:]
    )
