"""HubReport: what the task scheduler tells the hub, batched (the hub is not on the task path).

Every task passes the hub three times (in, destination, out) as events of one msgpack list
per batch (zpar.wire.messages: TASK_IN / TASK_DEST / TASK_OUT / TASK_RETRY); a task placed
before its TaskIn left has its destination folded into that TaskIn (one event fewer to
pack, check and record: the hub's share of a task is mostly per event). A batch goes at the
end of a scheduler turn, but no sooner than TASK_BATCH_INTERVAL after the previous one: a
lone task is known to the hub at once, a stream wakes it 100 times a second instead of once
per turn (it shares the cores with the task path).
"""

from __future__ import annotations

import time
from typing import Any

import zmq

from zpar.constants import RESULT_COPIES_HWM, STORE_INLINE_LIMIT, STORE_RESULT_LIMIT
from zpar.elements import RETRYING
from zpar.wire import Message, Session, frame_bytes, send_frames
from zpar.wire.messages import (
    MON_SCHEDULER,
    MON_TASK_RESULT,
    TASK_BATCH_INTERVAL,
    TASK_BATCH_MAX,
    MsgType,
)
from zpar.wire.monitor import TaskDest, TaskEvent, TaskIn, TaskOut, pack_batch
from zpar.wire.refusals import RefusalReporter
from zpar.wire.sockets import configure


class HubReport:
    """The scheduler's monitor PUSH to the hub and the events waiting for it."""

    def __init__(self, context: zmq.Context, address: str) -> None:
        self.socket = configure(context.socket(zmq.PUSH))
        # the controller may bind the other end a moment after this process starts (they
        # start together): retry every 10 ms, not libzmq's default 100
        self.socket.setsockopt(zmq.RECONNECT_IVL, 10)
        self.socket.connect(address)
        #: results for the store on a socket of their own, bounded: a hub behind its store
        #: makes the scheduler skip their copies rather than queue them (RESULT_COPIES_HWM)
        self.results = configure(context.socket(zmq.PUSH))
        self.results.setsockopt(zmq.SNDHWM, RESULT_COPIES_HWM)
        self.results.setsockopt(zmq.RECONNECT_IVL, 10)
        self.results.connect(address)
        #: results whose store copy was skipped so
        self.results_skipped = 0
        self.events: list[TaskEvent] = []
        #: msg_id -> index in ``events`` of its TaskIn not yet placed (see event)
        self._unplaced: dict[str, int] = {}
        self.due = 0.0  # when the unsent events must go (monotonic)
        self._sent = 0.0  # when the last batch went
        self._refusals: RefusalReporter | None = None

    def scheduler_ready(self, frames: list[Any]) -> None:
        self.socket.send_multipart([MON_SCHEDULER, *frames])

    def event(self, event: TaskEvent) -> None:
        events = self.events
        if not events:
            self.due = self._sent + TASK_BATCH_INTERVAL
        if isinstance(event, TaskDest):
            i = self._unplaced.pop(event.msg_id, None) if self._unplaced else None
            if i is not None and event.engine:  # placed before its TaskIn left: fold
                first = events[i]
                assert isinstance(first, TaskIn)
                events[i] = TaskIn(
                    first.client, first.header, first.metadata, event.engine, first.request
                )
                return
        elif isinstance(event, TaskIn) and not event.engine:
            self._unplaced[event.header["msg_id"]] = len(events)
        events.append(event)
        if len(events) >= TASK_BATCH_MAX:
            self.flush()

    def task_out(
        self,
        uuid: bytes,
        client: bytes,
        reply: Message,
        bare: bool = False,
        retrying: list[int] | None = None,
    ) -> None:
        """A checked reply passed, with what the hub's store keeps: small result buffers
        inline, larger ones (up to STORE_RESULT_LIMIT) in a message of their own; none if
        ``bare``. ``retrying``: positions of a map's part whose errors are not their
        answer (zpar.elements.RETRYING), told to the hub in the metadata."""
        bufs = [] if bare else reply.buffers
        msg_id = reply.parent_header.get("msg_id", "")
        size = sum(len(b) if type(b) is bytes else len(b.buffer) for b in bufs)
        inline = None
        if bufs and size <= STORE_INLINE_LIMIT:
            inline = [frame_bytes(b) for b in bufs]
        elif bufs and size <= STORE_RESULT_LIMIT:
            if self.results.poll(0, zmq.POLLOUT):  # room: a multipart's frames all go
                send_frames(self.results, [MON_TASK_RESULT, msg_id.encode(), *bufs])
            else:
                self.results_skipped += 1
        self.event(
            TaskOut(
                uuid.decode("ascii", "replace"),
                client,
                msg_id,
                reply.metadata if not retrying else {**reply.metadata, RETRYING: retrying},
                reply.content,
                inline,
            )
        )

    def flush(self) -> None:
        """Send the events held, in one message."""
        if self.events:
            self.socket.send_multipart(pack_batch(self.events))
            self.events = []
            self._unplaced = {}
            self._sent = time.monotonic()

    def flush_due(self, now: float) -> None:
        if self.events and now >= self.due:
            self.flush()

    def wait_ms(self, now: float) -> int | None:
        """Milliseconds until the held events are due; None when there are none."""
        if not self.events:
            return None
        return max(0, int((self.due - now) * 1000) + 1)

    def report_refusals(self, session: Session, now: float) -> None:
        """Tell the hub the scheduler's refused messages, when they changed (zpar.wire.refusals)."""
        if self._refusals is None:
            self._refusals = RefusalReporter(lambda: dict(session.refused))
        content = self._refusals.due(now)
        if content is not None:
            _, frames = session.serialize(MsgType.REFUSED_REPORT, content)
            self.socket.send_multipart([MON_SCHEDULER, *frames])

    def close(self) -> None:
        self.socket.close(linger=0)
        self.results.close(linger=0)
