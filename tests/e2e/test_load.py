"""The load test under faults in its reduced form (issue 13; the full run is
`python scripts/loadtest.py`, figures in docs/benchmarks.md): 3 client processes x 1,000
tasks on 4 engines while two engines, the task scheduler and the controller are killed
(3 x 200 were answered in about a second, too fast for the four kills to land in)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "loadtest.py"


def test_every_task_of_every_client_is_answered_while_parts_are_killed(tmp_path):
    clients, tasks = 3, 1000
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--clients", str(clients), "--tasks", str(tasks)]
        + ["--timeout", "90", "--json"]
        # 20 ms a task: ~3 s of work on 4 engines, so the kills (at 10-70% answered, seen
        # every 0.1 s) land while tasks run; no-op tasks all finished in ~1 s, before them
        + ["--work-ms", "20"],
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, "ZPAR_DIR": str(tmp_path)},
    )
    lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
    assert lines, f"no summary (exit {run.returncode}):\n{run.stdout}\n{run.stderr[-3000:]}"
    summary = json.loads(lines[-1])
    assert summary["problems"] == [], summary
    assert run.returncode == 0
    # every task answered once, a result or an error (ControllerLost after the last kill)
    assert sum(summary["outcomes"].values()) == clients * tasks
    assert set(summary["outcomes"]) <= {
        "ok",
        "ControllerLost",
        "EngineError",
        "SchedulerLost",
        "NoSuchEngine",  # a direct call to an engine killed while the client submitted
    }
    killed = [k["what"] for k in summary["kills"] if "pid" in k]
    assert killed == ["engine", "scheduler", "engine", "controller"], summary["kills"]
