"""AsyncResult: the handle a non-blocking call returns, a standard Future.

One AsyncResult covers one or several messages (one per engine, or one per map chunk). The
API is ipyparallel's (docs/api.md), every public name of its AsyncResult: timestamps are
aware UTC datetimes, metadata reads never wait. The result holds its calls' futures and
says what the user asked for; its parts do the work from what it hands them, each in a
module of its own: waiting (client.futurewait), values and errors (client.replyvalue),
metadata (client.resultmeta), what it shows (client.outputs), the Future internals
concurrent.futures reads (client.futurestate). Maps' results: client.asyncresult.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION
from typing import Any

from zpar.errors import NotReadyError, TimeoutError

from .futurestate import FutureState, StateField
from .futurewait import (
    check_return_when,
    condition_met,
    failed,
    timeout_of,
    wait_all,
    wait_first_exception,
    wait_for,
    wait_sent,
    when_all_done,
)
from .outputs import (
    OutputStream,
    check_groupby,
    display_outputs,
    html_summary,
    wait_with_progress,
)
from .replyvalue import by_engine, not_ready, raise_errors, value_or_error
from .request import first_submitted, sent_of
from .resultmeta import (
    METADATA_DEFAULTS,
    Metadata,
    calls_metadata,
    serial_time,
)
from .resultmeta import timedelta as _timedelta

__all__ = ["AsyncResult"]

#: ``_result`` before get() has a value to keep (None is a value)
_UNSET = object()


class AsyncResult(concurrent.futures.Future):
    """Results of one call on one or several engines (one msg_id per engine or task)."""

    #: a map's result, whose parts are chunks (AsyncMapResult): split() gives [chunk]s
    _chunked = False

    # slotted: a client holds one per task until the user drops it (~250 B less each)
    __slots__ = (
        "_client",
        "msg_ids",
        "_futures",
        "_fname",
        "_targets",
        "_single",
        "_postprocess",
        "_trackers",
        "_submitted",
        "_values",
        "_result",
        "_return_exceptions",
        "owner",
        "_futurestate",
    )

    def __init__(
        self,
        client: Any,
        msg_ids: Sequence[str],
        futures: Sequence[concurrent.futures.Future],
        *,
        fname: str = "",
        targets: Any = None,
        single: bool = False,
        submitted: float | None = None,
        postprocess: Callable[[list[Any]], Any] | None = None,
        trackers: Sequence[Any] = (),
        return_exceptions: bool = False,
    ) -> None:
        if len(msg_ids) != len(futures):
            raise ValueError(f"{len(msg_ids)} msg_ids but {len(futures)} futures")
        self._client = client
        self.msg_ids = list(msg_ids)
        self._futures = list(futures)
        self._fname = fname
        self._targets = targets
        self._single = single
        self._postprocess = postprocess
        self._trackers = tuple(trackers)
        # when the first message was made (its header's date)
        self._submitted = first_submitted(self._futures) if submitted is None else submitted
        self._values: list[Any] | None = None
        self._result: Any = _UNSET
        self._return_exceptions = return_exceptions
        self.owner = True  # compatibility with ipyparallel: results belong to this handle
        # a concurrent.futures.Future (as ipyparallel's): its lock and waiters are made only
        # if concurrent.futures.wait / asyncio.wrap_future ask (client.futurestate)
        self._futurestate: FutureState | None = None

    @classmethod
    def of_call(cls, client: Any, request: Any, fname: str) -> AsyncResult:
        """The result of one call (``single``), from its client.request.PendingRequest: what
        ``__init__`` makes of ``[request.msg_id], [request.future]``, without its checks
        and defaults (once per task on the submitting thread)."""
        ar = cls.__new__(cls)
        ar._client = client
        ar.msg_ids = [request.msg_id]
        ar._futures = [request.future]
        ar._fname = fname
        ar._targets = None
        ar._single = True
        ar._postprocess = None
        ar._trackers = ()
        ar._submitted = request.future.submitted or time.time()
        ar._values = None
        ar._result = _UNSET
        ar._return_exceptions = False
        ar.owner = True
        ar._futurestate = None
        return ar

    # -- as a concurrent.futures.Future ---------------------------------------------------

    # concurrent.futures.wait / as_completed and asyncio.wrap_future read these
    _condition = StateField("condition")
    _waiters = StateField("waiters")
    _state = StateField("state")

    def cancel(self) -> bool:
        """Calls on engines are not cancelled as futures; use ``abort()``. False, as a
        concurrent.futures.Future that is already running."""
        return False

    def cancelled(self) -> bool:
        return False

    def running(self) -> bool:
        return not self.ready()

    def set_running_or_notify_cancel(self) -> bool:
        return True

    # -- state (client.futurewait) -------------------------------------------------------

    def ready(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self, timeout: float | None = -1, return_when: str | None = None) -> Any:
        """Wait until every reply is in, or ``timeout`` seconds (-1 or None: forever).

        Without return_when: True if all are done. With return_when (the
        concurrent.futures constants), as concurrent.futures.wait: ``(done, pending)``,
        sets of one-message AsyncResults (this result's ``split()``).
        """
        timeout = timeout_of(timeout)
        if return_when is None:
            return wait_all(self._futures, timeout)
        check_return_when(return_when)
        parts = self.split()
        futs = [p._futures[0] for p in parts]
        wait_for(futs if return_when == FIRST_COMPLETED else self._futures, timeout, return_when)
        done = {p for p, f in zip(parts, futs, strict=True) if f.done()}
        return done, set(parts) - done

    def successful(self) -> bool:
        """True if every call finished without raising; RuntimeError if not finished."""
        if not self.ready():
            raise NotReadyError(f"{self!r} is not finished: cannot check successful()")
        return not any(failed(f) for f in self._futures)

    @property
    def progress(self) -> int:
        """How many of the tasks are done (elements, for a map)."""
        return sum(f.done() for f in self._futures)

    @property
    def sent(self) -> bool:
        """True once every message has left the client (handed to zmq by the I/O thread)."""
        return all(sent_of(f) for f in self._futures)

    def wait_for_send(self, timeout: float | None = -1) -> bool:
        """Wait until zmq no longer reads the memory of the arguments (``track=True``);
        TimeoutError after ``timeout`` seconds (-1: forever).

        Arguments sent without a copy (large arrays) must not be modified before this; an
        AsyncResult made without tracking waits until the messages have been sent.
        """
        return wait_sent(self._futures, self._trackers, timeout_of(timeout))

    def __len__(self) -> int:
        return len(self.msg_ids)

    def add_done_callback(self, fn: Callable[[AsyncResult], Any]) -> None:
        """Call fn(self) once every reply is in (in the thread that completes the last)."""
        when_all_done(self._futures, lambda: fn(self))

    def abort(self) -> None:
        """Abort the calls of this result that have not started yet; RuntimeError if all
        of them are done already (as in ipyparallel)."""
        if self._client is None:
            raise RuntimeError("this AsyncResult has no client to send the abort through")
        if self.ready():
            raise RuntimeError("Can't abort, I am already done!")
        self._client.abort(self, targets=self._targets, block=False)

    # -- values ---------------------------------------------------------------------------

    def get(
        self,
        timeout: float | None = None,
        return_exceptions: bool | None = None,
        return_when: str | None = None,
    ) -> Any:
        """Block until done and return the result; raise the remote error if any.

        return_exceptions=True: errors are returned in place of values. return_when=
        FIRST_EXCEPTION: raise as soon as one call failed, without waiting for the others.
        """
        if return_exceptions is None:
            return_exceptions = self._return_exceptions
        if self._result is not _UNSET and not return_exceptions:
            return self._result
        if return_when is not None:
            check_return_when(return_when)
        if timeout is not None and timeout < 0:  # timeout_of, inlined: once per task
            timeout = None
        if self._single and not return_exceptions and return_when is None:
            return self._get_one(timeout)
        return self._get(timeout, return_exceptions, return_when)

    def _get(self, timeout: float | None, return_exceptions: bool, return_when: str | None) -> Any:
        """get() past its cache and its checks: wait as asked, then the values (kept) or
        the errors (raised, or returned with ``return_exceptions``)."""
        futures = self._futures
        if return_when == FIRST_EXCEPTION:
            wait_first_exception(futures, timeout)
            first = next((f for f in futures if failed(f)), None)
            if first is not None and not return_exceptions:
                raise self._value_or_error(first)
        if not wait_all(futures, timeout):
            raise not_ready(self.progress, len(self), self._fname, timeout)
        if return_exceptions:
            values = [self._value_or_error(f) for f in futures]
        else:
            values = self._collect()
        if self._postprocess is not None:
            values = self._postprocess(values)
        result = values[0] if self._single else values
        if not return_exceptions:
            self._result = result
        return result

    def _get_one(self, timeout: float | None) -> Any:
        """get() of a one-call result (what _get does, for one future: most results)."""
        if len(self._futures) != 1 or self._postprocess is not None:
            return self._get(timeout, False, None)
        f = self._futures[0]
        if not f.done():  # wait_all of one future, without the call
            try:
                f.exception(timeout)
            except concurrent.futures.TimeoutError:
                raise not_ready(0, 1, self._fname, timeout) from None
        value = self._value_or_error(f)
        if isinstance(value, Exception):
            raise value
        self._values = [value]
        self._result = value
        return value

    @property
    def r(self) -> Any:
        """``get()`` as a property."""
        return self.get()

    @property
    def result_dict(self) -> dict[int, Any]:
        return self.get_dict()

    def done(self) -> bool:
        """As concurrent.futures.Future.done: the same as ready()."""
        return self.ready()

    def result(self, timeout: float | None = None) -> Any:
        """As concurrent.futures.Future.result: the same as get()."""
        return self.get(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error get() would raise (None if it succeeded); waits like get()."""
        try:
            self.get(timeout)
        except TimeoutError:
            if not self.ready():
                raise
            return sys.exc_info()[1]
        except Exception as e:
            return e
        return None

    def get_dict(self, timeout: float | None = -1) -> dict[int, Any]:
        """{engine_id: result}; an error if one engine has several results here."""
        values = self.get(timeout)
        if self._single:
            return by_engine([values], [self.engine_id])
        return by_engine(values, self.engine_id)

    def _value_or_error(self, f: concurrent.futures.Future) -> Any:
        """A done call's value or its error (client.replyvalue); TypedResult decodes its
        own replies."""
        return value_or_error(f)

    def _collect(self) -> list[Any]:
        """Every call's value, kept; their errors raised as ipyparallel raises them."""
        if self._values is not None:
            return self._values
        values = [self._value_or_error(f) for f in self._futures]
        raise_errors(
            values,
            one_call=self._single or len(values) == 1,
            fname=self._fname,
            what="calls",
        )
        self._values = values
        return values

    def _value_at(self, i: int, timeout: float | None = None) -> Any:
        """Call i's value; its error raised, or returned with ``return_exceptions``."""
        f = self._futures[i]
        try:
            f.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"reply {i} of {self._fname or 'the call'} not in") from None
        except Exception:
            pass
        v = self._value_or_error(f)
        if isinstance(v, Exception) and not self._return_exceptions:
            raise v
        return v

    def __iter__(self) -> Iterator[Any]:
        """Results in submission order, each as soon as it (and those before it) arrived."""
        if self._single:
            yield self.get()
            return
        for i in range(len(self._futures)):
            yield self._value_at(i)

    def as_completed(self, timeout: float | None = None) -> Iterator[Any]:
        """Results in the order they complete."""
        index = {id(f): i for i, f in enumerate(self._futures)}
        for f in concurrent.futures.as_completed(self._futures, timeout=timeout):
            yield self._value_at(index[id(f)])

    def __getitem__(self, key: int | slice | str) -> Any:
        """ar[i] / ar[a:b]: results (waiting for them); ar['engine_id']: metadata (never
        waits: None, or '' for output, until known)."""
        if isinstance(key, str):
            return self._meta(key)
        if isinstance(key, int | slice):
            values = self.get()
            if self._single:
                raise TypeError("a single result cannot be indexed by position")
            return values[key]
        raise TypeError(f"Invalid key type {type(key)!r}, must be 'int','slice', or 'str'")

    # -- metadata (client.resultmeta): reads never wait -------------------------------------

    def __getattr__(self, key: str) -> Any:
        """ar.received, ar.status, ar.execute_result…: metadata as attributes."""
        if key in METADATA_DEFAULTS:
            return self._meta(key)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(METADATA_DEFAULTS))

    def _metadatas(self) -> list[Metadata]:
        """One metadata dict per message, as known now (never waits)."""
        return calls_metadata(self.msg_ids, self._futures, self._submitted, self._client)

    def _meta(self, key: str) -> Any:
        mds = self._metadatas()
        if any(key not in md for md in mds):
            raise KeyError(key)  # not a metadata key, as ipyparallel
        values = [md[key] for md in mds]
        return values[0] if self._single else values

    @property
    def metadata(self) -> Any:
        mds = self._metadatas()
        return mds[0] if self._single else mds

    @property
    def data(self) -> Any:
        """What the task published (zpar.datapub.publish_data): the merge so far while it
        runs, everything once done (ipyparallel's ``ar.data``)."""
        if not self.ready():
            self._client.sender.live_data.watch(self.msg_ids)
        else:
            self._client.sender.live_data.forget(self.msg_ids)
        return self._meta("data")

    engine_id = property(lambda self: self._meta("engine_id"))
    stdout = property(lambda self: self._meta("stdout"))
    stderr = property(lambda self: self._meta("stderr"))
    submitted = property(lambda self: self._meta("submitted"))
    started = property(lambda self: self._meta("started"))
    completed = property(lambda self: self._meta("completed"))
    received = property(lambda self: self._meta("received"))

    def _check_ready(self) -> None:
        if not self.ready():
            raise TimeoutError("Result not ready.")

    @property
    def elapsed(self) -> float:
        """Seconds since submission: the wall time once done."""
        if self.ready():
            return self.wall_time
        return time.time() - self._submitted

    @property
    def serial_time(self) -> float:
        """Sum of the engines' compute times (completed - started): what a serial run
        would have taken. TimeoutError before the result is ready."""
        self._check_ready()
        return serial_time(self._metadatas())

    @property
    def wall_time(self) -> float:
        """Seconds from the first submission to the last result (its engine's completion
        time: zpar does not stamp receipt separately). TimeoutError before it is ready."""
        self._check_ready()
        return _timedelta(self.submitted, self.received)

    def timedelta(
        self, start: Any, end: Any, start_key: Callable = min, end_key: Callable = max
    ) -> float:
        """Seconds between two times or lists of times (reduced by start_key / end_key);
        times are datetimes or seconds since the epoch."""
        return _timedelta(start, end, start_key, end_key)

    # -- what it shows (client.outputs) ----------------------------------------------------

    def display_outputs(
        self, groupby: str = "type", result_only: bool = False, file: Any = None
    ) -> None:
        """Show each call's captured stdout/stderr under ``[stdout:N]`` headers and, inside
        IPython, its rich outputs (``[output:N]``) and last value (``Out[N:K]``), as
        ipyparallel's display_outputs, once the calls are done. groupby: 'type' (its
        default), 'engine' or 'order' (client.outputs.display_outputs says what each
        shows); result_only: only the ``Out`` values (the outputs were streamed already)."""
        check_groupby(groupby)  # before the wait
        self.wait()
        display_outputs(
            self._metadatas(),
            single=self._single,
            groupby=groupby,
            result_only=result_only,
            file=file,
        )

    def wait_for_output(self, timeout: float | None = -1) -> bool:
        """Wait until the output is complete: in zpar it travels with the result."""
        return self.wait(timeout)

    @contextlib.contextmanager
    def stream_output(self) -> Iterator[None]:
        """``with ar.stream_output(): ar.wait()``: engines' output shown as it is printed."""
        with self.stream_outputs().until(self.ready):
            yield

    def stream_outputs(
        self, callback: Callable[[int | None, str, str], Any] | None = None
    ) -> OutputStream:
        """Show engines' stdout/stderr for these calls as it is printed.

        callback(engine_id, stream_name, text) runs in the client's I/O thread; the default
        prints the text under ``[stdout:N]`` headers, as ``display_outputs``. Stops by
        itself when the calls are done. Returns an OutputStream: its ``finish(timeout)``
        waits for the engines' last output and shows what the stream missed (the reply
        holds all of it)."""
        if self._client is None:
            raise RuntimeError("this AsyncResult has no client to stream through")
        return OutputStream.started(
            self.msg_ids, self._client.sender, self._metadatas, callback, self._futures
        )

    def wait_interactive(
        self,
        interval: float = 0.1,
        timeout: float | None = -1,
        widget: bool | None = None,
        return_when: str = ALL_COMPLETED,
        file: Any = None,
    ) -> bool:
        """Wait with a progress bar: a widget in Jupyter when ipywidgets is installed, a
        text bar otherwise. Returns whether the return_when condition was met (it never
        waits past ``timeout``, and returns as soon as the calls are done)."""
        check_return_when(return_when)
        return wait_with_progress(
            self.wait,
            lambda: self.progress,
            lambda: condition_met(self._futures, return_when),
            total=len(self),
            desc=self._fname or "tasks",
            interval=interval,
            timeout=timeout_of(timeout),
            widget=widget,
            file=file,
        )

    def _repr_html_(self) -> str:
        engine_ids = self.engine_id if self.ready() else None
        return html_summary(
            type(self).__name__, self._fname, self._status(), self.progress, len(self), engine_ids
        )

    def _status(self) -> str:
        if not self.ready():
            return "pending"
        return "finished" if self.successful() else "failed"

    # -- splitting and joining --------------------------------------------------------------

    def split(self) -> tuple[AsyncResult, ...]:
        """One AsyncResult per message (a tuple, as in ipyparallel)."""
        if len(self._futures) == 1 and type(self) is AsyncResult:
            return (self,)
        return tuple(
            AsyncResult(
                self._client,
                [m],
                [f],
                fname=self._fname,
                single=not self._chunked,  # a map's part: [chunk]
                submitted=self._submitted,
                return_exceptions=self._return_exceptions,
            )
            for m, f in zip(self.msg_ids, self._futures, strict=True)
        )

    @classmethod
    def join(cls, *results: Any) -> AsyncResult:
        """One AsyncResult over the messages of several (values in the order given):
        ``AsyncResult.join(a, b)`` as in ipyparallel, or ``join([a, b])``."""
        if len(results) == 1 and isinstance(results[0], list | tuple):
            results = tuple(results[0])
        if not results:
            raise ValueError("Must specify at least one AsyncResult to join")
        if len(results) == 1:
            return results[0]
        msg_ids: list[str] = []
        futs: list[concurrent.futures.Future] = []
        for r in results:
            msg_ids.extend(r.msg_ids)
            futs.extend(r._futures)
        return AsyncResult(
            results[0]._client,
            msg_ids,
            futs,
            fname="+".join(sorted({r._fname for r in results if r._fname})),
            submitted=min(r._submitted for r in results),
        )

    def __add__(self, other: AsyncResult) -> AsyncResult:
        if not isinstance(other, AsyncResult):
            return NotImplemented
        return AsyncResult.join(self, other)

    # -- asyncio --------------------------------------------------------------------------

    def __await__(self) -> Generator[Any, None, Any]:
        yield from asyncio.gather(
            *(asyncio.wrap_future(f) for f in self._futures), return_exceptions=True
        ).__await__()
        return self.get()

    def __repr__(self) -> str:
        return f"<{type(self).__name__}({self._fname}): {self._status()}>"
