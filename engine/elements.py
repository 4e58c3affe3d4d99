"""ElementRun: an element request run on an engine, one element at a time, answered in parts.

A load-balanced map's request carries a run of elements (zpar.elements); each is a task for
its user. The engine runs them in order and answers in parts, each part one apply_reply for
the elements finished since the last (their values pickled as one list, errors per element):

    main thread   step ─ enter: f(element j) :leave ─ pending += value ─ (2 ms held?) part ─ …
    watchdog      sends the pending part itself once it waited HOLD_LIMIT in user code
    signal thread gives the unstarted tail back to the scheduler (RevokeGate.give_back)

A part is built when the pending values have waited HOLD_LIMIT, before control messages are
read, and at the end; while an element runs long, the held-replies watchdog builds and sends
it (``take`` is its source, under its lock: engine.heldreplies). So a finished element's
value waits at most about HOLD_LIMIT for company, and a slow element never holds back the
values before it. Before each element the gate is asked (its tail may have been taken back
to run elsewhere), the request's abort is checked, and, every CONTROL_EVERY seconds, the
control socket is read (an abort of the map reaches its unstarted elements).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from zpar.elements import ELEMENTS, ERRORS, FINAL, element_range, origin_of
from zpar.errors import SerializationError, TaskAborted, error_content
from zpar.mapchunk import _as_numpy_scalars, _bound, _numpy_scalar_types
from zpar.serialize import serialize_object, unpack_apply
from zpar.wire import Message
from zpar.wire.messages import MsgType, ReplyStatus

from .kernel import USER_ERRORS, Kernel, KernelReply, format_traceback
from .replies import ReplySender
from .revoke import RevokeGate

log = logging.getLogger(__name__)

#: Seconds between two looks at the control socket while elements run (an abort of the map
#: waits at most this long plus one element; a look costs ~0.5 us, an element may be 0.1).
CONTROL_EVERY = 0.001

_BUSY = {"execution_state": "busy"}
_IDLE = {"execution_state": "idle"}


class ElementRun:
    """One element request on this engine, from its first element to its last part."""

    def __init__(
        self,
        msg: Message,
        sock: Any,
        kernel: Kernel,
        replies: ReplySender,
        gate: RevokeGate | None,
    ) -> None:
        self.msg = msg
        self.sock = sock
        self.kernel = kernel
        self.replies = replies
        self.gate = gate
        self.origin = origin_of(msg.msg_id)
        #: values finished and not yet in a part, from position ``first``
        self.pending: list[Any] = []
        self.errors: dict[str, Any] = {}
        self.first = 0
        #: monotonic time the oldest pending value was finished (None: none pending)
        self.since: float | None = None
        self.started: float | None = None
        self.completed = 0.0

    # -- parts --------------------------------------------------------------------------

    def take(self, final: bool = False, stdout: str = "", stderr: str = "") -> None:
        """Make the pending values a part among the held replies (the ReplySender's
        flush calls this first, on whichever thread flushes); ``final``: the last part of
        this placement, made even with nothing pending."""
        values = self.pending
        if not values and not final:
            return
        first = self.first
        last = first + len(values)
        errors = self.errors
        self.pending, self.errors, self.first, self.since = [], {}, last, None
        content: dict[str, Any] = {"status": ReplyStatus.OK, ELEMENTS: [first, last]}
        buffers = self._pickle(values, first, errors) if values else []
        if errors:
            content[ERRORS] = errors
        if final:
            content[FINAL] = True
        now = time.time()
        self._hold(content, buffers, self.started or now, self.completed or now, stdout, stderr)
        self.started = None

    def finish(self, stop: int, end: int, stdout: str, stderr: str) -> None:
        """The last part: what is pending, then [stop, end) answered aborted (an abort
        of the map reached them; nothing if ``end == stop``: the rest was given back)."""
        if stop >= end:
            self.take(True, stdout, stderr)
            return
        self.take()
        now = time.time()
        content = error_content(
            TaskAborted,
            f"elements {stop}..{end - 1} of task {self.origin} were aborted before they ran",
            status=ReplyStatus.ABORTED,
            traceback=[],
            engine_info=self._info(),
            zpar_error=True,
        )
        content[ELEMENTS] = [stop, end]
        content[FINAL] = True
        self._hold(content, [], now, now, stdout, stderr)

    def _hold(
        self,
        content: dict[str, Any],
        buffers: list[Any],
        started: float,
        completed: float,
        stdout: str = "",
        stderr: str = "",
    ) -> None:
        md = {
            "engine_id": self.kernel.engine_id,
            "engine_uuid": self.kernel.engine_uuid,
            "started": started,
            "completed": completed,
            "status": content["status"],
            "stdout": stdout,
            "stderr": stderr,
        }
        self.replies.hold_frames(
            self.sock, self.msg, KernelReply(MsgType.APPLY_REPLY, content, md, buffers)
        )

    def _pickle(self, values: list[Any], first: int, errors: dict[str, Any]) -> list[Any]:
        if type(values[0]) in _numpy_scalar_types():
            values = _as_numpy_scalars(values)
        try:
            return serialize_object(values)
        except Exception:  # find the element(s) whose value cannot travel
            out = []
            for i, v in enumerate(values):
                try:
                    serialize_object(v)
                except Exception as e:
                    why = SerializationError(
                        f"cannot send the result back: {type(v).__name__} object is not "
                        f"serializable ({type(e).__name__}: {e})"
                    )
                    errors[str(first + i)] = self._error(why)
                    v = None
                out.append(v)
            return serialize_object(out)

    def _error(self, e: BaseException) -> dict[str, Any]:
        return error_content(e, traceback=format_traceback(e), engine_info=self._info())

    def _info(self) -> dict[str, Any]:
        k = self.kernel
        return {"engine_id": k.engine_id, "engine_uuid": k.engine_uuid, "method": "apply"}

    # -- the run ------------------------------------------------------------------------

    def run(self, look_at_control: Callable[[], bool]) -> None:
        """Run the elements; ``look_at_control()`` reads waiting control messages (after
        the held parts left) and says whether the rest must be aborted."""
        msg, kernel, gate = self.msg, self.kernel, self.gate
        publish = kernel._publish
        if publish is not None:
            publish(MsgType.STATUS, _BUSY, msg.header)
        capture = kernel._capture
        capture.start(msg.header)
        rng = element_range(msg.metadata.get(ELEMENTS))
        lo, hi = rng or (0, 0)
        try:
            if rng is None:
                raise ValueError(f"metadata 'elements' must be [lo, hi], got {msg.metadata}")
            self.first = lo
            f, args, _ = unpack_apply(msg.buffers)
            fn = _bound(args[0])
            items = zip(*(s[lo:hi] for s in args[1:]), strict=False)
        except USER_ERRORS as e:  # the request as a whole cannot run: one error part
            now = time.time()
            content = self._error(e)
            content[ELEMENTS] = [lo, hi]
            content[FINAL] = True
            stdout, stderr = capture.stop()
            self._hold(content, [], now, now, stdout, stderr)
            self._end(publish)
            return
        if gate is not None:
            gate.begin(msg.msg_id, lo, hi)
        stop, aborted = lo, False
        try:
            stop, aborted = self._loop(fn, items, lo, look_at_control)
        finally:
            if gate is not None:
                end = gate.end()
                hi = min(hi, end) if end is not None else hi
            stdout, stderr = capture.stop()
        if kernel.aborted and self.origin in kernel.aborted:
            aborted = aborted or stop < hi
            kernel.aborted.discard(self.origin)
        self.finish(stop, hi if aborted else stop, stdout, stderr)
        self._end(publish)

    def _loop(
        self, fn: Any, items: Any, j: int, look_at_control: Callable[[], bool]
    ) -> tuple[int, bool]:
        """Run elements from position ``j`` until the last, the given-back tail or an
        abort; returns (the first position not run, whether an abort stopped it)."""
        kernel, replies, gate = self.kernel, self.replies, self.gate
        watchdog = replies.watchdog
        monotonic = time.monotonic
        limit = watchdog.limit
        next_look = monotonic() + CONTROL_EVERY
        for item in items:
            if gate is not None and not gate.step(j):
                return j, False  # the rest was given back: it runs elsewhere
            if kernel.aborted and self.origin in kernel.aborted:
                return j, True
            now = monotonic()
            if now >= next_look:
                next_look = now + CONTROL_EVERY
                if look_at_control():
                    return j, True
            if self.started is None:
                self.started = time.time()
            since = self.since
            error = None
            # from enter to leave the pending values are the watchdog's (take)
            watchdog.enter(replies.held_since if since is None else since)
            try:
                value = fn(*item)
            except USER_ERRORS as e:
                value, error = None, e
            finally:
                watchdog.leave()
            if error is not None:
                self.errors[str(j)] = self._error(error)
            self.completed = time.time()
            self.pending.append(value)  # read again: the watchdog may have sent a part
            j += 1
            if self.since is None:
                self.since = replies.mark_held()
            elif monotonic() - self.since >= limit:
                replies.flush()
        return j, False

    def _end(self, publish: Any) -> None:
        self.replies.flush()
        if publish is not None:
            publish(MsgType.STATUS, _IDLE, self.msg.header)
