"""The signed multipart wire format: building, signing, checking and splitting messages.

Frame layout (protocol version 1.0)::

    [ident, ..., b"<ZPAR|MSG>", signature, header, parent_header, metadata, content, buffer, ...]

header, parent_header, metadata and content are msgpack maps; signature is the hex
HMAC-SHA256 of those four frames, keyed by the cluster key. Buffers are not signed: they
are opaque payload whose meaning is fixed by the signed content (the same choice as
jupyter_client), and signing gigabytes would cost more than the transfer.
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

import msgpack
import zmq

from .constants import COPY_THRESHOLD, DELIM, PROTOCOL_VERSION, REPLAY_HISTORY
from .errors import LocalProtocolError, RemoteProtocolError
from .recent import RecentKeys

log = logging.getLogger(__name__)

_packb = msgpack.Packer(use_bin_type=True).pack


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


_raw = frame_view


@dataclass(slots=True)
class Message:
    """A received message. ``frames`` are the signed frames, for forwarding unchanged."""

    idents: list[bytes]
    header: dict[str, Any]
    parent_header: dict[str, Any]
    metadata: dict[str, Any]
    content: dict[str, Any]
    buffers: list[Any] = field(default_factory=list)
    frames: list[Any] = field(default_factory=list)

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]


def split_idents(frames: Sequence[Any]) -> tuple[list[bytes], list[Any]]:
    """Split routing identities from the message proper, at the delimiter frame."""
    for i, f in enumerate(frames):
        raw = _raw(f)
        if len(raw) == len(DELIM) and bytes(raw) == DELIM:
            return [bytes(_raw(x)) for x in frames[:i]], list(frames[i:])
    raise RemoteProtocolError("no-delimiter", f"no {DELIM!r} frame among {len(frames)} frames")


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
        self.session = session_id or uuid.uuid4().hex
        self.username = username or os.environ.get("USER", "zpar")
        self._counter = itertools.count()
        # 64 bits of each accepted signature, in fixed memory (2 MB for 65,536); a false
        # "replayed" needs a 2**-64 collision among them
        self._seen = RecentKeys(replay_history)
        #: refused messages by reason, e.g. {'bad-signature': 3}
        self.refused: Counter[str] = Counter()

    def for_thread(self, replay_history: int = REPLAY_HISTORY) -> Session:
        """This Session's key, id and msg_id counter, with a replay guard and refusal counts
        of its own: for a second thread that checks messages (the guard is not locked)."""
        other = copy.copy(self)
        other._seen = RecentKeys(replay_history)
        other.refused = Counter()
        return other

    # -- building -------------------------------------------------------------------------

    def new_msg_id(self) -> str:
        return f"{self.session[:12]}_{_PID}_{next(self._counter)}"

    def make_header(self, msg_type: str, msg_id: str | None = None) -> dict[str, Any]:
        return {
            "msg_id": msg_id or self.new_msg_id(),
            "msg_type": str(msg_type),
            "session": self.session,
            "username": self.username,
            "date": time.time(),
            "version": PROTOCOL_VERSION,
        }

    def sign(self, parts: Iterable[Any]) -> bytes:
        if self._hmac is None:
            return b""
        h = self._hmac.copy()
        for p in parts:
            h.update(p)
        return h.hexdigest().encode("ascii")

    def serialize(
        self,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        parent: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
        header: dict[str, Any] | None = None,
        packb: Callable[[Any], bytes] | None = None,
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Return (header, [DELIM, signature, header, parent_header, metadata, content]).

        packb: a packer of the calling thread's own, for a second thread sharing this
        Session (the module's packer is reused for speed and is not thread-safe)."""
        if header is None:
            header = self.make_header(msg_type)
        p = packb or _packb
        try:
            parts = [p(header), p(parent or {}), p(metadata or {}), p(content or {})]
        except (TypeError, ValueError, OverflowError) as e:
            raise LocalProtocolError(f"cannot encode {msg_type} message with msgpack: {e}") from e
        return header, [DELIM, self.sign(parts), *parts]

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
    ) -> dict[str, Any]:
        """Sign and send one message; returns its header."""
        header, frames = self.serialize(
            msg_type, content, parent=parent, metadata=metadata, header=header
        )
        send_frames(socket, [*idents, *frames, *buffers])
        return header

    # -- checking -------------------------------------------------------------------------

    def verify(self, msg_frames: Sequence[Any]) -> list[Any]:
        """Check [DELIM, sig, header, parent, metadata, content, ...]: framing, signature and
        replay; return the four signed parts, undecoded.

        Raises RemoteProtocolError (with a reason token) for anything refused.
        """
        if len(msg_frames) < 6:
            raise RemoteProtocolError(
                "truncated", f"{len(msg_frames)} frames, need at least 6 after identities"
            )
        if bytes(_raw(msg_frames[0])) != DELIM:
            raise RemoteProtocolError("no-delimiter", "first frame is not the delimiter")
        signature = bytes(_raw(msg_frames[1]))
        parts = [_raw(f) for f in msg_frames[2:6]]
        if self._hmac is not None:
            expected = self.sign(parts)
            if not signature:
                raise RemoteProtocolError("unsigned", "message has no signature")
            if not hmac.compare_digest(signature, expected):
                raise RemoteProtocolError("bad-signature", "signature does not match the key")
            key = int(signature[:16], 16)
            if key in self._seen:
                raise RemoteProtocolError("replayed", "signature already seen")
            self._seen.add(key)
        return parts

    def unpack(self, msg_frames: Sequence[Any], idents: list[bytes] | None = None) -> Message:
        """Check and decode a message (see verify). Raises RemoteProtocolError."""
        parts = self.verify(msg_frames)
        try:
            header, parent, metadata, content = (_unpackb(p) for p in parts)
        except Exception as e:  # msgpack raises several unrelated types
            raise RemoteProtocolError("undecodable", f"msgpack: {e}") from e
        if not isinstance(header, dict) or not isinstance(content, dict):
            raise RemoteProtocolError("malformed", "header and content must be maps")
        if "msg_id" not in header or "msg_type" not in header:
            raise RemoteProtocolError("malformed", "header lacks msg_id or msg_type")
        if not isinstance(parent, dict) or not isinstance(metadata, dict):
            raise RemoteProtocolError("malformed", "parent_header and metadata must be maps")
        return Message(
            idents or [], header, parent, metadata, content, list(msg_frames[6:]), list(msg_frames)
        )

    def feed(self, frames: Sequence[Any], where: str = "") -> Message | None:
        """Split, check and decode a received multipart; refuse (log + count) bad ones."""
        try:
            idents, msg_frames = split_idents(frames)
            return self.unpack(msg_frames, idents)
        except RemoteProtocolError as e:
            self._refuse(e, where)
            return None

    def feed_lazy(self, frames: Sequence[Any], where: str = "") -> LazyMessage | None:
        """As feed, but decode only the parent header, for the msg_id a reply is routed by;
        every part is decoded again when first read (see LazyMessage)."""
        try:
            idents, msg_frames = split_idents(frames)
            parts = self.verify(msg_frames)
            try:
                parent = _unpackb(parts[1])
            except Exception as e:
                raise RemoteProtocolError("undecodable", f"msgpack: {e}") from e
            if not isinstance(parent, dict):
                raise RemoteProtocolError("malformed", "parent_header must be a map")
        except RemoteProtocolError as e:
            self._refuse(e, where)
            return None
        return LazyMessage(idents, parent.get("msg_id"), *(bytes(p) for p in parts), msg_frames[6:])

    def _refuse(self, e: RemoteProtocolError, where: str) -> None:
        self.refused[e.reason] += 1
        log.warning(
            "refused message%s: %s (%d refused so far)",
            f" on {where}" if where else "",
            e,
            sum(self.refused.values()),
        )


