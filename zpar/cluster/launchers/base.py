"""What every engine launcher shares: its context, the EngineSet interface, process helpers.

An EngineSet is the engines one launch started (``cluster start`` makes one, each
``cluster engines -n K`` another). It can describe itself as a JSON record, so that
``zpar cluster stop`` in another process stops it: pids with their create times (a reused
pid is never killed), an ssh host's remote pids, a batch job's id.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar

import psutil

from zpar.cluster.settings import Settings
from zpar.wire import framememory

log = logging.getLogger(__name__)

#: Old log files kept per process (name.log.1 … name.log.3), rotated at each start.
LOG_BACKUPS = 3


@dataclass(frozen=True, slots=True)
class LaunchContext:
    """Where a cluster's engines find their controller and put their logs."""

    cluster_id: str
    profile: str
    engine_file: Path
    client_file: Path
    log_dir: Path
    settings: Settings
    daemon: bool = False  # processes outlive this one (their own session)
    wait: float = 0.0  # seconds an engine may wait for the connection file
    extra_args: tuple[str, ...] = ()  # more `zpar engine` flags (zpar.Cluster(engine_args=…))

    @property
    def python(self) -> str:
        return self.settings.python or sys.executable

    def engine_args(self, engine_file: str | Path | None = None) -> list[str]:
        """Arguments of ``python -m zpar.engine`` for one engine of this cluster."""
        return [
            "-P",  # the installed zpar, not a source tree in the cwd (engine/__main__.py)
            "-m",
            "zpar.engine",
            "--file",
            str(engine_file or self.engine_file),
            "--log-level",
            self.settings.log_level,
            *(["--wait", f"{self.wait:g}"] if self.wait else []),
            *self.extra_args,
        ]


def rotate_log(path: Path, backups: int = LOG_BACKUPS) -> Path:
    """name.log -> name.log.1 -> … (the oldest dropped), so each start has a fresh file."""
    if path.exists() and path.stat().st_size:
        for i in range(backups - 1, 0, -1):
            older = path.with_name(f"{path.name}.{i}")
            if older.exists():
                older.replace(path.with_name(f"{path.name}.{i + 1}"))
        path.replace(path.with_name(f"{path.name}.1"))
    return path


def open_log(path: Path) -> BinaryIO:
    """A freshly rotated log file, opened for appending, mode 0600 (docs/security.md: a log
    holds task output and tracebacks); an empty file left by an older version with another
    mode is made 0600 too."""
    out = open(rotate_log(path), "ab", opener=lambda p, f: os.open(p, f, 0o600))  # noqa: SIM115
    os.fchmod(out.fileno(), 0o600)
    return out


def spawn(
    cmd: list[str], log_path: Path, daemon: bool, env: dict | None = None
) -> subprocess.Popen:
    """Start ``cmd`` with stdout and stderr into a freshly rotated ``log_path``. Unless
    ``daemon``, the process watches this one and stops when it dies (zpar.cluster.ownership)."""
    if not daemon:
        from zpar.cluster.ownership import OWNER_ENV, owner_token

        env = {**(os.environ if env is None else env), OWNER_ENV: owner_token()}
    with open_log(log_path) as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=daemon,
            close_fds=True,
            env=env,
        )


#: The glibc tunable engines start with: malloc asks the kernel for transparent huge pages
#: on the memory it maps (glibc >= 2.35; older ones ignore a tunable they do not know). libzmq
#: receives a large frame into freshly mapped memory: a 100 MB array is then ~50 page faults
#: instead of 25,600, and W5's engine CPU per round trip fell from ~190-300 ms to ~55 ms
#: (docs/decisions.md, "The wire ... W5"). ZPAR_ENGINE_HUGEPAGES=0 turns it off.
ENGINE_GLIBC_TUNABLE = "glibc.malloc.hugetlb=1"


