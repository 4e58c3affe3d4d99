"""The point-to-point layer's records: a send in progress, a posted receive, a message that
arrived before any receive matched it, and the byte view every buffer is turned into."""

from __future__ import annotations

from typing import Any

import numpy as np

from . import cma
from .peerwire import ENC_RAW, Kind, Packet
from .requests import ANY_SOURCE, ANY_TAG, Status


def flat(a: np.ndarray) -> memoryview:
    """A C-contiguous array's bytes, without a copy (what a collective sends of it)."""
    return memoryview(a.reshape(-1).view(np.uint8))


def as_bytes_view(buf: Any, writable: bool = False) -> memoryview:
    """A flat byte view of a buffer spec: an array, or mpi4py's ``[array, ...]`` forms."""
    if isinstance(buf, (list, tuple)):
        if not buf:
            raise TypeError("empty buffer specification")
        buf = buf[0]
    if isinstance(buf, np.ndarray):
        if not buf.flags.c_contiguous:
            raise ValueError("buffers must be C-contiguous numpy arrays (use np.ascontiguousarray)")
        if writable and not buf.flags.writeable:
            raise ValueError("receive buffer is read-only")
        return memoryview(buf.reshape(-1).view(np.uint8))
    mv = memoryview(buf)
    if writable and mv.readonly:
        raise ValueError("receive buffer is read-only")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


class PendingSend:
    """A message being sent: what is left of it, and how it ends."""

    __slots__ = (
        "dest",
        "data",
        "tag",
        "ctx",
        "enc",
        "track",
        "msgid",
        "offset",
        "trackers",
        "done",
        "error",
        "queued",
        "cma",
    )

    def __init__(self, dest: int, data: memoryview, tag: int, ctx: int, enc: int, track: bool):
        self.dest, self.data, self.tag, self.ctx, self.enc = dest, data, tag, ctx, enc
        self.track = track
        self.msgid = 0
        self.offset = 0  # next byte to send
        self.trackers: list[Any] = []
        self.done = False
        self.error: BaseException | None = None
        self.queued = False
        self.cma = 0  # 1: offered by CMASYNC, 2: the receiver refused, send the bytes

    def complete(self) -> bool:
        if self.done and self.trackers:
            self.trackers = [t for t in self.trackers if not t.done]
        return self.done and not self.trackers


class PendingRecv:
    """A posted receive: what it matches and where the bytes go."""

    __slots__ = (
        "source",
        "tag",
        "ctx",
        "buf",
        "data",
        "total",
        "got",
        "done",
        "error",
        "status",
        "enc",
    )

    def __init__(self, source: int, tag: int, ctx: int, buf: memoryview | None) -> None:
        self.source, self.tag, self.ctx, self.buf = source, tag, ctx, buf
        self.data: Any = None
        self.total = 0
        self.got = 0
        self.done = False
        self.error: BaseException | None = None
        self.status = Status()
        self.enc = ENC_RAW

    def complete(self) -> bool:
        return self.done

    def matches(self, src: int, tag: int, ctx: int) -> bool:
        return (
            self.ctx == ctx
            and (self.source == ANY_SOURCE or self.source == src)
            and (self.tag == ANY_TAG or self.tag == tag)
        )


class Arrived:
    """A message whose first packet arrived before any receive matched it."""

    __slots__ = ("src", "tag", "ctx", "enc", "msgid", "total", "first", "sync", "cma")

    def __init__(self, pkt: Packet) -> None:
        self.src, self.tag, self.ctx, self.enc = pkt.src, pkt.tag, pkt.ctx, pkt.enc
        self.msgid, self.total = pkt.msgid, pkt.arg
        self.first = pkt.payload
        self.sync = pkt.kind == Kind.DATASYNC
        #: CMASYNC: where to read the bytes from (comm.cma); the enc is the message's
        self.cma: bytes | None = None
        if pkt.kind == Kind.CMASYNC:
            self.cma, self.first = bytes(pkt.payload)[: cma.DESC.size], None
            self.enc = bytes(pkt.payload)[cma.DESC.size]
