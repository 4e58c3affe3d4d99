"""AsyncResult: the handle a non-blocking call returns, over standard futures.

Replies are decoded lazily, in the thread that asks for them, so the I/O thread stays fast.
One AsyncResult covers one or several messages (one per engine, or one per map chunk); an
AsyncMapResult flattens its chunks back into one sequence.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import html
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION
from typing import Any

from zpar.errors import CompositeError, RemoteError, TaskAborted, TimeoutError
from zpar.messages import Status
from zpar.serialize import deserialize_object
from zpar.wire import Message

_UNSET = object()
RETURN_WHEN = (ALL_COMPLETED, FIRST_COMPLETED, FIRST_EXCEPTION)


def decode_reply(msg: Message) -> Any:
    """The value of an apply/execute reply, or raise the error it carries."""
    c = msg.content
    status = c.get("status")
    if status == Status.OK:
        if msg.buffers:
            if "function_id" in c:  # a typed_reply read back from the hub: raw type arrays
                from zpar.typed.codec import type_arrays

                return type_arrays(c.get("counts") or [], msg.buffers)
            return deserialize_object(msg.buffers)
        return c.get("execute_result") if "execute_result" in c else None
    if status == Status.ABORTED:
        raise TaskAborted(c.get("evalue") or f"task {msg.parent_header.get('msg_id')} aborted")
    raise RemoteError.from_content(c)


def _future_failed(f: concurrent.futures.Future) -> bool:
    if not f.done():
        return False
    if f.exception() is not None:
        return True
    return f.result().content.get("status") != Status.OK


class AsyncResult:
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
        "submitted",
        "_values",
        "_result",
        "owner",
        "__weakref__",
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
            dates = [getattr(f, "zpar_submitted", None) for f in self._futures]
            submitted = min((d for d in dates if d is not None), default=None) or time.time()
        self.submitted = submitted
        self._values: list[Any] | None = None
        self._result: Any = _UNSET
        self.owner = True  # compatibility with ipyparallel: results belong to this handle

    # -- state ----------------------------------------------------------------------------

    def ready(self) -> bool:
        return all(f.done() for f in self._futures)

    def wait(self, timeout: float | None = None, return_when: str = ALL_COMPLETED) -> bool:
        """Wait until every reply is in (or the return_when condition, or timeout).

        Returns True if the condition was met: all done, one done, or one failed.
        """
        if return_when not in RETURN_WHEN:
            raise ValueError(f"return_when must be one of {RETURN_WHEN}, got {return_when!r}")
        if timeout is not None and timeout < 0:
            timeout = None
        if return_when == FIRST_EXCEPTION:
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
        if return_when == FIRST_COMPLETED:
            done, _ = concurrent.futures.wait(self._futures, timeout, FIRST_COMPLETED)
            return bool(done)
        # ALL_COMPLETED: wait on each future's own condition (no waiter objects per call)
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

    def successful(self) -> bool:
        """True if every call finished without raising; an error if not finished yet."""
        if not self.ready():
            raise ValueError(f"{self!r} is not finished: call wait() first")
        return not any(_future_failed(f) for f in self._futures)

    @property
    def progress(self) -> int:
        """How many of the messages have their reply."""
        return sum(f.done() for f in self._futures)

    @property
    def sent(self) -> bool:
        """True once every message has left the client (handed to zmq by the I/O thread)."""
        return all(getattr(f, "zpar_sent", None) is not None for f in self._futures)

    def wait_for_send(self, timeout: float | None = None) -> bool:
        """Wait until zmq no longer reads the memory of the arguments (``track=True``).

        Arguments sent without a copy (large arrays) must not be modified before this; an
        AsyncResult made without tracking waits until the messages have been sent.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.sent:
            if deadline is not None and time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        trackers = list(self._trackers)
        for f in self._futures:
            trackers.extend(getattr(f, "zpar_trackers", ()))
        for t in trackers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                t.wait(remaining)
            except Exception:  # zmq.NotDone on timeout
                return False
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
        """Abort the calls of this result that have not started yet."""
        if self._client is None:
            raise RuntimeError("this AsyncResult has no client to send the abort through")
        if not self.ready():
            self._client.abort(self, targets=self._targets, block=False)

    # -- values ---------------------------------------------------------------------------

    def get(self, timeout: float | None = None, return_exceptions: bool = False) -> Any:
        """Block until done and return the result; raise the remote error if any.

        With return_exceptions=True, errors are returned in place of values instead.
        """
        if self._result is not _UNSET and not return_exceptions:
            return self._result
        if timeout is not None and timeout < 0:
            timeout = None
        if not self.wait(timeout):
            raise TimeoutError(
                f"{self.progress}/{len(self)} replies of {self._fname or 'the call'} arrived "
                f"within {timeout} s"
            )
        if return_exceptions:
            values = [self._value_or_error(f) for f in self._futures]
            values = self._postprocess(values) if self._postprocess is not None else values
            return values[0] if self._single else values
        values = self._collect()
        if self._postprocess is not None:
            values = self._postprocess(values)
        self._result = values[0] if self._single else values
        return self._result

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

    def get_dict(self, timeout: float | None = None) -> dict[int, Any]:
        """{engine_id: result}; an error if one engine has several results here."""
        values = self.get(timeout)
        values = [values] if self._single else values
        ids = self.engine_id if not self._single else [self.engine_id]
        if len(set(ids)) != len(ids):
            raise ValueError(f"engines {ids} ran more than one of these calls: no dict")
        return dict(zip(ids, values, strict=True))

    @staticmethod
    def _value_or_error(f: concurrent.futures.Future) -> Any:
        try:
            exc = f.exception()
            if exc is not None:
                raise exc
            return decode_reply(f.result())
        except Exception as e:
            return e

    def _collect(self) -> list[Any]:
        if self._values is not None:
            return self._values
        values = [self._value_or_error(f) for f in self._futures]
        errors = [v for v in values if isinstance(v, Exception)]
        if errors:
            if len(errors) == 1 or self._single:
                raise errors[0]
            raise CompositeError(f"{len(errors)} of {len(self)} calls raised", errors)
        self._values = values
        return values

    def _value_at(self, i: int, timeout: float | None = None) -> Any:
        f = self._futures[i]
        try:
            f.result(timeout)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"reply {i} of {self._fname or 'the call'} not in") from None
        except Exception:
            pass
        v = self._value_or_error(f)
        if isinstance(v, Exception):
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
        """ar[i] / ar[a:b]: results (waiting for them); ar['engine_id']: metadata."""
        if isinstance(key, str):
            return self._meta(key)
        if isinstance(key, int | slice):
            values = self.get()
            if self._single:
                raise TypeError("a single result cannot be indexed by position")
            return values[key]
        raise TypeError(f"AsyncResult indices are int, slice or metadata key, not {key!r}")

    # -- splitting and joining --------------------------------------------------------------

    def split(self) -> list[AsyncResult]:
        """One AsyncResult per message."""
        return [
            AsyncResult(
                self._client, [m], [f], fname=self._fname, single=True, submitted=self.submitted
            )
            for m, f in zip(self.msg_ids, self._futures, strict=True)
        ]

    @classmethod
    def join(cls, results: Sequence[AsyncResult]) -> AsyncResult:
        """One AsyncResult over the messages of several (values in the order given)."""
        if not results:
            raise ValueError("join needs at least one AsyncResult")
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
            submitted=min(r.submitted for r in results),
        )

    def __add__(self, other: AsyncResult) -> AsyncResult:
        if not isinstance(other, AsyncResult):
            return NotImplemented
        return AsyncResult.join([self, other])

    # -- metadata -------------------------------------------------------------------------

    def _metadatas(self) -> list[dict[str, Any]]:
        self.wait()
        out = []
        for m, f in zip(self.msg_ids, self._futures, strict=True):
            md: dict[str, Any] = {"msg_id": m, "submitted": self.submitted}
            if f.exception() is None:
                reply = f.result()
                md.update(reply.metadata)
                md.setdefault("status", reply.content.get("status"))
            else:
                md["status"] = "error"
                md["error"] = f.exception()
            out.append(md)
        return out

    def _meta(self, key: str) -> Any:
        values = [md.get(key) for md in self._metadatas()]
        return values[0] if self._single else values

    @property
    def metadata(self) -> Any:
        mds = self._metadatas()
        return mds[0] if self._single else mds

    @property
    def engine_id(self) -> Any:
        return self._meta("engine_id")

    @property
    def stdout(self) -> Any:
        return self._meta("stdout")

    @property
    def stderr(self) -> Any:
        return self._meta("stderr")

    @property
    def started(self) -> Any:
        return self._meta("started")

    @property
    def completed(self) -> Any:
        return self._meta("completed")

    @property
    def elapsed(self) -> float:
        """Seconds since submission, up to the last completion once all are done."""
        if self.ready():
            done = [c for c in _as_list(self.completed) if c is not None]
            if done:
                return max(done) - self.submitted
        return time.time() - self.submitted

    @property
    def serial_time(self) -> float:
        """Sum of the engines' compute times: what a serial run would have taken."""
        total = 0.0
        for md in self._metadatas():
            if md.get("started") is not None and md.get("completed") is not None:
                total += md["completed"] - md["started"]
        return total

    @property
    def wall_time(self) -> float:
        """Seconds from submission to the last completion."""
        return self.timedelta(self.submitted, max(_known(self.completed), default=self.submitted))

    def timedelta(
        self, start: Any, end: Any, start_key: Callable = min, end_key: Callable = max
    ) -> float:
        """Seconds between two times or lists of times (reduced by start_key / end_key)."""
        if isinstance(start, list | tuple):
            start = start_key(_known(start))
        if isinstance(end, list | tuple):
            end = end_key(_known(end))
        return float(end) - float(start)

    # -- output ---------------------------------------------------------------------------

    def display_outputs(self, groupby: str = "engine", file: Any = None) -> None:
        """Print each call's captured stdout/stderr, headed by its engine."""
        out = file or sys.stdout
        mds = self._metadatas()
        if groupby == "type":
            for stream in ("stdout", "stderr"):
                for md in mds:
                    if md.get(stream):
                        print(f"[{stream}:{md.get('engine_id')}] {md[stream]}", end="", file=out)
            return
        if groupby not in ("engine", "order"):
            raise ValueError(f"groupby must be 'engine', 'order' or 'type', got {groupby!r}")
        if groupby == "engine":
            mds = sorted(mds, key=lambda md: (md.get("engine_id") is None, md.get("engine_id")))
        for md in mds:
            for stream in ("stdout", "stderr"):
                if md.get(stream):
                    print(f"[{stream}:{md.get('engine_id')}] {md[stream]}", end="", file=out)

    def stream_outputs(self, callback: Callable[[int | None, str, str], Any] | None = None) -> None:
        """Show engines' stdout/stderr for these calls as it is printed.

        callback(engine_id, stream_name, text) runs in the client's I/O thread; the default
        prints ``[stdout:N] text``. Stops by itself when the calls are done.
        """
        if self._client is None:
            raise RuntimeError("this AsyncResult has no client to stream through")
        io = self._client._io
        targets = getattr(self, "_engine_of", {})

        def default(eid: int | None, name: str, text: str) -> None:
            out = sys.stderr if name == "stderr" else sys.stdout
            label = "?" if eid is None else eid
            print(f"[{name}:{label}] {text}", end="" if text.endswith("\n") else "\n", file=out)

        show = callback or default

        def on_output(msg_id: str, msg: Message) -> None:
            if msg.msg_type == "status":
                if msg.content.get("execution_state") == "idle":  # the last word of a call
                    io.unwatch_output([msg_id])
                return
            if msg.msg_type == "stream":
                eid = msg.metadata.get("engine_id", targets.get(msg_id))
                show(eid, msg.content.get("name", "stdout"), msg.content.get("text", ""))

        io.watch_output(self.msg_ids, on_output)

        def stop_later(ar: AsyncResult) -> None:
            # a reply can overtake its last output (two paths): stop watching a bit later,
            # unless the engine's 'idle' status ended it already
            timer = threading.Timer(1.0, io.unwatch_output, args=(ar.msg_ids,))
            timer.daemon = True
            timer.start()

        self.add_done_callback(stop_later)

    def wait_interactive(
        self, interval: float = 0.1, timeout: float | None = None, file: Any = None
    ) -> bool:
        """Wait with a progress bar (tqdm: a terminal bar, or a widget in Jupyter)."""
        from tqdm.auto import tqdm

        deadline = None if timeout is None or timeout < 0 else time.monotonic() + timeout
        with tqdm(total=len(self), desc=self._fname or "tasks", unit="tasks", file=file) as bar:
            while True:
                bar.update(self.progress - bar.n)
                if self.ready():
                    return True
                if deadline is not None and time.monotonic() > deadline:
                    return False
                self.wait(
                    interval if deadline is None else min(interval, deadline - time.monotonic())
                )

    # -- asyncio --------------------------------------------------------------------------

    def __await__(self) -> Generator[Any, None, Any]:
        yield from asyncio.gather(
            *(asyncio.wrap_future(f) for f in self._futures), return_exceptions=True
        ).__await__()
        return self.get()

    def __repr__(self) -> str:
        state = "finished" if self.ready() else "pending"
        return f"<{type(self).__name__}({self._fname}): {state} {self.progress}/{len(self)}>"

    def _repr_html_(self) -> str:
        state = "pending"
        if self.ready():
            state = "finished" if self.successful() else "failed"
        engines = ""
        if self.ready():
            ids = sorted({e for e in _as_list(self.engine_id) if e is not None})
            engines = f", engines {ids}"
        return (
            f"<code>{html.escape(type(self).__name__)}({html.escape(self._fname)})</code>: "
            f"<b>{state}</b> {self.progress}/{len(self)}{engines}"
        )


class AsyncMapResult(AsyncResult):
    """A map's result: chunks of results flattened back in submission order."""

    def __init__(self, *args: Any, ordered: bool = True, **kwargs: Any) -> None:
        kwargs.setdefault("postprocess", _flatten)
        super().__init__(*args, **kwargs)
        self.ordered = ordered

    def __iter__(self) -> Iterator[Any]:
        """Elements in order (ordered=True) or chunk by chunk as they complete."""
        if not self.ordered:
            for chunk in self.as_completed():
                yield from chunk
            return
        for i in range(len(self._futures)):
            yield from self._value_at(i)

    def __getitem__(self, key: int | slice | str) -> Any:
        if isinstance(key, str):
            return self._meta(key)
        return self.get()[key]


def _flatten(chunks: list[Any]) -> list[Any]:
    out: list[Any] = []
    for chunk in chunks:
        if isinstance(chunk, Exception):
            out.append(chunk)
        else:
            out.extend(chunk)
    return out


def _as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v]


def _known(values: Any) -> list[float]:
    return [v for v in _as_list(values) if v is not None]
