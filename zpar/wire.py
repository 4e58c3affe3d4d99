"""The signed multipart wire format: building, signing, checking and splitting messages.

Frame layout (protocol version 2.0)::

    [ident, ..., b"<ZPAR|MSG>", signature, envelope, buffer, ...]

envelope is one msgpack array ``[header, parent_header, metadata, content, buffer_tags]``;
signature is the raw 32-byte HMAC-SHA256, keyed by the cluster key, of the envelope followed
by every buffer under INLINE_SIGNED_MAX (64 KiB). buffer_tags has one entry per buffer: b""
for those small ones, a 16-byte keyed BLAKE3 tag for each larger one. So the signature
covers every buffer: a swapped buffer fails the signature or its tag. This module alone
knows where a part of a message sits; every other module goes through Session, Message and
the helpers below.

Under load a sender puts several messages in one multipart, a batch::

    [ident, ..., b"<ZPAR|BATCH>", index, signature, envelope, buffer, ..., signature, ...]

index is a msgpack array with each message's number of buffers, in order; each message is
its signature, envelope and buffers exactly as it would be sent alone. ``batch`` builds
one, ``split_messages`` turns any received multipart (batch or not) into the identities and
one frame list per message, from its delimiter on, as ``Session.unpack`` takes it; so each
message is checked on its own (``Session.feed_all``): one bad message is refused, the
others go on. A batch whose index does not match its frames is refused whole, never split
or glued to anything.

Every field is checked before a handler sees a message (``_check_envelope``); a message
that fails is refused with a reason token (``Session.refused``), never handed on.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import itertools
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import blake3
import msgpack
import zmq

from .constants import (
    BATCH_DELIM,
    BUFFER_TAG_SIZE,
    COPY_THRESHOLD,
    DELIM,
    INLINE_SIGNED_MAX,
    MAX_BATCH,
    MAX_MSG_ID,
    PARALLEL_TAG_MIN,
    PROTOCOL_VERSION,
    REPLAY_HISTORY,
    STORE_RESULT_LIMIT,
)
from .errors import LocalProtocolError, RemoteProtocolError
from .messages import MsgType
from .msgtypes import extension_type
from .recent import RecentKeys

log = logging.getLogger(__name__)

_packb = msgpack.Packer(use_bin_type=True).pack

#: Frames of a message after its identities: delimiter, signature, envelope (then buffers).
HEAD_FRAMES = 3
#: Bytes of an HMAC-SHA256 signature.
SIGNATURE_SIZE = 32
#: msg_type names a receiver accepts: every MsgType (new ones join by being added there),
#: and the capabilities' (msgtypes.extension_type), checked only when not one of these.
KNOWN_TYPES = frozenset(m.value for m in MsgType)


def _unpackb(data: Any) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


#: This process's pid, refreshed in forked children: msg_ids embed it on every message, and
#: os.getpid() is a system call on current glibc.
_PID = os.getpid()


def _refresh_pid() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


def frame_view(frame: Any) -> Any:
    """Bytes-like view of a frame (zmq.Frame or bytes) without copying it."""
    return frame.buffer if isinstance(frame, zmq.Frame) else frame


def frame_bytes(frame: Any) -> bytes:
    """A frame's content as bytes (a copy for a zmq.Frame or a view)."""
    return frame.bytes if isinstance(frame, zmq.Frame) else bytes(frame)


def _nbytes(b: Any) -> int:
    if type(b) is bytes:
        return len(b)
    if isinstance(b, zmq.Frame):
        return len(b.buffer)
    return memoryview(b).nbytes


def _octets(b: Any) -> Any:
    """A buffer as contiguous unsigned bytes (what BLAKE3 reads), without a copy."""
    if type(b) is bytes:
        return b
    view = memoryview(frame_view(b))
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


_raw = frame_view


