"""The controller process: binds every socket, starts the relays and the task scheduler,
writes the connection files, then runs the hub loop until told to stop.

The hub and its scheduler talk over ipc sockets in a private 0700 directory: those pipes
carry unsigned header copies, so they are never reachable from the network.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import zmq

from zpar.cluster.connection import (
    CLIENT_FILE,
    ENGINE_FILE,
    ConnectionInfo,
    pid_namespace,
    profile_dir,
    read_connection_file,
    security_dir,
    write_connection_file,
)
from zpar.cluster.ownership import DEFAULT_LOCK_NAME
from zpar.constants import (
    MONITOR_RCVHWM,
    WILDCARDS,
)
from zpar.errors import ControllerError, ZparError
from zpar.memory import Trimmer
from zpar.profiling import profiled
from zpar.schedulers.relays import start_relays
from zpar.wire import Session
from zpar.wire.curve import ZapAuthenticator, secure
from zpar.wire.listenguard import ListenerGuard
from zpar.wire.messages import MON_SCHEDULER, MsgType
from zpar.wire.monitor import split_monitor
from zpar.wire.privacy import iopub_topic
from zpar.wire.sockets import bind_port, configure

from .heartmonitor import HeartMonitor
from .hub import Addresses, Hub
from .resubmit import RESUBMIT_IDENT, Resubmitter
from .schedproc import ControllerConfig, SchedulerLaunch, launch_scheduler
from .schedwatch import SchedulerWatch
from .status import add_refusal_parts
from .stores import TaskStore, open_store

log = logging.getLogger(__name__)

#: Seconds the scheduler has to start and say where it listens.
SCHEDULER_START_TIMEOUT = 30.0


#: Seconds between heartbeat probes while an engine is registering.
PROBE_INTERVAL = 0.01


def advertise(addr: str, host: str) -> str:
    """``tcp://0.0.0.0:5555`` -> ``tcp://<host>:5555``: what a peer should connect to."""
    port = addr.rsplit(":", 1)[1]
    return f"tcp://{host}:{port}"


