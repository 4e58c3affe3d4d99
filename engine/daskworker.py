"""A dask.distributed Worker (or Nanny) inside an engine, for ``Client.become_dask``:
ipyparallel's ``util.become_dask_worker`` / ``stop_distributed_worker``, sent to engines
by reference and run there as tasks.

ipyparallel's engines run the worker on their kernel's event loop; a zpar engine runs user
code in its main thread and has no such loop, so the worker gets an asyncio loop in a
thread of its own: the engine keeps taking zpar tasks while dask runs its own (in the
worker's thread pool). The worker is in the engine's namespace as ``dask_worker`` and
``distributed_worker``, as in ipyparallel.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from zpar.namespace import current

log = logging.getLogger(__name__)

#: Seconds a worker may take to start, and to close when stopped.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0

_NAMES = ("dask_worker", "distributed_worker")


class _WorkerThread(threading.Thread):
    def __init__(self, address: str, nanny: bool, kwargs: dict[str, Any]) -> None:
        super().__init__(name="zpar-dask-worker", daemon=True)
        self.address, self.nanny, self.kwargs = address, nanny, kwargs
        self.worker: Any = None
        self.error: BaseException | None = None
        self.started = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as e:  # given to the task that started it
            self.error = e
        finally:
            self.started.set()

    async def _main(self) -> None:
        from distributed import Nanny, Worker

        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        cls = Nanny if self.nanny else Worker
        self.worker = await cls(self.address, **self.kwargs)
        self.started.set()
        try:
            await self.stopping.wait()
        finally:
            await self.worker.close()

    def stop(self) -> None:
        if self.loop is not None and self.stopping is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.join(STOP_TIMEOUT)


_thread: _WorkerThread | None = None


def become_dask_worker(address: str, nanny: bool = False, **kwargs: Any) -> None:
    """Start a dask Worker connected to the scheduler at ``address`` (once per engine);
    kwargs go to distributed.Worker (or Nanny)."""
    global _thread
    if _thread is not None and _thread.is_alive():
        log.info("a dask worker already runs on this engine")
        return
    thread = _WorkerThread(address, nanny, kwargs)
    thread.start()
    if not thread.started.wait(START_TIMEOUT):
        thread.stop()
        raise TimeoutError(f"the dask worker did not start within {START_TIMEOUT} s")
    if thread.error is not None:
        raise thread.error
    _thread = thread
    ns = current()
    for name in _NAMES:
        ns[name] = thread.worker


def stop_dask_worker() -> None:
    """Stop this engine's dask worker, if it runs, and remove its names."""
    global _thread
    thread, _thread = _thread, None
    ns = current()
    if thread is not None:
        for name in _NAMES:
            if ns.get(name) is thread.worker:
                ns.pop(name)
        thread.stop()
