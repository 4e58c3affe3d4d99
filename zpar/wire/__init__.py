"""The signed multipart wire format: building, signing, checking and splitting messages.

Frame layout (protocol version 2.0)::

    [ident, ..., b"<ZPAR|MSG>", signature, envelope, buffer, ...]

envelope is one msgpack array ``[header, parent_header, metadata, content, buffer_tags]``;
signature is the raw 32-byte HMAC-SHA256, keyed by the cluster key, of the envelope followed
by every buffer under INLINE_SIGNED_MAX (64 KiB). buffer_tags has one entry per buffer: b""
for those small ones, a 16-byte keyed BLAKE3 tag for each larger one. So the signature
covers every buffer: a swapped buffer fails the signature or its tag. This package alone
knows where a part of a message sits; every other module goes through Session, Message and
the helpers it exports.

Under load a sender puts several messages in one multipart, a batch::

    [ident, ..., b"<ZPAR|BATCH>", index, signature, envelope, buffer, ..., signature, ...]

index is a msgpack array with each message's number of buffers, in order; each message is
its signature, envelope and buffers exactly as it would be sent alone. When every frame of
every message is small (under PACK_MAX_BUFFER, 64 KiB: what zmq copies anyway), the batch
is packed, its messages in one frame (a socket hop costs ~5 us of CPU a frame, both ends
and their I/O threads)::

    [ident, ..., b"<ZPAR|BATCH>" + [[signature, envelope, buffer, ...], ...]]

one frame: the marker's bytes, then a msgpack array with, per message, the array of its
frames after the delimiter (bin). A lone small message goes so too, as a batch of one (one
frame instead of 3+); the two-frame form of earlier senders (the marker, then the array)
is still read. ``batch`` builds one, ``split_messages`` turns any received multipart (batch or not) into the identities and
one frame list per message, from its delimiter on, as ``Session.unpack`` takes it; so each
message is checked on its own (``Session.feed_all``): one bad message is refused, the
others go on. A batch whose index does not match its frames is refused whole, never split
or glued to anything.

Every field is checked before a handler sees a message (``check_envelope``); a message
that fails is refused with a reason token (``Session.refused``), never handed on.

The package's modules, one job each (import from ``zpar.wire``):

- frames: views of frames, where each part of a message sits, the msgpack codec
- batching: batch / batches / split_messages / routing (the batch layouts above)
- envelope: the checks of every decoded field and version, what the signature covers
- signing: Signer, the cluster key's HMAC over a message and BLAKE3 tags of large buffers
- replay: ReplayGuard, the signatures accepted lately (refused if seen again)
- session: Session, which builds, serializes, verifies (through its Signer) and refuses
  replays (through its ReplayGuard)
- received: Message, LazyMessage and LazyReply, what a checked message is handed on as
- segref: SegmentRef, a buffer carried by shared memory, named in the envelope
- multipart: recv_message / send_frames on a socket
"""

from __future__ import annotations

from .batching import batch, batch_counts, batches, is_batch, routing, split_messages, unbatch
from .envelope import (
    KNOWN_TYPES,
    check_envelope,
    check_header,
    signed_parts,
    sniff_version,
    version_error,
)
from .frames import (
    HEAD_FRAMES,
    SIGNATURE_SIZE,
    buffers_size,
    checkable_copy,
    envelope_and_buffers,
    envelope_frame,
    frame_bytes,
    frame_view,
    head_frames,
    message_buffers,
    pack,
    split_idents,
    unpack,
)
from .multipart import recv_message, send_frames
from .received import LazyMessage, LazyReply, Message
from .segref import SegmentRef, is_descriptor
from .session import Session

#: the names tests and older callers import (see envelope.signed_parts)
_signed_parts = signed_parts

__all__ = [
    "HEAD_FRAMES",
    "KNOWN_TYPES",
    "SIGNATURE_SIZE",
    "LazyMessage",
    "LazyReply",
    "Message",
    "SegmentRef",
    "Session",
    "batch",
    "batch_counts",
    "batches",
    "buffers_size",
    "check_envelope",
    "check_header",
    "checkable_copy",
    "envelope_and_buffers",
    "envelope_frame",
    "frame_bytes",
    "frame_view",
    "head_frames",
    "is_batch",
    "is_descriptor",
    "message_buffers",
    "pack",
    "recv_message",
    "routing",
    "send_frames",
    "signed_parts",
    "sniff_version",
    "split_idents",
    "split_messages",
    "unbatch",
    "unpack",
    "version_error",
]