@dataclass(slots=True)
class Message:
    """A received (checked) message. ``frames`` are the signed frames from the delimiter
    on, buffers included, for forwarding unchanged."""

    idents: list[bytes]
    header: dict[str, Any]
    parent_header: dict[str, Any]
    metadata: dict[str, Any]
    content: dict[str, Any]
    buffers: list[Any] = field(default_factory=list)
    frames: list[Any] = field(default_factory=list)
    #: one tag per buffer (None: untagged, on a private channel or without a key)
    tags: list[bytes | None] = field(default_factory=list)

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]

    @property
    def signature(self) -> bytes:
        return bytes(_raw(self.frames[1])) if len(self.frames) > 1 else b""

    @property
    def envelope(self) -> bytes:
        return bytes(_raw(self.frames[2])) if len(self.frames) > 2 else b""

    @property
    def dest(self) -> str | None:
        """Where the sender bound this request to run (an engine uuid, or ``task``)."""
        return self.header.get("dest")


def _is_marker(f: Any) -> bool:
    """Whether a frame is the delimiter of a message or of a batch."""
    raw = _raw(f)
    n = len(raw)
    return (n == len(DELIM) or n == len(BATCH_DELIM)) and bytes(raw) in (DELIM, BATCH_DELIM)


def split_idents(frames: Sequence[Any]) -> tuple[list[bytes], list[Any]]:
    """Split routing identities from the message (or batch) proper, at its delimiter."""
    for i, f in enumerate(frames):
        if type(f) is bytes:  # the head as recv_message returns it: no view needed
            if f == DELIM or f == BATCH_DELIM:
                return list(frames[:i]), list(frames[i:])
            continue
        if _is_marker(f):
            return [bytes(_raw(x)) for x in frames[:i]], list(frames[i:])
    raise RemoteProtocolError("no-delimiter", f"no {DELIM!r} frame among {len(frames)} frames")


def is_batch(msg_frames: Sequence[Any]) -> bool:
    """Whether a multipart given from its delimiter on is a batch."""
    if not msg_frames:
        return False
    f = msg_frames[0]
    return f == BATCH_DELIM if type(f) is bytes else bytes(_raw(f)) == BATCH_DELIM


def _batch_counts(index: Any) -> list[int]:
    """Each message's buffer count from a batch's index frame; RemoteProtocolError if the
    index is not a list of 1..MAX_BATCH counts."""
    raw = _raw(index)
    if len(raw) > 5 + 5 * MAX_BATCH:  # msgpack: array header + one uint32 per count
        raise RemoteProtocolError("batch-index", f"batch index of {len(raw)} bytes")
    try:
        counts = _unpackb(raw)
    except Exception as e:  # msgpack raises several unrelated types
        raise RemoteProtocolError("batch-index", f"batch index is not msgpack: {e}") from e
    if type(counts) is not list or not all(type(n) is int and n >= 0 for n in counts):
        raise RemoteProtocolError(
            "batch-index", "batch index must be a list of buffer counts (ints >= 0)"
        )
    if not counts:
        raise RemoteProtocolError("empty-batch", "batch of no messages")
    if len(counts) > MAX_BATCH:
        raise RemoteProtocolError(
            "batch-size", f"batch of {len(counts)} messages, at most {MAX_BATCH}"
        )
    return counts


