"""ElementRun: an element request run on an engine, one element at a time, answered in parts.

A load-balanced map's request carries a run of elements (zpar.elements); each is a task for
its user. The engine runs them in order and answers in parts, each part one apply_reply for
the elements finished since the last (their values pickled as one list, errors per element):

    main thread   enter ─ [pop position, f(element), pending.append] x burst ─ leave ─ part? ─ …
    watchdog      makes the pending values a part and sends it once they waited HOLD_LIMIT
    signal thread gives unstarted positions back to the scheduler (RevokeGate.give_back)

Elements run in *bursts* of at most BURST of the hold limit: the main thread tells the
held-replies watchdog once per burst that it runs user code (engine.heldreplies), not once
per element, and between bursts it reads the control socket (an abort of the map reaches
its unstarted elements) and sends a part if the values pending waited HOLD_LIMIT. While a
burst runs, the watchdog may take the pending values at any moment (``take``: a snapshot of
an append-only list, each step atomic under the GIL), so a value finished before a slow
element leaves within about HOLD_LIMIT: a slow element never holds back the values before
it. Positions are popped one at a time from the gate's deque, so the signal thread can give
back every position not started yet, whatever the burst.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from zpar.elements import (
    ELEMENTS,
    STDERRS,
    STDOUTS,
    TIMES,
    element_range,
    origin_of,
    pack_part_times,
)
from zpar.errors import SerializationError, TaskAborted, error_content
from zpar.mapchunk import _as_numpy_scalars, _bound, _numpy_scalar_types
from zpar.serialize import serialize_object, unpack_apply
from zpar.wire import Message
from zpar.wire.messages import ApplyReply, MsgType, ReplyStatus, StatusMessage

from .burst import run_burst
from .kernel import USER_ERRORS, Kernel, KernelReply, format_traceback
from .replies import ReplySender
from .revoke import RevokeGate

log = logging.getLogger(__name__)

#: A burst of elements lasts at most this fraction of the hold limit (then the control
#: socket is read, and a part sent if due): the watchdog, which fires at the limit, finds the
#: main thread in the burst's last element at most, so what finished before has left by then.
BURST = 0.5
#: values made into parts kept in the pending list before it is cut (between bursts)
COMPACT_AT = 4096

_BUSY = StatusMessage("busy").as_dict()
_IDLE = StatusMessage("idle").as_dict()


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
        #: values finished, from position ``base``; those before ``taken`` are in parts
        self.pending: list[Any] = []
        self.base = 0
        self.taken = 0
        #: exceptions raised, by position (set before the position's value is appended)
        self.errors: dict[int, BaseException] = {}
        self.started: float | None = None
        #: when each value of ``pending`` was done (monotonic; same indices), and when the
        #: first one not in a part yet started: a part's TIMES (zpar.elements)
        self.ends = array("d")
        self.first_start: float | None = None
        #: the epoch second the last part's last element ended, as its TIMES say: the next
        #: part starts there (no overlap by rounding, nor by a second read of the clock)
        self.next_epoch: float | None = None

    # -- parts --------------------------------------------------------------------------

    def position(self) -> int:
        """The position of the element running (or next to run): what its prints belong
        to (engine.capture's ``track``)."""
        return self.base + len(self.pending)

    def take(self, final: bool = False) -> None:
        """Make the values not in a part yet a part among the held replies (the
        ReplySender's flush calls this first, on whichever thread flushes); ``final``: the
        last part of this placement, made even with nothing pending. The part carries
        what its elements printed, each element's own text under STDOUTS / STDERRS."""
        pending = self.pending
        n = len(pending)  # a snapshot: the main thread may append meanwhile
        t = self.taken
        if n == t and not final:
            return
        values = pending[t:n]
        first = self.base + t
        last = self.base + n
        self.taken = n
        errors = {}
        if self.errors:
            for pos in list(self.errors):
                if first <= pos < last:
                    errors[str(pos)] = self._error(self.errors.pop(pos))
        buffers = self._pickle(values, first, errors) if values else []
        content = ApplyReply.content(
            ReplyStatus.OK, elements=[first, last], errors=errors, final=final
        )
        times = None
        if n > t:
            ends = self.ends
            start = ends[t] if self.first_start is None else self.first_start
            epoch = self.next_epoch  # the last part's end, as it was reported
            if epoch is None:
                epoch = time.time() - time.monotonic() + start
            times, self.next_epoch = pack_part_times(epoch, start, ends[t:n])
            self.first_start = ends[n - 1]  # the next one started when this one ended
        capture = self.kernel._capture
        upto = None if final else last
        stdout, stdouts = capture.stdout.take(upto)
        stderr, stderrs = capture.stderr.take(upto)
        now = time.time()
        own = {}
        if stdouts:  # no field when no element printed (most maps)
            own[STDOUTS] = stdouts
        if stderrs:
            own[STDERRS] = stderrs
        self._hold(content, buffers, self.started or now, now, stdout, stderr, times, own)
        self.started = None

    def finish(self, stop: int, end: int) -> None:
        """The last part: what is pending, then [stop, end) answered aborted (an abort
        of the map reached them; nothing if ``end == stop``: the rest was given back)."""
        if stop >= end:
            self.take(True)
            return
        self.take()
        capture = self.kernel._capture
        stdout, _ = capture.stdout.take(None)  # printed outside the elements taken
        stderr, _ = capture.stderr.take(None)
        now = time.time()
        content = error_content(
            TaskAborted,
            f"elements {stop}..{end - 1} of task {self.origin} were aborted before they ran",
            status=ReplyStatus.ABORTED,
            traceback=[],
            engine_info=self._info(),
            zpar_error=True,
            elements=[stop, end],
            final=True,
        )
        self._hold(content, [], now, now, stdout, stderr)

    def _hold(
        self,
        content: dict[str, Any],
        buffers: list[Any],
        started: float,
        completed: float,
        stdout: str = "",
        stderr: str = "",
        times: bytes | None = None,
        own: dict[str, Any] | None = None,
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
        if times is not None:
            md[TIMES] = times
        if own:
            md.update(own)
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

    def _error(self, e: BaseException, **fields: Any) -> dict[str, Any]:
        """The error content of element ``e`` came from (``fields``: ``elements``,
        ``final`` when it answers elements itself)."""
        return error_content(e, traceback=format_traceback(e), engine_info=self._info(), **fields)

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
        capture.stdout.track(self.position)
        capture.stderr.track(self.position)
        rng = element_range(msg.metadata.get(ELEMENTS))
        lo, hi = rng or (0, 0)
        try:
            if rng is None:
                raise ValueError(f"metadata 'elements' must be [lo, hi], got {msg.metadata}")
            self.base = lo
            f, args, _ = unpack_apply(msg.buffers)
            # map() calls fn in C with each element's arguments: no tuple nor star-call
            # per element (~50 ns of ~300 for a quick call); it goes on past a call that
            # raised, and stops with the shortest sequence (StopIteration, as zip did)
            calls = map(_bound(args[0]), *(s[lo:hi] for s in args[1:]))
        except USER_ERRORS as e:  # the request as a whole cannot run: one error part
            now = time.time()
            content = self._error(e, elements=[lo, hi], final=True)
            stdout, stderr = capture.stop()
            self._hold(content, [], now, now, stdout, stderr)
            self._end(publish)
            return
        positions = gate.begin(msg.msg_id, lo, hi) if gate is not None else deque(range(lo, hi))
        stop, aborted = lo, False
        try:
            stop, aborted = self._loop(calls, positions, look_at_control)
        finally:
            if gate is not None:
                gate.end()
            capture.stop()  # the parts read their text from it (take)
        end = stop + len(positions)  # what was not given back nor run: aborted
        if kernel.aborted and self.origin in kernel.aborted:
            # kept in the set: another part of this request may come here later
            aborted = aborted or stop < end
        if not aborted and stop < end:  # the sequences ended early: answered, never lost
            self._short(stop, end)
            stop = end
        self.finish(stop, end if aborted else stop)
        self._end(publish)

    def _short(self, stop: int, end: int) -> None:
        self.take()
        now = time.time()
        error = IndexError(f"the map's sequences end before element {stop}")
        content = self._error(error, elements=[stop, end])
        self._hold(content, [], now, now)

    def _loop(
        self, calls: Iterator[Any], positions: deque[int], look_at_control: Callable[[], bool]
    ) -> tuple[int, bool]:
        """Run elements (``next(calls)``: the next one's value) in bursts until none is
        left (run, or given back) or an abort; returns (the position after the last run,
        whether an abort stopped it)."""
        kernel, replies = self.kernel, self.replies
        watchdog = replies.watchdog
        monotonic = time.monotonic
        limit = watchdog.limit
        burst = limit * BURST
        pending, errors = self.pending, self.errors
        take_position, ends = positions.popleft, self.ends
        last = self.base - 1  # the position run last (per element: no j += 1)
        while positions:
            if kernel.aborted and self.origin in kernel.aborted:
                return last + 1, True  # an abort read before this request (or the last look)
            start = monotonic()
            deadline = start + burst  # per element: one comparison, no subtraction
            if self.started is None:
                self.started = time.time()
            if self.first_start is None:
                self.first_start = start
            # held from now (or earlier): the watchdog sends what is pending by then + limit;
            # from enter to leave the values not in a part are its too (take)
            watchdog.enter(replies.mark_held())
            try:
                last = run_burst(
                    calls, take_position, pending, ends, errors, deadline, last, USER_ERRORS
                )
            finally:
                watchdog.leave()
            if look_at_control():
                return last + 1, True
            since = replies.held_since
            if len(pending) > self.taken and since is not None and monotonic() - since >= limit:
                replies.flush()
            if self.taken >= COMPACT_AT:  # outside user code: the main thread's alone
                del pending[: self.taken]
                del self.ends[: self.taken]
                self.base += self.taken
                self.taken = 0
        return last + 1, False

    def _end(self, publish: Any) -> None:
        self.replies.flush()
        if publish is not None:
            publish(MsgType.STATUS, _IDLE, self.msg.header)
