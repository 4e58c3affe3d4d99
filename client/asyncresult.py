"""AsyncResult: the handle a non-blocking call returns, over standard futures.

Replies are decoded lazily, in the thread that asks for them, so the I/O thread stays fast.
One AsyncResult covers one or several messages (one per engine, or one per map chunk); an
AsyncMapResult flattens its chunks back into one sequence. The API is ipyparallel's
(docs/api.md): timestamps are aware UTC datetimes, metadata reads never wait.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION
from typing import Any

from zpar.elements import PART_SEP
from zpar.errors import CompositeError, NotReadyError, RemoteError, TaskAborted, TimeoutError
from zpar.serialize import deserialize_object
from zpar.wire import Message
from zpar.wire.messages import MsgType, ReplyStatus

from .executereply import ExecuteReply
from .futurestate import FutureMachinery, FutureStateMixin
from .mapparts import ElementFuture, ElementReply, MapWaiters, Parts
from .outputs import OutputsMixin
from .request import request_of, sent_of, submitted_of
from .resultmeta import Metadata, MetadataMixin, element_metadata, reply_metadata

_UNSET = object()
RETURN_WHEN = (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION)


def decode_reply(msg: Message) -> Any:
    """The value of an apply/execute reply, or raise the error it carries."""
    if type(msg) is ElementReply:  # one element of a map's part, decoded already
        if isinstance(msg.value, Exception):
            raise msg.value
        return msg.value
    c = msg.content
    status = c.get("status")
    if status == ReplyStatus.OK:
        if msg.buffers:
            if "function_id" in c:  # a typed_reply read back from the hub: raw type arrays
                from zpar.typed.codec import type_arrays

                return type_arrays(c.get("counts") or [], msg.buffers)
            return deserialize_object(msg.buffers)
        if msg.parent_header.get("msg_type") == MsgType.EXECUTE_REQUEST:  # Out[engine:count]
            return ExecuteReply(msg.parent_header.get("msg_id", ""), c, reply_metadata(msg))
        return None
    if status == ReplyStatus.ABORTED:
        raise TaskAborted(c.get("evalue") or f"task {msg.parent_header.get('msg_id')} aborted")
    raise RemoteError.from_content(c)


def _future_failed(f: concurrent.futures.Future) -> bool:
    if not f.done():
        return False
    if f.exception() is not None:
        return True
    return f.result().content.get("status") != ReplyStatus.OK


def _timeout(timeout: float | None) -> float | None:
    """ipyparallel's convention: a negative timeout (the default -1) waits forever."""
    return None if timeout is None or timeout < 0 else timeout


