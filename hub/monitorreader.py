"""What the monitor pipe brings the hub about tasks, recorded in its task table and store.

Relays' and engines' copies of direct requests and replies (alone or in an engine's copy
batch), the task scheduler's batches of task events, and large load-balanced results
travelling ahead of their events. Each copy is checked as its receiver checked it (with a
replay guard of its own: a request's copy and the request itself are one message); what
fails is refused and counted, never recorded. The hub's loop reads the socket and hands
each message to ``handlers[kind]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import zmq

from zpar.constants import STORE_RESULT_LIMIT
from zpar.errors import RemoteProtocolError
from zpar.wire import Message, Session, envelope_and_buffers, routing
from zpar.wire.copybatch import unpack_copies
from zpar.wire.messages import (
    MON_CONTROL_IN,
    MON_CONTROL_OUT,
    MON_COPY_BATCH,
    MON_MUX_IN,
    MON_MUX_OUT,
    MON_TASK_BATCH,
    MON_TASK_RESULT,
)
from zpar.wire.monitor import (
    TaskDest,
    TaskIn,
    TaskOut,
    TaskRetry,
    packed_body,
    split_task_result,
    unpack_batch,
)

from .recorder import StoreWriter
from .records import TaskRecord, TaskTable, pack_request
from .staleheart import StaleHearts

log = logging.getLogger(__name__)

#: Copies of a batch checked between two yields of the GIL to the relay threads.
COPY_YIELD_EVERY = 8

#: Large results (over STORE_INLINE_LIMIT) held until their TaskOut event arrives; a batch
#: interval's worth at most, so the oldest beyond this are surely orphans.
LARGE_RESULTS_HELD = 256
#: ...and at most this many bytes of them: results travel on a socket of their own and may
#: run ahead of their events by as much as the monitor lets queue (MONITOR_RCVHWM).
LARGE_RESULTS_BYTES = 32 * 2**20


class MonitorReader:
    """Records the tasks the monitor pipe tells of.

    ``copies`` checks the relays' and engines' copies (the hub's Session for this thread);
    ``tasks`` and ``writer`` are the hub's task table and store writer; ``stale`` the
    engines the hub declared dead (a request one of them takes is lost, whatever it says)."""

    def __init__(
        self, *, copies: Session, tasks: TaskTable, writer: StoreWriter, stale: StaleHearts
    ) -> None:
        self.copies = copies
        self.tasks = tasks
        self.writer = writer
        self.stale = stale
        self._large_results: dict[str, list[Any]] = {}  # msg_id -> buffers, until its TaskOut
        self._large_bytes = 0  # bytes of _large_results
        #: the handler of each kind of monitor message this reader takes (its first frame)
        self.handlers: dict[bytes, Callable[[list[Any]], None]] = {
            MON_MUX_IN: self.mux_in,
            MON_MUX_OUT: self.mux_out,
            MON_COPY_BATCH: self.copy_batch,
            MON_CONTROL_IN: _ignore,
            MON_CONTROL_OUT: _ignore,
            MON_TASK_BATCH: self.task_batch,
            MON_TASK_RESULT: self.task_result,
        }

    def _copy(self, frames: list[Any], where: str) -> Message | None:
        """A relay's or an engine's copy of a message, checked as its receiver checks it
        (the small result buffers the store keeps included); None if refused."""
        framed = routing(frames)
        if framed is None or len(framed[0]) != 2:
            log.warning("%s copy without two identities dropped", where)
            return None
        # the signature covers the small buffers; large ones are checked below when stored
        return self.copies.feed(frames, where, buffers=False, private=True)

    def copy_batch(self, frames: list[Any]) -> None:
        # [msgpack list of copies] from an engine's copy thread (zpar.wire.copybatch.pack_copies):
        # each copy checked and recorded as if it had come alone; a bad one is refused there
        try:
            copies = unpack_copies(packed_body(frames))
        except ValueError as e:
            log.warning("malformed copy batch dropped: %s", e)
            return
        handlers = self.handlers
        for i, copy in enumerate(copies, 1):
            try:
                handlers[copy[0]](copy[1:])
            except Exception as e:  # garbage on the monitor must not kill the hub
                log.warning("malformed %r copy in a batch ignored: %s", copy[0], e)
            if i % COPY_YIELD_EVERY == 0:
                # the relay threads share this GIL: without a yield a batch held a relayed
                # message up to the 5 ms switch interval (docs/decisions.md, W2)
                time.sleep(0)

    def mux_in(self, frames: list[Any]) -> None:
        # [engine_uuid, client_ident, <ZPAR|MSG>, signature, envelope, buffers…] (buffers
        # when all of them fit what the store keeps: the request is kept for resubmit)
        msg = self._copy(frames, "monitor (mux in)")
        if msg is None:
            return
        engine, client = msg.idents
        engine_uuid = engine.decode("ascii", "replace")
        if msg.dest != engine_uuid:
            return  # not for this engine: refused there, so not recorded here
        request = None
        if len(msg.buffers) == len(msg.tags):  # large buffers: checked if ever resubmitted
            request = pack_request(envelope_and_buffers(msg.frames))
        self.tasks.submitted(msg.header, "mux", client, engine_uuid, msg.metadata, request)
        if engine in self.stale:  # taken by an engine declared dead: lost, whatever it says
            self.tasks.engine_died(engine_uuid)

    def mux_out(self, frames: list[Any]) -> None:
        # [client_ident, engine_uuid, <ZPAR|MSG>, signature, envelope, buffers…]
        msg = self._copy(frames, "monitor (mux out)")
        if msg is None:
            return
        engine = msg.idents[1].decode("ascii", "replace")
        msg_id = msg.parent_header.get("msg_id")
        if msg_id is None or msg.parent_header.get("dest") != engine:
            return  # an answer to nothing, or from an engine the request was not bound to
        metadata = dict(msg.metadata)
        status = str(metadata.get("status", ""))
        buffers = msg.buffers if len(msg.buffers) == len(msg.tags) else []  # large left out
        if buffers and not self._checked(msg, "monitor (mux out)"):
            return
        if self.tasks.finished(msg_id, engine, metadata, status, msg.content):
            self._result_buffers(msg_id, buffers)

    def _checked(self, msg: Message, where: str) -> bool:
        """Whether a copy's large buffers (not covered by the signature) check out."""
        try:
            self.copies.check_buffers(msg.tags, msg.buffers, private=True)
        except RemoteProtocolError as e:
            self.copies.refuse(e, where)
            return False
        return True

    def task_batch(self, frames: list[Any]) -> None:
        # [msgpack list of events] (zpar.wire.monitor), dispatched on their exact type
        tasks, large_results = self.tasks, self._large_results
        for event in unpack_batch(packed_body(frames)):
            if type(event) is TaskIn:
                request = event.request
                if request is not None:
                    request = pack_request(request)
                tasks.submitted(event.header, "task", event.client, None, event.metadata, request)
                if event.engine:  # its TaskDest, folded in (zpar.wire.monitor): as if it followed
                    tasks.assigned(event.header["msg_id"], event.engine)
            elif type(event) is TaskOut:
                md, msg_id = event.metadata, event.msg_id  # decoded for this call: no copy
                status = str(md.get("status", ""))
                large = self._forget_large(msg_id) if large_results else None
                rec = tasks.finished(msg_id, event.engine or None, md, status, event.content)
                if rec is not None:
                    buffers = event.buffers if event.buffers is not None else large
                    if buffers:  # a map's part: under its own row's id
                        self._result_buffers(rec.msg_id, buffers, rec)
            elif type(event) is TaskDest and event.engine:
                tasks.assigned(event.msg_id, event.engine)
            elif type(event) is TaskDest:  # taken back from its engine unstarted (prefetch)
                tasks.requeued(event.msg_id)
            elif type(event) is TaskRetry:
                log.info("task %s retried after %s", event.msg_id, event.why)
                tasks.retried(event.msg_id)
            else:
                log.warning("task event ignored: %s", event)

    def task_result(self, frames: list[Any]) -> None:
        # [msg_id, buffers…]: a large load-balanced result (the scheduler checked its tags),
        # usually ahead of its TaskOut event; stored only if that reply finishes the record
        held = self._large_results
        msg_id, buffers = split_task_result(frames)
        rec = self.tasks.records.get(msg_id)
        if rec is not None and rec.elements is not None:
            rec = None  # a map's part: its values are its part row's, held for its TaskOut
        if rec is not None and rec.completed is not None and rec.result_size is None:
            # it travels on a socket of its own (schedulers/hubreport.py) and may come
            # after its TaskOut: stored now, the record written again with its size
            self._result_buffers(msg_id, buffers)
            if rec.result_size is not None:
                self.tasks.dirty[msg_id] = rec
            return
        held[msg_id] = buffers
        self._large_bytes += sum(len(f.buffer if isinstance(f, zmq.Frame) else f) for f in buffers)
        while held and (len(held) > LARGE_RESULTS_HELD or self._large_bytes > LARGE_RESULTS_BYTES):
            self._forget_large(next(iter(held)))

    def _forget_large(self, msg_id: str) -> list[Any] | None:
        bufs = self._large_results.pop(msg_id, None)
        if bufs is not None:
            self._large_bytes -= sum(len(f.buffer if isinstance(f, zmq.Frame) else f) for f in bufs)
        return bufs

    def _result_buffers(
        self, msg_id: Any, buffers: list[Any], rec: TaskRecord | None = None
    ) -> None:
        if not buffers or not isinstance(msg_id, str):
            return
        size = sum(len(b.buffer if isinstance(b, zmq.Frame) else b) for b in buffers)
        if rec is None:
            rec = self.tasks.records.get(msg_id)
        if size > STORE_RESULT_LIMIT:
            return  # recorded without its result (result_size stays None)
        kept = self.writer.add_buffers(
            msg_id, [b.bytes if isinstance(b, zmq.Frame) else b for b in buffers]
        )
        if rec is not None and kept:  # not kept: the store is behind (recorder.py)
            rec.result_size = size


def _ignore(frames: list[Any]) -> None:
    pass
