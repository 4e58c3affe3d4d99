"""An in-process cluster for fast tests: the controller's hub and relays, the task scheduler
and N engines as threads of the test's own process, with a real ``zpar.Client`` on it.

As dramatiq's ``StubBroker`` serves its tests, it lets tests of the client's API (apply,
map, push/pull, scatter/gather, AsyncResult) run without starting a process::

    from zpar.testing import InProcessCluster

    with InProcessCluster(n=2) as cluster:
        rc = cluster.client
        assert rc[:].apply_sync(lambda: 1) == [1, 1]

or, with ``pytest_plugins = ["zpar.testing"]``, the fixtures ``inprocess_cluster``
(module-scoped) and ``inprocess_rc`` (its client, engines' namespaces cleared per test).

The parts talk over loopback tcp and ipc, as in a real cluster: each part keeps its own
zmq context (the controller, the heartbeat, the scheduler, every engine and its heart), and
inproc endpoints reach only sockets of the same context. The wire, the signing and every
handler are the product's own; only the processes are missing. So it does not support what
needs an engine to be a process of its own, and says so (errors.InProcessUnsupported):

- ``time_limit``: the watchdog interrupts with SIGINT, which reaches only the main thread;
- ``send_signal`` (interrupting a running task): a signal would hit the test process;
- ``shutdown(restart=True)``: an engine restarts by re-executing its process;
- killing an engine, or a task calling ``os._exit``: the process is the test's.

Engines share one interpreter: each has its own namespace (zpar.namespace.per_thread), and
what a task prints goes to its engine's capture (stdout is routed per thread while the
cluster runs), but modules, ``sys`` and the GIL are shared, and ``zpar.comm`` communicators
(one engine per process) are not supported.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import zmq

from zpar import namespace
from zpar.cluster.connection import CLIENT_FILE, ENGINE_FILE, read_connection_file
from zpar.cluster.ownership import RUNDIR_PREFIX, write_rundir_owner
from zpar.constants import TASK_SCHEME
from zpar.engine.capture import Capture
from zpar.engine.engine import Engine
from zpar.errors import InProcessUnsupported
from zpar.hub.controller import Controller
from zpar.hub.schedproc import ControllerConfig, SchedulerLaunch
from zpar.schedulers.quota import QueueQuota
from zpar.schedulers.task import TaskScheduler
from zpar.wire import Session
from zpar.wire.messages import MsgType

log = logging.getLogger(__name__)

__all__ = ["InProcessCluster", "InProcessUnsupported", "inprocess_cluster", "inprocess_rc"]

#: Seconds each part has to stop when the cluster closes.
STOP_TIMEOUT = 10.0

_WHY = "engines of zpar.testing's in-process cluster are threads, not processes"


# -- the task scheduler as a thread -----------------------------------------------------------


class _SchedulerThread:
    """What the controller knows of its scheduler process (a Popen), for a thread."""

    def __init__(self, scheduler: TaskScheduler, ctx: zmq.Context) -> None:
        self.pid = os.getpid()
        self.returncode: int | None = None
        self._scheduler = scheduler
        self._ctx = ctx
        self._thread = threading.Thread(target=self._run, name="zpar-scheduler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._scheduler.announce()
            self._scheduler.run()
        finally:
            self._scheduler.close()
            self._ctx.term()

    def poll(self) -> int | None:
        if self.returncode is None and not self._thread.is_alive():
            self.returncode = 0
        return self.returncode

    def terminate(self) -> None:
        self._scheduler.stopping = True
        # its loop polls up to a second between checks: a peer that connects and leaves
        # wakes it at once (the client link watches its socket's connections); no message
        poke = self._ctx.socket(zmq.DEALER)
        poke.connect(self._scheduler.client_addr)
        time.sleep(0.01)
        poke.close(linger=0)

    kill = terminate

    def wait(self, timeout: float | None = None) -> int:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise subprocess.TimeoutExpired("zpar-scheduler thread", timeout or 0)
        return self.poll() or 0


def _launch_scheduler_thread(config: ControllerConfig) -> SchedulerLaunch:
    """hub.schedproc.launch_scheduler's counterpart: the same sockets, in a thread."""
    rundir = Path(tempfile.mkdtemp(prefix=RUNDIR_PREFIX))  # mode 0700
    write_rundir_owner(rundir)
    key = config.key or secrets.token_hex(32)
    key_file = rundir / "key"  # the controller removes it once the scheduler is ready
    key_file.touch(0o600)
    ctx = zmq.Context()
    scheduler = TaskScheduler(
        Session(key),
        ip=config.ip,
        monitor=f"ipc://{rundir}/monitor",
        events=f"ipc://{rundir}/events",
        scheme=config.scheme,
        hwm=config.hwm,
        context=ctx,
        ipc_dir=str(rundir),
        quota=QueueQuota(per_client=config.client_queue, budget=config.queue_budget),
    )
    process: Any = _SchedulerThread(scheduler, ctx)
    return SchedulerLaunch(rundir, key, key_file, process)


