"""The packets engines exchange over their peer links: layout, signing and checking.

Frames of one packet (a ROUTER prepends the peer's identity)::

    [header + signature + payload]        payload of up to INLINE bytes (or none)
    [header + signature, payload]         a larger payload, zero copy

header is ``HEADER`` (big-endian, 36 bytes)::

    kind u8 | ctx u8 | enc u8 | acks u8 | src i32 | tag i32 | seq u64 | msgid u64 | arg u64

- kind: one of ``Kind``; ctx: 0 point-to-point, 1 collectives (so they never match each
  other); enc: 0 raw buffer, 1 pickle.
- seq counts the packets of this link in each direction, from 0: a packet out of sequence
  (replayed, dropped, injected) is refused, so no replay table is needed on a FIFO link.
- arg: DATA/DATASYNC first packet: the message length; later DATA packets: their offset;
  ACK: packets acknowledged; SYNCACK: unused.
- signature: HMAC-SHA256 keyed by the cluster key over the header, and over the payload
  too when it is a pickle (unpickling runs code). Raw buffers are not signed, as the core
  wire leaves message buffers unsigned: a changed buffer changes numbers, it cannot run code.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
from dataclasses import dataclass
from typing import Any

from zpar.errors import RemoteProtocolError

HEADER = struct.Struct(">BBBBiiQQQ")

#: payloads up to this many bytes travel in the header's frame
INLINE = 2048

CTX_P2P = 0
CTX_COLL = 1
ENC_RAW = 0
ENC_PICKLE = 1


class Kind(enum.IntEnum):
    DATA = 1  #: a message's only packet, or a later packet of a long one
    DATASYNC = 2  #: first packet of a long message: the rest waits for SYNCACK
    SYNCACK = 3  #: the receiver matched a long message: send the rest
    ACK = 4  #: flow-control credit: ``arg`` packets received
    HELLO = 5  #: the dance: the higher rank's first packet, carrying its rank
    WELCOME = 6  #: the lower rank checked the HELLO: the link is open
    ABORT = 7  #: the sender's communicator broke; ``payload`` says why
    FIN = 8  #: the sender freed the communicator: its link closing next is no error
    PING = 9  #: ignored; completes the ROUTER's reachability probe of a live peer
    SHMDATA = 10  #: a later packet of a long message, its bytes in a shared-memory slot
    CMASYNC = 11  #: first packet of a long message on one host: where to read it (comm.cma)
    CMADONE = 12  #: the receiver read a CMASYNC message: the send is complete
    #: a whole small message through a same-host mailbox, outside the credit window (the
    #: mailbox's slots bound it); the receiver takes it like DATA and counts no credit
    EAGER = 13


@dataclass(slots=True)
class Packet:
    kind: int
    ctx: int
    enc: int
    src: int
    tag: int
    seq: int
    msgid: int
    arg: int
    payload: Any = None  # bytes-like (a zmq.Frame's buffer on receipt) or None
    acks: int = 0  #: credits returned to the receiver of this packet (piggybacked ACK)


class PeerSigner:
    """Signs and checks packets with the cluster key; empty key = unsigned (insecure)."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self._base = hmac.new(key, digestmod=hashlib.sha256) if key else None
        self.siglen = self._base.digest_size if self._base is not None else 0

    def sign(self, header: bytes, payload: Any = None) -> bytes:
        if self._base is None:
            return b""
        h = self._base.copy()
        h.update(header)
        if payload is not None:
            h.update(payload)
        return h.digest()

    def pack(self, p: Packet, *, signed: bool = True) -> list[Any]:
        """[header+signature+payload] for a payload up to INLINE bytes (one zmq frame: a
        small message costs one send), else [header+signature, payload]. ``signed=False``:
        no signature (a same-host mailbox packet: see PeerSigner.unpack)."""
        header = HEADER.pack(p.kind, p.ctx, p.enc, p.acks, p.src, p.tag, p.seq, p.msgid, p.arg)
        if signed:
            head = header + self.sign(header, p.payload if p.enc == ENC_PICKLE else None)
        else:
            head = header
        if p.payload is None:
            return [head]
        if len(p.payload) <= INLINE:
            return [head + bytes(p.payload)]
        return [head, p.payload]

    def unpack(self, frames: list[Any], *, signed: bool = True) -> Packet:
        """Check and decode; raise RemoteProtocolError naming what was wrong.

        ``signed=False``: a packet from a same-host mailbox, which carries no signature
        (design.md, "Same-host data plane"): the mailbox is a 0600 mapping of the user who
        owns the cluster key, agreed on in the signed dance, so whoever can write into it
        can read the key anyway; an HMAC there costs each message its time and protects
        nothing (docs/security.md)."""
        if len(frames) not in (1, 2):
            raise RemoteProtocolError("bad-packet", f"{len(frames)} frames, expected 1 or 2")
        first = memoryview(frames[0])
        siglen = self.siglen if signed else 0
        if len(first) < HEADER.size + siglen:
            raise RemoteProtocolError("bad-packet", f"head of {len(first)} bytes")
        header = bytes(first[: HEADER.size])
        kind, ctx, enc, acks, src, tag, seq, msgid, arg = HEADER.unpack(header)
        if len(frames) == 2:
            payload = frames[1]
        elif len(first) > HEADER.size + siglen:
            payload = first[HEADER.size + siglen :]
        else:
            payload = None
        if self._base is not None and signed:
            sig = bytes(first[HEADER.size : HEADER.size + siglen])
            if not hmac.compare_digest(
                self.sign(header, payload if enc == ENC_PICKLE else None), sig
            ):
                raise RemoteProtocolError("bad-signature", f"packet from rank {src}")
        return Packet(kind, ctx, enc, src, tag, seq, msgid, arg, payload, acks)
