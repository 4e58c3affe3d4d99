"""Batches: several messages in one multipart, and the split of any received multipart
into its messages (see zpar.wire for the layout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..constants import BATCH_DELIM, COPY_THRESHOLD, DELIM, MAX_BATCH
from ..errors import LocalProtocolError, RemoteProtocolError
from .frames import HEAD_FRAMES, MARKER_SIZE, decode, encode, frame_view, nbytes, split_idents

#: A batch whose every frame is under this many bytes travels packed, in one frame (see batch):
#: the frames zmq copies anyway (COPY_THRESHOLD).
PACK_MAX_BUFFER = COPY_THRESHOLD


def is_batch(msg_frames: Sequence[Any]) -> bool:
    """Whether a multipart given from its delimiter on is a batch (its marker alone, or a
    packed batch's one frame, which opens with it)."""
    if not msg_frames:
        return False
    f = msg_frames[0]
    head = f[:MARKER_SIZE] if type(f) is bytes else bytes(frame_view(f)[:MARKER_SIZE])
    return head == BATCH_DELIM


def batch_counts(index: Any) -> list[int]:
    """Each message's buffer count from a framed batch's index frame; RemoteProtocolError
    if the index is not a list of 1..MAX_BATCH counts."""
    raw = frame_view(index)
    if len(raw) > 5 + 5 * MAX_BATCH:  # msgpack: array header + one uint32 per count
        raise RemoteProtocolError("batch-index", f"batch index of {len(raw)} bytes")
    return _counts(_decode_index(raw))


def _decode_index(raw: Any) -> Any:
    try:
        return decode(raw)
    except Exception as e:  # msgpack raises several unrelated types
        raise RemoteProtocolError("batch-index", f"batch index is not msgpack: {e}") from e


def _size(n: int) -> None:
    if not n:
        raise RemoteProtocolError("empty-batch", "batch of no messages")
    if n > MAX_BATCH:
        raise RemoteProtocolError("batch-size", f"batch of {n} messages, at most {MAX_BATCH}")


def _counts(counts: Any) -> list[int]:
    if type(counts) is not list or not all(type(n) is int and n >= 0 for n in counts):
        raise RemoteProtocolError(
            "batch-index", "batch index must be a list of buffer counts (ints >= 0)"
        )
    _size(len(counts))
    return counts


def _packed(packed: list[Any]) -> list[list[Any]]:
    """The messages of a packed batch's frame, each from its delimiter on."""
    _size(len(packed))
    messages = []
    for m in packed:
        if type(m) is list and len(m) >= HEAD_FRAMES - 1:
            for f in m:  # a loop, not any(<genexpr>): ~0.4 us a message less
                if type(f) is not bytes:
                    break
            else:
                messages.append([DELIM, *m])
                continue
        raise RemoteProtocolError(
            "batch-index",
            "a packed batch is a list of [signature, envelope, buffer...] lists of bytes",
        )
    return messages


def unbatch(msg_frames: Sequence[Any]) -> list[list[Any]]:
    """One frame list per message, each from its delimiter on (what Session.unpack takes),
    of a multipart given from its delimiter on: a lone message as it is, a batch split by
    its index (or unpacked from its one frame). RemoteProtocolError (nothing returned) when
    a batch's index does not match its frames: a batch is split only whole."""
    if not is_batch(msg_frames):
        return [list(msg_frames)]
    first = frame_view(msg_frames[0])
    if len(first) > MARKER_SIZE:  # a packed batch in one frame: marker + packed messages
        if len(msg_frames) != 1:
            raise RemoteProtocolError(
                "batch-frames", f"a packed batch is 1 frame, this one has {len(msg_frames)}"
            )
        packed = _decode_index(memoryview(first)[MARKER_SIZE:])
        if type(packed) is not list or (packed and type(packed[0]) is not list):
            raise RemoteProtocolError("batch-index", "a packed batch's frame holds no messages")
        return _packed(packed)
    if len(msg_frames) < 2:
        raise RemoteProtocolError("batch-index", "batch without an index")
    index = _decode_index(frame_view(msg_frames[1]))
    if type(index) is list and index and type(index[0]) is list:  # packed
        if len(msg_frames) != 2:
            raise RemoteProtocolError(
                "batch-frames", f"a packed batch is 2 frames, this one has {len(msg_frames)}"
            )
        return _packed(index)
    counts = _counts(index)
    expected = 2 * len(counts) + sum(counts)
    got = len(msg_frames) - 2
    if got != expected:
        raise RemoteProtocolError(
            "batch-frames",
            f"batch index lists {len(counts)} message(s) in {expected} frames, the batch has {got}",
        )
    messages: list[list[Any]] = []
    i = 2
    for n in counts:
        j = i + 2 + n
        messages.append([DELIM, *msg_frames[i:j]])
        i = j
    return messages


def split_messages(frames: Sequence[Any]) -> tuple[list[bytes], list[list[Any]]]:
    """The identities of a received multipart and one frame list per message it carries
    (one, or a batch's): the receive side of batching. RemoteProtocolError for a multipart
    without a delimiter or a batch whose index lies."""
    idents, msg = split_idents(frames)
    return idents, unbatch(msg)


def batch(messages: Sequence[Sequence[Any]]) -> list[Any]:
    """One multipart (identities not included) carrying ``messages``, each given from its
    delimiter on as Session.serialize returns it: ``[BATCH_DELIM, packed]`` when every
    frame is under PACK_MAX_BUFFER, a lone message too (two frames instead of its 3+:
    sending and receiving a no-op task's message so costs ~7-10 us less, I/O threads
    included, bench.wiremicro), else ``[BATCH_DELIM, index, signature, envelope,
    buffers…, …]`` (large buffers stay frames of their own, never copied), or a lone
    message unchanged. At most MAX_BATCH messages (see batches). Only for receivers that
    take batches (Session.feed_all, or feed, which takes a batch of one)."""
    if len(messages) == 1:
        return _lone(messages[0])
    if not messages or len(messages) > MAX_BATCH:
        raise LocalProtocolError(f"a batch carries 1 to {MAX_BATCH} messages, not {len(messages)}")
    counts = []
    frames: list[Any] = [BATCH_DELIM, b""]
    small = True
    for m in messages:
        if len(m) < HEAD_FRAMES or m[0] != DELIM:
            raise LocalProtocolError("batch() takes messages from their delimiter on")
        counts.append(len(m) - HEAD_FRAMES)
        frames.extend(m[1:])
        if small:
            small = all(
                (len(f) if type(f) is bytes else nbytes(f)) < PACK_MAX_BUFFER for f in m[1:]
            )
    if small:
        return [_one_frame([[_octets_of(f) for f in m[1:]] for m in messages])]
    frames[1] = encode(counts)
    return frames


def _one_frame(packed: list[list[Any]]) -> bytes:
    """A packed batch's one frame: the marker, then the msgpack array of its messages."""
    return BATCH_DELIM + encode(packed)


def _lone(m: Sequence[Any]) -> list[Any]:
    """One message as a packed batch of one when its frames are small, else as itself."""
    if len(m) < HEAD_FRAMES or m[0] != DELIM:
        raise LocalProtocolError("batch() takes messages from their delimiter on")
    for f in m[1:]:
        if (len(f) if type(f) is bytes else nbytes(f)) >= PACK_MAX_BUFFER:
            return list(m)
    return [_one_frame([[_octets_of(f) for f in m[1:]]])]


def _octets_of(f: Any) -> Any:
    """A frame msgpack packs as its bytes (bin): bytes as they are, a view or zmq.Frame
    through its buffer."""
    return f if type(f) is bytes else frame_view(f)


def batches(messages: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """``messages`` as few multiparts as MAX_BATCH allows (see batch)."""
    return [batch(messages[i : i + MAX_BATCH]) for i in range(0, len(messages), MAX_BATCH)]


def routing(frames: Sequence[Any]) -> tuple[list[bytes], list[Any]] | None:
    """(identities, message or batch from its delimiter on) of a well-framed multipart,
    else None: what a relay checks before it forwards anything (see hub.relays)."""
    try:
        idents, msg = split_idents(frames)
        if is_batch(msg):
            unbatch(msg)  # its index must match its frames
            return idents, msg
    except RemoteProtocolError:
        return None
    if len(msg) < HEAD_FRAMES:
        return None
    return idents, msg
