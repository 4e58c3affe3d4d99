"""One request's state on the client, from the moment it is signed to its reply.

The user's thread makes a PendingRequest and hands it to the I/O thread (ClientIO.submit), which
alone changes it afterwards: it sends the frames (when several are queued, in one batch),
stamps ``sent``, routes the reply (or the engine's death) to ``future``, and forgets it.
The futures an AsyncResult holds point back at their PendingRequest (``ReplyFuture.request``) until
they are resolved, so what the handle reports while it waits (whether it was sent, zmq's
trackers) is read from one record. A resolved future lets go of its PendingRequest (see
client.futures): PendingRequest and future never form a reference cycle that outlives the reply,
so a dropped result and its buffers are freed at once, not by the cyclic GC.

The I/O thread keeps every PendingRequest it awaits in a PendingTable, by msg_id and by
engine: a request leaves it when its last reply comes, its engine dies, the controller is
lost, or it is withdrawn from its window unsent; leaving is the moment its submission
window (client/window.py) lets the next held request out (``admitted``, sent by the
client.outbox before anything newer). Only the table's own methods change it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from zpar.elements import PART_SEP, origin_of
from zpar.errors import (
    EngineError,
    RemoteProtocolError,
    SchedulerLost,
    ZparError,
    remote_error,
)
from zpar.wire.messages import ReplyStatus

from .futures import ReplyFuture, resolve
from .mapparts import Parts
from .window import Windows, aborted_here


class PendingRequest:
    """A request the client sent and awaits. ``future`` resolves with the reply (a
    wire.LazyMessage) or the error that ended the wait; a broadcast (one message the task
    scheduler hands to several engines) has one reply future per engine uuid in
    ``replies``, and ``future`` only marks the send."""

    __slots__ = (
        "msg_id",
        "channel",
        "private",
        "frames",
        "engine_uuid",
        "future",
        "replies",
        "unanswered",
        "submitted",
        "sent",
        "trackers",
        "resend",
        "report_outcome",
        "windowed",
        "parts",
    )

    def __init__(
        self,
        msg_id: str,
        channel: str,
        frames: list[Any],
        *,
        engine_uuid: str | None = None,
        private: str | None = None,
        submitted: float | None = None,
        track: bool = False,
        broadcast: list[str] | None = None,
        resend: bool = False,
        windowed: bool = False,
        elements: int | None = None,
        waiters: Any = None,
    ) -> None:
        self.msg_id = msg_id
        #: "mux", "control", "task", "query"; "direct" for a call its own thread makes
        self.channel = channel
        #: the engine's own ipc address when the request was signed for it (private: see
        #: wire.Session.serialize), then sent there, not through the relay of ``channel``
        self.private = private
        #: the signed frames, from the routing identity (MUX, control) or delimiter on;
        #: dropped once sent unless ``resend``
        self.frames: list[Any] | None = frames
        #: the engine a direct request is bound to (None: load balanced, or a query)
        self.engine_uuid = engine_uuid
        #: the header's date (Unix time): when the request was made
        self.submitted = submitted
        self.future: ReplyFuture = ReplyFuture(self)
        #: a broadcast's reply futures by engine uuid (never changed: the caller reads it)
        self.replies: dict[str, ReplyFuture] | None = None
        if broadcast:
            self.replies = {u: ReplyFuture(self, u) for u in broadcast}
        #: replies still awaited (engines of a broadcast)
        self.unanswered = len(broadcast) if broadcast else 1
        #: time.time() when the I/O thread handed it to zmq; None until then
        self.sent: float | None = None
        #: zmq MessageTrackers of its zero-copy frames (track=True), once sent
        self.trackers: list[Any] | None = [] if track else None
        #: a load-balanced request with retries: sent again if the task scheduler dies
        self.resend = resend
        #: a direct call load-balanced tasks depend on: the scheduler is told its outcome
        self.report_outcome = False
        #: work (apply / execute) that counts against the client's submission window
        #: (client/window.py): held in the client while the window is full
        self.windowed = windowed
        #: an element request's (zpar.elements) parts as they arrive: client.mapparts
        self.parts: Parts | None = None
        if elements is not None:
            self.parts = Parts(elements, waiters)
            self.future.add_done_callback(self.parts.on_done)

    def reply_futures(self) -> list[ReplyFuture]:
        """The futures of its replies: one, or one per engine of a broadcast."""
        if self.replies is not None:
            return list(self.replies.values())
        return [self.future]

    def reply_future(self, engine_uuid: str | None) -> ReplyFuture | None:
        """The future a reply from ``engine_uuid`` resolves, None if that engine was not
        asked (a broadcast) or has answered already."""
        fut: ReplyFuture | None
        if self.replies is None:
            fut = self.future
        else:
            fut = self.replies.get(engine_uuid or "")
        return None if fut is None or fut.done() else fut

    def __repr__(self) -> str:
        state = "sent" if self.sent is not None else "queued"
        return f"<PendingRequest {self.msg_id} on {self.channel} {state}>"


def request_of(fut: Future) -> PendingRequest | None:
    """The PendingRequest behind a future an AsyncResult holds while it is pending (None once
    resolved, and for futures of other origins: a result fetched from the hub's store, an
    executor's)."""
    return fut.request if isinstance(fut, ReplyFuture) else None


def sent_of(fut: Future) -> bool:
    """Whether a future's request has left the client (one that came from elsewhere, the
    hub's store or its own thread, has nothing left to send)."""
    if not isinstance(fut, ReplyFuture):
        return True
    request = fut.request
    return (request.sent if request is not None else fut.sent) is not None


def submitted_of(fut: Future) -> float | None:
    """When a future's request was made (its header's date); None if not one of ours."""
    return fut.submitted if isinstance(fut, ReplyFuture) else None


def first_submitted(futs: Sequence[Future]) -> float:
    """When the first of these requests was made (its header's date); now if none says."""
    if len(futs) == 1:  # most results: one call
        return submitted_of(futs[0]) or time.time()
    dates = [d for f in futs if (d := submitted_of(f)) is not None]
    return min(dates, default=None) or time.time()


def engine_of(fut: Future) -> str | None:
    """The engine uuid a future's request went to (a broadcast's: that reply's engine)."""
    return fut.engine_uuid if isinstance(fut, ReplyFuture) else None


def outcome_of(fut: Future) -> list[Any]:
    """[succeeded, engine_uuid] of a finished call, as the task scheduler counts them."""
    if fut.exception() is not None:
        return [False, engine_of(fut) or ""]
    msg = fut.result()
    try:
        ok = msg.content.get("status") == ReplyStatus.OK
        return [ok, str(msg.metadata.get("engine_uuid") or "")]
    except RemoteProtocolError:  # a reply that does not decode counts as failed
        return [False, ""]


#: an empty set to discard from (never added to)
_NONE: set[str] = set()


class PendingTable:
    """Every request awaiting a reply, the engines each awaits, and the windows that hold
    work back. Not locked: ``add`` runs in the submitting thread (before the I/O thread can
    see the request), everything else in the I/O thread."""

    def __init__(self, windows: Windows) -> None:
        #: submission windows (client/window.py): work past them waits there, in order
        self.windows = windows
        #: every PendingRequest not answered yet, by msg_id (a broadcast: until every
        #: engine replied)
        self.requests: dict[str, PendingRequest] = {}
        #: engine uuid -> msg_ids of the direct requests it owes a reply
        self.by_engine: dict[str, set[str]] = {}
        #: requests let out of their window by replies, to send before anything newer
        self.admitted: deque[PendingRequest] = deque()

    def add(self, request: PendingRequest) -> None:
        """Register a request before it is queued, so that a reply never finds it missing."""
        msg_id = request.msg_id
        self.requests[msg_id] = request
        if request.replies is not None:
            for u in request.replies:
                self.by_engine.setdefault(u, set()).add(msg_id)
        elif request.engine_uuid is not None:
            self.by_engine.setdefault(request.engine_uuid, set()).add(msg_id)

    def get(self, msg_id: str) -> PendingRequest | None:
        return self.requests.get(msg_id)

    def of_reply(self, msg_id: Any) -> PendingRequest | None:
        """The request a reply's parent msg_id answers: its own, or the element request
        one of whose parts was placed on its own (zpar.elements)."""
        request = self.requests.get(msg_id)
        if request is None and isinstance(msg_id, str) and PART_SEP in msg_id:
            request = self.requests.get(origin_of(msg_id))
        return request

    def answered(self, request: PendingRequest, fut: ReplyFuture | None) -> None:
        """One of ``request``'s replies came (``fut``'s; None: an element request's last
        part): forget it once no other reply is awaited."""
        request.unanswered -= 1
        if request.unanswered <= 0:  # finish(request), inline: once per reply
            self.requests.pop(request.msg_id, None)
            if request.windowed:
                self.admitted.extend(self.windows.answered(request))
        engine = fut.engine_uuid if fut is not None else request.engine_uuid
        if engine is not None:
            self.by_engine.get(engine, _NONE).discard(request.msg_id)
        request.frames = None

    def finish(self, request: PendingRequest) -> None:
        """``request`` is answered for good: forget it, and let its window send on."""
        self.requests.pop(request.msg_id, None)
        if request.windowed:
            self.admitted.extend(self.windows.answered(request))

    def msg_ids(self) -> set[str]:
        """The msg_ids awaiting a reply as their user knows them (``ar.msg_ids``, as
        ipyparallel's ``Client.outstanding``): an element request's (zpar.elements)
        unanswered elements by element id, any other request by its own msg_id."""
        out: set[str] = set()
        for msg_id, request in list(self.requests.items()):
            parts = request.parts
            if parts is None:
                out.add(msg_id)
            else:
                prefix = msg_id + PART_SEP
                out.update(prefix + str(pos) for pos in parts.unanswered())
        return out

    def owed_by(self, engine_uuid: str) -> bool:
        """Whether a request to this engine awaits its reply."""
        return bool(self.by_engine.get(engine_uuid))

    def futures(self) -> list[ReplyFuture]:
        """Every future still waiting (broadcasts count once per engine)."""
        return [f for r in list(self.requests.values()) for f in r.reply_futures()]

    def engine_died(self, eid: int, uuid: str, reason: str) -> list[str]:
        """Fail what engine ``uuid`` owed with a RemoteError (EngineError), as ipyparallel
        fails its stranded replies; the msg_ids whose outcome the task scheduler wants."""
        why = f": {reason}" if reason else ""
        report = []
        for msg_id in self.by_engine.pop(uuid, set()):
            request = self.requests.get(msg_id)
            fut = request.reply_future(uuid) if request is not None else None
            if request is None or fut is None:
                continue
            request.unanswered -= 1
            if not request.unanswered:
                self.finish(request)
            fut.set_exception(
                remote_error(
                    EngineError,
                    f"engine {eid} ({uuid}) died before replying to {msg_id}{why}",
                    {"engine_id": eid, "engine_uuid": uuid, "method": "apply"},
                )
            )
            if request.report_outcome:
                report.append(msg_id)
        return report

    def fail_all(self, error: ZparError) -> None:
        """Fail every request, held ones too (never sent), with ``error``."""
        self.windows.reset()
        self.admitted.clear()
        for fut in self.futures():
            resolve(fut, error=error)
        self.requests.clear()
        self.by_engine.clear()

    def withdraw(self, msg_ids: list[str] | None) -> list[str]:
        """Abort requests still held in the windows (``msg_ids`` None: all), as the task
        scheduler aborts its queued tasks: each fails with TaskAborted, nothing is sent."""
        aborted = []
        for request in self.windows.withdraw(msg_ids):
            self.requests.pop(request.msg_id, None)
            if request.engine_uuid is not None:
                self.by_engine.get(request.engine_uuid, _NONE).discard(request.msg_id)
            request.frames = None
            for fut in request.reply_futures():
                resolve(fut, error=aborted_here(request.msg_id))
            aborted.append(request.msg_id)
        return aborted

    def scheduler_restarted(self, reason: str) -> tuple[list[PendingRequest], int]:
        """The task scheduler died with our unanswered load-balanced requests: those with
        retries (and their frames) are to be resent to its successor, the others fail at
        once, naming what happened. (the requests to resend, how many failed)"""
        resend, failed = [], 0
        for msg_id, request in list(self.requests.items()):
            if request.channel != "task" or request.sent is None:
                continue  # not on the task path, or still queued: goes to the new one
            if request.resend and request.frames is not None:
                resend.append(request)
                continue
            self.finish(request)  # room for the held ones: they go to the new one
            error = SchedulerLost(
                f"{reason} while it held task {msg_id}, which had no retries; a new task "
                "scheduler runs: resubmit it (or give tasks retries to have them resent)"
            )
            for fut in request.reply_futures():
                resolve(fut, error=error)
            failed += 1
        return resend, failed
