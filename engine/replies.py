"""Replies of an engine: signed, sent on the socket their request came on, with its idents.

Replies to the task scheduler may be *held* and sent together as one wire batch
(zpar.wire.batch), under the rule of docs/decisions.md ("Held replies leave within a
bound"): a reply is held only while the engine goes straight on to the next task of the
same incoming batch; everything held leaves before the engine reads control messages, when
the batch in hand ends, and at the latest HOLD_LIMIT after the first of them was held --
sent by the main thread between two tasks, or by the watchdog thread (engine.heldreplies)
while a task runs. So a lone reply is never held, no timer is on its path, and a short
task's reply waits behind a long one at most HOLD_LIMIT.
"""

from __future__ import annotations

import logging
from time import monotonic
from typing import Any

import zmq

from zpar import sharedmem
from zpar.constants import TASK_HWM_LOADED
from zpar.errors import LocalProtocolError, error_content
from zpar.wire import (
    Message,
    Session,
    batch,
    buffers_size,
    checkable_copy,
    head_frames,
    message_buffers,
    send_frames,
)
from zpar.wire.frames import nbytes
from zpar.wire.messages import MON_MUX_OUT, ReplyStatus

from .heldreplies import HeldReplyWatchdog
from .kernel import KernelReply
from .monitorcopies import MonitorCopies

log = logging.getLogger(__name__)