# -- engines as threads -----------------------------------------------------------------------

#: the task each thread runs now: its capture's (stdout, stderr)
_tasks = threading.local()
_streams_lock = threading.Lock()
#: in-process clusters running in this process (namespaces are per thread while any runs)
_running = 0


class _ThreadStream:
    """Installed as sys.stdout/sys.stderr while engine threads run tasks: writes of an
    engine thread inside a task go to that task's capture, every other write where it
    went before."""

    def __init__(self, real: Any, index: int) -> None:
        self.real = real
        self._index = index

    def _target(self) -> Any:
        streams = getattr(_tasks, "streams", None)
        return self.real if streams is None else streams[self._index]

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)


class _ThreadCapture(Capture):
    """engine.capture.Capture for engine threads: Capture swaps sys.stdout for the whole
    process, which concurrent engines would tangle; this one routes by thread."""

    def start(self, parent: dict[str, Any]) -> None:
        self._parent = parent
        self.stdout.reset()
        self.stderr.reset()
        with _streams_lock:
            if not isinstance(sys.stdout, _ThreadStream):
                sys.stdout = _ThreadStream(sys.stdout, 0)
            if not isinstance(sys.stderr, _ThreadStream):
                sys.stderr = _ThreadStream(sys.stderr, 1)
        _tasks.streams = (self.stdout, self.stderr)

    def stop(self) -> tuple[str, str]:
        _tasks.streams = None
        self.stdout.flush()
        self.stderr.flush()
        return self.stdout.getvalue(), self.stderr.getvalue()


def _refusing_time_limits(run: Any) -> Any:
    def run_unlimited(msg: Any) -> Any:
        if msg.metadata.get("time_limit") is not None:
            raise InProcessUnsupported(
                f"time_limit: {_WHY}, and the watchdog interrupts a task with SIGINT, which "
                "reaches only a process's main thread; test time limits on a real cluster"
            )
        return run(msg)

    return run_unlimited


class ThreadEngine(Engine):
    """An engine serving in a thread of the test process (not restartable, no signals)."""

    configures_logging = False  # the host's logging (pytest's) is left alone

    def connect(self, reply: Any) -> None:
        super().connect(reply)
        kernel = self.kernel
        assert kernel is not None and self.signals is not None
        kernel._capture = _ThreadCapture(self.iopub.publish)
        for msg_type in (MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST):
            kernel._handlers[msg_type] = _refusing_time_limits(kernel._handlers[msg_type])
        self.signals.raise_signal = self._refuse_signal

    def register(self) -> Any:
        reply = super().register()
        _forget_engine(self)  # zpar.engine.this_engine() names a process's one engine
        return reply

    def _refuse_signal(self, signum: int) -> None:
        log.error("engine %d: signal %d not raised: %s", self.id, signum, _WHY)


def _forget_engine(engine: Engine | None = None) -> None:
    """What engine threads leave in the process: this_engine() (every engine's register
    sets it), and the IPython shell the first execute_request made, which would answer
    get_ipython() in the host (zpar.engine.ipyshell)."""
    from zpar.engine import engine as engine_module

    current = engine_module._this_engine
    if current is not None and (engine is None or current is engine):
        engine_module._this_engine = None
    if engine is None and "zpar.engine.ipyshell" in sys.modules:
        from IPython.core.interactiveshell import InteractiveShell

        from zpar.engine.ipyshell import EmbeddedEngineShell

        if InteractiveShell.initialized() and isinstance(
            InteractiveShell.instance(), EmbeddedEngineShell
        ):
            EmbeddedEngineShell.clear_instance()


# -- the cluster ------------------------------------------------------------------------------


def _client_class() -> type:
    from zpar.client.client import Client

    class InProcessClient(Client):
        """A zpar.Client whose engines are threads: signals are refused here, clearly."""

        def send_signal(self, sig: int | str, targets: Any = None, block: bool = True) -> Any:
            raise InProcessUnsupported(
                f"send_signal({sig!r}): {_WHY}; a signal would reach the test process "
                "itself. Test signals and interrupts on a real cluster"
            )

    return InProcessClient


