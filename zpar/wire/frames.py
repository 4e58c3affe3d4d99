"""Frames of one message: views of them, where each part sits, and the msgpack codec.

A message from its delimiter on is ``[DELIM, signature, envelope, buffer, ...]``
(HEAD_FRAMES before the buffers); routing identities come before the delimiter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack
import zmq

from ..constants import BATCH_DELIM, DELIM, INLINE_SIGNED_MAX, STORE_RESULT_LIMIT
from ..errors import RemoteProtocolError

#: msgpack encoder of the wire (reused for speed: not thread-safe, see Session.serialize)
encode = msgpack.Packer(use_bin_type=True).pack

#: The bytes of BATCH_DELIM, which also open the one frame of a packed batch.
MARKER_SIZE = len(BATCH_DELIM)
assert MARKER_SIZE == 12  # split_idents slices the marker by this literal (no lookup)

#: Frames of a message after its identities: delimiter, signature, envelope (then buffers).
HEAD_FRAMES = 3
#: Bytes of an HMAC-SHA256 signature.
SIGNATURE_SIZE = 32


def decode(data: Any) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def frame_view(frame: Any) -> Any:
    """Bytes-like view of a frame (zmq.Frame or bytes) without copying it."""
    return frame.buffer if isinstance(frame, zmq.Frame) else frame


def frame_bytes(frame: Any) -> bytes:
    """A frame's content as bytes (a copy for a zmq.Frame or a view)."""
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)


def nbytes(b: Any) -> int:
    if type(b) is bytes:
        return len(b)
    if isinstance(b, zmq.Frame):
        return len(b.buffer)
    return memoryview(b).nbytes


def octets(b: Any) -> Any:
    """A buffer as contiguous unsigned bytes (what BLAKE3 reads), without a copy."""
    if type(b) is bytes:
        return b
    view = memoryview(frame_view(b))
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def signed_inline(b: Any) -> bool:
    """Whether a buffer is signed inline (by the HMAC) rather than by a tag of its own."""
    return nbytes(b) < INLINE_SIGNED_MAX


def _is_marker(f: Any) -> bool:
    """Whether a frame is the delimiter of a message or of a batch, or a packed batch in
    one frame (its marker followed by the packed messages, see zpar.wire)."""
    raw = frame_view(f)
    n = len(raw)
    if n == len(DELIM):
        return bytes(raw) == DELIM
    return n >= len(BATCH_DELIM) and bytes(raw[: len(BATCH_DELIM)]) == BATCH_DELIM


def split_idents(frames: Sequence[Any]) -> tuple[list[bytes], list[Any]]:
    """Split routing identities from the message (or batch) proper, at its delimiter (or
    the frame of a packed batch, which starts with BATCH_DELIM)."""
    for i, f in enumerate(frames):
        if type(f) is bytes:  # the head as recv_message returns it: no view needed
            if f == DELIM or f[:12] == BATCH_DELIM:
                return list(frames[:i]), list(frames[i:])
            continue
        if _is_marker(f):
            return [bytes(frame_view(x)) for x in frames[:i]], list(frames[i:])
    raise RemoteProtocolError("no-delimiter", f"no {DELIM!r} frame among {len(frames)} frames")


def message_buffers(msg_frames: Sequence[Any]) -> list[Any]:
    """The buffers of a message given from its delimiter on."""
    return list(msg_frames[HEAD_FRAMES:])


def buffers_size(msg_frames: Sequence[Any]) -> int:
    """Total bytes of a message's buffers (message given from its delimiter on)."""
    return sum(nbytes(b) for b in msg_frames[HEAD_FRAMES:])


def envelope_frame(msg_frames: Sequence[Any]) -> Any:
    """The envelope frame of a message given from its delimiter on (as received: bytes
    or a zmq.Frame); ValueError if the message is too short to have one."""
    if len(msg_frames) < HEAD_FRAMES:
        raise ValueError(f"a message of {len(msg_frames)} frames has no envelope")
    return msg_frames[HEAD_FRAMES - 1]


def envelope_and_buffers(msg_frames: Sequence[Any]) -> list[Any]:
    """The envelope and the buffers of a message given from its delimiter on: what its
    signature and tags cover, without the delimiter and the signature (what the hub's
    store keeps of a request, to sign it anew on resubmit)."""
    if len(msg_frames) < HEAD_FRAMES:
        raise ValueError(f"a message of {len(msg_frames)} frames has no envelope")
    return list(msg_frames[HEAD_FRAMES - 1 :])


def head_frames(msg_frames: Sequence[Any]) -> list[Any]:
    """The delimiter, signature and envelope of a message, without its buffers."""
    return list(msg_frames[:HEAD_FRAMES])


def checkable_copy(
    msg_frames: Sequence[Any], *, large: bool = False, detach: bool = False
) -> list[Any]:
    """A copy of a message (from its delimiter on) that its receiver can still check: the
    head and the small buffers the signature covers; the large ones too with ``large``,
    and only if all of them together fit STORE_RESULT_LIMIT (what the hub stores). detach:
    copy the buffers out (the sender's memory may change before the copy is read)."""
    bufs = msg_frames[HEAD_FRAMES:]
    keep_large = large and sum(nbytes(b) for b in bufs) <= STORE_RESULT_LIMIT
    kept = [b for b in bufs if keep_large or signed_inline(b)]
    if detach:
        kept = [b if type(b) is bytes else bytes(frame_view(b)) for b in kept]
    return [*msg_frames[:HEAD_FRAMES], *kept]


def pack(obj: Any) -> bytes:
    return encode(obj)


def unpack(data: Any) -> Any:
    return decode(frame_view(data))
