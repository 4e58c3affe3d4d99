"""The benchmark harness still runs (zpar only, tiny counts: no figures are judged here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parent.parent


def _bench(zpar_dir, only: str, count: int) -> subprocess.CompletedProcess:
    """``python -m bench --quick`` for zpar alone, tiny counts, no JSON line appended."""
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    cmd = [sys.executable, "-m", "bench", "--quick", "--only", only, "--systems", "zpar"]
    cmd += ["--count", str(count), "--json-out", ""]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.timeout(120)
def test_bench_quick_w2_runs(zpar_dir):
    r = _bench(zpar_dir, "W2,W9", 20)
    assert "W2 rtt_median_us" in r.stdout and "W9 detect_s" in r.stdout
    assert "W1 start_s" in r.stdout


@pytest.mark.timeout(120)
def test_bench_quick_w3_cpu_w7_checkpoints_and_8_engines(zpar_dir):
    r = _bench(zpar_dir, "W3,W7,W3x8", 50)
    assert "W3x8 tasks_per_s" in r.stdout and "W7 pss_growth_mb" in r.stdout
    cpu = [line for line in r.stdout.splitlines() if line.startswith("zpar W3")]
    assert [line.split(":")[0] for line in cpu] == ["zpar W3", "zpar W3x8"]
    # every process that works on a task has its share: client, hub, scheduler, engines
    assert "client" in cpu[0] and "hub" in cpu[0] and "scheduler" in cpu[0]
    assert "2 engines" in cpu[0] and "8 engines" in cpu[1]


def test_format_cpu_groups_engines():
    from bench.report import format_cpu

    row = {
        "system": "zpar",
        "workload": "W3",
        "figures": {
            "cpu_us_per_task": {"client": 100.0, "hub": 40.0, "engine 0": 30.0, "engine 1": 20.0},
            "cpu_us_per_task_total": 190.0,
        },
    }
    assert format_cpu([row]) == (
        "zpar W3: 190 us/task = client 100, hub 40, 2 engines 50 (30 / 20)"
    )


def test_clientmicro_measures_the_client_path_without_a_cluster():
    """bench.clientmicro submits through a real LoadBalancedView and reads real signed
    replies (checked, routed, resolved): every figure is a positive time per task."""
    from bench import clientmicro

    figures = clientmicro.run(number=50, repeat=1)
    assert set(figures) >= {
        "apply_async (user thread, to the I/O thread's outbox)",
        "reply checked, routed and read (I/O thread + ar.get())",
    }
    assert all(us > 0 for us in figures.values())


@pytest.mark.timeout(120)
def test_directfloor_runs_every_way():
    """bench.directfloor: W2's topology in plain pyzmq, each way answered (tiny count)."""
    cmd = [sys.executable, "-m", "bench.directfloor", "--count", "20", "--json"]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in r.stdout.splitlines()]
    assert [row["way"] for row in rows] == [
        "plain",
        "engine-shaped",
        "engine-shaped+hmac",
        "shm+eventfd+hmac",
    ]
    assert all(0 < row["min_us"] <= row["median_us"] <= row["p99_us"] for row in rows)


def test_clientfloor_sends_and_reads_back_every_task():
    """bench.clientfloor's send and receive sides each take time, for every batch size (it
    raises on a reply that does not verify, is replayed or answers no task)."""
    from bench import clientfloor

    for b in (1, 8):
        figures = clientfloor.run(count=40, b=b, repeat=1)
        assert figures["send"] > 0 and figures["receive"] > 0
        assert figures["total"] == figures["send"] + figures["receive"]


@pytest.mark.timeout(120)
def test_mapcpu_gives_every_process_its_cpu_per_map(zpar_dir):
    """bench.mapcpu: per map and per task, the CPU of the client, the hub, the scheduler
    and each engine (tiny counts: only that every process is there and the maps ran)."""
    env = dict(os.environ, ZPAR_DIR=str(zpar_dir))
    cmd = [sys.executable, "-m", "bench.mapcpu", "--maps", "10", "--tasks", "50"]
    cmd += ["--repeat", "1", "--json"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    for row in ("W4", "W4 chunksize=100", "W3"):
        assert {"client", "hub", "scheduler", "engine 0", "engine 1"} <= set(res[row]), res[row]
        assert res[row]["per_s"] > 0 and res[row]["total"] >= 0
    assert res["controller_pss_mb"] > 0
