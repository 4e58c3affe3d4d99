"""bench.typed still runs (tiny counts: no figures are judged here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.timeout(120)
def test_bench_typed_runs(zpar_dir):
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    args = ["--calls", "1000", "--applies", "20", "--repeat", "1", "--json-out", ""]
    r = subprocess.run(
        [sys.executable, "-m", "bench.typed", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert r.returncode == 0, r.stderr
    for row in ("vectorized", "vectorized_lb", "plain", "apply"):
        assert f"  {row} " in r.stdout
