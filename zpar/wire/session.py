"""Session: signs and checks messages for one process, and refuses replays."""

from __future__ import annotations

import copy
import hmac
import itertools
import logging
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import zmq

from ..constants import (
    DELIM,
    INLINE_SIGNED_MAX,
    PROTOCOL_VERSION,
    REPLAY_HISTORY,
    STORE_RESULT_LIMIT,
)
from ..errors import LocalProtocolError, RemoteProtocolError
from .batching import is_batch, split_messages, unbatch
from .bounds import (
    MAX_ENVELOPE,
    MAX_NESTING,
    check_envelope_size,
    flat,
    nesting_within,
)
from .envelope import check_envelope, sniff_version, version_error
from .frames import (
    HEAD_FRAMES,
    SIGNATURE_SIZE,
    decode,
    encode,
    frame_view,
    nbytes,
    signed_inline,
    split_idents,
)
from .multipart import send_frames
from .received import LazyMessage, Message
from .replay import ReplayGuard
from .segref import SegmentRef
from .signing import Signer

log = logging.getLogger(__name__)

#: This process's pid, refreshed in forked children: msg_ids embed it on every message, and
#: os.getpid() is a system call on current glibc.
_PID = os.getpid()


def _refresh_pid() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_refresh_pid)


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
        #: signs and tags under the key; None: no key (an insecure cluster, asked for)
        self._signer: Signer | None = Signer(self.key) if self.key else None
        self.session = session_id or uuid.uuid4().hex
        self.username = username or os.environ.get("USER", "zpar")
        self._counter = itertools.count()
        # 64 bits of each accepted signature, in fixed memory (2 MB for 65,536); a false
        # "replayed" needs a 2**-64 collision among them
        self._seen = ReplayGuard(replay_history)
        #: refused messages by reason, e.g. {'bad-signature': 3}
        self.refused: Counter[str] = Counter()
        #: the last refusal, for a caller that answers it (a version mismatch at the hub)
        self.last_refusal: RemoteProtocolError | None = None

    def for_thread(self, replay_history: int = REPLAY_HISTORY) -> Session:
        """This Session's key, id and msg_id counter, with a replay guard and refusal counts
        of its own: for a second thread that checks messages (the guard is not locked)."""
        other = copy.copy(self)
        other._seen = ReplayGuard(replay_history)
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
        return b"" if self._signer is None else self._signer.sign(parts)

    def tag(self, buffer: Any) -> bytes | None:
        """The keyed BLAKE3 tag of one buffer; None without a key."""
        return None if self._signer is None else self._signer.tag(buffer)

    def _tags(self, buffers: Sequence[Any], private: bool) -> list[Any]:
        tags: list[Any] = []
        for b in buffers:
            if type(b) is SegmentRef:
                tags.append(b.desc)  # its descriptor, signed in the envelope (wire.segref)
                continue
            n = len(b) if type(b) is bytes else nbytes(b)
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
        p = packb or encode
        if (metadata and not (flat(map(type, metadata.values())) or nesting_within(metadata))) or (
            content and not (flat(map(type, content.values())) or nesting_within(content))
        ):
            name = "content" if nesting_within(metadata or {}) else "metadata"
            raise LocalProtocolError(
                f"the {msg_type} message's {name} nests maps or lists deeper than "
                f"{MAX_NESTING} levels: receivers refuse it (send such data as an "
                "argument or a result, which are pickled)"
            )
        tags = self._tags(buffers, private)
        try:
            envelope = p([header, parent or {}, metadata or {}, content or {}, tags])
        except (TypeError, ValueError, OverflowError) as e:
            raise LocalProtocolError(f"cannot encode {msg_type} message with msgpack: {e}") from e
        if len(tags) != tags.count(b"") and any(type(t) is list for t in tags):
            buffers = [b"" if type(b) is SegmentRef else b for b in buffers]
        if len(envelope) > MAX_ENVELOPE:
            raise LocalProtocolError(
                f"the {msg_type} message's envelope is {len(envelope)} bytes, at most "
                f"{MAX_ENVELOPE}: send large data as buffers (arrays, bytes), not in its "
                "metadata or content"
            )
        signature = b"" if self._signer is None else self._signer.signature(envelope, buffers)
        return header, [DELIM, signature, envelope, *buffers]

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
        envelope = encode(
            [
                msg.header if header is None else header,
                msg.parent_header,
                msg.metadata if metadata is None else metadata,
                msg.content,
                msg.tags,
            ]
        )
        buffers = msg.buffers
        signature = b"" if self._signer is None else self._signer.signature(envelope, buffers)
        return [DELIM, signature, envelope, *buffers]

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
        return self._verify(msg_frames, replay)[1]

    def _verify(self, msg_frames: Sequence[Any], replay: bool) -> tuple[bytes, bytes]:
        """verify's work: (signature, envelope), both bytes. Keep in step with unpack's
        inlined copy of it (the hot path)."""
        if len(msg_frames) < HEAD_FRAMES:
            raise RemoteProtocolError(
                "truncated",
                f"{len(msg_frames)} frames, need at least {HEAD_FRAMES} after identities",
            )
        delim, signature, envelope = msg_frames[0], msg_frames[1], msg_frames[2]
        # recv_message gives the head as bytes; a view or a zmq.Frame is copied (small)
        if type(delim) is not bytes:
            delim = bytes(frame_view(delim))
        if delim != DELIM:
            raise RemoteProtocolError("no-delimiter", "first frame is not the delimiter")
        if type(signature) is not bytes:
            signature = bytes(frame_view(signature))
        if type(envelope) is not bytes:
            envelope = bytes(frame_view(envelope))
        if self._signer is not None:
            if not signature:
                raise RemoteProtocolError("unsigned", "message has no signature")
            if len(signature) != SIGNATURE_SIZE or not hmac.compare_digest(
                signature, self._signer.signature(envelope, msg_frames[HEAD_FRAMES:])
            ):
                theirs = sniff_version(msg_frames)
                if theirs is not None and theirs != PROTOCOL_VERSION:
                    raise version_error(theirs)
                raise RemoteProtocolError("bad-signature", "signature does not match the key")
            if replay and int.from_bytes(signature[:8], "little") in self._seen:
                raise RemoteProtocolError("replayed", "signature already seen")
        return signature, envelope

    @staticmethod
    def _replay_key(signature: bytes) -> int:
        return int.from_bytes(signature[:8], "little")

    def accept(self, signature: bytes) -> None:
        """Remember an accepted message's signature (the replay guard)."""
        if self._signer is not None:
            self._seen.add(int.from_bytes(signature[:8], "little"))

    def check_buffers(
        self, tags: list[bytes | None], buffers: Sequence[Any], private: bool
    ) -> None:
        """Refuse buffers that do not match their signed tags (the small ones, signed inline,
        were checked with the signature)."""
        if self._signer is None:
            return
        for i, (t, b) in enumerate(zip(tags, buffers, strict=True)):
            if type(t) is list:  # a segment's descriptor (signed): its frame is empty
                if nbytes(b):
                    raise RemoteProtocolError("bad-buffer", f"buffer {i} is not the one signed")
                continue
            if type(b) is bytes and len(b) < INLINE_SIGNED_MAX or signed_inline(b):
                if t != b"":  # the signer tagged a large buffer here
                    raise RemoteProtocolError("bad-buffer", f"buffer {i} is not the one signed")
                continue
            if t == b"":  # the signer signed a small buffer inline here
                raise RemoteProtocolError("bad-buffer", f"buffer {i} is not the one signed")
            if t is None:
                if private and nbytes(b) > STORE_RESULT_LIMIT:
                    continue
                raise RemoteProtocolError("untagged-buffer", f"buffer {i} has no signed tag")
            if not hmac.compare_digest(t, self._signer.tag(b)):
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
        frames = list(msg_frames)
        if (
            len(frames) >= HEAD_FRAMES
            and type(frames[1]) is bytes
            and type(frames[2]) is bytes
            and frames[0] == DELIM
        ):  # as recv_message and unbatch give it: _verify inlined, the replay key read once
            signature, envelope = frames[1], frames[2]
            seen = None
            if self._signer is not None:
                if not signature:
                    raise RemoteProtocolError("unsigned", "message has no signature")
                if len(signature) != SIGNATURE_SIZE or not hmac.compare_digest(
                    signature, self._signer.signature(envelope, frames[HEAD_FRAMES:])
                ):
                    self._verify(frames, replay)  # raises the refusal, the version named
                    raise RemoteProtocolError("bad-signature", "signature does not match")
                if replay:
                    seen = int.from_bytes(signature[:8], "little")
                    if seen in self._seen:
                        raise RemoteProtocolError("replayed", "signature already seen")
        else:
            signature, envelope = self._verify(frames, replay)
            seen = int.from_bytes(signature[:8], "little") if replay and self._signer else None
        if len(envelope) > MAX_ENVELOPE:
            check_envelope_size(envelope)
        try:
            env = decode(envelope)
        except Exception as e:  # msgpack raises several unrelated types
            raise RemoteProtocolError("undecodable", f"msgpack: {e}") from e
        bufs = frames[HEAD_FRAMES:]
        header, parent, metadata, content, tags = check_envelope(
            env, len(bufs) if buffers else None
        )
        if buffers and bufs:
            for t, b in zip(tags, bufs, strict=True):  # the common case: small, signed inline
                if t != b"" or type(b) is not bytes or len(b) >= INLINE_SIGNED_MAX:
                    self.check_buffers(tags, bufs, private)
                    break
        if seen is not None:
            self._seen.add(seen)
        return Message(idents or [], header, parent, metadata, content, bufs, frames, tags)

    def feed(
        self,
        frames: Sequence[Any],
        where: str = "",
        *,
        private: bool = False,
        buffers: bool = True,
        replay: bool = True,
    ) -> Message | None:
        """Split, check and decode a received multipart (one message, alone or as a batch
        of one: see batch); refuse (log + count) bad ones, and a batch of several."""
        try:
            idents, msg_frames = split_idents(frames)
            if is_batch(msg_frames):
                messages = unbatch(msg_frames)
                if len(messages) != 1:
                    raise RemoteProtocolError(
                        "no-delimiter", f"a batch of {len(messages)} where one message is expected"
                    )
                msg_frames = messages[0]
            return self.unpack(msg_frames, idents, private=private, buffers=buffers, replay=replay)
        except RemoteProtocolError as e:
            self.refuse(e, where)
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
            self.refuse(e, where)
            return []
        accepted = []
        for m in messages:
            try:
                accepted.append(
                    self.unpack(m, list(idents), private=private, buffers=buffers, replay=replay)
                )
            except RemoteProtocolError as e:
                self.refuse(e, where)
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

    def refuse(self, e: RemoteProtocolError, where: str) -> None:
        """Count and log a message refused for ``e``'s reason (its receiver's checks beyond
        the wire's: a misrouted request, segments that cannot be read, a client over its
        quota); ``where`` names the socket or peer in the log line."""
        self.refused[e.reason] += 1
        self.last_refusal = e
        log.warning(
            "refused message%s: %s (%d refused so far)",
            f" on {where}" if where else "",
            e,
            sum(self.refused.values()),
        )
