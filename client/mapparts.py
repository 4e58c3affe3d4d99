"""Parts: one element request's elements as its parts arrive (zpar.elements).

A load-balanced map without chunksize sends its elements several to a request, each a task
for its user; the request is answered in parts (one apply_reply per run of finished
elements, possibly from several engines when the scheduler placed its tail elsewhere). The
I/O thread adds each part here (``add``) and resolves the request's future once every
element is answered; user threads wait for and read single elements (``wait``, ``value``),
decoding a part's values once, when first read.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from zpar.elements import ELEMENTS, ERRORS, RETRYING, element_range, with_own_metadata
from zpar.errors import RemoteError, TaskAborted
from zpar.serialize import deserialize_object
from zpar.wire import LazyReply, Message

from .futures import ReplyFuture

#: a reply as the I/O thread hands it over: read lazily, or whole (tests, the in-process cluster)
AnyReply = Message | LazyReply

#: the reply a position is not answered by yet
_NONE = -1


class Parts:
    """The elements of one element request of ``n`` positions."""

    __slots__ = (
        "n",
        "replies",
        "owner",
        "answered",
        "_waiters",
        "_values",
        "_errors",
        "error",
        "_futures",
    )

    def __init__(self, n: int, waiters: MapWaiters | None = None) -> None:
        self.n = n
        #: the parts received, in arrival order
        self.replies: list[AnyReply] = []
        #: for each position, the index in ``replies`` of the part that answers it
        self.owner = [_NONE] * n
        self.answered = 0
        #: the condition of its map's waiters (all the map's requests share one)
        self._waiters = waiters or MapWaiters()
        #: futures of single positions (AsyncMapResult.split), resolved as they come
        self._futures: dict[int, list[Future]] | None = None
        self._values: list[list[Any] | None] = []
        #: each failed position's exception, made once: every read returns the same object
        #: (as ipyparallel, whose elements are tasks of their own: ``list(amr) == amr.get(
        #: return_exceptions=True)`` holds)
        self._errors: dict[int, Exception] | None = None
        #: the error that ended the wait for the whole request (its controller lost...)
        self.error: BaseException | None = None

    # -- the I/O thread -------------------------------------------------------------------

    def add(self, reply: AnyReply) -> bool:
        """Take a part (or any reply to the request: one with no ``elements`` answers
        every position not answered yet); True once every position is answered."""
        owner, n = self.owner, self.n
        rng = element_range(reply.content.get(ELEMENTS))
        a, b = (0, n) if rng is None else (min(rng[0], n), min(rng[1], n))
        idx = len(self.replies)
        self.replies.append(reply)
        self._values.append(None)
        retrying = reply.metadata.get(RETRYING) if ERRORS in reply.content else None
        seg = owner[a:b]
        if retrying:  # failed elements placed again: their answer is still to come
            count = 0
            skip = set(retrying)
            for i in range(a, b):
                if owner[i] == _NONE and i not in skip:
                    owner[i] = idx
                    count += 1
        elif rng is not None and seg.count(_NONE) == len(seg):
            owner[a:b] = [idx] * (b - a)  # the common case: a run answered once
            count = b - a
        else:  # a reply for what is left, or a run answered again (a retried placement)
            count = 0
            for i in range(a, b):
                if owner[i] == _NONE:
                    owner[i] = idx
                    count += 1
        self.answered += count
        self._waiters.notify()
        if self._futures:
            self._resolve()
        return self.answered >= n

    def fail(self, error: BaseException) -> None:
        """The request will get no more parts (its future failed): unanswered positions
        raise ``error``."""
        self.error = error
        self._waiters.notify(force=True)
        if self._futures:
            self._resolve()

    def on_done(self, fut: Future) -> None:
        """Done-callback of the request's future."""
        error = fut.exception()
        if error is not None:
            self.fail(error)

    # -- user threads ---------------------------------------------------------------------

    def unanswered(self) -> list[int]:
        """Positions no part has answered yet (none once the request failed)."""
        if self.error is not None:
            return []
        owner = self.owner
        if self.answered == 0:
            return list(range(self.n))
        return [i for i, o in enumerate(owner) if o == _NONE]

    def done(self, pos: int) -> bool:
        return self.owner[pos] != _NONE or self.error is not None

    def wait(self, pos: int, timeout: float | None = None) -> bool:
        """Wait until position ``pos`` is answered (or the request failed); False on
        timeout."""
        return self.done(pos) or self._waiters.wait_for(lambda: self.done(pos), timeout)

    def watch(self, pos: int, fut: Future) -> None:
        """Resolve ``fut`` with position ``pos`` (an ElementReply) once it is answered."""
        if self._futures is None:
            self._futures = {}
        self._futures.setdefault(pos, []).append(fut)
        if self.done(pos):
            self._resolve()

    def _resolve(self) -> None:
        futures = self._futures
        assert futures is not None
        for pos in [p for p in futures if self.done(p)]:
            for fut in futures.pop(pos):
                if fut.done():
                    continue
                reply = self.reply_of(pos)
                if reply is None:
                    fut.set_exception(self.error)
                else:
                    fut.set_result(ElementReply(reply, self.value(pos), pos))  # decoded: [value]

    def reply_of(self, pos: int) -> AnyReply | None:
        idx = self.owner[pos]
        return None if idx == _NONE else self.replies[idx]

    def values(self) -> list[Any]:
        """Every position's value or exception (all answered): runs of a part copied as
        slices, not element by element."""
        n, owner, replies = self.n, self.owner, self.replies
        out: list[Any] = [None] * n
        slow = False
        for idx, reply in enumerate(replies):
            c = reply.content
            rng = element_range(c.get(ELEMENTS))
            if rng is None or c.get("status") != "ok":
                slow = True
                continue
            a, b = min(rng[0], n), min(rng[1], n)
            if owner[a:b].count(idx) != b - a:
                slow = True
                continue
            out[a:b] = self._decoded(idx)[: b - a]
            errors = c.get(ERRORS)
            if errors:
                for k in errors:
                    if a <= int(k) < b:
                        out[int(k)] = self.value(int(k))
        if slow or self.error is not None:  # a retried run, an error for a whole run...
            done = set()
            for idx, reply in enumerate(replies):
                c = reply.content
                rng = element_range(c.get(ELEMENTS))
                if rng is not None and c.get("status") == "ok":
                    a, b = min(rng[0], n), min(rng[1], n)
                    if owner[a:b].count(idx) == b - a:
                        done.add(idx)
            for pos in range(n):
                if owner[pos] not in done:
                    out[pos] = self.value(pos)
        return out

    def _decoded(self, idx: int) -> list[Any]:
        values = self._values[idx]
        if values is None:
            reply = self.replies[idx]
            values = deserialize_object(reply.buffers) if reply.buffers else []
            self._values[idx] = values
        return values

    def value(self, pos: int) -> Any:
        """The value of an answered position, or the exception it raised (returned)."""
        idx = self.owner[pos]
        if idx == _NONE:
            assert self.error is not None
            return self.error
        reply = self.replies[idx]
        content = reply.content
        errors = content.get(ERRORS)
        if errors and str(pos) in errors:
            return self._error_at(pos, lambda: RemoteError.from_content(errors[str(pos)]))
        values = self._values[idx]
        if values is None:
            if content.get("status") != "ok" or element_range(content.get(ELEMENTS)) is None:
                return self._error_at(pos, lambda: whole_run_error(reply))
            values = self._decoded(idx)
        return values[pos - content[ELEMENTS][0]]

    def _error_at(self, pos: int, make: Callable[[], Exception | None]) -> Exception | None:
        """Position ``pos``'s exception: made by ``make`` on the first read, then kept."""
        errors = self._errors
        if errors is None:
            errors = self._errors = {}
        error = errors.get(pos)
        if error is None:
            error = make()
            if error is not None:
                errors[pos] = error
        return error