#: Bytes of buffers at most in the replies held together: a batch is one message for the
#: receiver's high-water marks (the scheduler bounds its reply batches to clients alike),
#: and a large result is worth sending at once; a reply past this leaves with those held.
HELD_BYTES_MAX = 64 * 1024
#: Replies held at most: the task scheduler gives a busy engine up to TASK_HWM_LOADED tasks
#: and places more only as replies come back, so replies held for a whole batch leave the
#: engine idle for the scheduler's round trip after each batch (W3 fell from ~3,000 to
#: ~2,000 tasks/s); half of it leaves the other half to run meanwhile.
HELD_REPLIES_MAX = max(1, TASK_HWM_LOADED // 2)


class ReplySender:
    """Builds and sends one engine's replies; holds those the batch rule lets wait."""

    def __init__(
        self,
        session: Session,
        engine_id: int,
        engine_uuid: str,
        *,
        direct: zmq.Socket | None = None,
        task: zmq.Socket | None = None,
        monitor: MonitorCopies | None = None,
    ) -> None:
        self.session = session
        self.engine_id = engine_id
        self.engine_uuid = engine_uuid
        self.ident = engine_uuid.encode("ascii")
        self.direct = direct
        #: the task socket: the scheduler takes any reply there as a (packed) batch
        self.task = task
        self.monitor = monitor
        #: (socket, idents, frames from the delimiter on) of replies not sent yet, in order
        self.held: list[tuple[zmq.Socket, list[bytes], list[Any]]] = []
        self._held_bytes = 0
        #: when the first of the held replies was held (monotonic; None: none held)
        self.held_since: float | None = None
        #: sends what is held once it waited its bound while a task runs
        self.watchdog = HeldReplyWatchdog(self.flush, lambda: self.held_since, engine_id=engine_id)
        #: multiparts sent, and replies in them (a reply batch counts once, its replies each)
        self.sent_multiparts = 0
        self.sent_replies = 0
        #: client session -> (pid, start) of clients on this host that offered shared
        #: memory (zpar.sharedmem): their large buffers go in segments
        self._shm_clients: dict[str, tuple[int, int]] = {}
        #: makes pending parts of a running element request into held replies at each
        #: flush (engine.elements.ElementRun.take), on whichever thread flushes
        self.source: Any = None
        #: the hub's reason once it unregistered this engine: every reply is dropped (its
        #: work was failed or placed elsewhere; hub/staleheart.py)
        self.stale: str | None = None

    def send(
        self, sock: zmq.Socket, msg: Message, reply: KernelReply, *, hold: bool = False
    ) -> None:
        """Answer ``msg`` with ``reply``; ``hold``: keep it for the next flush if the replies
        held already waited less than the watchdog's limit (the caller guarantees a flush
        when the batch in hand ends, and tells the watchdog when user code runs)."""
        if self.stale is not None:
            log.info(
                "engine %d: %s's %s dropped: the hub unregistered this engine (%s)",
                self.engine_id,
                msg.msg_id,
                reply.msg_type,
                self.stale,
            )
            return
        direct = sock is self.direct
        frames, shared = self._frames(msg, reply, direct)
        if shared or (direct and msg.tags and msg.tags.count(b"") != len(msg.tags)):
            # the request's and the result's views of shared segments are not needed to
            # send: let go of them now, so the client's next send finds its segment free
            # (else it races this reply and makes a new one: fresh pages cost 10x a copy)
            msg.buffers.clear()
            if shared:
                reply.buffers = []
        if not direct and (hold or self.held):
            # the last of a run of held replies leaves with them, as one batch
            held, since = self.held, self.held_since
            if since is None:
                self.held_since = monotonic()
            elif hold and monotonic() - since >= self.watchdog.limit:
                hold = False  # held long enough: they leave with this one
            held.append((sock, msg.idents, frames))
            self._held_bytes += buffers_size(frames)
            if not hold or len(held) >= HELD_REPLIES_MAX or self._held_bytes > HELD_BYTES_MAX:
                self.flush()
            return
        if self.held:
            self.flush()  # replies leave in the order their tasks ran
        # to the scheduler through batch(): a small lone message goes packed in fewer
        # frames (zpar.wire.batching; pyzmq costs a few us a frame on both ends)
        send_frames(sock, [*msg.idents, *(batch([frames]) if sock is self.task else frames)])
        self.sent_multiparts += 1
        self.sent_replies += 1
        if direct and self.monitor is not None and msg.idents:
            # for the hub's store: the result too, unless it is too big to keep there
            # (copied: the thread sends them later, the result's memory may change by then)
            if shared:  # no segment for the hub: it stores what it would without them
                frames = [*head_frames(frames), *filter(nbytes, message_buffers(frames))]
            copy = checkable_copy(frames, large=not shared, detach=True)
            self.monitor.put([MON_MUX_OUT, msg.idents[0], self.ident, *copy])

    def hold_frames(self, sock: zmq.Socket, msg: Message, reply: KernelReply) -> None:
        """Hold ``reply`` to ``msg`` for the next flush, whatever the rule (a part of an
        element request: engine.elements says when it leaves)."""
        frames, _ = self._frames(msg, reply, False)  # the request's payload stays: it runs on
        self.held.append((sock, msg.idents, frames))
        self._held_bytes += buffers_size(frames)

    def mark_held(self) -> float:
        """Something is held from now on, if nothing was: since when (monotonic)."""
        since = self.held_since
        if since is None:
            since = self.held_since = monotonic()
        return since

    def flush(self) -> None:
        """Send every held reply: consecutive ones to one destination as one batch."""
        if self.source is not None:
            self.source()
        held, self.held = self.held, []
        self._held_bytes = 0
        self.held_since = None
        if self.stale is not None:
            return
        i = 0
        while i < len(held):
            sock, idents, frames = held[i]
            group = [frames]
            j = i + 1
            while j < len(held) and held[j][0] is sock and held[j][1] == idents:
                group.append(held[j][2])
                j += 1
            send_frames(sock, [*idents, *batch(group)])
            self.sent_multiparts += 1
            self.sent_replies += len(group)
            i = j

    def _same_host(
        self, msg: Message, buffers: list[Any], metadata: dict[str, Any]
    ) -> tuple[Any, dict[str, Any]]:
        """A direct reply's buffers and metadata for the same-host data plane
        (zpar.sharedmem): a client that offers shared memory from this host is answered so
        (this engine's own offer in the metadata) and remembered by its session; its large
        buffers go in segments."""
        o = msg.metadata.get("shm")
        session = msg.header.get("session", "")
        if o is not None:
            dest = sharedmem.same_host(o)
            if dest is None:
                return buffers, metadata
            self._shm_clients[session] = dest
            metadata = {**metadata, "shm": sharedmem.offer()}
        else:
            dest = self._shm_clients.get(session)
            if dest is None:
                return buffers, metadata
        if len(buffers) > 1:  # out-of-band buffers after the pickle stream: large ones
            buffers = sharedmem.outbound(buffers, dest)
        return buffers, metadata

    def _frames(self, msg: Message, reply: KernelReply, private: bool) -> tuple[list[Any], bool]:
        """The reply's signed frames, and whether shared memory carries buffers of it."""
        buffers, metadata = reply.buffers, reply.metadata
        if private:
            buffers, metadata = self._same_host(msg, buffers, metadata)
        try:
            _, frames = self.session.serialize(
                reply.msg_type,
                reply.content,
                parent=msg.header,
                metadata=metadata,
                buffers=buffers,
                private=private,
            )
            return frames, buffers is not reply.buffers
        except LocalProtocolError as e:  # e.g. output that msgpack cannot encode
            log.error(
                "engine %d: cannot send the %s to %s: %s",
                self.engine_id,
                reply.msg_type,
                msg.msg_id,
                e,
            )
            content = error_content(
                LocalProtocolError,
                f"the engine could not encode its reply: {e}",
                traceback=[],
                engine_info={"engine_id": self.engine_id, "engine_uuid": self.engine_uuid},
            )
            md = {k: v for k, v in reply.metadata.items() if k not in ("stdout", "stderr")}
            md["status"] = ReplyStatus.ERROR
            _, frames = self.session.serialize(
                reply.msg_type, content, parent=msg.header, metadata=md, private=private
            )
            return frames, False
