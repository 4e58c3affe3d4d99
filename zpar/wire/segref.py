"""A buffer carried by a shared-memory segment (zpar.sharedmem): what a message says in its
place.

Its descriptor takes the buffer's entry in the signed envelope's ``buffer_tags``, where a
tag would be, and its frame is empty (so it adds nothing to the signature and a relay or
the hub forwards it as any frame)::

    [owner pid, fd, token (16 bytes), offset, nbytes, slot, ticket, return slot, return ticket]

The descriptor is covered by the signature, so a receiver opens only segments a holder of
the cluster key named; the bytes themselves are unsigned, as a private channel's large
buffers are (docs/security.md).
"""

from __future__ import annotations

from typing import Any

#: fields of a descriptor, in order
DESC_FIELDS = ("pid", "fd", "token", "offset", "nbytes", "slot", "ticket", "rslot", "rticket")
#: bytes of a segment's token
TOKEN_BYTES = 16


class SegmentRef:
    """A buffer sent through shared memory: the sender puts it in a message's buffers."""

    __slots__ = ("desc", "nbytes")

    def __init__(self, desc: list[Any]) -> None:
        self.desc = desc
        self.nbytes = desc[4]


def is_descriptor(t: Any) -> bool:
    """Whether a buffer_tags entry is a sound segment descriptor."""
    if type(t) is not list or len(t) != len(DESC_FIELDS):
        return False
    token = t[2]
    if type(token) is not bytes or len(token) != TOKEN_BYTES:
        return False
    return all(type(v) is int and 0 <= v < 2**63 for i, v in enumerate(t) if i != 2) and (
        t[1] >= 0 and t[5] < 64 and t[7] < 64
    )