class MapWaiters:
    """The condition a map's user threads wait on for any of its elements; the I/O thread
    notifies it only while someone waits (a lock taken per part, not per element)."""

    __slots__ = ("_cond", "_waiting")

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._waiting = 0

    def notify(self, force: bool = False) -> None:
        if self._waiting or force:
            with self._cond:
                self._cond.notify_all()

    def wait_for(self, predicate: Any, timeout: float | None = None) -> bool:
        """Wait until ``predicate()``; False if ``timeout`` seconds passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            self._waiting += 1
            try:
                while not predicate():
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        return False
                    self._cond.wait(remaining)
            finally:
                self._waiting -= 1
        return True


class ElementReply:
    """One element's answer, as a reply an AsyncResult reads (AsyncMapResult.split): the
    part's metadata, its own status, its value or error already decoded."""

    __slots__ = ("metadata", "content", "parent_header", "header", "idents", "buffers", "value")

    def __init__(self, part: AnyReply, value: Any, pos: int | None = None) -> None:
        # as the part of a map ipyparallel's split() makes: the chunk, here of one element
        self.value = value if isinstance(value, Exception) else [value]
        ok = not isinstance(value, Exception)
        self.metadata = {**part.metadata, "status": "ok" if ok else "error"}
        if pos is not None:  # its own dates, as its own task's (ipyparallel)
            with_own_metadata(self.metadata, part.content, pos)
        self.content = {"status": "ok" if ok else "error"}
        self.parent_header = part.parent_header
        self.header = part.header
        self.idents = part.idents
        self.buffers: list[Any] = []


def ElementFuture(parts: Parts, pos: int, waiters: MapWaiters | None = None) -> Future:  # noqa: N802
    """A future of position ``pos`` of ``parts``, resolved with an ElementReply."""
    fut = ReplyFuture()
    parts.watch(pos, fut)
    return fut


def whole_run_error(reply: AnyReply) -> Exception | None:
    """The error a reply for a whole run of elements carries (aborted, its engine died, the
    request could not run), None if it carries none."""
    c = reply.content
    status = c.get("status")
    if status == "ok":
        return None
    if status == "aborted":
        return TaskAborted(c.get("evalue") or "aborted before it ran")
    return RemoteError.from_content(c)
