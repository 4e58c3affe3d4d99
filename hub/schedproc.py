"""Launching the task scheduler process, first thing in a controller.

The scheduler is a process of its own (it never shares the hub's GIL) and the controller
writes its connection files only once the scheduler has bound its ports. Started after the
controller's imports, the scheduler's own start-up (~0.16 s) followed them; started here,
before them, the two overlap (cluster start-up is benchmark row W1). This module imports
only the standard library and zpar.constants, so the controller's entry point can use it
before importing the rest of the hub.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from zpar.constants import KEY_FILE_ENV, WILDCARDS


@dataclass
class SchedulerLaunch:
    """A started scheduler and what the controller shares with it."""

    rundir: Path  # 0700: the scheduler's and relays' ipc sockets, the key file
    key: str  # the cluster key ("" when insecure)
    key_file: Path  # read by the scheduler at start; removed once it is ready
    process: subprocess.Popen


def launch_scheduler(
    *, ip: str, scheme: str, hwm: int, log_level: str, insecure: bool
) -> SchedulerLaunch:
    rundir = Path(tempfile.mkdtemp(prefix="zpar-"))  # mode 0700
    key = "" if insecure else secrets.token_hex(32)
    key_file = rundir / "key"
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    cmd = [
        sys.executable,
        "-m",
        "zpar.schedulers",
        "--monitor",
        f"ipc://{rundir}/monitor",
        "--events",
        f"ipc://{rundir}/events",
        "--ip",
        "*" if ip in WILDCARDS else ip,
        "--scheme",
        scheme,
        "--hwm",
        str(hwm),
        "--log-level",
        log_level,
        "--ipc-dir",
        str(rundir),
    ]
    if insecure:
        cmd.append("--insecure")
    env = {**os.environ, KEY_FILE_ENV: str(key_file)}
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    return SchedulerLaunch(rundir, key, key_file, process)
