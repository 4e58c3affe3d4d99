"""The envelope codec's checks: every field of a decoded envelope before a handler sees it,
the protocol version, and which parts the signature covers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from zpar.wire.messages import MsgType
from zpar.wire.msgtypes import extension_type

from ..constants import BUFFER_TAG_SIZE, INLINE_SIGNED_MAX, MAX_MSG_ID, PROTOCOL_VERSION
from ..errors import RemoteProtocolError
from .bounds import (
    MAX_NESTING,
    MAX_SESSION,
    MAX_USERNAME,
    check_header_strings,
    check_nesting,
    flat,
    nesting_within,
)
from .frames import decode, frame_view, signed_inline
from .segref import is_descriptor

#: msg_type names a receiver accepts: every MsgType (new ones join by being added there),
#: and the capabilities' (msgtypes.extension_type), checked only when not one of these.
KNOWN_TYPES = frozenset(m.value for m in MsgType)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _sound(h: dict, version: bool) -> bool:
    """Whether a header (a dict) is the common, sound one, in one expression; check_header
    says what is wrong with any other."""
    msg_id, msg_type, date = h.get("msg_id"), h.get("msg_type"), h.get("date", 0.0)
    dest, session, username = h.get("dest"), h.get("session", ""), h.get("username", "")
    return (
        type(msg_id) is str
        and 0 < len(msg_id) <= MAX_MSG_ID
        and type(msg_type) is str
        and msg_type in KNOWN_TYPES
        and type(session) is str
        and len(session) <= MAX_SESSION
        and type(username) is str
        and len(username) <= MAX_USERNAME
        and (type(date) is float or type(date) is int)
        and (dest is None or type(dest) is str)
        and (not version or h.get("version") == PROTOCOL_VERSION)
    )


def check_header(h: Any, what: str, *, version: bool = True) -> None:
    """Refuse a header whose fields are missing or of the wrong type."""
    if type(h) is dict and _sound(h, version):
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
    check_header_strings(h)


def version_error(theirs: Any) -> RemoteProtocolError:
    return RemoteProtocolError(
        "version",
        f"the peer speaks zpar protocol {str(theirs)[:16]!r}, this process speaks "
        f"{PROTOCOL_VERSION!r}: run the same zpar version on every host",
    )


def sniff_version(msg_frames: Sequence[Any]) -> Any:
    """The version a peer of another protocol (1.x: four map frames) claims, or None."""
    if len(msg_frames) < 6:
        return None
    try:
        header = decode(frame_view(msg_frames[2]))
    except Exception:
        return None
    if isinstance(header, dict) and "version" in header:
        return header["version"]
    return None


def signed_parts(envelope: Any, buffers: Sequence[Any]) -> list[Any]:
    parts = [envelope]
    for b in buffers:
        if type(b) is bytes:
            if len(b) < INLINE_SIGNED_MAX:
                parts.append(b)
        elif signed_inline(b):
            parts.append(frame_view(b))
    return parts


def check_envelope(env: Any, n_buffers: int | None) -> tuple[dict, dict, dict, dict, list]:
    """The envelope's parts, each checked; n_buffers None: the buffers are not here (a
    copy without them, or a relay that leaves them to the receiver)."""
    if type(env) is list and len(env) == 5:  # the common, sound envelope in one expression
        header, parent, metadata, content, tags = env
        if (
            type(header) is dict
            and type(parent) is dict
            and type(metadata) is dict
            and type(content) is dict
            and type(tags) is list
            and (n_buffers is None or len(tags) == n_buffers)
            and tags.count(b"") == len(tags)  # every buffer signed inline (small)
            and _sound(header, True)
            and (not parent or _sound(parent, False))
            and (flat(map(type, header.values())) or nesting_within(header))
            and (flat(map(type, parent.values())) or nesting_within(parent))
            and (flat(map(type, metadata.values())) or nesting_within(metadata))
            and (flat(map(type, content.values())) or nesting_within(content))
        ):
            return header, parent, metadata, content, tags
    if not isinstance(env, list) or len(env) != 5:
        raise RemoteProtocolError("malformed", "envelope must be a list of 5 parts")
    header, parent, metadata, content, tags = env
    check_header(header, "header")
    if not isinstance(parent, dict):
        raise RemoteProtocolError("malformed", "parent_header must be a map")
    if parent:
        check_header(parent, "parent_header", version=False)
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
        if type(t) is list:
            if not is_descriptor(t):
                raise RemoteProtocolError("malformed", "a shared-memory descriptor is malformed")
        elif t is not None and not (isinstance(t, bytes) and len(t) in (0, BUFFER_TAG_SIZE)):
            raise RemoteProtocolError(
                "malformed", "buffer tags must be b'', 16 bytes or a segment descriptor"
            )
    check_nesting(header, "header", MAX_NESTING)
    for part, name in ((parent, "parent_header"), (metadata, "metadata"), (content, "content")):
        try:
            check_nesting(part, name, MAX_NESTING)
        except RemoteProtocolError as e:
            e.header = header  # sound: the hub answers a query refused so (hub.hub)
            raise
    return header, parent, metadata, content, tags
