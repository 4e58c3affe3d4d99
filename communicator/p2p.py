"""Point-to-point messaging over the peer links: matching, the short/long message protocols,
credit flow control, shared memory on one host (requests and statuses: comm.requests).

Progress happens only inside calls (as in MPI without a progress thread): every wait polls
the links, hands arriving packets to receives, acknowledges them and sends what the credits
allow. A message of up to ``maxdatalen`` bytes is one DATA packet sent eagerly; a longer one
sends its first packet as DATASYNC and the rest only after the receiver matched it and sent
SYNCACK (IMPI's long-message protocol), so an unexpected long message costs the receiver one
packet of memory, and the rest lands straight in the posted buffer.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from zpar.errors import RemoteProtocolError

from . import cma
from .flow import RecvCounter, SendWindow, check_window
from .links import LinkError, PeerLinks
from .peerwire import CTX_P2P, ENC_PICKLE, ENC_RAW, INLINE, Kind, Packet
from .pending import Arrived as _Arrived
from .pending import PendingRecv as _Recv
from .pending import PendingSend as _Send
from .pending import as_bytes_view
from .requests import ANY_SOURCE, ANY_TAG, PROC_NULL, CommError, Request, Status, unpickle
from .shm import ShmRing

log = logging.getLogger(__name__)

EAGER = int(Kind.EAGER)
#: how long a fast receive waits (asleep) before the general path checks who is alive
FAST_WAIT_NS = 100_000_000

#: slot and length of a SHMDATA packet (the ring's path follows on the first one)
_SHM_DESC = struct.Struct(">IQ")

#: a payload at least this large is handed to zmq without a copy
ZERO_COPY_MIN = 64 * 1024


class P2P:
    """The progress engine of one rank: owns the links, the queues and the credit counters."""

    def __init__(
        self,
        links: PeerLinks,
        *,
        maxdatalen: int,
        ackmark: int,
        hiwater: int,
        timeout: float | None = None,
        shm: bool = True,
    ) -> None:
        check_window(ackmark, hiwater)
        if maxdatalen < 1:
            raise ValueError(f"maxdatalen must be >= 1, got {maxdatalen}")
        self.links = links
        self.rank, self.size = links.rank, links.size
        self.maxdatalen = maxdatalen
        self.timeout = timeout
        self.windows = [SendWindow(hiwater) for _ in range(self.size)]
        self.counters = [RecvCounter(ackmark) for _ in range(self.size)]
        self._queues: list[deque[_Send]] = [deque() for _ in range(self.size)]
        self._busy: set[int] = set()  # peers with something queued
        self._await_sync: dict[int, _Send] = {}
        self._posted: list[_Recv] = []
        self._unexpected: list[_Arrived] = []
        self._filling: dict[tuple[int, int], _Recv] = {}
        self._msgid = 0
        self.broken: CommError | None = None
        self._quiet_since: float | None = None
        #: ranks reported lost by someone else (the hub, through the rendezvous member)
        self.liveness: Callable[[], list[int]] | None = None
        self.hiwater = hiwater
        self.shm = shm
        self._rings_out: dict[int, ShmRing | None] = {}
        self._rings_in: dict[int, ShmRing] = {}
        #: long messages to ranks on this host go by cross-memory attach (comm.cma) unless
        #: that peer could not read us once
        self.cma = shm and cma.SUPPORTED
        self._no_cma: set[int] = set()
        #: long messages received by cross-memory attach so far
        self.cma_reads = 0

    # -- posting ----------------------------------------------------------------------------

    def post_send(
        self,
        dest: int,
        data: Any,
        tag: int,
        ctx: int = CTX_P2P,
        enc: int = ENC_RAW,
        track: bool = False,
    ) -> _Send:
        self._check_alive()
        op = _Send(
            dest, data if isinstance(data, memoryview) else memoryview(data), tag, ctx, enc, track
        )
        if dest == PROC_NULL:
            op.done = True
            return op
        self._check_rank(dest, "dest")
        self._msgid += 1
        op.msgid = self._msgid
        if dest == self.rank:
            self._deliver_local(op)
            return op
        if dest in self.links.mail_out and not self._queues[dest] and len(op.data) <= INLINE:
            if self._eager(dest, op.data, tag, ctx, enc):
                op.offset = len(op.data)
                op.done = True
                return op
        self._enqueue(dest, op)
        op.queued = True
        self._pump(dest)
        return op

    def _enqueue(self, dest: int, op: _Send) -> None:
        """Queue a send behind the credit window; fast sends to ``dest`` wait behind it."""
        self._queues[dest].append(op)
        self._busy.add(dest)
        self.links.lane.block(dest, True)

    # -- the same-host fast path (zpar.comm.lane) ---------------------------------------------

    def _eager(self, dest: int, data: Any, tag: int, ctx: int, enc: int) -> bool:
        """A whole small message into ``dest``'s mailbox as one EAGER packet, outside the
        credit window (the mailbox's slots bound it); False when the mailbox is full."""
        r = self.links.lane.send(dest, EAGER, ctx, enc, 0, self.rank, tag, 0, 0, data)
        if r == 2:
            self.links.wake(dest)
        return r != 0

    def send_now(self, dest: int, data: Any, tag: int, ctx: int, enc: int) -> bool:
        """Send a small message to a rank of this host at once, in one compiled call
        (lane.send_eager); False: not taken (another host, too big, sends queued to it, a
        buffer spec): the caller takes the general path, which also reports bad input."""
        r = self.links.lane.send_eager(dest, data, tag, ctx, enc)
        if r == 2:
            self.links.wake(dest)
        return r != 0

    def recv_now(self, source: int, tag: int, ctx: int, buf: Any) -> int | None:
        """Receive the next message from ``source`` (a rank of this host) if it is a small
        one matching (tag, ctx), in one compiled call (lane.recv_eager: it waits with the
        GIL released, spinning, then asleep on a futex): into ``buf``, or, buf None, as
        ``links.lane.last_payload``; return its length (``lane.last_tag`` / ``last_enc``
        tell the rest). None: anything unusual (another receive posted, sends queued or
        waiting, a message already queued, a long message, a quiet 100 ms) for the general
        path to handle."""
        if (
            self._posted
            or self._unexpected
            or self.links.early  # taken from a mailbox by the general path, not yet matched
            or self._busy
            or self._await_sync
            or self._filling
        ):
            return None
        n = self.links.lane.recv_eager(source, tag, ctx, buf, FAST_WAIT_NS)
        return None if n < 0 else n

    def post_recv(self, source: int, tag: int, ctx: int = CTX_P2P, buf: Any = None) -> _Recv:
        self._check_alive()
        view = None if buf is None else as_bytes_view(buf, writable=True)
        op = _Recv(source, tag, ctx, view)
        if source == PROC_NULL:
            op.status._set(PROC_NULL, ANY_TAG, 0)
            op.done = True
            return op
        if source != ANY_SOURCE:
            self._check_rank(source, "source")
        for i, msg in enumerate(self._unexpected):
            if op.matches(msg.src, msg.tag, msg.ctx):
                del self._unexpected[i]
                self._match(op, msg)
                return op
        self._posted.append(op)
        return op

    def probe(self, source: int, tag: int, block: bool) -> tuple[int, int, int] | None:
        """(source, tag, bytes) of the first unexpected message a receive for (source, tag)
        would match, without receiving it; waits for one when ``block``."""
        self._check_alive()
        if source == PROC_NULL:
            return (PROC_NULL, ANY_TAG, 0)
        want = _Recv(source, tag, CTX_P2P, None)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        self.progress(0)
        while True:
            for msg in self._unexpected:
                if want.matches(msg.src, msg.tag, msg.ctx):
                    return (msg.src, msg.tag, msg.total)
            if not block:
                return None
            self._check_alive()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"rank {self.rank}: probe not answered after {self.timeout} s")
            self._progress_or_check(100)

    def _check_rank(self, r: int, what: str) -> None:
        if not 0 <= r < self.size:
            raise ValueError(f"{what} rank {r} out of range for a communicator of size {self.size}")

    def _check_alive(self) -> None:
        if self.broken is not None:
            raise self.broken
        if self.links.closed:
            raise CommError(f"rank {self.rank}: the communicator was freed")

    # -- waiting ----------------------------------------------------------------------------

    def wait(self, ops: list[Any], what: str = "operation") -> None:
        """Make progress until every op completes; raise CommError if the communicator breaks
        and TimeoutError past ``self.timeout``."""
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        pending = [op for op in ops if not op.complete()]
        try:
            while pending:
                for op in pending:
                    if op.error is not None:
                        raise op.error
                self._check_alive()
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"rank {self.rank}: {what} not complete after {self.timeout} s"
                    )
                # only long sends whose reader copies from our memory (CMASYNC out): that
                # takes milliseconds, so sleep at once and leave the CPUs to its split read
                self.links.sleep_first = all(
                    type(op) is _Send and op.cma == 1 and op.msgid in self._await_sync
                    for op in pending
                )
                self._progress_or_check(100)
                pending = [op for op in pending if not op.complete()]
        finally:
            self.links.sleep_first = False
        for op in ops:
            if op.error is not None:
                raise op.error

    def _progress_or_check(self, timeout_ms: int) -> None:
        """Progress, and after ``timeout_ms`` without a packet check who is alive (a poll
        woken by a stale mailbox wake-up returns early with nothing: not yet quiet)."""
        now = time.monotonic()
        if self.progress(timeout_ms):
            self._quiet_since = None
            return
        if self._quiet_since is None:
            self._quiet_since = now
        if time.monotonic() - self._quiet_since >= timeout_ms / 1000:
            self._quiet_since = None
            self._check_peers()  # that long without a packet: is anyone we wait on dead?

    def _check_peers(self) -> None:
        try:
            self.links.check_peers()
            lost = self.liveness() if self.liveness is not None else []
        except LinkError as e:
            self._break(str(e), e.ranks)
            return
        except Exception as e:  # noqa: BLE001 - the rendezvous member's own error
            lost = list(getattr(e, "missing", [])) or [-1]
            self._break(f"the hub reports the communicator failed: {e}", lost)
            return
        if lost:
            self._break(f"the hub reports rank(s) {sorted(lost)} gone", sorted(lost))

    def progress(self, timeout_ms: int = 0) -> int:
        """Send what credits allow, then handle what arrives within timeout_ms; return how
        many packets arrived."""
        for peer in list(self._busy):
            self._pump(peer)
        # waiting only on trackers: zmq's I/O thread finishes without us, poll briefly
        if timeout_ms and not (self._posted or self._filling or self._busy or self._await_sync):
            timeout_ms = min(timeout_ms, 1)
        n = 0
        try:
            for peer, pkt in self.links.poll(timeout_ms):
                n += 1
                self._on_packet(peer, pkt)
        except LinkError as e:
            self._break(str(e), e.ranks)
        except RemoteProtocolError as e:
            self._break(f"refused a packet: {e}", [])
        for peer in list(self._busy):
            self._pump(peer)
        return n

    # -- sending ----------------------------------------------------------------------------

    def _pump(self, peer: int) -> None:
        q = self._queues[peer]
        window = self.windows[peer]
        while q:
            if not window.can_send():
                window.stalled()
                return
            op = q[0]
            self._send_packet(op, window)
            if op.done or op.msgid in self._await_sync:
                q.popleft()
                op.queued = False
        self._busy.discard(peer)
        self.links.lane.block(peer, False)

    def _send_packet(self, op: _Send, window: SendWindow) -> None:
        n = len(op.data)
        start = op.offset
        if start == 0 and n > self.maxdatalen and not op.cma and self._cma_to(op.dest):
            self._send_cma(op, window)
            return
        stop = min(n, start + self.maxdatalen)
        chunk = op.data[start:stop]
        if start == 0 and not op.cma:
            kind = Kind.DATASYNC if n > self.maxdatalen else Kind.DATA
            arg = n
        else:  # a later packet, or the first one after the receiver refused CMA
            kind, arg = Kind.DATA, start
        later = start or op.cma
        ring = self._ring_out(op.dest) if later and len(chunk) > INLINE else None
        if ring is not None:
            k = ring.take()
            ring.slot(k)[: len(chunk)] = chunk
            desc = _SHM_DESC.pack(k, len(chunk))
            if not ring.announced:
                desc += ring.path.encode()
                ring.announced = True
            kind, chunk = Kind.SHMDATA, desc
        big = len(chunk) >= ZERO_COPY_MIN
        enc = ENC_PICKLE if kind == Kind.SHMDATA else op.enc  # sign the slot descriptor
        pkt = Packet(kind, op.ctx, enc, self.rank, op.tag, 0, op.msgid, arg, chunk)
        pkt.acks = self.counters[op.dest].take()
        try:
            tracker = self.links.send(op.dest, pkt, copy=not big, track=big and op.track)
        except LinkError as e:
            self._break(str(e), e.ranks)
            raise self.broken from e  # type: ignore[misc]
        window.sent()
        if tracker is not None and big and op.track:
            op.trackers.append(tracker)
        op.offset = stop
        if kind == Kind.DATASYNC:
            self._await_sync[op.msgid] = op
        elif stop >= n:
            op.done = True

    def _cma_to(self, peer: int) -> bool:
        return self.cma and peer in self.links.same_host and peer not in self._no_cma

    def _send_cma(self, op: _Send, window: SendWindow) -> None:
        """Offer a long message for the receiver to read from our memory (CMASYNC: our
        pid, the buffer's address, the message's encoding; signed)."""
        desc = cma.describe(os.getpid(), op.data) + bytes([op.enc])
        pkt = Packet(Kind.CMASYNC, op.ctx, ENC_PICKLE, self.rank, op.tag, 0, op.msgid, len(op.data))
        pkt.payload = desc
        pkt.acks = self.counters[op.dest].take()
        try:
            self.links.send(op.dest, pkt)
        except LinkError as e:
            self._break(str(e), e.ranks)
            raise self.broken from e  # type: ignore[misc]
        window.sent()
        op.cma = 1
        self._await_sync[op.msgid] = op

    def _ring_out(self, peer: int) -> ShmRing | None:
        if not self.shm or peer not in self.links.same_host:
            return None
        if peer not in self._rings_out:
            try:
                ring = ShmRing.create(self.hiwater, self.maxdatalen)
            except OSError as e:
                log.warning(
                    "rank %d: no shared memory toward rank %d (%s): using the socket",
                    self.rank,
                    peer,
                    e,
                )
                ring = None
            self._rings_out[peer] = ring
        return self._rings_out[peer]

    def _on_shmdata(self, peer: int, pkt: Packet) -> None:
        desc = bytes(pkt.payload)
        k, n = _SHM_DESC.unpack_from(desc)
        ring = self._rings_in.get(peer)
        if ring is None:
            ring = ShmRing.attach(desc[_SHM_DESC.size :].decode(), self.hiwater, self.maxdatalen)
            self._rings_in[peer] = ring
        op = self._filling.get((peer, pkt.msgid))
        if op is None or not 0 <= k < ring.slots or n > ring.slot_size:
            raise CommError(f"rank {peer}: shared-memory packet for no matched message")
        self._fill(op, pkt.arg, ring.slot(k)[:n], (peer, pkt.msgid))

    def close_rings(self) -> None:
        for ring in [*self._rings_out.values(), *self._rings_in.values()]:
            if ring is not None:
                ring.close()
        self._rings_out.clear()
        self._rings_in.clear()

    def _control(self, peer: int, kind: Kind, msgid: int = 0, arg: int = 0) -> None:
        """ACK / SYNCACK: outside the credit window (seed: ACKs do not count)."""
        pkt = Packet(kind, 0, 0, self.rank, 0, 0, msgid, arg)
        if kind != Kind.ACK:
            pkt.acks = self.counters[peer].take()
        try:
            self.links.send(peer, pkt)
        except LinkError as e:
            self._break(str(e), e.ranks)

    # -- receiving --------------------------------------------------------------------------

    def _on_packet(self, peer: int, pkt: Packet) -> None:
        kind = pkt.kind
        if pkt.acks:
            self.windows[peer].acked(pkt.acks)
        if (
            kind == Kind.DATA
            or kind == Kind.DATASYNC
            or kind == Kind.SHMDATA
            or kind == Kind.CMASYNC
        ):
            if kind == Kind.SHMDATA:
                self._on_shmdata(peer, pkt)
            else:
                self._on_data(peer, pkt)
            # acknowledged once handled: a shared-memory slot is free again when its ACK
            # comes back (what makes the ring safe to reuse)
            ack = self.counters[peer].received()
            if ack:
                self._control(peer, Kind.ACK, arg=ack)
        elif kind == Kind.EAGER:
            self._on_data(peer, pkt)  # outside the credit window: nothing to acknowledge
        elif kind == Kind.ACK:
            self.windows[peer].acked(pkt.arg)
        elif kind == Kind.SYNCACK:
            op = self._await_sync.pop(pkt.msgid, None)
            if op is None:
                raise CommError(f"SYNCACK from rank {peer} for unknown message {pkt.msgid}")
            if op.cma:  # it could not read our memory: send the bytes, now and from now on
                op.cma = 2
                self._no_cma.add(peer)
            self._enqueue(peer, op)
        elif kind == Kind.CMADONE:
            op = self._await_sync.pop(pkt.msgid, None)
            if op is None or not op.cma:
                raise CommError(f"CMADONE from rank {peer} for unknown message {pkt.msgid}")
            op.offset = len(op.data)
            op.done = True
        elif kind == Kind.FIN or kind == Kind.PING:
            pass  # FIN: links noted it
        elif kind == Kind.ABORT:
            why = bytes(pkt.payload or b"").decode(errors="replace")
            self._break(f"rank {peer} aborted the communicator: {why}", [])
        else:
            log.warning("rank %d: ignoring %s packet from rank %d", self.rank, kind, peer)

    def _on_data(self, peer: int, pkt: Packet) -> None:
        kind = pkt.kind
        filling = self._filling.get((peer, pkt.msgid)) if kind == Kind.DATA else None
        if filling is not None:
            self._fill(filling, pkt.arg, pkt.payload, (peer, pkt.msgid))
            return
        msg = _Arrived(pkt)
        for i, op in enumerate(self._posted):
            if op.matches(msg.src, msg.tag, msg.ctx):
                del self._posted[i]
                self._match(op, msg)
                return
        self._unexpected.append(msg)

    def _match(self, op: _Recv, msg: _Arrived) -> None:
        op.status._set(msg.src, msg.tag, msg.total)
        op.total, op.enc = msg.total, msg.enc
        if op.buf is not None and msg.total > len(op.buf):
            op.error = CommError(
                f"message truncated: {msg.total} bytes from rank {msg.src} (tag {msg.tag}) "
                f"into a buffer of {len(op.buf)}"
            )
            op.data = memoryview(bytearray(msg.total))  # consumed and dropped
        elif op.buf is not None:
            op.data = op.buf
        else:
            op.data = memoryview(bytearray(msg.total))
        key = (msg.src, msg.msgid)
        if msg.cma is not None:
            self._read_cma(op, msg, key)
            return
        if msg.sync:
            self._filling[key] = op
            self._control(msg.src, Kind.SYNCACK, msgid=msg.msgid)
        self._fill(op, 0, msg.first, key)

    def _read_cma(self, op: _Recv, msg: _Arrived, key: tuple[int, int]) -> None:
        """Read a CMASYNC message from the sender's memory and answer CMADONE; if the
        kernel refuses, ask for the bytes with SYNCACK (the sender stops offering CMA)."""
        assert msg.cma is not None
        if op.error is None and not cma.read(msg.cma, op.data[: msg.total]):
            log.info(
                "rank %d: cannot read rank %d's memory: its long messages take the ring",
                self.rank,
                msg.src,
            )
            self._filling[key] = op
            self._control(msg.src, Kind.SYNCACK, msgid=msg.msgid)
            return
        op.got = msg.total
        op.done = True
        self.cma_reads += op.error is None
        self._control(msg.src, Kind.CMADONE, msgid=msg.msgid)

    def _fill(self, op: _Recv, offset: int, payload: Any, key: tuple[int, int]) -> None:
        if payload is not None:
            data = payload.buffer if hasattr(payload, "buffer") else payload
            n = len(data)
            if n:
                op.data[offset : offset + n] = data
            op.got += n
        if op.got >= op.total:
            self._filling.pop(key, None)
            op.done = True

    def _deliver_local(self, op: _Send) -> None:
        """A message to oneself: copied at once, matched like any other."""
        data = bytes(op.data)
        pkt = Packet(Kind.DATA, op.ctx, op.enc, self.rank, op.tag, 0, op.msgid, len(data), data)
        msg = _Arrived(pkt)
        op.done = True
        for i, r in enumerate(self._posted):
            if r.matches(msg.src, msg.tag, msg.ctx):
                del self._posted[i]
                self._match(r, msg)
                return
        self._unexpected.append(msg)

    # -- breaking ---------------------------------------------------------------------------

    def _break(self, why: str, ranks: list[int]) -> None:
        if self.broken is not None:
            return
        self.broken = CommError(f"communicator broken on rank {self.rank}: {why}", ranks)
        self.links.lane.enabled = False  # no fast path past this: calls must raise
        log.error("%s", self.broken)
        for peer in range(self.size):  # tell the others, so nobody waits on us in vain
            if peer != self.rank and peer not in ranks:
                try:
                    self.links.send(
                        peer, Packet(Kind.ABORT, 0, 0, self.rank, 0, 0, 0, 0, why.encode()[:1000])
                    )
                except (LinkError, Exception):  # noqa: BLE001 - best effort on a broken comm
                    pass
        for op in self._posted:
            op.error = self.broken

    def finish(self) -> None:
        """Tell every peer we are closing (a FIN each), so our links closing is no error."""
        for peer in range(self.size):
            if peer != self.rank and peer not in self.links.finished:
                try:
                    self.links.send(peer, Packet(Kind.FIN, 0, 0, self.rank, 0, 0, 0, 0))
                except LinkError:
                    pass  # it closed first; nothing to tell

    def flow_state(self, peer: int) -> dict[str, int]:
        """Credits toward ``peer``: packets in flight, stalls so far, messages queued."""
        w = self.windows[peer]
        return {
            "inflight": w.inflight,
            "hiwater": w.hiwater,
            "stalls": w.stalls,
            "queued": len(self._queues[peer]),
            "unexpected": len(self._unexpected),
        }


__all__ = [
    "ANY_SOURCE",
    "ANY_TAG",
    "PROC_NULL",
    "CommError",
    "P2P",
    "Request",
    "Status",
    "as_bytes_view",
    "unpickle",
]