class AsyncResult(FutureStateMixin, MetadataMixin, OutputsMixin, concurrent.futures.Future):
    """Results of one call on one or several engines (one msg_id per engine or task)."""

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
        if submitted is None:  # when the first message was made (its header's date)
            if len(self._futures) == 1:  # most results: one call
                submitted = submitted_of(self._futures[0]) or time.time()
            else:
                dates = [d for f in self._futures if (d := submitted_of(f)) is not None]
                submitted = min(dates, default=None) or time.time()
        self._submitted = submitted
        self._values: list[Any] | None = None
        self._result: Any = _UNSET
        self._return_exceptions = return_exceptions
        self.owner = True  # compatibility with ipyparallel: results belong to this handle
        # a concurrent.futures.Future (as ipyparallel's): its lock and waiters are made only
        # if concurrent.futures.wait / asyncio.wrap_future ask (client.futurestate)
        self._futurestate: FutureMachinery | None = None

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

    # -- state ----------------------------------------------------------------------------

    def ready(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self, timeout: float | None = -1, return_when: str | None = None) -> Any:
        """Wait until every reply is in, or ``timeout`` seconds (-1 or None: forever).

        Without return_when: True if all are done. With return_when (the
        concurrent.futures constants), as concurrent.futures.wait: ``(done, pending)``,
        sets of one-message AsyncResults (this result's ``split()``).
        """
        timeout = _timeout(timeout)
        if return_when is None:
            return self._wait_all(timeout)
        if return_when not in RETURN_WHEN:
            raise ValueError(f"return_when must be one of {RETURN_WHEN}, got {return_when!r}")
        parts = self.split()
        by_future = {id(p._futures[0]): p for p in parts}
        futs = [p._futures[0] for p in parts]
        if return_when == FIRST_EXCEPTION:
            self._wait_first_exception(timeout)
        elif return_when == FIRST_COMPLETED:
            concurrent.futures.wait(futs, timeout, FIRST_COMPLETED)
        else:
            self._wait_all(timeout)
        done = {by_future[id(f)] for f in futs if f.done()}
        pending = {by_future[id(f)] for f in futs if not f.done()}
        return done, pending

    def _wait_all(self, timeout: float | None) -> bool:
        # wait on each future's own condition (no waiter objects per call)
        deadline = None if timeout is None else time.monotonic() + timeout
        for f in self._futures:
            if f.done():
                continue
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                f.exception(remaining)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                return self.ready()
        return True

    def _wait_first_exception(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = [f for f in self._futures if not f.done()]
        while pending and not any(_future_failed(f) for f in self._futures):
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            _, pending_set = concurrent.futures.wait(
                pending, timeout=remaining, return_when=FIRST_COMPLETED
            )
            pending = list(pending_set)
        return True

    def _condition_met(self, return_when: str | None) -> bool:
        if return_when in (None, ALL_COMPLETED):
            return self.ready()
        if return_when == FIRST_COMPLETED:
            return any(f.done() for f in self._futures) or not self._futures
        return self.ready() or any(_future_failed(f) for f in self._futures)

    def successful(self) -> bool:
        """True if every call finished without raising; RuntimeError if not finished."""
        if not self.ready():
            raise NotReadyError(f"{self!r} is not finished: cannot check successful()")
        return not any(_future_failed(f) for f in self._futures)

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
        timeout = _timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.sent:
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError("Still waiting to be sent")
            time.sleep(0.0005)
        trackers = list(self._trackers)
        for f in self._futures:
            request = request_of(f)
            if request is not None and request.trackers:
                trackers.extend(request.trackers)
        for t in trackers:
            remaining = -1 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                t.wait(remaining)  # zmq's MessageTracker: -1 waits forever
            except Exception:  # zmq.NotDone on timeout
                raise TimeoutError("Still waiting to be sent") from None
        return True

    def __len__(self) -> int:
        return len(self.msg_ids)

    def add_done_callback(self, fn: Callable[[AsyncResult], Any]) -> None:
        """Call fn(self) once every reply is in (in the thread that completes the last)."""
        remaining = [len(self._futures)]
        lock = threading.Lock()

        def one_done(_: Any) -> None:
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                fn(self)

        if not self._futures:
            fn(self)
        for f in self._futures:
            f.add_done_callback(one_done)

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
        timeout = _timeout(timeout)
        if self._single and not return_exceptions and return_when is None:
            return self._get_one(timeout)
        if return_when == FIRST_EXCEPTION:
            self._wait_first_exception(timeout)
            failed = [f for f in self._futures if _future_failed(f)]
            if failed and not return_exceptions:
                v = self._value_or_error(failed[0])
                raise v
        elif return_when not in (None, ALL_COMPLETED, FIRST_COMPLETED):
            raise ValueError(f"return_when must be one of {RETURN_WHEN}, got {return_when!r}")
        if return_exceptions:
            if not self._wait_all(timeout):
                raise TimeoutError(
                    f"Result not ready: {self.progress}/{len(self)} of "
                    f"{self._fname or 'the call'} done within {timeout} s"
                )
            values = [self._value_or_error(f) for f in self._futures]
            values = self._postprocess(values) if self._postprocess is not None else values
            return values[0] if self._single else values
        values = self._wait_and_collect(timeout)
        self._result = values[0] if self._single else values
        return self._result

    def _get_one(self, timeout: float | None) -> Any:
        """get() of a one-call result (what _wait_all and _collect do, for one future:
        most results)."""
        if len(self._futures) != 1 or self._postprocess is not None:
            values = self._wait_and_collect(timeout)
            self._result = values[0] if self._single else values
            return self._result
        f = self._futures[0]
        if not f.done() and not self._wait_all(timeout):
            raise TimeoutError(
                f"Result not ready: 0/1 of {self._fname or 'the call'} done within {timeout} s"
            )
        value = self._value_or_error(f)
        if isinstance(value, Exception):
            raise value
        self._values = [value]
        self._result = value
        return value

    def _wait_and_collect(self, timeout: float | None) -> Any:
        if not self._wait_all(timeout):
            raise TimeoutError(
                f"Result not ready: {self.progress}/{len(self)} of "
                f"{self._fname or 'the call'} done within {timeout} s"
            )
        values = self._collect()
        return self._postprocess(values) if self._postprocess is not None else values

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
        values = [values] if self._single else values
        ids = self.engine_id if not self._single else [self.engine_id]
        if len(set(ids)) != len(ids):
            raise ValueError(f"engines {ids} ran more than one of these calls: no dict")
        return dict(zip(ids, values, strict=True))

    @staticmethod
    def _value_or_error(f: concurrent.futures.Future) -> Any:
        error = getattr(f, "_decoded_error", None)
        if error is not None:
            return error
        try:
            exc = f.exception()
            if exc is not None:
                raise exc
            return decode_reply(f.result())
        except Exception as e:
            # one error object per call, on every read (ipyparallel compares them: a map's
            # errors from list(amr) == amr.get() with return_exceptions)
            with contextlib.suppress(AttributeError):
                f._decoded_error = e  # type: ignore[attr-defined]
            return e

    def _collect(self) -> list[Any]:
        if self._values is not None:
            return self._values
        values = [self._value_or_error(f) for f in self._futures]
        errors = [v for v in values if isinstance(v, Exception)]
        if errors:
            # as ipyparallel: a single-call result raises its error, a multi-call one a
            # CompositeError (even for one failure: ``except CompositeError`` holds)
            if self._single or len(self._futures) == 1:
                raise errors[0]
            raise CompositeError(
                f"one or more exceptions raised in: {self._fname or 'unspecified'} "
                f"({len(errors)} of {len(self.msg_ids)} calls)",
                errors,
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
                single=not isinstance(self, AsyncMapResult),  # a map's part: [chunk]
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
        state = "pending"
        if self.ready():
            state = "finished" if self.successful() else "failed"
        return f"<{type(self).__name__}({self._fname}): {state}>"


class AsyncMapResult(AsyncResult):
    """A map's result: chunks of results flattened back in submission order. Its length
    and progress count elements, as in ipyparallel.

    A load-balanced map without chunksize is one task per element, as ipyparallel's
    chunksize=1 (``parts``: its element requests, zpar.elements): ``msg_ids``,
    ``progress``, metadata, iteration, errors and ``abort`` are per element, whatever the
    number of messages underneath."""

    __slots__ = ("ordered", "_chunk_sizes", "_parts", "_ids", "_element_ids", "_map_waiters")

    def __init__(
        self,
        *args: Any,
        ordered: bool = True,
        chunk_sizes: Sequence[int] | None = None,
        parts: Sequence[Parts] | None = None,
        waiters: MapWaiters | None = None,
        **kwargs: Any,
    ) -> None:
        self._parts = list(parts) if parts is not None else None
        self._map_waiters = waiters
        self._element_ids: list[str] | None = None
        kwargs.setdefault("postprocess", _flatten)
        super().__init__(*args, **kwargs)
        self.ordered = ordered
        self._chunk_sizes = list(chunk_sizes) if chunk_sizes is not None else None

    # msg_ids: one per element for a map of elements (ipyparallel's chunksize=1), made
    # when first read; the requests' own ids are ``request_ids``
    @property
    def msg_ids(self) -> list[str]:
        if self._parts is None:
            return self._ids
        ids = self._element_ids
        if ids is None:
            ids = self._element_ids = [
                f"{m}{PART_SEP}{j}"
                for m, p in zip(self._ids, self._parts, strict=True)
                for j in range(p.n)
            ]
        return ids

    @msg_ids.setter
    def msg_ids(self, value: list[str]) -> None:
        self._ids = value
        self._element_ids = None

    @property
    def request_ids(self) -> list[str]:
        """The msg_ids of the requests sent (an element request's answers its elements)."""
        return self._ids

    def __len__(self) -> int:
        if self._chunk_sizes is None:
            return len(self.msg_ids)
        return sum(self._chunk_sizes)

    @property
    def progress(self) -> int:
        if self._parts is not None:
            return sum(p.answered for p in self._parts)
        if self._chunk_sizes is None:
            return super().progress
        return sum(n for n, f in zip(self._chunk_sizes, self._futures, strict=True) if f.done())

    def __iter__(self) -> Iterator[Any]:
        """Elements in order (ordered=True) or chunk by chunk as they complete."""
        if self._parts is not None:
            yield from self._iter_elements()
            return
        chunks = (
            self.as_completed()
            if not self.ordered
            else map(self._value_at, range(len(self._futures)))
        )
        for chunk in chunks:
            if isinstance(chunk, Exception):  # with return_exceptions: in the element's place
                yield chunk
            else:
                yield from chunk

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            return self._meta(key)
        return self.get()[key]

    # -- a map of elements ------------------------------------------------------------------

    def _element(self, parts: Parts, pos: int) -> Any:
        """An answered element's value; its error raised as ipyparallel's iteration does
        (a CompositeError of that one element) unless errors are returned."""
        v = parts.value(pos)
        if isinstance(v, Exception) and not self._return_exceptions:
            raise CompositeError(
                f"one or more exceptions raised in: {self._fname or 'unspecified'}", [v]
            )
        return v

    def _iter_elements(self) -> Iterator[Any]:
        parts = self._parts
        assert parts is not None
        if self.ordered:
            for p in parts:
                for j in range(p.n):
                    p.wait(j)
                    yield self._element(p, j)
            return
        # as they arrive: each part's positions once it is in
        seen = [0] * len(parts)
        yielded = [0] * len(parts)
        total, done = len(self), 0
        waiters = self._map_waiters
        while done < total:
            new = False
            for k, p in enumerate(parts):
                while seen[k] < len(p.replies):
                    idx = seen[k]
                    seen[k] += 1
                    new = True
                    for j in range(p.n):
                        if p.owner[j] == idx:
                            done += 1
                            yielded[k] += 1
                            yield self._element(p, j)
                if p.error is not None and yielded[k] < p.n:
                    for j in range(p.n):
                        if not p.owner[j] >= 0:
                            done += 1
                            yielded[k] += 1
                            yield self._element(p, j)
            if not new and done < total and waiters is not None:
                counts = [len(p.replies) for p in parts]
                waiters.wait_for(
                    lambda counts=counts: any(
                        len(p.replies) != c or p.error is not None
                        for p, c in zip(parts, counts, strict=True)
                    ),
                    0.5,
                )

    def _element_values(self) -> list[Any]:
        assert self._parts is not None
        if len(self._parts) == 1:
            return self._parts[0].values()
        out: list[Any] = []
        for p in self._parts:
            out.extend(p.values())
        return out

    def get(
        self,
        timeout: float | None = None,
        return_exceptions: bool | None = None,
        return_when: str | None = None,
    ) -> Any:
        if self._parts is None:
            return super().get(timeout, return_exceptions, return_when)
        if return_exceptions is None:
            return_exceptions = self._return_exceptions
        if self._result is not _UNSET and not return_exceptions:
            return self._result
        if return_when not in (None, *RETURN_WHEN):
            raise ValueError(f"return_when must be one of {RETURN_WHEN}, got {return_when!r}")
        timeout = _timeout(timeout)
        if return_when == FIRST_EXCEPTION:
            error = self._first_error(timeout)
            if error is not None and not return_exceptions:
                raise error
        if not self._wait_all(timeout):
            raise TimeoutError(
                f"Result not ready: {self.progress}/{len(self)} of "
                f"{self._fname or 'the call'} done within {timeout} s"
            )
        values = self._element_values()
        if return_exceptions:
            return values
        errors = [v for v in values if isinstance(v, Exception)]
        if errors:
            raise CompositeError(
                f"one or more exceptions raised in: {self._fname or 'unspecified'} "
                f"({len(errors)} of {len(values)} elements)",
                errors,
            )
        self._result = values
        return values

    def _first_error(self, timeout: float | None) -> Exception | None:
        """Wait until an element failed or all are in; the first error found."""
        assert self._parts is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            for p in self._parts:
                for j in range(p.n):
                    if p.done(j):
                        v = p.value(j)
                        if isinstance(v, Exception):
                            return v
            if self.ready():
                return None
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            if self._map_waiters is not None:
                progress = self.progress
                self._map_waiters.wait_for(
                    lambda p=progress: self.progress != p or self.ready(), 0.5
                )

    def successful(self) -> bool:
        if self._parts is None:
            return super().successful()
        if not self.ready():
            raise NotReadyError(f"{self!r} is not finished: cannot check successful()")
        return not any(isinstance(v, Exception) for v in self._element_values())

    def _metadatas(self) -> list[Metadata]:
        if self._parts is None:
            return super()._metadatas()
        out = []
        ids = iter(self.msg_ids)
        for p, f in zip(self._parts, self._futures, strict=True):
            submitted = submitted_of(f) or self._submitted
            label = getattr(f, "label", None)  # the request's, each element's
            for j in range(p.n):
                reply = p.reply_of(j)
                value = p.value(j) if reply is not None else None
                out.append(element_metadata(next(ids), submitted, reply, value, p.error, label))
        return out

    def split(self) -> tuple[AsyncResult, ...]:
        """One AsyncResult per element (a map of elements), as ipyparallel's chunksize=1
        map (each a part whose value is ``[[value]]``: a list of its one chunk); one per
        chunk otherwise."""
        if self._parts is None:
            return super().split()
        out = []
        ids = iter(self.msg_ids)
        for p in self._parts:
            for j in range(p.n):
                fut = ElementFuture(p, j, self._map_waiters)
                out.append(
                    AsyncResult(
                        self._client,
                        [next(ids)],
                        [fut],
                        fname=self._fname,
                        single=False,  # as a chunk's part: [[value]], ipyparallel's shape
                        submitted=self._submitted,
                        return_exceptions=self._return_exceptions,
                    )
                )
        return tuple(out)

    def as_completed(self, timeout: float | None = None) -> Iterator[Any]:
        if self._parts is None:
            yield from super().as_completed(timeout)
            return
        yield from self._iter_elements()


class AsyncHubResult(AsyncResult):
    """Results of tasks fetched from the hub's task store (``get_result`` of tasks another
    client submitted): the hub is polled while they are pending."""

    __slots__ = ()


def _flatten(chunks: list[Any]) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        if isinstance(chunk, Exception):
            out.append(chunk)
        else:
            out.extend(chunk)
    return out
