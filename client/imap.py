"""A load-balanced view's imap: inputs consumed and submitted as results come back, not
as the caller iterates (ipyparallel 9's LoadBalancedView.imap).

One consumer thread per imap reads the inputs (a blocking or infinite generator never
blocks the client's I/O thread) and submits a call each time one of the ``limit`` in
flight completes; the caller's iterator yields results in order (or as they complete).
``cancel()``, or dropping the iterator, stops consuming the inputs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import threading
from collections.abc import Callable, Iterator
from typing import Any


class LazyMapIterator:
    """The iterator ``imap`` returns: results as they come, and ``cancel()`` to stop
    consuming the inputs (calls already sent still run)."""

    def __init__(self, gen: Iterator[Any], signal_done: Callable[[], None]) -> None:
        self._gen = gen
        self._signal_done = signal_done

    def __iter__(self) -> LazyMapIterator:
        return self

    def __next__(self) -> Any:
        return next(self._gen)

    def cancel(self) -> None:
        """Stop consuming the inputs: no more calls are sent."""
        self._signal_done()

    def __del__(self) -> None:
        # an abandoned imap over an endless generator must not submit forever
        self._signal_done()


class _FailedInput(concurrent.futures.Future):
    """Stands in the results for an input iterator that raised: ``get`` raises it."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        return self.result()


class _ImapRun:
    """One imap: the consumer thread's submissions and the caller's results."""

    def __init__(self, view: Any, f: Callable[..., Any], iterables: tuple[Any, ...], limit: int):
        self.view = view
        self.f = f
        self.args = zip(*iterables, strict=False)
        self.limit = limit
        self.cond = threading.Condition()
        self.inflight: collections.deque[Any] = collections.deque()
        self.done = False
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="zpar-imap")
        view._outstanding_maps.add(self)

    def signal_done(self) -> None:
        """No more inputs are consumed (exhausted, failed or cancelled)."""
        with self.cond:
            self.done = True
            self.view._outstanding_maps.discard(self)
            self.cond.notify_all()

    def more(self, _: Any = None) -> None:
        if not self.done:
            try:
                self.pool.submit(self.consume_next)
            except RuntimeError:  # the pool is shut down: the map is over
                pass

    def _add(self, ar: Any) -> None:
        with self.cond:
            self.inflight.append(ar)
            self.cond.notify_all()

    def consume_next(self) -> None:
        """Read one input and submit its call (on the consumer thread)."""
        if self.done:
            return
        try:
            args = next(self.args)
            ar = self.view.apply_async(self.f, *args)
        except StopIteration:
            self.signal_done()
            return
        except Exception as e:  # the inputs raised, or the call could not be sent
            failed = _FailedInput()
            failed.set_exception(e)
            self._add(failed)
            self.signal_done()
            return
        self._add(ar)
        if self.limit:
            ar.add_done_callback(self.more)
        else:
            self.more()

    def start(self) -> None:
        """Submit the first ``limit`` calls and wait until they are sent (ipyparallel waits
        for the first only, so how many are out when imap returns was left to chance)."""
        first = [self.pool.submit(self.consume_next) for _ in range(self.limit or 1)]
        try:
            for f in first:
                f.result()
        except Exception:
            self.signal_done()
            raise

    def take(self, ordered: bool) -> Any:
        """The next result to yield, or None once the inputs are exhausted and every
        submitted call was taken."""
        while True:
            with self.cond:
                while not self.inflight and not self.done:
                    self.cond.wait()
                if not self.inflight:
                    return None
                if ordered:
                    return self.inflight.popleft()
                pending = list(self.inflight)
            done, _ = concurrent.futures.wait(
                pending, timeout=0.5, return_when=concurrent.futures.FIRST_COMPLETED
            )
            if done:  # else: more may have been submitted meanwhile
                ar = next(iter(done))
                with self.cond:
                    self.inflight.remove(ar)
                return ar

    def results(self, ordered: bool, return_exceptions: bool) -> Iterator[Any]:
        try:
            while (ar := self.take(ordered)) is not None:
                yield ar.get(return_exceptions=return_exceptions)
        finally:
            self.signal_done()
            self.pool.shutdown(wait=False)


def start_imap(
    view: Any,
    f: Callable[..., Any],
    iterables: tuple[Any, ...],
    limit: int,
    ordered: bool,
    return_exceptions: bool,
) -> LazyMapIterator:
    """Start submitting ``f`` over ``iterables`` through ``view.apply_async``, at most
    ``limit`` calls in flight (0: as fast as the inputs come); the results' iterator."""
    run = _ImapRun(view, f, iterables, limit)
    run.start()
    return LazyMapIterator(run.results(ordered, return_exceptions), run.signal_done)
