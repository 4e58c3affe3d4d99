"""DaskHost: a dask.distributed Scheduler in the controller, for ipyparallel's
``Client.become_dask`` (ipyparallel runs it in its hub too).

```
 client ──become_dask_request {scheduler_args}──► hub ──► DaskHost (a hub service)
                                                           │ a thread: asyncio loop,
                                                           │ distributed.Scheduler(...)
 client ◄──become_dask_reply {address}── hub (at the next tick once it listens)
 engines: distributed.Worker(address) in a thread of each (zpar.engine.daskworker)
```

The hub's loop never waits for dask: importing distributed and starting the scheduler take
a second or two, in the service's thread; the reply goes out from the hub's thread (its
sockets are not thread-safe) at the first heartbeat tick after the scheduler listens.
A hub service (hub/services.py), loaded only when a client first asks: a controller whose
users never call become_dask does not import dask. The scheduler listens on the controller's
``--ip`` (loopback by default) unless ``scheduler_args`` names a ``host``: dask's protocol
has no authentication of its own, anyone who reaches the port can run code.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from zpar.errors import HubRefused, error_content
from zpar.wire import Message
from zpar.wire.messages import BecomeDaskReply, MsgType, ReplyStatus, StopDaskReply

log = logging.getLogger(__name__)


class DaskScheduler(threading.Thread):
    """A distributed.Scheduler on an asyncio loop of its own thread."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        super().__init__(name="zpar-dask-scheduler", daemon=True)
        self.kwargs = kwargs
        self.started = threading.Event()
        self.address = ""
        self.error = ""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except ImportError as e:
            self.error = (
                f"dask.distributed is not installed where the controller runs ({e}): "
                "pip install 'zpar[dask]'"
            )
        except Exception as e:  # reported to the client that asked
            log.exception("the dask scheduler failed")
            self.error = f"{type(e).__name__}: {e}"
        finally:
            self.started.set()

    async def _main(self) -> None:
        from distributed import Scheduler

        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        scheduler = await Scheduler(**self.kwargs)
        self.address = str(scheduler.address)
        log.info("dask.distributed scheduler running at %s", self.address)
        self.started.set()
        try:
            await self._stop.wait()
        finally:
            await scheduler.close()
            log.info("dask.distributed scheduler at %s stopped", self.address)

    def stop(self) -> None:
        """Ask the scheduler to close; returns at once (the hub's loop never waits on it)."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)


class DaskHost:
    """The hub service: ``DaskHost(hub)``."""

    msg_types = frozenset({MsgType.BECOME_DASK_REQUEST, MsgType.STOP_DASK_REQUEST})

    def __init__(self, hub: Any) -> None:
        self.hub = hub
        self.scheduler: DaskScheduler | None = None
        #: become_dask requests waiting for the scheduler to listen: (idents, header)
        self.waiting: list[tuple[list[bytes], dict[str, Any]]] = []

    def handle(self, msg: Message) -> None:
        if msg.msg_type == MsgType.STOP_DASK_REQUEST:
            self._stop()
            self.hub.send_to(
                msg.idents,
                MsgType.STOP_DASK_REPLY,
                StopDaskReply(ReplyStatus.OK).as_dict(),
                msg.header,
            )
            return
        if self.scheduler is None or (self.scheduler.error and not self.scheduler.is_alive()):
            args = msg.content.get("scheduler_args") or {}
            if not isinstance(args, dict):
                self._reply(msg.idents, msg.header, f"scheduler_args must be a map, got {args!r}")
                return
            kwargs = {"host": self._host(), **args}
            self.scheduler = DaskScheduler(kwargs)
            self.scheduler.start()
        self.waiting.append((list(msg.idents), msg.header))
        self.tick(0.0)

    def tick(self, now: float) -> None:
        scheduler = self.scheduler
        if not self.waiting or scheduler is None or not scheduler.started.is_set():
            return
        waiting, self.waiting = self.waiting, []
        for idents, parent in waiting:
            self._reply(idents, parent, scheduler.error)
        if scheduler.error:
            self.scheduler = None

    def engine_lost(self, uuid: str, engine_id: int, reason: str) -> None:
        pass  # a dask worker on it is the dask scheduler's to forget

    def _reply(self, idents: list[bytes], parent: dict[str, Any], error: str) -> None:
        if error:
            content = error_content(HubRefused, f"cannot start a dask scheduler: {error}")
        else:
            assert self.scheduler is not None
            address = self.scheduler.address
            hostport = address.split("://", 1)[-1]
            ip, _, port = hostport.rpartition(":")
            content = BecomeDaskReply(ReplyStatus.OK, address, ip, int(port or 0)).as_dict()
        self.hub.send_to(idents, MsgType.BECOME_DASK_REPLY, content, parent)

    def _stop(self) -> None:
        scheduler, self.scheduler = self.scheduler, None
        if scheduler is not None:
            scheduler.stop()

    def _host(self) -> str:
        """The interface the controller serves clients on (its --ip): tcp://HOST:port."""
        task = str(self.hub.addresses.client.get("task", ""))
        host = task.split("://", 1)[-1].rpartition(":")[0]
        return host or "127.0.0.1"