def unbatch(msg_frames: Sequence[Any]) -> list[list[Any]]:
    """One frame list per message, each from its delimiter on (what Session.unpack takes),
    of a multipart given from its delimiter on: a lone message as it is, a batch split by
    its index. RemoteProtocolError (nothing returned) when a batch's index does not match
    its frames: a batch is split only whole."""
    if not is_batch(msg_frames):
        return [list(msg_frames)]
    if len(msg_frames) < 2:
        raise RemoteProtocolError("batch-index", "batch without an index")
    counts = _batch_counts(msg_frames[1])
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
    delimiter on as Session.serialize returns it: a lone message unchanged, several as
    ``[BATCH_DELIM, index, signature, envelope, buffers…, …]``. At most MAX_BATCH messages
    (see batches)."""
    if len(messages) == 1:
        return list(messages[0])
    if not messages or len(messages) > MAX_BATCH:
        raise LocalProtocolError(f"a batch carries 1 to {MAX_BATCH} messages, not {len(messages)}")
    counts = []
    frames: list[Any] = [BATCH_DELIM, b""]
    for m in messages:
        if len(m) < HEAD_FRAMES or m[0] != DELIM:
            raise LocalProtocolError("batch() takes messages from their delimiter on")
        counts.append(len(m) - HEAD_FRAMES)
        frames.extend(m[1:])
    frames[1] = _packb(counts)
    return frames


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


def message_buffers(msg_frames: Sequence[Any]) -> list[Any]:
    """The buffers of a message given from its delimiter on."""
    return list(msg_frames[HEAD_FRAMES:])


def buffers_size(msg_frames: Sequence[Any]) -> int:
    """Total bytes of a message's buffers (message given from its delimiter on)."""
    return sum(_nbytes(b) for b in msg_frames[HEAD_FRAMES:])


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
    keep_large = large and sum(_nbytes(b) for b in bufs) <= STORE_RESULT_LIMIT
    kept = [b for b in bufs if keep_large or _small(b)]
    if detach:
        kept = [b if type(b) is bytes else bytes(frame_view(b)) for b in kept]
    return [*msg_frames[:HEAD_FRAMES], *kept]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_header(h: Any, what: str, *, version: bool = True) -> None:
    """Refuse a header whose fields are missing or of the wrong type."""
    if type(h) is dict:  # the common, sound header in one expression; else say what is wrong
        msg_id, msg_type, date = h.get("msg_id"), h.get("msg_type"), h.get("date", 0.0)
        dest = h.get("dest")
        if (
            type(msg_id) is str
            and 0 < len(msg_id) <= MAX_MSG_ID
            and type(msg_type) is str
            and msg_type in KNOWN_TYPES
            and type(h.get("session", "")) is str
            and (type(date) is float or type(date) is int)
            and (dest is None or type(dest) is str)
            and (not version or h.get("version") == PROTOCOL_VERSION)
        ):
            return
    if not isinstance(h, dict):
        raise RemoteProtocolError("malformed", f"{what} must be a map, got {type(h).__name__}")
    msg_id = h.get("msg_id")
    if not isinstance(msg_id, str) or not msg_id or len(msg_id) > MAX_MSG_ID:
        raise RemoteProtocolError(
            "malformed", f"{what} msg_id must be a non-empty str (<= {MAX_MSG_ID}), got {msg_id!r}"
        )
    msg_type = h.get("msg_type")
    if not isinstance(msg_type, str):
        raise RemoteProtocolError(
            "malformed", f"{what} msg_type must be a str, got {type(msg_type).__name__}"
        )
    if msg_type not in KNOWN_TYPES and not extension_type(msg_type):
        raise RemoteProtocolError("unknown-type", f"{what} msg_type {msg_type[:64]!r} is unknown")
    if not isinstance(h.get("session", ""), str):
        raise RemoteProtocolError("malformed", f"{what} session must be a str")
    date = h.get("date", 0.0)
    if not (isinstance(date, float) or _is_int(date)):
        raise RemoteProtocolError("malformed", f"{what} date must be a number")
    dest = h.get("dest")
    if dest is not None and not isinstance(dest, str):
        raise RemoteProtocolError("malformed", f"{what} dest must be a str")
    if version and h.get("version") != PROTOCOL_VERSION:
        raise version_error(h.get("version"))


def version_error(theirs: Any) -> RemoteProtocolError:
    return RemoteProtocolError(
        "version",
        f"the peer speaks zpar protocol {str(theirs)[:16]!r}, this process speaks "
        f"{PROTOCOL_VERSION!r}: run the same zpar version on every host",
    )


