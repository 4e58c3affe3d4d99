"""Receiving and sending one multipart on a socket, with copies only of small frames."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import zmq
import zmq.backend

from ..constants import BATCH_DELIM, COPY_THRESHOLD, DELIM
from ..errors import RemoteProtocolError
from .batching import batch_counts
from .frames import HEAD_FRAMES, MARKER_SIZE


def recv_message(sock: zmq.Socket, flags: int = 0) -> list[Any]:
    """Receive one multipart: routing identities, the delimiter, the signature and the
    envelope as bytes; buffers as zero-copy Frames, small ones copied out.

    libzmq decodes small messages into one shared, refcounted receive buffer: a kept
    zmq.Frame of 200 bytes pins all of it, so anything held beyond the moment (a reply
    waiting for its reader, a queued task) must be copied out. The head of a message is
    always small and always wanted as bytes. Every frame is received as a Frame and its
    ``more`` read from it: ~1 us a frame cheaper than recv(copy=True) plus
    getsockopt(RCVMORE).
    """
    recv = sock.recv
    parts: list[Any] = []
    head = -1  # frames left to take as bytes once the delimiter is seen (-1: not yet)
    while True:
        frame = recv(flags, copy=False)
        if head > 0:
            parts.append(frame.bytes)
            head -= 1
        elif len(frame) < COPY_THRESHOLD:
            part = frame.bytes
            parts.append(part)
            if head < 0:
                if part == DELIM:
                    head = HEAD_FRAMES - 1
                elif part == BATCH_DELIM:
                    if frame.more:
                        _recv_batch(sock, flags, parts)
                    return parts
                elif part[:MARKER_SIZE] == BATCH_DELIM:  # a packed batch, in this one frame
                    head = 0  # anything after it is taken by size (the receiver refuses it)
        else:
            parts.append(frame)
        if not frame.more:
            return parts


def _recv_batch(sock: zmq.Socket, flags: int, parts: list[Any]) -> None:
    """The rest of a batch after its delimiter, as recv_message takes a message: a packed
    batch's one frame as bytes; a framed batch's index, then each signature and envelope
    as bytes, buffers by size; by size throughout from where an index that does not match
    its frames goes wrong (the receiver refuses the batch)."""
    recv = sock.recv
    frame = recv(flags, copy=False)
    index = frame.bytes
    parts.append(index)
    more = frame.more
    if not more:  # a packed batch: its messages are in that one frame (see wire.batch)
        return
    try:
        counts = batch_counts(index)
    except RemoteProtocolError:
        counts = []
    for n in counts:
        for _ in range(2):  # signature, envelope
            if not more:
                return
            frame = recv(flags, copy=False)
            parts.append(frame.bytes)
            more = frame.more
        for _ in range(n):
            if not more:
                return
            frame = recv(flags, copy=False)
            parts.append(frame.bytes if len(frame) < COPY_THRESHOLD else frame)
            more = frame.more
    while more:  # frames the index does not account for
        frame = recv(flags, copy=False)
        parts.append(frame.bytes if len(frame) < COPY_THRESHOLD else frame)
        more = frame.more


#: pyzmq's compiled Socket.send, under zmq.Socket.send: that Python wrapper only adds the
#: DRAFT routing_id / group arguments and costs ~0.4-0.6 us a frame (0.6-0.9 against
#: 0.25), on every frame of every message. Used only for a socket whose send is that
#: wrapper (not zmq.asyncio's, whose send returns a future).
_COMPILED_SEND: Any = (
    zmq.backend.Socket.send if issubclass(zmq.Socket, zmq.backend.Socket) else None
)
_WRAPPED_SEND = zmq.Socket.send


def send_frames(
    socket: zmq.Socket, frames: Sequence[Any], trackers: list[Any] | None = None
) -> None:
    """Send a multipart, copying small frames and handing large ones to zmq without a copy.

    With ``trackers`` (a list), the MessageTracker of each zero-copy frame is appended: it
    is done when zmq no longer reads that memory.
    """
    send = socket.send
    if _COMPILED_SEND is not None and type(socket).send is _WRAPPED_SEND:
        send = _COMPILED_SEND.__get__(socket, type(socket))
    last = len(frames) - 1
    for i, f in enumerate(frames):
        flags = zmq.SNDMORE if i < last else 0
        if isinstance(f, zmq.Frame):
            send(f, flags, copy=False)
        else:
            n = f.nbytes if isinstance(f, memoryview) else len(f)
            if n < COPY_THRESHOLD:
                send(f, flags, copy=True)
            elif trackers is None:
                send(f, flags, copy=False)
            else:
                trackers.append(send(f, flags, copy=False, track=True))