class Controller:
    def __init__(self, config: ControllerConfig, launch: SchedulerLaunch | None = None) -> None:
        """``launch``: the task scheduler, started already (hub/__main__ starts it before
        importing this module); started here if not."""
        self.config = config
        self.ctx = zmq.Context()
        #: the heartbeat's ping and pong sockets have a libzmq I/O thread of their own: on
        #: a --curve cluster the main one encrypts and decrypts every byte the relays carry,
        #: and a 100 MB push held the pings and pongs back past the engines' limit
        #: (tests/e2e/test_curve_heartbeat.py; the engine's heart does the same)
        self.hb_ctx = zmq.Context()
        self._hb_zap: ZapAuthenticator | None = None
        if launch is None:
            launch = launch_scheduler(config)
        self.rundir = launch.rundir
        self.key = launch.key
        self._key_file = launch.key_file
        #: zpar.wire.curve.CurveKeys of a --curve cluster; its ZAP handler, once started
        self.curve = launch.curve
        self.zap: ZapAuthenticator | None = None
        self.session = Session(self.key or None, allow_insecure=config.insecure)
        self.scheduler: subprocess.Popen | None = launch.process
        self._launch = launch
        self.watch: SchedulerWatch | None = None  # once the scheduler reported ready
        log.info("task scheduler started (pid %d)", self.scheduler.pid)
        self.store: TaskStore | None = None
        self.hub: Hub | None = None
        self.url_files: list[Path] = []
        self.dashboard: Any = None  # zpar.dashboard.Dashboard, when the config asks for one
        self._sockets: list[zmq.Socket] = []
        #: strangers on every listener peers reach: handshake deadline, per-address limit,
        #: descriptor exhaustion (zpar/wire/listenguard.py); counted as "connections"
        self.guard = ListenerGuard(what="controller")
        self._forwarded: dict[str, zmq.Socket | None] = {}
        self.exit_code = 0

    # -- start-up -------------------------------------------------------------------------

    def _socket(
        self,
        kind: int,
        *,
        peers: bool = True,
        context: zmq.Context | None = None,
        name: str = "",
        forward: int = 0,
    ) -> zmq.Socket:
        """``peers``: engines or clients connect to it (a Curve server on a --curve cluster).
        ``context``: another than the controller's (the heartbeat's). ``name``: a listener
        strangers reach, guarded by ``self.guard``, which forwards the ``forward`` events
        of its monitor (``self._forwarded[name]``)."""
        s = configure((context or self.ctx).socket(kind))
        if peers:
            secure(s, self.curve, server=True)
        if name:
            self._forwarded[name] = self.guard.watch(s, name, forward=forward)
        self._sockets.append(s)
        return s

    def start(self) -> None:
        cfg = self.config
        # first: a store that cannot be opened stops us before any port is bound
        # the store (and SQLAlchemy's import) opens in a thread while the sockets bind and
        # the scheduler starts; a store that cannot be opened still stops us before any
        # connection file is written
        # README: tasks-<cluster id>.db; a controller started without one is "default"
        name = f"tasks-{cfg.cluster_id or DEFAULT_LOCK_NAME}.db"
        opened: dict[str, Any] = {}

        def open_it() -> None:
            try:
                opened["store"] = open_store(cfg.db, profile_dir(cfg.profile) / name)
            except BaseException as e:  # re-raised in this thread below
                opened["error"] = e

        opener = threading.Thread(target=open_it, name="zpar-store-open", daemon=True)
        opener.start()
        ip = "*" if cfg.ip in WILDCARDS else cfg.ip
        host = cfg.advertised_host
        if self.curve is not None:  # judging handshakes before the first socket binds
            self.zap = ZapAuthenticator(self.ctx, {self.curve.client_public})
            self._hb_zap = ZapAuthenticator(self.hb_ctx, {self.curve.client_public})
            self._hb_zap.refused = self.zap.refused  # one count of refused handshakes
        query = self._socket(zmq.ROUTER, name="registration")
        query_addr = bind_port(query, ip, cfg.port_of("registration"))
        notification = self._socket(zmq.XPUB, name="notification")
        notification.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscriber gets its welcome
        notification_addr = bind_port(notification, ip, cfg.port_of("notification"))
        ping = self._socket(zmq.PUB, context=self.hb_ctx, name="heartbeat ping")
        ping_addr = bind_port(ping, ip, cfg.port_of("heartbeat ping"))
        pong = self._socket(
            zmq.ROUTER, context=self.hb_ctx, name="heartbeat pong", forward=zmq.EVENT_DISCONNECTED
        )
        pong_addr = bind_port(pong, ip, cfg.port_of("heartbeat pong"))
        monitor = self._socket(zmq.PULL, peers=False)
        # ipc peers (scheduler, engines) wait in their own queues while the hub is behind;
        # the relays' inproc pipes stay unbounded (their PUSH has no HWM)
        monitor.setsockopt(zmq.RCVHWM, MONITOR_RCVHWM)
        inproc_monitor = f"inproc://zpar-monitor-{os.getpid()}"
        monitor.bind(inproc_monitor)
        monitor.bind(f"ipc://{self.rundir}/monitor")
        events = self._socket(zmq.PUSH, peers=False)
        relays = start_relays(
            self.ctx,
            ip,
            inproc_monitor,
            str(self.rundir),
            self.curve,
            iopub_topic(self.key),
            ports=cfg.port_of,
            guard=self.guard,
        )
        self.guard.start(self.ctx)
        ready = self._wait_for_scheduler(monitor)
        self.watch = SchedulerWatch(cfg, self._launch, ready)
        events.connect(ready["events"])

        heart = HeartMonitor(
            ping,
            pong,
            period=cfg.hb_period,
            max_misses=cfg.hb_misses,
            on_new_heart=lambda uuid: None,
            on_heart_failure=lambda uuid, reason: None,
        )

        def side(which: str) -> dict[str, Any]:
            """Addresses one kind of peer connects to: tcp as advertised, and ipc twins."""
            relay_addr = {name: getattr(r, which) for name, r in relays.items()}
            local = {name: getattr(r, f"local_{which}") for name, r in relays.items()}
            return {
                **{name: advertise(addr, host) for name, addr in relay_addr.items()},
                "task": advertise(ready[which], host),
                "local": {
                    **local,
                    "task": ready.get(f"local_{which}", ""),
                    "host": socket.gethostname(),
                },
            }

        engine_side = {
            **side("engine"),
            "heartbeat": [advertise(ping_addr, host), advertise(pong_addr, host)],
            "hb_period": cfg.hb_period,
        }
        client_side = {
            **side("client"),
            "task_scheme": ready.get("scheme", cfg.scheme),
            "notification": advertise(notification_addr, host),
        }
        opener.join()
        if "error" in opened:
            raise opened["error"]
        store = self.store = opened["store"]
        log.info("task store: %s (%d records)", store.url, store.count())
        self.hub = Hub(
            self.session,
            query=query,
            notification=notification,
            monitor=monitor,
            events=events,
            heart=heart,
            addresses=Addresses(engine_side, client_side),
            store=store,
        )
        self.hub.resubmitter = self._resubmitter(ready)
        add_refusal_parts(self.hub.refusals, relays, self.zap)
        self.hub.refusals.add_part("connections", lambda: dict(self.guard.counts))
        if cfg.dashboard:
            self._open_dashboard(cfg.dashboard)
        self._write_url_files(advertise(query_addr, host))
        if self.dashboard is not None:
            self.dashboard.url_file = self.url_files[-1]  # the client file: its hub line
            self.hub.dashboard_link = self.dashboard.link
            self.dashboard.start()

    def _open_dashboard(self, address: str) -> None:
        """Bind the dashboard's socket (an error now if it cannot), started once the
        connection files that carry its link are written."""
        from zpar.dashboard import Dashboard

        assert self.hub is not None
        self.dashboard = Dashboard(
            self.hub,
            address,
            key=self.key,
            scheduler_pid=lambda: self.scheduler.pid if self.scheduler is not None else None,
        )

    def _resubmitter(self, ready: dict[str, Any]) -> Resubmitter:
        """The hub's DEALER to the task scheduler's client ROUTER (its ipc twin when there
        is one), through which resubmitted tasks go as any client's (hub/resubmit.py).
        A restarted scheduler binds the same addresses: the DEALER reconnects itself."""
        s = self._socket(zmq.DEALER, peers=False)
        s.setsockopt(zmq.IDENTITY, RESUBMIT_IDENT)
        secure(s, self.curve)  # a Curve client of a --curve scheduler, as clients are
        s.connect(ready.get("local_client") or advertise(ready["client"], "127.0.0.1"))
        return Resubmitter(s, self.session)

    def _wait_for_scheduler(self, monitor: zmq.Socket) -> dict[str, Any]:
        """Wait for the (already started) scheduler to report the ports it bound."""
        assert self.scheduler is not None
        key_file = self._key_file
        session = self.session
        deadline = time.monotonic() + SCHEDULER_START_TIMEOUT
        while True:
            if self.scheduler.poll() is not None:
                raise ControllerError(
                    f"the task scheduler exited with code {self.scheduler.returncode} at start-up"
                )
            if time.monotonic() > deadline:
                raise ControllerError(
                    f"the task scheduler did not report ready within {SCHEDULER_START_TIMEOUT} s"
                )
            if not monitor.poll(100):
                continue
            kind, frames = split_monitor(monitor.recv_multipart())
            if kind != MON_SCHEDULER:
                continue
            msg = session.feed(frames, "monitor (scheduler start-up)")
            if msg is not None and msg.msg_type == MsgType.SCHEDULER_READY:
                log.info("task scheduler ready: %s", msg.content)
                key_file.unlink(missing_ok=True)
                return msg.content

    def _write_url_files(self, registration: str) -> None:
        cfg = self.config
        d = Path(cfg.url_file_dir) if cfg.url_file_dir else security_dir(cfg.profile)
        info = ConnectionInfo(
            registration=registration,
            key=self.key,
            location=cfg.advertised_host,
            cluster_id=cfg.cluster_id,
            controller_pid=os.getpid(),
            dashboard=self.dashboard.url if self.dashboard is not None else "",
            dashboard_token=self.dashboard.token if self.dashboard is not None else "",
            controller_pidns=pid_namespace(),
            controller_started=psutil.Process().create_time(),
        )
        if self.curve is not None:
            info = replace(
                info,
                curve_server_key=self.curve.server_public,
                curve_public_key=self.curve.client_public,
                curve_secret_key=self.curve.client_secret,
            )
        # engine file first: a launcher that sees the client file may start engines at once
        for name in (ENGINE_FILE, CLIENT_FILE):
            self.url_files.append(write_connection_file(d / name, info))
        log.info("connection files written in %s; registration at %s", d, registration)

    # -- running --------------------------------------------------------------------------

    def run(self) -> int:
        """Serve until a shutdown request, SIGTERM/SIGINT or the scheduler's death."""
        hub = self.hub
        assert hub is not None and self.scheduler is not None
        heart = hub.heart
        poller = zmq.Poller()
        handlers = {
            hub.query: hub.handle_query,
            hub.notification: hub.handle_notification,
            hub.monitor: hub.handle_monitor,
            heart.pong: heart.handle_pong,
        }
        if hub.resubmitter is not None:
            handlers[hub.resubmitter.socket] = hub.resubmitter.drain
        events = heart.watch_connections(self._forwarded["heartbeat pong"])
        self._sockets.insert(0, events)  # closed before the pong socket it watches
        handlers[events] = heart.handle_events
        for s in handlers:
            poller.register(s, zmq.POLLIN)
        watch = self.watch
        assert watch is not None
        hub.on_scheduler_ready = lambda content: watch.on_ready(hub, content)
        watch.register(poller)
        period = heart.period
        next_beat = time.monotonic()
        log.info("controller running (heartbeat %.3g s x %d)", period, heart.max_misses)
        next_probe = 0.0
        trimmer = Trimmer(burst=200)
        while not hub.stopping:
            probing = bool(hub.registrar.pending) or heart.probing
            wake = min(next_beat, next_probe) if probing else next_beat
            timeout = max(0.0, wake - time.monotonic())
            flush_in = hub.writer.wait()
            if flush_in is not None:
                timeout = min(timeout, flush_in)
            ready = poller.poll(int(timeout * 1000) + 1)
            for sock, _ in ready:
                handlers.get(sock, watch.on_sentinel)()  # not a socket: the scheduler's pidfd
            if (watch.fired or time.monotonic() >= next_beat) and not watch.check():
                self.exit_code = 1
                break
            self.scheduler = watch.process
            hub.flush_store()
            if ready:
                trimmer.count(len(ready))
            else:
                trimmer.maybe_trim()  # idle after a burst: give the pages back
            now = time.monotonic()
            if (hub.registrar.pending or heart.probing) and now >= next_probe:
                # a registering engine is in as soon as its heart is up; an engine whose
                # heartbeat connection closed is dead unless it answers soon
                heart.probe()
                next_probe = now + PROBE_INTERVAL
            if heart.probing:
                heart.check_suspects(now)
            if now >= next_beat:
                heart.beat()
                next_beat = max(next_beat + period, now)
                hub.registrar.expire()
                hub.tick_services(now)
        watch.close_sentinel()
        return self.exit_code

    def request_stop(self, *_: Any) -> None:
        if self.hub is not None:
            self.hub.stopping = True

    # -- stopping -------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop the scheduler, close every socket, remove our connection files."""
        if self.dashboard is not None:
            self.dashboard.stop(timeout=2.0)  # a daemon thread: never the stop's bottleneck
        if self.scheduler is not None and self.scheduler.poll() is None:
            self.scheduler.terminate()
            try:
                self.scheduler.wait(5)
            except subprocess.TimeoutExpired:
                log.warning("task scheduler ignored SIGTERM; killing it")
                self.scheduler.kill()
                self.scheduler.wait(5)
        if self.hub is not None:
            self.hub.writer.flush(everything=True)  # what the store has not seen yet
        if self.store is not None:
            self.store.close()
        for path in self.url_files:
            try:
                if read_connection_file(path).controller_pid == os.getpid():
                    path.unlink()
            except (ZparError, OSError):
                pass
        self.guard.stop()  # its monitors, before the sockets they watch
        for s in self._sockets:
            s.close(linger=0)
        for zap in (self.zap, self._hb_zap):
            if zap is not None:
                zap.stop()
        # the relay threads close their sockets when term() interrupts them
        for ctx in (self.ctx, self.hb_ctx):
            term = threading.Thread(target=ctx.term, daemon=True)
            term.start()
            term.join(5)
        shutil.rmtree(self.rundir, ignore_errors=True)
        log.info("controller stopped")


def run_controller(config: ControllerConfig, launch: SchedulerLaunch | None = None) -> int:
    controller = Controller(config, launch)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, controller.request_stop)
    try:
        controller.start()
        with profiled("controller"):
            return controller.run()
    finally:
        controller.stop()