def _sniff_version(msg_frames: Sequence[Any]) -> Any:
    """The version a peer of another protocol (1.x: four map frames) claims, or None."""
    if len(msg_frames) < 6:
        return None
    try:
        header = _unpackb(_raw(msg_frames[2]))
    except Exception:
        return None
    if isinstance(header, dict) and "version" in header:
        return header["version"]
    return None


def _small(b: Any) -> bool:
    """Whether a buffer is signed inline (by the HMAC) rather than by a tag of its own."""
    return _nbytes(b) < INLINE_SIGNED_MAX


def _signed_parts(envelope: Any, buffers: Sequence[Any]) -> list[Any]:
    parts = [envelope]
    for b in buffers:
        if type(b) is bytes:
            if len(b) < INLINE_SIGNED_MAX:
                parts.append(b)
        elif _small(b):
            parts.append(_raw(b))
    return parts


def _check_envelope(env: Any, n_buffers: int | None) -> tuple[dict, dict, dict, dict, list]:
    """The envelope's parts, each checked; n_buffers None: the buffers are not here (a
    copy without them, or a relay that leaves them to the receiver)."""
    if not isinstance(env, list) or len(env) != 5:
        raise RemoteProtocolError("malformed", "envelope must be a list of 5 parts")
    header, parent, metadata, content, tags = env
    _check_header(header, "header")
    if not isinstance(parent, dict):
        raise RemoteProtocolError("malformed", "parent_header must be a map")
    if parent:
        _check_header(parent, "parent_header", version=False)
    if not isinstance(metadata, dict):
        raise RemoteProtocolError("malformed", "metadata must be a map")
    if not isinstance(content, dict):
        raise RemoteProtocolError("malformed", "content must be a map")
    if not isinstance(tags, list) or (n_buffers is not None and len(tags) != n_buffers):
        raise RemoteProtocolError(
            "buffer-count",
            f"the signed envelope lists {len(tags) if isinstance(tags, list) else 'no'} "
            f"buffer(s), the message has {n_buffers}",
        )
    for t in tags:
        if t is not None and not (isinstance(t, bytes) and len(t) in (0, BUFFER_TAG_SIZE)):
            raise RemoteProtocolError("malformed", "buffer tags must be b'' or 16 bytes")
    return header, parent, metadata, content, tags


