"""A concurrent.futures.Executor over a zpar view, so code that takes an executor runs on
the cluster unchanged."""

from __future__ import annotations

import concurrent.futures
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .asyncresult import AsyncResult


def as_future(ar: AsyncResult) -> concurrent.futures.Future:
    """A standard Future resolved with ``ar.get()`` (value or exception) when ``ar`` is done."""
    fut: concurrent.futures.Future = concurrent.futures.Future()
    fut.set_running_or_notify_cancel()

    def done(ar: AsyncResult) -> None:
        try:
            fut.set_result(ar.get())
        except BaseException as e:
            fut.set_exception(e)

    ar.add_done_callback(done)
    return fut


class ViewExecutor(concurrent.futures.Executor):
    """``submit`` and ``map`` go through the view (load-balanced or direct)."""

    def __init__(self, view: Any) -> None:
        self.view = view
        self._lock = threading.Lock()
        self._outstanding: set[concurrent.futures.Future] = set()
        self._shutdown = False

    def __call__(self) -> ViewExecutor:
        """``view.executor()`` is ``view.executor`` (an attribute in ipyparallel)."""
        return self

    def submit(
        self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
    ) -> concurrent.futures.Future:
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to an executor that was shut down")
        fut = as_future(self.view.apply_async(fn, *args, **kwargs))
        with self._lock:
            self._outstanding.add(fut)
        fut.add_done_callback(self._forget)
        return fut

    def _forget(self, fut: concurrent.futures.Future) -> None:
        with self._lock:
            self._outstanding.discard(fut)

    def map(
        self,
        fn: Callable[..., Any],
        *iterables: Iterable[Any],
        timeout: float | None = None,
        chunksize: int = 1,
    ) -> Iterator[Any]:
        """Results in order; chunksize > 1 sends that many calls per message."""
        if chunksize < 1:
            raise ValueError(f"chunksize must be >= 1, got {chunksize}")
        if chunksize == 1:
            # ipyparallel: the view's own imap (a DirectView splits the work over its engines;
            # submitting each item would run it on every engine)
            if timeout is None:
                return self.view.imap(fn, *iterables)
            ar = self.view.map_async(fn, *iterables)

            def within_timeout() -> Iterator[Any]:
                yield from ar.get(timeout)

            return within_timeout()
        items = list(zip(*iterables, strict=False))  # shortest wins, as in the stdlib
        chunks = [items[i : i + chunksize] for i in range(0, len(items), chunksize)]
        futures = [self.submit(_run_chunk, fn, chunk) for chunk in chunks]

        def results() -> Iterator[Any]:
            for f in futures:
                yield from f.result(timeout)

        return results()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """With ``wait``: once this executor's maps have submitted all their inputs (as
        ipyparallel), wait for everything the view sent. Engines keep running."""
        with self._lock:
            self._shutdown = True
            pending = list(self._outstanding)
        maps: set[object] = getattr(self.view, "_outstanding_maps", set())
        if cancel_futures:
            for token in list(maps):
                maps.discard(token)
            if pending:
                try:
                    self.view.abort()
                except Exception:  # nothing left to abort, or the client is closed
                    pass
        if wait:
            while maps:  # imaps submit from their own thread as results come back
                time.sleep(0.01)
            if pending:
                concurrent.futures.wait(pending)
            self.view.wait()


def _run_chunk(fn: Callable[..., Any], chunk: list[tuple[Any, ...]]) -> list[Any]:
    return list(itertools.starmap(fn, chunk))
