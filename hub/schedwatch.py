"""The controller's watch on its task scheduler: a sentinel in its poll loop, and a new
scheduler, on the same addresses, when the old one dies.

The scheduler's process is watched through a pidfd (readable the moment it exits), so its
death wakes the controller at once instead of at the next heartbeat. The new scheduler binds
the same tcp ports and ipc paths: engines' and clients' DEALERs reconnect on their own. When
it reports ready, the hub tells it every registered engine again, and tells the clients
(``scheduler_restarted``), which resubmit their load-balanced requests that carry retries and
fail the others (client.ioloop). A scheduler that keeps dying (``MAX_RESTARTS`` within
``RESTART_WINDOW`` seconds) stops the controller instead: something is wrong that a restart
will not fix.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections import deque
from typing import Any

import zmq

from zpar.wire.messages import MsgType, SchedulerRestarted

from .schedproc import ControllerConfig, SchedulerLaunch, launch_scheduler

log = logging.getLogger(__name__)

MAX_RESTARTS = 5
#: Seconds clients have to resend a dead scheduler's tasks (they do so as soon as they
#: are told); a task still not resent is one its client had the answer to already.
RESEND_WINDOW = 10.0
RESTART_WINDOW = 60.0


def _port(addr: str) -> int:
    return int(addr.rsplit(":", 1)[1]) if addr.startswith("tcp://") else 0


class SchedulerWatch:
    def __init__(self, config: ControllerConfig, launch: SchedulerLaunch, ready: dict[str, Any]):
        self.config = config
        self.launch = launch
        self.ports = (_port(ready.get("client", "")), _port(ready.get("engine", "")))
        self.addresses = (ready.get("client"), ready.get("engine"))
        self.sentinel = self._open_sentinel()
        self.restarts: deque[float] = deque()
        #: why the last scheduler died, until its successor is ready
        self.reason = ""
        self.fired = False  # the sentinel became readable: the scheduler exited
        #: tasks with retries a dead scheduler held, until their clients' copies come
        self._awaiting: dict[str, dict[str, Any]] = {}
        self._awaiting_until = 0.0
        self._hub: Any = None
        self._poller: Any = None

    def register(self, poller: Any) -> None:
        """Watch the sentinel in the controller's poller (zmq.Poller takes plain fds)."""
        self._poller = poller
        if self.sentinel is not None:
            poller.register(self.sentinel, zmq.POLLIN)

    def on_sentinel(self) -> None:
        self.fired = True

    def check(self) -> bool:
        """After the sentinel fired, or at a heartbeat: a dead scheduler is replaced;
        False when it died too often and the controller must stop."""
        if self._awaiting and time.monotonic() > self._awaiting_until:
            lost = self._hub.tasks.never_resent(self._awaiting)
            if lost:
                log.warning(
                    "store: %d task(s) never resent after the scheduler's death (answered "
                    "before it reported them): marked scheduler_died",
                    len(lost),
                )
            self._awaiting = {}
        if self.fired:
            self.fired = False
            try:
                self.launch.process.wait(1)  # reap it: the pidfd is readable as it ends
            except subprocess.TimeoutExpired:
                pass
        if not self.died():
            return True
        if self.sentinel is not None and self._poller is not None:
            self._poller.unregister(self.sentinel)
        if not self.restart():
            return False
        if self.sentinel is not None and self._poller is not None:
            self._poller.register(self.sentinel, zmq.POLLIN)
        return True

    @property
    def process(self) -> Any:
        return self.launch.process

    def _open_sentinel(self) -> int | None:
        try:
            return os.pidfd_open(self.launch.process.pid)
        except (AttributeError, OSError):  # not Linux >= 5.3: found at the next heartbeat
            return None

    def close_sentinel(self) -> None:
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None

    def died(self) -> bool:
        return self.launch.process.poll() is not None

    def restart(self) -> bool:
        """Start a successor; False when the scheduler died too often to try again."""
        code = self.launch.process.returncode
        self.reason = f"the task scheduler died (exit code {code})"
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > RESTART_WINDOW:
            self.restarts.popleft()
        if len(self.restarts) >= MAX_RESTARTS:
            log.error(
                "%s, its %d-th death in %g s: not restarting it",
                self.reason,
                len(self.restarts) + 1,
                RESTART_WINDOW,
            )
            return False
        self.restarts.append(now)
        self.close_sentinel()
        log.error("%s: starting a new one on the same addresses", self.reason)
        self.launch = launch_scheduler(self.config, again=self.launch, ports=self.ports)
        self.sentinel = self._open_sentinel()
        return True

    def on_ready(self, hub: Any, content: dict[str, Any]) -> None:
        """The successor is up: it learns the engines, the clients learn what happened."""
        self.launch.key_file.unlink(missing_ok=True)
        if (content.get("client"), content.get("engine")) != self.addresses:
            log.error(
                "the new task scheduler listens at %s / %s, not %s / %s: peers cannot find it",
                content.get("client"),
                content.get("engine"),
                *self.addresses,
            )
        for rec in list(hub.engines.values()):
            hub._tell_scheduler("registered", rec)
        awaiting, lost = hub.tasks.scheduler_died()
        self._hub = hub
        self._awaiting = awaiting
        self._awaiting_until = time.monotonic() + RESEND_WINDOW
        log.warning(
            "store: %d load-balanced task(s) wait to be resent, %d marked scheduler_died",
            len(awaiting),
            len(lost),
        )
        log.warning(
            "task scheduler restarted (pid %d, %d engines); clients told to resubmit or "
            "fail their load-balanced tasks",
            self.launch.process.pid,
            len(hub.engines),
        )
        hub.session.send(
            hub.notification, MsgType.SCHEDULER_RESTARTED, SchedulerRestarted(self.reason).as_dict()
        )
