"""Starting and stopping a controller and engines on this machine.

The launcher only spawns processes and waits for facts (a connection file written, N engines
registered, a child exited); the processes do the rest. A cluster started with daemon=True
outlives the launcher; its pids (with create times, so a reused pid is never killed) are
kept in ``<profile>/clusters/<cluster_id>.json`` for ``zpar cluster stop`` and ``list``.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psutil

from .connection import profile_dir
from .constants import DEFAULT_PROFILE
from .errors import TimeoutError, ZparError

log = logging.getLogger(__name__)

DEFAULT_CLUSTER_ID = "default"


class LaunchError(ZparError):
    """A controller or engine could not be started."""


def url_dir(profile: str, cluster_id: str) -> Path:
    """Connection files of a cluster; the default cluster's are where zpar.Client() looks."""
    sec = profile_dir(profile) / "security"
    return sec if cluster_id == DEFAULT_CLUSTER_ID else sec / f"cluster-{cluster_id}"


def state_file(profile: str, cluster_id: str) -> Path:
    return profile_dir(profile) / "clusters" / f"{cluster_id}.json"


@dataclass
class ClusterState:
    """What `zpar cluster stop/list` needs to find a cluster's processes again."""

    cluster_id: str
    profile: str
    n: int
    url_file: str
    controller: list[float] = field(default_factory=list)  # [pid, create_time]
    engines: list[list[float]] = field(default_factory=list)
    started: float = 0.0

    def save(self) -> Path:
        path = state_file(self.profile, self.cluster_id)
        tmp = path.with_suffix(".tmp")
        # 0600 like every file under the profile (docs/security.md)
        with open(tmp, "w", opener=lambda p, f: os.open(p, f, 0o600)) as out:
            out.write(json.dumps(asdict(self), indent=2))
        os.replace(tmp, path)
        return path

    @classmethod
    def load(cls, path: Path) -> ClusterState:
        return cls(**json.loads(path.read_text()))

    def processes(self) -> list[psutil.Process]:
        """The cluster's processes still alive (same pid and create time)."""
        alive = []
        for pid, created in [*self.engines, *([self.controller] if self.controller else [])]:
            try:
                p = psutil.Process(int(pid))
                if abs(p.create_time() - created) < 1.0:
                    alive.append(p)
            except psutil.NoSuchProcess:
                pass
        return alive


def _log_tail(path: Path | None, lines: int = 20) -> str:
    if path is None or not path.exists():
        return ""
    text = path.read_text(errors="replace").splitlines()[-lines:]
    return "\n  ".join(["", *text])


