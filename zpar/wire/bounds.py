"""Bounds on what one decoded message may hold: nesting, lengths and header fields.

Defined once here and checked in one place per surface (wire.envelope for every zmq
socket, the store writer for records, the typed and darray codecs for their headers),
before a handler, the store or an allocation sees the message. A message past a bound is
refused like any other malformed one: counted by reason (``zpar cluster status``) and,
where the sender can be answered, told which field.
"""

from __future__ import annotations

from typing import Any

from ..errors import RemoteProtocolError

#: Deepest nesting of maps and lists inside one of a message's four maps (header,
#: parent_header, metadata, content), the map itself counting as 1. zpar's own messages
#: nest at most 6 deep (a result_reply's stored metadata with its dependencies); json's
#: encoder (the store) raises RecursionError about 1,000 deep and msgpack's packer (the
#: scheduler re-signs requests) refuses past 511, so one signed message nested 1,000 deep
#: once killed the controller's store writer. 64 leaves users' own metadata room and
#: stays an order of magnitude below both.
MAX_NESTING = 64

#: Deepest nesting of a JSON column the store writes (header, metadata, result_content):
#: the hub sends stored maps back inside result_reply and db_reply up to 4 levels down, and
#: those replies must pass MAX_NESTING at the client in turn.
STORE_NESTING = MAX_NESTING - 8

#: Largest envelope frame (the signed msgpack of the four maps) a process decodes. Data
#: travels in buffers, never in the envelope; the largest envelopes zpar makes are
#: execute_request cells and display_data on IOPub (an embedded plotly.js page is ~4 MB).
#: msgpack turns one byte into at most ~64 bytes of Python objects (an empty map), so this
#: bounds what decoding one message allocates to about 4 GB worst case and ~10x the frame
#: for real data; the sender is told before sending (LocalProtocolError).
MAX_ENVELOPE = 64 * 2**20

#: Longest ``session`` and ``username`` of a header: the store's session column is
#: VARCHAR(128) (PostgreSQL refuses longer text, SQLite does not), and zpar's session ids
#: are 32 hex digits.
MAX_SESSION = 128

#: Longest str of a few header fields kept in records and logs (username).
MAX_USERNAME = 256

#: The container types a decoded envelope holds (tuples too, on the sending side).
_CONTAINERS = frozenset({dict, list, tuple})

#: ``flat(map(type, d.values()))``: whether a map holds no container, in one C-level pass
#: (most maps of most envelopes: the hot path's whole check).
flat = _CONTAINERS.isdisjoint


def nesting_within(obj: Any, room: int = MAX_NESTING) -> bool:
    """Whether the maps and lists in ``obj`` (a map or list: 1 level) nest at most ``room``
    deep. Recursion is bounded by ``room`` itself; a map of scalars costs one C-level pass
    over the types of its values (this runs on every message)."""
    if room <= 0:
        return False
    values = obj.values() if type(obj) is dict else obj
    if flat(map(type, values)):
        return True
    for v in values:
        if isinstance(v, dict | list | tuple) and not nesting_within(v, room - 1):
            return False
    return True


def check_nesting(obj: Any, field: str, room: int = MAX_NESTING) -> None:
    """Refuse (RemoteProtocolError, reason ``too-deep``) a map nested deeper than ``room``."""
    if not nesting_within(obj, room):
        raise RemoteProtocolError(
            "too-deep", f"{field} nests maps or lists deeper than {room} levels"
        )


def check_header_strings(h: dict) -> None:
    """Refuse a header whose session or username is longer than the bounds."""
    session = h.get("session", "")
    if type(session) is str and len(session) > MAX_SESSION:
        raise RemoteProtocolError(
            "too-long", f"header session is {len(session)} chars, at most {MAX_SESSION}"
        )
    username = h.get("username", "")
    if type(username) is not str or len(username) > MAX_USERNAME:
        raise RemoteProtocolError(
            "too-long" if type(username) is str else "malformed",
            f"header username must be a str of at most {MAX_USERNAME} chars",
        )


def check_envelope_size(envelope: Any) -> None:
    """Refuse an envelope frame larger than MAX_ENVELOPE before it is decoded."""
    if len(envelope) > MAX_ENVELOPE:
        raise RemoteProtocolError(
            "too-long", f"envelope of {len(envelope)} bytes, at most {MAX_ENVELOPE}"
        )