class Session:
    """Signs and checks messages for one process, and remembers signatures against replay.

    One Session per process (or per I/O thread): its replay history and msg_id counter are
    not locked.
    """

    def __init__(
        self,
        key: bytes | str | None,
        *,
        session_id: str | None = None,
        username: str = "",
        allow_insecure: bool = False,
        replay_history: int = REPLAY_HISTORY,
    ) -> None:
        if isinstance(key, str):
            key = key.encode("ascii")
        if not key:
            if not allow_insecure:
                raise LocalProtocolError(
                    "no cluster key: refusing to send unsigned messages. Pass the key from the "
                    "connection file, or allow_insecure=True to run without signatures."
                )
            log.warning(
                "SECURITY: running WITHOUT message signatures (no key). Anyone who can reach "
                "these ports can run code on the engines."
            )
        self.key: bytes = key or b""
        self._hmac = hmac.new(self.key, digestmod=hashlib.sha256) if self.key else None
        # buffers are tagged with a key of their own, derived from the cluster key
        self._tag_key = hmac.digest(self.key, b"zpar buffer tags", "sha256") if key else b""
        self.session = session_id or uuid.uuid4().hex
        self.username = username or os.environ.get("USER", "zpar")
        self._counter = itertools.count()
        # 64 bits of each accepted signature, in fixed memory (2 MB for 65,536); a false
        # "replayed" needs a 2**-64 collision among them
        self._seen = RecentKeys(replay_history)
        #: refused messages by reason, e.g. {'bad-signature': 3}
        self.refused: Counter[str] = Counter()
        #: the last refusal, for a caller that answers it (a version mismatch at the hub)
        self.last_refusal: RemoteProtocolError | None = None

    def for_thread(self, replay_history: int = REPLAY_HISTORY) -> Session:
        """This Session's key, id and msg_id counter, with a replay guard and refusal counts
        of its own: for a second thread that checks messages (the guard is not locked)."""
        other = copy.copy(self)
        other._seen = RecentKeys(replay_history)
        other.refused = Counter()
        other.last_refusal = None
        return other

    # -- building -------------------------------------------------------------------------

    def new_msg_id(self) -> str:
        return f"{self.session[:12]}_{_PID}_{next(self._counter)}"

    def make_header(
        self, msg_type: str, msg_id: str | None = None, dest: str | None = None
    ) -> dict[str, Any]:
        header = {
            "msg_id": msg_id or self.new_msg_id(),
            "msg_type": str(msg_type),
            "session": self.session,
            "username": self.username,
            "date": time.time(),
            "version": PROTOCOL_VERSION,
        }
        if dest is not None:
            header["dest"] = dest
        return header

    def sign(self, parts: Iterable[Any]) -> bytes:
        """HMAC-SHA256 of the parts (in practice: the envelope); b"" without a key."""
        if self._hmac is None:
            return b""
        h = self._hmac.copy()
        for p in parts:
            h.update(p)
        return h.digest()

    def tag(self, buffer: Any) -> bytes | None:
        """The keyed BLAKE3 tag of one buffer; None without a key."""
        if not self._tag_key:
            return None
        data = _octets(buffer)
        if len(data) >= PARALLEL_TAG_MIN:
            hasher = blake3.blake3(data, key=self._tag_key, max_threads=blake3.blake3.AUTO)
        else:  # passing max_threads at all costs ~3 us: a small buffer's whole tag
            hasher = blake3.blake3(data, key=self._tag_key)
        return hasher.digest(BUFFER_TAG_SIZE)

    def _tags(self, buffers: Sequence[Any], private: bool) -> list[bytes | None]:
        tags: list[bytes | None] = []
        for b in buffers:
            n = _nbytes(b)
            if n < INLINE_SIGNED_MAX:
                tags.append(b"")  # signed inline
            elif private and n > STORE_RESULT_LIMIT:
                tags.append(None)  # see serialize: untagged on a private channel
            else:
                tags.append(self.tag(b))
        return tags

    def serialize(
        self,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        parent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        header: dict[str, Any] | None = None,
        packb: Callable[[Any], bytes] | None = None,
        buffers: Sequence[Any] = (),
        dest: str | None = None,
        private: bool = False,
    ) -> tuple[dict[str, Any], list[Any]]:
        """Return (header, [DELIM, signature, envelope, *buffers]).

        The buffers must be given here, not appended afterwards: the signed envelope lists
        a tag of each. dest: where the request may run (an engine uuid, or ``task`` for the
        task scheduler); receivers refuse a request bound elsewhere. private: the channel
        is an ipc socket in the controller's 0700 run directory, reachable only by this user,
        who can read the key anyway: buffers over STORE_RESULT_LIMIT go untagged there (a
        100 MB array is not hashed twice per round trip); receivers accept that only on such
        sockets. packb: a packer of the calling thread's own, for a second thread sharing
        this Session (the module's packer is reused for speed and is not thread-safe)."""
        if header is None:
            header = self.make_header(msg_type, dest=dest)
        elif dest is not None:
            header["dest"] = dest
        p = packb or _packb
        tags = self._tags(buffers, private)
        try:
            envelope = p([header, parent or {}, metadata or {}, content or {}, tags])
        except (TypeError, ValueError, OverflowError) as e:
            raise LocalProtocolError(f"cannot encode {msg_type} message with msgpack: {e}") from e
        return header, [DELIM, self.sign(_signed_parts(envelope, buffers)), envelope, *buffers]

    def resign(
        self,
        msg: Message,
        *,
        header: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[Any]:
        """The frames of ``msg`` signed anew with another header or metadata (the task
        scheduler binds a request to the engine it places it on); the buffers and their
        tags are reused, not hashed again."""
        envelope = _packb(
            [
                msg.header if header is None else header,
                msg.parent_header,
                msg.metadata if metadata is None else metadata,
                msg.content,
                msg.tags,
            ]
        )
        return [DELIM, self.sign(_signed_parts(envelope, msg.buffers)), envelope, *msg.buffers]

    def send(
        self,
        socket: zmq.Socket,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        parent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        buffers: Sequence[Any] = (),
        idents: Sequence[bytes] = (),
        header: dict[str, Any] | None = None,
        dest: str | None = None,
        private: bool = False,
    ) -> dict[str, Any]:
        """Sign and send one message; returns its header."""
        header, frames = self.serialize(
            msg_type,
            content,
            parent=parent,
            metadata=metadata,
            header=header,
            buffers=buffers,
            dest=dest,
            private=private,
        )
        send_frames(socket, [*idents, *frames])
        return header

    # -- checking -------------------------------------------------------------------------

    def verify(self, msg_frames: Sequence[Any], *, replay: bool = True) -> bytes:
        """Check framing, signature and (with ``replay``) that the signature is new; return
        the envelope, undecoded. The signature is remembered only once the whole message is
        accepted (see accept): a forged copy of a real message must not shut the real one
        out. Raises RemoteProtocolError (with a reason token) for anything refused."""
        if len(msg_frames) < HEAD_FRAMES:
            raise RemoteProtocolError(
                "truncated",
                f"{len(msg_frames)} frames, need at least {HEAD_FRAMES} after identities",
            )
        if bytes(_raw(msg_frames[0])) != DELIM:
            raise RemoteProtocolError("no-delimiter", "first frame is not the delimiter")
        signature = bytes(_raw(msg_frames[1]))
        envelope = bytes(_raw(msg_frames[2]))
        if self._hmac is not None:
            if not signature:
                raise RemoteProtocolError("unsigned", "message has no signature")
            if len(signature) != SIGNATURE_SIZE or not hmac.compare_digest(
                signature, self.sign(_signed_parts(envelope, msg_frames[HEAD_FRAMES:]))
            ):
                theirs = _sniff_version(msg_frames)
                if theirs is not None and theirs != PROTOCOL_VERSION:
                    raise version_error(theirs)
                raise RemoteProtocolError("bad-signature", "signature does not match the key")
            if replay and self._replay_key(signature) in self._seen:
                raise RemoteProtocolError("replayed", "signature already seen")
        return envelope

    @staticmethod
    def _replay_key(signature: bytes) -> int:
        return int.from_bytes(signature[:8], "little")

    def accept(self, signature: bytes) -> None:
        """Remember an accepted message's signature (the replay guard)."""
        if self._hmac is not None:
            self._seen.add(self._replay_key(signature))

    def check_buffers(
        self, tags: list[bytes | None], buffers: Sequence[Any], private: bool
    ) -> None:
        """Refuse buffers that do not match their signed tags (the small ones, signed inline,
        were checked with the signature)."""
        if self._hmac is None:
            return
        for i, (t, b) in enumerate(zip(tags, buffers, strict=True)):
            if _small(b):
                if t != b"":  # the signer tagged a large buffer here
                    raise RemoteProtocolError("bad-buffer", f"buffer {i} is not the one signed")
                continue
            if t == b"":  # the signer signed a small buffer inline here
                raise RemoteProtocolError("bad-buffer", f"buffer {i} is not the one signed")
            if t is None:
                if private and _nbytes(b) > STORE_RESULT_LIMIT:
                    continue
                raise RemoteProtocolError("untagged-buffer", f"buffer {i} has no signed tag")
            if not hmac.compare_digest(t, self.tag(b) or b""):
                raise RemoteProtocolError("bad-buffer", f"buffer {i} does not match its tag")

    def unpack(
        self,
        msg_frames: Sequence[Any],
        idents: list[bytes] | None = None,
        *,
        private: bool = False,
        buffers: bool = True,
        replay: bool = True,
    ) -> Message:
        """Check and decode a message given from its delimiter on. buffers=False skips the
        tags of large buffers and the buffer count (a relay that hands the buffers on to a
        receiver that checks them, or a copy without its large buffers); small buffers are
        always checked, by the signature. Raises RemoteProtocolError."""
        envelope = self.verify(msg_frames, replay=replay)
        try:
            env = _unpackb(envelope)
        except Exception as e:  # msgpack raises several unrelated types
            raise RemoteProtocolError("undecodable", f"msgpack: {e}") from e
        bufs = list(msg_frames[HEAD_FRAMES:])
        header, parent, metadata, content, tags = _check_envelope(
            env, len(bufs) if buffers else None
        )
        if buffers:
            self.check_buffers(tags, bufs, private)
        if replay:
            self.accept(bytes(_raw(msg_frames[1])))
        return Message(
            idents or [], header, parent, metadata, content, bufs, list(msg_frames), tags
        )

    def feed(
        self,
        frames: Sequence[Any],
        where: str = "",
        *,
        private: bool = False,
        buffers: bool = True,
        replay: bool = True,
    ) -> Message | None:
        """Split, check and decode a received multipart; refuse (log + count) bad ones."""
        try:
            idents, msg_frames = split_idents(frames)
            return self.unpack(msg_frames, idents, private=private, buffers=buffers, replay=replay)
        except RemoteProtocolError as e:
            self._refuse(e, where)
            return None

    def feed_all(
        self,
        frames: Sequence[Any],
        where: str = "",
        *,
        private: bool = False,
        buffers: bool = True,
        replay: bool = True,
    ) -> list[Message]:
        """As feed, for a multipart that may be a batch: every message it carries that
        passes, each checked on its own (a refused one is logged and counted, the others
        go on); a batch whose framing is wrong is refused whole, counted once."""
        try:
            idents, messages = split_messages(frames)
        except RemoteProtocolError as e:
            self._refuse(e, where)
            return []
        accepted = []
        for m in messages:
            try:
                accepted.append(
                    self.unpack(m, list(idents), private=private, buffers=buffers, replay=replay)
                )
            except RemoteProtocolError as e:
                self._refuse(e, where)
        return accepted

    def feed_lazy_all(
        self, frames: Sequence[Any], where: str = "", *, private: bool = False
    ) -> list[LazyMessage]:
        """As feed_lazy, for a multipart that may be a batch (see feed_all)."""
        return [
            LazyMessage(m.idents, m.parent_header.get("msg_id"), m.envelope, m.buffers)
            for m in self.feed_all(frames, where, private=private)
        ]

    def feed_lazy(
        self, frames: Sequence[Any], where: str = "", *, private: bool = False
    ) -> LazyMessage | None:
        """As feed (every field checked), but the message keeps only its envelope's bytes
        and its parent's msg_id (what a reply is routed by); the four maps are decoded
        again when first read (see LazyMessage)."""
        msg = self.feed(frames, where, private=private)
        if msg is None:
            return None
        return LazyMessage(msg.idents, msg.parent_header.get("msg_id"), msg.envelope, msg.buffers)

    def _refuse(self, e: RemoteProtocolError, where: str) -> None:
        self.refused[e.reason] += 1
        self.last_refusal = e
        log.warning(
            "refused message%s: %s (%d refused so far)",
            f" on {where}" if where else "",
            e,
            sum(self.refused.values()),
        )


class LazyMessage:
    """A checked message whose four maps stay msgpack bytes (its envelope) until read.

    The client holds every reply until the user reads it: 10,000 decoded replies are
    ~17 MB of small dicts and strings, the raw bytes a third of that, and most readers
    only want the content. The envelope was fully checked on receipt.
    """

    __slots__ = ("idents", "parent_msg_id", "buffers", "_envelope", "_parts")

    frames: tuple[Any, ...] = ()

    def __init__(
        self, idents: list[bytes], parent_msg_id: Any, envelope: bytes, buffers: Sequence[Any]
    ) -> None:
        self.idents = idents
        self.parent_msg_id = parent_msg_id
        self._envelope = envelope
        self._parts: list[Any] | None = None
        self.buffers = list(buffers)

    def _decoded(self, i: int) -> Any:
        parts = self._parts
        if parts is None:
            parts = self._parts = _unpackb(self._envelope)
            self._envelope = b""
        return parts[i]

    @property
    def header(self) -> dict[str, Any]:
        return self._decoded(0)

    @property
    def parent_header(self) -> dict[str, Any]:
        return self._decoded(1)

    @property
    def metadata(self) -> dict[str, Any]:
        return self._decoded(2)

    @property
    def content(self) -> dict[str, Any]:
        return self._decoded(3)

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]