class InProcessCluster:
    """The controller (hub, relays), the task scheduler and ``n`` engines as threads of this
    process; ``client`` is a zpar.Client connected to them. A context manager; ``start()``
    and ``stop()`` otherwise. ``url_file_dir``: where the connection files go (default: a
    private temporary folder)."""

    def __init__(
        self,
        n: int = 2,
        *,
        timeout: float = 30.0,
        scheme: str = TASK_SCHEME,
        url_file_dir: str | Path | None = None,
        log_level: str = "WARNING",
    ) -> None:
        if n < 1:
            raise ValueError(f"an in-process cluster needs at least 1 engine, not n={n}")
        self.n = n
        self.timeout = timeout
        self._own_dir = url_file_dir is None
        self.url_file_dir = Path(url_file_dir or tempfile.mkdtemp(prefix="zpar-inprocess-"))
        self.config = ControllerConfig(
            ip="127.0.0.1",
            url_file_dir=str(self.url_file_dir),
            scheme=scheme,
            db="memory",
            log_level=log_level,
        )
        self.controller: Controller | None = None
        self.engines: list[ThreadEngine] = []
        self._threads: list[threading.Thread] = []
        self._client: Any = None
        self._counted = False  # in _running
        #: seconds from start() to a client seeing every engine
        self.startup_seconds = 0.0

    @property
    def client(self) -> Any:
        if self._client is None:
            raise RuntimeError("the in-process cluster is not started: call start() first")
        return self._client

    def __enter__(self) -> InProcessCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Any:
        """Start every part; returns the client once all ``n`` engines are registered."""
        global _running
        t0 = time.monotonic()
        with _streams_lock:
            _running += 1
            namespace.per_thread()
        self._counted = True
        try:
            controller = self.controller = Controller(
                self.config, _launch_scheduler_thread(self.config)
            )
            controller.start()
            self._thread(controller.run, "zpar-controller")
            info = read_connection_file(self.url_file_dir / ENGINE_FILE)
            for _ in range(self.n):
                engine = ThreadEngine(info)
                self.engines.append(engine)
                self._thread(engine.run, "zpar-engine")
            self._client = _client_class()(url_file=self.url_file_dir / CLIENT_FILE)
            self._client.wait_for_engines(self.n, timeout=self.timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        log.info("in-process cluster of %d engines up in %.3f s", self.n, self.startup_seconds)
        return self._client

    def _uncount(self) -> None:
        """The last in-process cluster gone: the process's streams and namespace rule back
        as they were."""
        global _running
        if not self._counted:
            return
        self._counted = False
        with _streams_lock:
            _running -= 1
            if _running:
                return
            namespace.per_thread(False)
            if isinstance(sys.stdout, _ThreadStream):
                sys.stdout = sys.stdout.real
            if isinstance(sys.stderr, _ThreadStream):
                sys.stderr = sys.stderr.real

    def _thread(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        """Stop the engines, then the controller and scheduler; close the client."""
        client, self._client = self._client, None
        deadline = time.monotonic() + STOP_TIMEOUT
        engine_threads = self._threads[1:]  # the controller's is the first
        if client is not None:
            try:  # not waiting for the hub to see them gone: the threads' ends say it
                if client.ids:
                    client.shutdown(targets="all", block=False)
            except Exception as e:  # stopped below anyway
                log.warning("in-process cluster: engines not asked to shut down: %s", e)
            for t in engine_threads:
                t.join(max(0.0, min(STOP_TIMEOUT / 2, deadline - time.monotonic())))
            client.close()
        for engine in self.engines:
            engine.state.stopping = True  # seen within a poll period (1 s)
        controller = self.controller
        if controller is not None:
            controller.request_stop()
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
        left = [t.name for t in self._threads if t.is_alive()]
        if controller is not None:
            controller.stop()
        self.controller = None
        self.engines.clear()
        self._threads.clear()
        self._uncount()
        _forget_engine()
        if self._own_dir:
            shutil.rmtree(self.url_file_dir, ignore_errors=True)
        if left:
            raise RuntimeError(f"in-process cluster: threads still running after stop: {left}")


# -- pytest fixtures (``pytest_plugins = ["zpar.testing"]``) ----------------------------------

try:
    import pytest
except ImportError:  # pragma: no cover - the fixtures only matter under pytest
    pass
else:

    @pytest.fixture(scope="module")
    def inprocess_cluster() -> Iterator[InProcessCluster]:
        """A module's in-process cluster of 2 engines."""
        with InProcessCluster(n=2) as cluster:
            yield cluster

    @pytest.fixture
    def inprocess_rc(inprocess_cluster: InProcessCluster) -> Any:
        """The in-process cluster's client, its engines' namespaces cleared for this test."""
        rc = inprocess_cluster.client
        rc.clear(block=True)
        return rc