class _Decoded:
    """A LazyMessage part: msgpack bytes until first read, then the decoded map."""

    def __init__(self, check: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.check = check

    def __set_name__(self, owner: type, name: str) -> None:
        self.name, self.slot = name, f"_{name}"

    def __get__(self, msg: Any, owner: type | None = None) -> Any:
        if msg is None:
            return self
        value = getattr(msg, self.slot)
        if type(value) is bytes:
            try:
                value = _unpackb(value)
            except Exception as e:
                raise RemoteProtocolError("undecodable", f"{self.name}: msgpack: {e}") from e
            if not isinstance(value, dict):
                raise RemoteProtocolError("malformed", f"{self.name} must be a map")
            if self.check is not None:
                self.check(value)
            setattr(msg, self.slot, value)
        return value


def _check_header(header: dict[str, Any]) -> None:
    if "msg_id" not in header or "msg_type" not in header:
        raise RemoteProtocolError("malformed", "header lacks msg_id or msg_type")


class LazyMessage:
    """A checked message whose header, metadata and content stay msgpack bytes until read.

    The client holds every reply until the user reads it: 10,000 decoded replies are
    ~17 MB of small dicts and strings, the raw bytes a third of that, and most readers
    only want the content. A part that turns out not to decode raises
    RemoteProtocolError where it is read (the caller's get()), not silently nowhere.
    """

    __slots__ = (
        "idents",
        "parent_msg_id",
        "buffers",
        "_header",
        "_parent_header",
        "_metadata",
        "_content",
    )

    frames: tuple[Any, ...] = ()

    def __init__(
        self,
        idents: list[bytes],
        parent_msg_id: Any,
        header: bytes,
        parent_header: bytes,
        metadata: bytes,
        content: bytes,
        buffers: Sequence[Any],
    ) -> None:
        self.idents = idents
        self.parent_msg_id = parent_msg_id
        self._parent_header: Any = parent_header
        self._header: Any = header
        self._metadata: Any = metadata
        self._content: Any = content
        self.buffers = list(buffers)

    header = _Decoded(_check_header)
    parent_header = _Decoded()
    metadata = _Decoded()
    content = _Decoded()

    @property
    def msg_type(self) -> str:
        return self.header["msg_type"]

    @property
    def msg_id(self) -> str:
        return self.header["msg_id"]


def recv_message(sock: zmq.Socket, flags: int = 0) -> list[Any]:
    """Receive one multipart: routing identities, the delimiter, the signature and the four
    maps as bytes; buffers as zero-copy Frames, small ones copied out.

    libzmq decodes small messages into one shared, refcounted receive buffer: a kept
    zmq.Frame of 200 bytes pins all of it, so anything held beyond the moment (a reply
    waiting for its reader, a queued task) must be copied out. recv_multipart(copy=False)
    made a Frame per frame (~2 us each) only to copy it out again; the head of a message
    is always small and always wanted as bytes (the scheduler, the engines and the client
    each read 8-9 frames a message).
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
                head = 5
            if not getsockopt(rcvmore):
                return parts
        else:
            frame = recv(flags, copy=False)
            parts.append(frame.bytes if len(frame) < COPY_THRESHOLD else frame)
            if not frame.more:
                return parts


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
