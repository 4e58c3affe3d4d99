"""The benchmark harness still runs (zpar only, tiny counts: no figures are judged here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_bench_quick_w2_runs(zpar_dir):
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "--quick",
            "--only",
            "W2,W9",
            "--systems",
            "zpar",
            "--count",
            "20",
            "--json-out",
            "",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert r.returncode == 0, r.stderr
    assert "W2 rtt_median_us" in r.stdout and "W9 detect_s" in r.stdout
    assert "W1 start_s" in r.stdout