def recv_message(sock: zmq.Socket, flags: int = 0) -> list[Any]:
    """Receive one multipart: routing identities, the delimiter, the signature and the
    envelope as bytes; buffers as zero-copy Frames, small ones copied out.

    libzmq decodes small messages into one shared, refcounted receive buffer: a kept
    zmq.Frame of 200 bytes pins all of it, so anything held beyond the moment (a reply
    waiting for its reader, a queued task) must be copied out. The head of a message is
    always small and always wanted as bytes.
    """
    recv, rcvmore = sock.recv, zmq.RCVMORE
    getsockopt = sock.getsockopt
    parts: list[Any] = []
    head = -1  # frames left to take as bytes once the delimiter is seen
    while True:
        if head:
            part = recv(flags, copy=True)
            parts.append(part)
            if head > 0:
                head -= 1
            elif part == DELIM:
                head = HEAD_FRAMES - 1
            elif part == BATCH_DELIM:
                if getsockopt(rcvmore):
                    _recv_batch(sock, flags, parts)
                return parts
            if not getsockopt(rcvmore):
                return parts
        else:
            frame = recv(flags, copy=False)
            parts.append(frame.bytes if len(frame) < COPY_THRESHOLD else frame)
            if not frame.more:
                return parts


def _recv_batch(sock: zmq.Socket, flags: int, parts: list[Any]) -> None:
    """The rest of a batch after its delimiter, as recv_message takes a message: each
    signature and envelope as bytes, buffers by size; by size throughout from where an
    index that does not match its frames goes wrong (the receiver refuses the batch)."""
    recv, rcvmore = sock.recv, zmq.RCVMORE
    index = recv(flags, copy=True)
    parts.append(index)
    more = sock.getsockopt(rcvmore)
    try:
        counts = _batch_counts(index)
    except RemoteProtocolError:
        counts = []
    for n in counts:
        for _ in range(2):  # signature, envelope
            if not more:
                return
            parts.append(recv(flags, copy=True))
            more = sock.getsockopt(rcvmore)
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


def send_frames(
    socket: zmq.Socket, frames: Sequence[Any], trackers: list[Any] | None = None
) -> None:
    """Send a multipart, copying small frames and handing large ones to zmq without a copy.

    With ``trackers`` (a list), the MessageTracker of each zero-copy frame is appended: it
    is done when zmq no longer reads that memory.
    """
    last = len(frames) - 1
    for i, f in enumerate(frames):
        flags = zmq.SNDMORE if i < last else 0
        if isinstance(f, zmq.Frame):
            socket.send(f, flags, copy=False)
        else:
            n = f.nbytes if isinstance(f, memoryview) else len(f)
            if n < COPY_THRESHOLD:
                socket.send(f, flags, copy=True)
            elif trackers is None:
                socket.send(f, flags, copy=False)
            else:
                trackers.append(socket.send(f, flags, copy=False, track=True))


def pack(obj: Any) -> bytes:
    return _packb(obj)


def unpack(data: Any) -> Any:
    return _unpackb(_raw(data))
