"""A cluster's launcher: starts a controller and engine sets, watches them, stops them.

The launcher only spawns processes and waits for facts (a connection file written, N engines
registered, a child exited); the processes do the rest. It waits on its children's
sentinels (zpar.cluster.launchers.watch): when an engine it started exits it tells the hub at once
(milliseconds, where the heartbeat takes seconds) and, with ``keep``, starts a replacement
(zpar.cluster.launchers.restart backs off a crash loop). The engines come from a launcher kind
(zpar.cluster.launchers: local, mpi, ssh, slurm, pbs).

A cluster kept running (``zpar cluster start --daemon``) is owned by one supervising
launcher process. Its record, ``<profile>/clusters/<cluster_id>.json``, holds the pids (with
create times, so a reused pid is never killed) and each engine set's record, for
``zpar cluster stop`` and ``list``; only its owner writes and removes it. Engines added by
``zpar cluster engines`` are recorded by their own launcher beside it
(``<cluster_id>.engines-<pid>.json``).
"""

from __future__ import annotations

import atexit
import logging
import os
import secrets
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import psutil

from zpar.cluster import names
from zpar.cluster.connection import profile_dir
from zpar.cluster.launchers import EngineSet, LaunchContext, engine_set_class
from zpar.cluster.launchers.base import ident, log_tail, process_state, spawn
from zpar.cluster.launchers.base import stop_processes as stop_processes
from zpar.cluster.launchers.restart import RestartPolicy
from zpar.cluster.launchers.watch import ProcessWatcher
from zpar.cluster.ownership import controller_running, sweep_stale_rundirs
from zpar.cluster.registry import (
    DEFAULT_CLUSTER_ID,
    ClusterState,
    list_clusters,
    remove_dead_connection_files,
    state_file,
    stop_cluster,
    url_dir,
)
from zpar.cluster.settings import Settings
from zpar.constants import DEFAULT_PROFILE
from zpar.errors import LaunchError, TimeoutError, ZparError

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_CLUSTER_ID",
    "ClusterState",
    "LaunchError",
    "LocalCluster",
    "list_clusters",
    "state_file",
    "stop_cluster",
    "url_dir",
]


class LocalControllerLauncher:
    """ipyparallel's name for the launcher of a controller on this machine, for code that
    passes ``Cluster(controller=...)`` a subclass of it: its ``controller_args`` are read
    (ipyparallel's store flags ``--dictdb`` / ``--sqlitedb`` mean zpar's ``--db memory`` /
    the default SQLite file; other arguments go to ``zpar controller`` as they are)."""

    controller_args: ClassVar[list[str]] = []


#: ipyparallel's controller store flags -> zpar controller arguments
IPP_STORE_FLAGS = {"--dictdb": ["--db", "memory"], "--sqlitedb": [], "--nodb": ["--db", "memory"]}


def controller_args_of(controller: Any) -> list[str]:
    """zpar controller arguments of an ipyparallel-style controller launcher (class or
    instance with ``controller_args``); a ValueError names a store zpar does not have."""
    out: list[str] = []
    for arg in list(getattr(controller, "controller_args", None) or []):
        if arg in IPP_STORE_FLAGS:
            out += IPP_STORE_FLAGS[arg]
        elif arg.startswith("--mongodb") or arg.startswith("--MongoDB"):
            raise ValueError(
                f"{arg}: zpar's task store is SQLite, PostgreSQL or memory (--db URL), not MongoDB"
            )
        else:
            out.append(arg)
    return out


