"""One request's state on the client, from the moment it is signed to its reply.

The user's thread makes a PendingRequest and hands it to the I/O thread (ClientIO.submit), which
alone changes it afterwards: it sends the frames (when several are queued, in one batch),
stamps ``sent``, routes the reply (or the engine's death) to ``future``, and forgets it.
The futures an AsyncResult holds point back at their PendingRequest (``ReplyFuture.request``) until
they are resolved, so what the handle reports while it waits (whether it was sent, zmq's
trackers) is read from one record. A resolved future lets go of its PendingRequest (see
client.futures): PendingRequest and future never form a reference cycle that outlives the reply,
so a dropped result and its buffers are freed at once, not by the cyclic GC.
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

from .futures import ReplyFuture
from .mapparts import Parts


class PendingRequest:
    """A request the client sent and awaits. ``future`` resolves with the reply (a
    wire.LazyMessage) or the error that ended the wait; a broadcast (one message the task
    scheduler hands to several engines) has one reply future per engine uuid in
    ``replies``, and ``future`` only marks the send."""

    __slots__ = (
        "msg_id",
        "channel",
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


def engine_of(fut: Future) -> str | None:
    """The engine uuid a future's request went to (a broadcast's: that reply's engine)."""
    return fut.engine_uuid if isinstance(fut, ReplyFuture) else None