def engine_tunables() -> list[str]:
    """The glibc tunables a local engine starts with, by default: huge pages, and large
    frames received into reused memory (zpar.wire.framememory), each unless turned off."""
    out = [] if os.environ.get("ZPAR_ENGINE_HUGEPAGES", "1") == "0" else [ENGINE_GLIBC_TUNABLE]
    if framememory.for_engines():
        out += framememory.REUSE_TUNABLES
    return out


def engine_environment() -> dict[str, str] | None:
    """The environment a local engine starts with: this process's, plus engine_tunables()
    but for those GLIBC_TUNABLES already names (the user's choice wins; None: the
    environment as it is)."""
    tunables = os.environ.get("GLIBC_TUNABLES", "")
    theirs = {t.split("=", 1)[0] for t in tunables.split(":") if t}
    ours = [t for t in engine_tunables() if t.split("=", 1)[0] not in theirs]
    if not ours:
        return None
    return {**os.environ, "GLIBC_TUNABLES": ":".join([*([tunables] if tunables else []), *ours])}


def ident(pid: int) -> list[float]:
    """[pid, create time]: names a process so that a reused pid is never mistaken for it."""
    return [pid, psutil.Process(pid).create_time()]


def alive(idents: list[list[float]]) -> list[psutil.Process]:
    """The processes of ``idents`` still running (same pid and create time)."""
    out = []
    for pid, created in idents:
        try:
            p = psutil.Process(int(pid))
            if abs(p.create_time() - created) < 1.0 and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def stop_processes(procs: list[psutil.Process], timeout: float = 5.0) -> None:
    """terminate -> wait -> kill, in the order given (engines before their controller)."""
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(procs, timeout=timeout)
    for p in left:
        log.warning("process %d did not stop within %.0f s; killing it", p.pid, timeout)
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=timeout)


def log_tail(path: Path | None, lines: int = 8) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n    ".join(["", *text])


def process_state(proc: subprocess.Popen) -> str:
    if proc.poll() is not None:
        return f"exited with code {proc.returncode}"
    try:
        return psutil.Process(proc.pid).status()
    except psutil.NoSuchProcess:
        return "gone"


class EngineSet(ABC):
    """Engines started together by one launcher."""

    kind: ClassVar[str]

    def __init__(self, ctx: LaunchContext, n: int, index: int = 0) -> None:
        self.ctx = ctx
        self.n = n
        self.index = index  # which set of the cluster: names its log files

    def log_path(self, name: str) -> Path:
        return self.ctx.log_dir / f"{self.ctx.cluster_id}-{name}.log"

    @abstractmethod
    def start(self) -> None:
        """Start the engines (return without waiting for them to register)."""

    def local_processes(self) -> list[subprocess.Popen]:
        """Processes of this machine whose exit means engines are gone (waited on)."""
        return []

    def engine_of(self, proc: subprocess.Popen) -> tuple[str, int] | None:
        """(hostname, pid) the hub knows the engine of ``proc`` by, if it is one engine."""
        return None

    def replace(self, proc: subprocess.Popen) -> subprocess.Popen | None:
        """Start a new engine in place of the exited ``proc`` (None: this launcher can't)."""
        return None

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """JSON-able facts for stopping the set from another process ("kind" and "n" in it)."""

    @classmethod
    @abstractmethod
    def stop_record(cls, record: dict[str, Any], timeout: float = 5.0) -> int:
        """Stop the engines of ``record``; return how many processes (or jobs) were stopped."""

    def stop(self, timeout: float = 5.0) -> int:
        return self.stop_record(self.record(), timeout)

    def describe(self) -> str:
        """Each process's state and log tail, for a start that timed out."""
        return "".join(
            f"\n- {self.kind} engine pid {p.pid} ({process_state(p)}):{log_tail(self._log_of(p))}"
            for p in self.local_processes()
        )

    def _log_of(self, proc: subprocess.Popen) -> Path | None:
        return None


def this_host() -> str:
    return socket.gethostname()