class LocalCluster:
    """A controller (unless ``attach``) and engine sets, started and watched from here."""

    def __init__(
        self,
        n: int = 2,
        *,
        profile: str = DEFAULT_PROFILE,
        cluster_id: str | None = None,
        controller_args: Sequence[str] = (),
        engine_args: Sequence[str] = (),
        daemon: bool = False,
        keep_files: bool = False,
        settings: Settings | None = None,
    ) -> None:
        """``keep_files``: keep a throwaway cluster's task store, logs and connection files.
        ``settings``: the profile's with its overrides (zpar.cluster.settings.load: the CLI's
        flags, zpar.Cluster's arguments): ip, log level, engines' launcher, keep..."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"number of engines must be an int >= 0, got {n!r}")
        names.profile_name(profile)
        names.cluster_id(cluster_id or "")
        settings = settings or Settings(profile=profile)
        settings = replace(settings, log_level=names.log_level(settings.log_level))
        engine_set_class(settings.engines)  # an unknown kind fails here, before any process
        self.settings = settings
        self.n = n
        self.profile = profile
        #: a cluster without a given id is a throwaway: its files go when it stops
        self.throwaway = not cluster_id
        self.keep_files = keep_files
        self.cluster_id = cluster_id or secrets.token_hex(4)
        self.ip = settings.ip
        self.log_level = settings.log_level
        self.controller_args = list(controller_args)
        self.engine_args = list(engine_args)
        self.daemon = daemon
        self.url_dir = url_dir(profile, self.cluster_id)
        self.log_dir = profile_dir(profile) / "log"
        self.controller: subprocess.Popen | None = None
        self.engine_sets: list[EngineSet] = []
        #: ids of engine sets stopped on purpose (stop_engine_set): not replaced when they exit
        self._retired: set[int] = set()
        self._controller_log: Path | None = None
        self._recorded: Path | None = None  # the record this launcher wrote (and may remove)
        self._watcher: ProcessWatcher | None = None
        self._hub: Any = None  # zpar.cluster.launchers.hubquery.HubLine, made on first need
        self._policy = RestartPolicy()
        self._started_at: dict[int, float] = {}
        self._stopping = False
        self._lock = threading.RLock()
        #: called with a line for the user when an engine dies or is restarted
        self.on_event: Callable[[str], None] = lambda text: log.warning("%s", text)

    # -- files -------------------------------------------------------------------------------

    @property
    def client_file(self) -> Path:
        return self.url_dir / "zpar-client.json"

    @property
    def engine_file(self) -> Path:
        return self.url_dir / "zpar-engine.json"

    @property
    def engines(self) -> list[subprocess.Popen]:
        """Engine processes of this machine (local launcher) now running or last run."""
        return [p for s in self.engine_sets if s.kind == "local" for p in s.local_processes()]

    @property
    def _logs(self) -> dict[int, Path]:
        out = {self.controller.pid: self._controller_log} if self.controller else {}
        for s in self.engine_sets:
            out.update(getattr(s, "logs", {}))
        return out  # type: ignore[return-value]

    def context(self, wait: float = 0.0) -> LaunchContext:
        return LaunchContext(
            cluster_id=self.cluster_id,
            profile=self.profile,
            engine_file=self.engine_file,
            client_file=self.client_file,
            log_dir=self.log_dir,
            settings=self.settings,
            daemon=self.daemon,
            wait=wait,
            extra_args=tuple(self.engine_args),
        )

    # -- starting ------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        """Start the controller and the engines together; wait for the connection files.

        Local engines start at once with ``--wait``: their interpreter start-up overlaps the
        controller's instead of following it (cluster start-up is a benchmark row). Other
        launchers need the connection file first (they copy it, or submit a job).
        """
        self.start_controller(timeout, wait=self.settings.engines != "local")
        self.start_engines(wait=timeout)
        self.wait_for_connection_files(timeout)

    def wait_for_connection_files(self, timeout: float = 30.0) -> None:
        self._wait(
            lambda: self.client_file.exists() and self.engine_file.exists(),
            timeout,
            "the controller to write its connection files",
        )

    def check_not_running(self) -> None:
        """Refuse, touching nothing, if this profile and cluster id has a live cluster."""
        sweep_stale_rundirs()
        existing = state_file(self.profile, self.cluster_id)
        running = controller_running(self.profile, self.cluster_id)
        if not running and existing.exists():
            try:
                running = bool(ClusterState.load(existing).processes())
            except (OSError, ValueError, TypeError):
                running = False
        if running:
            raise LaunchError(
                f"cluster {self.cluster_id!r} of profile {self.profile!r} is already running; "
                f"stop it first: zpar cluster stop --profile {self.profile} "
                f"--cluster-id {self.cluster_id}"
            )

    def controller_command(self) -> list[str]:
        s = self.settings
        cmd = [
            sys.executable,  # the controller runs here, with this python ([engines] python
            "-P",  # is for engines); -P: the installed zpar, not a source tree in the cwd
            "-m",
            "zpar.hub",
            "--profile",
            self.profile,
            "--ip",
            s.ip,
            "--cluster-id",
            self.cluster_id,
            "--url-file-dir",
            str(self.url_dir),
            "--log-level",
            s.log_level,
        ]
        # the profile's and the environment's controller settings, resolved here, so the
        # launcher and its controller agree
        names = ("location", "db", "hb_period", "hb_misses", "scheme", "hwm", "port", "dashboard")
        for name in names:
            if name in s.sources:
                cmd += [f"--{name.replace('_', '-')}", str(getattr(s, name))]
        if s.insecure:
            cmd.append("--insecure")
        if s.curve:
            cmd.append("--curve")
        return [*cmd, *self.controller_args]

    def start_controller(self, timeout: float = 30.0, wait: bool = True) -> None:
        self.check_not_running()
        # what is left is a dead cluster's: its record and connection files would mislead
        state_file(self.profile, self.cluster_id).unlink(missing_ok=True)
        for f in (self.client_file, self.engine_file):
            f.unlink(missing_ok=True)
        self._controller_log = self.log_dir / f"{self.cluster_id}-controller.log"
        # the key goes in the environment: a command line is every user's to read
        env = {**os.environ, "ZPAR_KEY": self.settings.key} if self.settings.key else None
        self.controller = spawn(
            self.controller_command(), self._controller_log, self.daemon, env=env
        )
        if not self.daemon:
            atexit.register(self.stop)
        if wait:
            self.wait_for_connection_files(timeout)

    def start_engines(self, n: int | None = None, wait: float = 0.0) -> EngineSet:
        """Start n engines (default: the cluster's n) with the configured launcher;
        ``wait``: seconds local engines may wait for the connection file."""
        n = self.n if n is None else n
        cls = engine_set_class(self.settings.engines)
        es = cls(self.context(wait), n, index=len(self.engine_sets))
        with self._lock:
            self.engine_sets.append(es)
            es.start()
            for proc in es.local_processes():
                self._watch(es, proc)
        return es

    def add_engines(self, n: int) -> EngineSet:
        """Start n more engines; the cluster now asks for n more."""
        es = self.start_engines(n, wait=self.settings.timeout)
        self.n += n
        if self._recorded is not None:
            self.save_state()
        return es

    # -- watching ----------------------------------------------------------------------------

    def _watch(self, es: EngineSet, proc: subprocess.Popen) -> None:
        if self._watcher is None:
            self._watcher = ProcessWatcher(self._on_exit)
        self._started_at[proc.pid] = time.monotonic()
        self._watcher.watch(es, proc)

    def _hub_line(self) -> Any:
        if self._hub is None:
            from zpar.cluster.launchers.hubquery import HubLine

            self._hub = HubLine(self.client_file)
        return self._hub

    def stop_engine_set(self, es: EngineSet, timeout: float = 5.0) -> None:
        """Stop one set of engines (not replaced, even with ``keep``); the cluster now asks
        for that many fewer."""
        with self._lock:
            if es not in self.engine_sets:
                return
            self.engine_sets.remove(es)
            self._retired.add(id(es))
            self.n = max(0, self.n - es.n)
        try:
            es.stop(timeout)
        finally:
            if self._recorded is not None:
                self.save_state()

    def _on_exit(self, es: EngineSet, proc: subprocess.Popen) -> None:
        """In the watcher thread, the moment a process ``es`` started has exited."""
        if self._stopping:
            return
        engine = es.engine_of(proc)
        lifetime = time.monotonic() - self._started_at.pop(proc.pid, time.monotonic())
        if engine is not None and self.client_file.exists():
            try:
                ids = self._hub_line().engine_exited(*engine, proc.returncode)
            except ZparError as e:
                ids = []
                log.warning("could not tell the hub that engine pid %d exited: %s", proc.pid, e)
        else:
            ids = []
        what = f"engine {ids[0]}" if len(ids) == 1 else f"{es.kind} engine"
        text = f"{what} (pid {proc.pid}) exited with code {proc.returncode}"
        if not self.settings.keep or self._stopping or id(es) in self._retired:
            self.on_event(text)
            return
        slot = (es.index, es.local_processes().index(proc) if proc in es.local_processes() else 0)
        delay = self._policy.next_delay(slot, lifetime)
        crashes = self._policy.crash_count(slot)
        if delay:
            text += (
                f" after {lifetime:.1f} s, {crashes} crash(es) in a row: restarting it in "
                f"{delay:g} s (check its log {self.log_dir}/{self.cluster_id}-engine-*.log)"
            )
        else:
            text += "; restarting it"
        self.on_event(text)
        timer = threading.Timer(delay, self._replace, (es, proc))
        timer.daemon = True
        timer.start()

    def _replace(self, es: EngineSet, proc: subprocess.Popen) -> None:
        with self._lock:
            if self._stopping:
                return
            new = es.replace(proc)
            if new is None:
                return
            self._watch(es, new)
            if self._recorded is not None:
                self.save_state()
        log.info("engine pid %d replaced by pid %d", proc.pid, new.pid)

    # -- waiting -----------------------------------------------------------------------------

    def _wait(self, cond: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        delay = 0.005
        while not cond():
            self._check_alive(what)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"timed out after {timeout} s waiting for {what}.{self.describe()}"
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.02)

    def wait_for_engines(
        self, client: Any, timeout: float = 60.0, progress: Callable[[int, int], None] | None = None
    ) -> None:
        """Wait until n engines are registered, failing at once if the controller (or, for
        local engines without keep, an engine) exits."""
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
                    f"see the logs in {self.log_dir}.{self.describe()}"
                )
            try:  # wakes on each registration; the short timeout is for noticing deaths
                client.wait_for_engines(have + 1, timeout=0.05)
            except TimeoutError:
                pass

    def describe(self) -> str:
        """State and log tail of each process, for an error message."""
        out = []
        if self.controller is not None:
            out.append(
                f"\n- controller pid {self.controller.pid} ({process_state(self.controller)}):"
                f"{log_tail(self._controller_log)}"
            )
        for es in self.engine_sets:
            out.append(es.describe())
        return "".join(out)

    _describe_processes = describe

    def _check_alive(self, what: str) -> None:
        procs = [self.controller]
        if not self.settings.keep:
            procs += [p for es in self.engine_sets for p in es.local_processes()]
        for p in procs:
            if p is not None and p.poll() is not None:
                logs = self._logs
                raise LaunchError(
                    f"process {p.pid} ({' '.join(p.args[1:4])}) exited with code "
                    f"{p.returncode} while waiting for {what}. Its log:"
                    f"{log_tail(logs.get(p.pid), 20)}"
                )

    # -- the record --------------------------------------------------------------------------

    def state(self) -> ClusterState:
        return ClusterState(
            cluster_id=self.cluster_id,
            profile=self.profile,
            n=self.n,
            url_file=str(self.client_file),
            launcher=self.settings.engines,
            controller=ident(self.controller.pid) if self.controller else [],
            supervisor=ident(os.getpid()) if not self.daemon else [],
            engine_sets=[es.record() for es in self.engine_sets],
            keep=self.settings.keep,
            started=time.time(),
        )

    def save_state(self, path: Path | None = None) -> Path:
        """Write this cluster's record (this launcher owns it from now on)."""
        with self._lock:
            path = path or self._recorded or state_file(self.profile, self.cluster_id)
            self._recorded = self.state().save(path)
            return path

    # -- stopping ----------------------------------------------------------------------------

    def stop(self, timeout: float = 5.0) -> None:
        with self._lock:
            self._stopping = True
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
        if self._hub is not None:
            self._hub.close()
            self._hub = None
        started = bool(self.engine_sets) or self.controller is not None
        for es in self.engine_sets:
            try:
                es.stop(timeout)
            except LaunchError as e:
                log.warning("stopping %s engines: %s", es.kind, e)
        if self.controller is not None and self.controller.poll() is None:
            stop_processes([psutil.Process(self.controller.pid)], timeout)
        if self.controller is not None:
            try:
                self.controller.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        if self._recorded is not None:
            self._recorded.unlink(missing_ok=True)
            self._recorded = None
        if self.controller is not None:  # a controller killed by SIGKILL left its files
            remove_dead_connection_files(self.url_dir)
        if started and self.throwaway and not self.keep_files:
            self.remove_files()
        self.engine_sets = []
        self.controller = None
        self._stopping = False

    def remove_files(self) -> None:
        """Remove this cluster's task store, logs and connection files."""
        pdir = profile_dir(self.profile)
        paths = [self.client_file, self.engine_file]
        paths += self.log_dir.glob(f"{self.cluster_id}-*.log*")
        paths += pdir.glob(f"tasks-{self.cluster_id}.db*")  # with SQLite's -wal / -shm
        paths += (pdir / "batch").glob(f"{self.cluster_id}-*")
        for path in paths:
            path.unlink(missing_ok=True)
        if self.url_dir != url_dir(self.profile, DEFAULT_CLUSTER_ID):
            shutil.rmtree(self.url_dir, ignore_errors=True)