class LocalCluster:
    """A controller and n engines on this machine."""

    def __init__(
        self,
        n: int = 2,
        *,
        profile: str = DEFAULT_PROFILE,
        cluster_id: str | None = None,
        ip: str = "127.0.0.1",
        controller_args: Sequence[str] = (),
        engine_args: Sequence[str] = (),
        daemon: bool = False,
        log_level: str = "WARNING",
    ) -> None:
        if not isinstance(n, int) or n < 0:
            raise ValueError(f"number of engines must be an int >= 0, got {n!r}")
        self.n = n
        self.profile = profile
        self.cluster_id = cluster_id or secrets.token_hex(4)
        self.ip = ip
        self.controller_args = list(controller_args)
        self.engine_args = list(engine_args)
        self.daemon = daemon
        self.log_level = log_level
        self.url_dir = url_dir(profile, self.cluster_id)
        self.log_dir = profile_dir(profile) / "log"
        self.controller: subprocess.Popen | None = None
        self.engines: list[subprocess.Popen] = []
        self._logs: dict[int, Path] = {}

    @property
    def client_file(self) -> Path:
        return self.url_dir / "zpar-client.json"

    @property
    def engine_file(self) -> Path:
        return self.url_dir / "zpar-engine.json"

    def _spawn(self, cmd: list[str], name: str) -> subprocess.Popen:
        log_path = self.log_dir / f"{self.cluster_id}-{name}.log"
        # 0600: a log holds task output and tracebacks (docs/security.md)
        with open(log_path, "ab", opener=lambda p, f: os.open(p, f, 0o600)) as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=self.daemon,
                close_fds=True,
            )
        self._logs[proc.pid] = log_path
        return proc

    def start(self, timeout: float = 30.0) -> None:
        """Start the controller and the engines together; wait for the connection files.

        Engines start at once with ``--wait``: their interpreter start-up overlaps the
        controller's instead of following it (cluster start-up is a benchmark row).
        """
        self.start_controller(timeout, wait=False)
        self.start_engines(wait=timeout)
        self.wait_for_connection_files(timeout)

    def wait_for_connection_files(self, timeout: float = 30.0) -> None:
        self._wait(
            lambda: self.client_file.exists() and self.engine_file.exists(),
            timeout,
            "the controller to write its connection files",
        )

    def start_controller(self, timeout: float = 30.0, wait: bool = True) -> None:
        existing = state_file(self.profile, self.cluster_id)
        if existing.exists() and ClusterState.load(existing).processes():
            raise LaunchError(
                f"cluster {self.cluster_id!r} of profile {self.profile!r} is already running; "
                f"stop it first: zpar cluster stop --profile {self.profile} "
                f"--cluster-id {self.cluster_id}"
            )
        for f in (self.client_file, self.engine_file):
            f.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "zpar.hub",
            "--profile",
            self.profile,
            "--ip",
            self.ip,
            "--cluster-id",
            self.cluster_id,
            "--url-file-dir",
            str(self.url_dir),
            "--log-level",
            self.log_level,
            *self.controller_args,
        ]
        self.controller = self._spawn(cmd, "controller")
        if not self.daemon:
            atexit.register(self.stop)
        if wait:
            self.wait_for_connection_files(timeout)

    def start_engines(self, n: int | None = None, wait: float = 0.0) -> None:
        """Start n engines (default: the cluster's n); ``wait``: seconds they may wait for
        the connection file (engines started before the controller has written it)."""
        for _ in range(self.n if n is None else n):
            i = len(self.engines)
            cmd = [
                sys.executable,
                "-m",
                "zpar.engine",
                "--file",
                str(self.engine_file),
                "--log-level",
                self.log_level,
                *(["--wait", str(wait)] if wait else []),
                *self.engine_args,
            ]
            self.engines.append(self._spawn(cmd, f"engine-{i}"))

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not cond():
            self._check_alive(what)
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def wait_for_engines(
        self, client, timeout: float = 60.0, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Wait until n engines are registered, failing at once if a process exits."""
        deadline = time.monotonic() + timeout
        seen = -1
        while True:
            have = len(client.ids)
            if have != seen and progress is not None:
                progress(have, self.n)
                seen = have
            if have >= self.n:
                return
            self._check_alive("engines to register")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{have} of {self.n} engines registered within {timeout} s; "
                    f"see the logs in {self.log_dir}.{self._describe_processes()}"
                )
            try:  # wakes on each registration; the short timeout is for noticing deaths
                client.wait_for_engines(have + 1, timeout=0.05)
            except TimeoutError:
                pass

    def _describe_processes(self) -> str:
        """State and log tail of each process, for an error message."""
        out = []
        for p in [self.controller, *self.engines]:
            if p is None:
                continue
            try:
                state = (
                    psutil.Process(p.pid).status() if p.poll() is None else f"exit {p.returncode}"
                )
            except psutil.NoSuchProcess:
                state = "gone"
            out.append(
                f"\n- {' '.join(p.args[1:4])} pid {p.pid} ({state}):"
                f"{_log_tail(self._logs.get(p.pid), 8)}"
            )
        return "".join(out)

    def _check_alive(self, what: str) -> None:
        for p in [self.controller, *self.engines]:
            if p is not None and p.poll() is not None:
                raise LaunchError(
                    f"process {p.pid} ({' '.join(p.args[1:4])}) exited with code "
                    f"{p.returncode} while waiting for {what}. Its log:"
                    f"{_log_tail(self._logs.get(p.pid))}"
                )

    def save_state(self) -> Path:
        def ident(p: subprocess.Popen) -> list[float]:
            return [p.pid, psutil.Process(p.pid).create_time()]

        assert self.controller is not None
        return ClusterState(
            cluster_id=self.cluster_id,
            profile=self.profile,
            n=self.n,
            url_file=str(self.client_file),
            controller=ident(self.controller),
            engines=[ident(p) for p in self.engines if p.poll() is None],
            started=time.time(),
        ).save()

    def stop(self, timeout: float = 5.0) -> None:
        procs = [p for p in [*self.engines, self.controller] if p is not None]
        stop_processes([psutil.Process(p.pid) for p in procs if p.poll() is None], timeout)
        for p in procs:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        state_file(self.profile, self.cluster_id).unlink(missing_ok=True)
        self.engines = []
        self.controller = None


def stop_processes(procs: list[psutil.Process], timeout: float = 5.0) -> None:
    """terminate -> wait -> kill; engines first so the controller sees them go."""
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        log.warning("process %d did not stop within %.0f s; killing it", p.pid, timeout)
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=timeout)


def list_clusters(profile: str | None = None) -> list[tuple[ClusterState, int]]:
    """(state, live process count) of every recorded cluster (of one profile or all)."""
    from .connection import zpar_dir

    root = zpar_dir()
    pattern = f"profile_{profile}/clusters/*.json" if profile else "profile_*/clusters/*.json"
    out = []
    for path in sorted(root.glob(pattern)):
        try:
            st = ClusterState.load(path)
        except (OSError, ValueError, TypeError):
            log.warning("unreadable cluster file %s ignored", path)
            continue
        out.append((st, len(st.processes())))
    return out


def stop_cluster(profile: str, cluster_id: str, timeout: float = 5.0) -> int:
    """Stop a recorded cluster; return how many processes were stopped."""
    path = state_file(profile, cluster_id)
    if not path.exists():
        raise LaunchError(f"no cluster {cluster_id!r} recorded for profile {profile!r} ({path})")
    st = ClusterState.load(path)
    procs = st.processes()
    stop_processes(procs, timeout)
    path.unlink(missing_ok=True)
    return len(procs)
