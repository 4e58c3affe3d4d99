"""A controller's configuration, and launching its task scheduler process first thing.

The scheduler is a process of its own (it never shares the hub's GIL) and the controller
writes its connection files only once the scheduler has bound its ports. Started after the
controller's imports, the scheduler's own start-up (~0.16 s) followed them; started here,
before them, the two overlap (cluster start-up is benchmark row W1). This module imports
only the standard library and zpar.constants, so the controller's entry point can build
its configuration and start the scheduler before importing the rest of the hub.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zpar.cluster.ownership import RUNDIR_PREFIX, write_rundir_owner
from zpar.constants import (
    CLIENT_QUEUE_LIMIT,
    CURVE_FILE_ENV,
    DEFAULT_PROFILE,
    HEARTBEAT_MAX_MISSES,
    HEARTBEAT_PERIOD,
    KEY_FILE_ENV,
    QUEUE_BUDGET,
    TASK_HWM,
    TASK_SCHEME,
    WILDCARDS,
)

#: The controller's tcp ports in the order ``port = P`` assigns them: P, P + 1, ...
#: (docs/deploy.md). A relay's client side is the one clients connect to.
PORT_ORDER = (
    "registration", "notification", "heartbeat ping", "heartbeat pong",
    "mux client", "mux engine", "control client", "control engine",
    "iopub client", "iopub engine", "task client", "task engine",
)  # fmt: skip


def check_ports_free(ip: str, first: int) -> None:
    """OSError naming the first of ``port = first``'s ports another socket holds, before
    any process binds one (a half-bound controller would be the worse error)."""
    host = "" if ip in WILDCARDS else ip
    for offset, name in enumerate(PORT_ORDER):
        port = first + offset
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # as ZeroMQ binds: a port left in TIME_WAIT by a stopped controller is free
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            last = first + len(PORT_ORDER) - 1
            raise OSError(
                f"tcp port {port} ({name}) is in use ({e.strerror}); setting port = {first} "
                f"takes ports {first}-{last}: free them or choose another port"
            ) from None
        finally:
            probe.close()


@dataclass
class ControllerConfig:
    ip: str = "127.0.0.1"
    location: str = ""  # host name clients and engines use; default: ip, or hostname if wildcard
    profile: str = DEFAULT_PROFILE
    cluster_id: str = ""
    url_file_dir: str = ""  # default: the profile's security dir
    hb_period: float = HEARTBEAT_PERIOD
    hb_misses: int = HEARTBEAT_MAX_MISSES
    scheme: str = TASK_SCHEME
    hwm: int = TASK_HWM
    client_queue: int = CLIENT_QUEUE_LIMIT  # schedulers/quota.py
    queue_budget: int = QUEUE_BUDGET
    insecure: bool = False
    curve: bool = False  # CurveZMQ on every socket peers connect to (zpar.wire.curve)
    log_level: str = "INFO"
    db: str = ""  # task store: "" SQLite file in the profile dir, "memory", or an SQLAlchemy URL
    port: int = 0  # first of len(PORT_ORDER) consecutive tcp ports; 0: random ports
    key: str = field(default="", repr=False)  # the cluster key; "": a new random one
    #: HOST:PORT the dashboard (zpar.dashboard) listens on; "": no dashboard
    dashboard: str = "127.0.0.1:0"

    def port_of(self, name: str) -> int:
        """The tcp port ``name`` (one of PORT_ORDER) binds; 0: a random one."""
        return self.port + PORT_ORDER.index(name) if self.port else 0

    @property
    def advertised_host(self) -> str:
        if self.location:
            return self.location
        return socket.gethostname() if self.ip in WILDCARDS else self.ip


@dataclass
class SchedulerLaunch:
    """A started scheduler and what the controller shares with it."""

    rundir: Path  # 0700: the scheduler's and relays' ipc sockets, the key file
    key: str  # the cluster key ("" when insecure)
    key_file: Path  # read by the scheduler at start; removed once it is ready
    process: subprocess.Popen
    curve: Any = None  # zpar.wire.curve.CurveKeys of a --curve cluster (server secret included)
    generation: int = 0  # schedulers of this controller that died before this one


def launch_scheduler(
    config: ControllerConfig, again: SchedulerLaunch | None = None, ports: tuple[int, int] = (0, 0)
) -> SchedulerLaunch:
    """Start the task scheduler; ``again``: the launch of one that died, whose run
    directory, keys and (``ports``) tcp ports the new one takes over."""
    ip, insecure = config.ip, config.insecure
    if again is not None:
        rundir = again.rundir
    else:
        rundir = Path(tempfile.mkdtemp(prefix=RUNDIR_PREFIX))  # mode 0700
        write_rundir_owner(rundir)  # so a sweep can remove it if this controller is SIGKILLed
    key = again.key if again else "" if insecure else config.key or secrets.token_hex(32)
    if ports == (0, 0):
        ports = (config.port_of("task client"), config.port_of("task engine"))
    key_file = rundir / "key"
    key_file.unlink(missing_ok=True)
    generation = again.generation + 1 if again else 0
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key)
    cmd = [
        sys.executable,
        "-P",  # the installed zpar, not a source tree in the cwd (docs/decisions.md)
        "-m",
        "zpar.schedulers",
        "--monitor",
        f"ipc://{rundir}/monitor",
        "--events",
        f"ipc://{rundir}/events",
        "--ip",
        "*" if ip in WILDCARDS else ip,
        "--scheme",
        config.scheme,
        "--hwm",
        str(config.hwm),
        "--client-queue",
        str(config.client_queue),
        "--queue-budget",
        str(config.queue_budget),
        "--log-level",
        config.log_level,
        "--ipc-dir",
        str(rundir),
        "--client-port",
        str(ports[0]),
        "--engine-port",
        str(ports[1]),
        "--generation",
        str(generation),
        # the scheduler watches this pid: read after its imports, getppid() could already be
        # init's if the controller died meanwhile, and the scheduler would outlive it
        "--parent-pid",
        str(os.getpid()),
    ]
    if insecure:
        cmd.append("--insecure")
    env = {**os.environ, KEY_FILE_ENV: str(key_file)}
    curve = again.curve if again else None
    if config.curve:
        from zpar.wire.curve import CurveKeys  # imports zmq: only for a Curve cluster

        curve = curve or CurveKeys.generate()
        (rundir / "curve").unlink(missing_ok=True)
        env[CURVE_FILE_ENV] = str(curve.write(rundir / "curve"))
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
    return SchedulerLaunch(rundir, key, key_file, process, curve, generation)
