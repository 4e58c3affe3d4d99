"""How a rank's peer links wait for packets (PeerLinks' polling, a mixin of its own):
the mailboxes first, through the lane when every peer is on this host (spin, then sleep on
futex words, with the GIL released), else a bounded spin in Python and the sockets' poll;
the sockets drained; mailbox packets taken in their link's order (docs/communicator.md,
"Small messages on one host")."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import zmq

from zpar.errors import RemoteProtocolError

from . import mailbox
from .peerwire import Kind, Packet

if TYPE_CHECKING:
    from .lane import Lane

#: the receiver's spin before it blocks on its sockets, microseconds: adaptive between these
SPIN_MIN_US = 20
SPIN_MAX_US = 400
#: the spin of a receiver whose peers are all on this host, before it sleeps on its futex
#: words (the lane; docs/decisions.md, "A blocking receive spins while the host has room"),
#: microseconds. While the host has a CPU for every runnable task (the lane reads the count
#: from /proc/loadavg at most every millisecond) and this communicator's ranks here fit the
#: CPUs, it pause-spins: the CPU is nobody else's, and a futex wake-up of an idle CPU costs
#: 15-17 us on this VM against 0.2-0.3 us spinning (bench/shmfloor.py). Longer than most
#: waits between two messages, short beside the compute a long wait covers.
FUTEX_SPIN_ROOM_US = 200
#: otherwise it calls sched_yield for this long, so ranks that share a CPU take turns
#: without a wake-up (MPICH ch4's progress wait yields on every empty poll); then the futex
FUTEX_YIELD_US = 50
#: mailbox polls between looks at the sockets and the clock
SPIN_SYSCALL_EVERY = 32
#: a poll that found mailbox packets looks at the sockets only every this many times
SOCKET_POLL_EVERY = 4


class LinkPolling:
    """PeerLinks' waiting and reading (the attributes are PeerLinks')."""

    early: list[tuple[int, Packet]]
    futex: bool
    lane: Lane
    poller: zmq.Poller
    router: zmq.Socket
    dealers: dict[int, zmq.Socket]
    spins: bool
    spin_us: int
    #: the wait is a long one (a long message's sender waiting for its reader): sleep at
    #: once, no spin or yield, so the reader's split copy finds the CPU idle
    sleep_first: bool = False
    signer: Any
    finished: set[int]
    _inbox: dict[int, mailbox.Mailbox]
    _mail_ready: bool
    _skipped_polls: int
    _missed_at: float | None
    _recv_seq: Any

    def _peer_of(self, ident: bytes) -> int | None:  # pragma: no cover - PeerLinks'
        raise NotImplementedError

    def _accept(
        self, peer: int, frames: list[Any], *, signed: bool = True
    ) -> list[tuple[int, Packet]]:  # pragma: no cover - PeerLinks'
        raise NotImplementedError

    def poll(self, timeout_ms: int) -> Iterator[tuple[int, Packet]]:
        """Yield the packets that arrive within timeout_ms (all that are ready, at least one
        wait); raise LinkError when a link drops. With mailboxes, spin on them for up to
        ``spin_us`` before blocking on the sockets."""
        if self.early:
            early, self.early = self.early, []
            yield from early
            timeout_ms = 0
        if self.futex and self._mail_ready:
            yield from self._poll_futex(timeout_ms)
            return
        if self._inbox:
            ready = self._from_inboxes()
            if not ready and timeout_ms and self.spins:
                ready = self._spin()
            if ready:
                yield from ready
                timeout_ms = 0
                # the sockets' poll is a system call: skip it while the mailboxes deliver,
                # but not for long (a large packet or another peer may wait there)
                self._skipped_polls += 1
                if self._skipped_polls < SOCKET_POLL_EVERY:
                    return
        self._skipped_polls = 0
        events = self.poller.poll(timeout_ms)
        if self._missed_at is not None:
            # the spin missed: had it been a little longer, would it have hit?
            waited_us = (time.perf_counter() - self._missed_at) * 1e6
            self._missed_at = None
            if events and waited_us < SPIN_MAX_US:
                self.spin_us = min(SPIN_MAX_US, max(self.spin_us * 2, int(waited_us * 1.5)))
            else:
                self.spin_us = max(SPIN_MIN_US, self.spin_us // 2)
        for sock, _ in events:
            yield from self._drain(sock)
        if self._inbox:
            yield from self._from_inboxes()

    def _poll_futex(self, timeout_ms: int) -> Iterator[tuple[int, Packet]]:
        """Every peer on this host: the lane waits (GIL released: spin or yield, then sleep
        on the mailboxes' futex words), then the mailboxes are read; the sockets only when the lane
        says a packet took one (too big for a slot, or a full mailbox), and now and then."""
        ready = self._from_inboxes()
        if not ready and timeout_ms:
            r = self.lane.wait(-1 if self.sleep_first else 0, timeout_ms * 1_000_000)
            ready = self._from_inboxes() if r == 1 else []
            if r == 2 and not ready:  # announced on a socket: it is on its way
                yield from self._poll_sockets(min(timeout_ms, 100))
                return
        if ready:
            yield from ready
            self._skipped_polls += 1
            if self._skipped_polls < SOCKET_POLL_EVERY:
                return
        self._skipped_polls = 0
        yield from self._poll_sockets(0)

    def _poll_sockets(self, timeout_ms: int) -> Iterator[tuple[int, Packet]]:
        for sock, _ in self.poller.poll(timeout_ms):
            yield from self._drain(sock)
        yield from self._from_inboxes()

    def _drain(self, sock: zmq.Socket) -> Iterator[tuple[int, Packet]]:
        peer = -1 if sock is self.router else next(r for r, d in self.dealers.items() if d is sock)
        # drain while zmq says more is queued (cheaper than a failing recv's exception)
        while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            frames = sock.recv_multipart(copy=False)
            if peer < 0:
                src = self._peer_of(frames[0].bytes)
                if src is None:
                    continue  # a stranger's, counted
                frames = frames[1:]
            else:
                src = peer
            if len(frames) == 1 and len(frames[0]) == 0:
                continue  # a wake-up: the packet is in the mailbox
            yield from self._accept(src, frames)

    def _spin(self) -> list[tuple[int, Packet]]:
        """Poll the mailboxes (and, cheaply, the sockets) for up to ``spin_us`` with
        ``spinning`` set, so senders need not wake us. The spin adapts: it doubles after a
        hit; after a miss, ``poll`` sees how long the packet took to come: within
        SPIN_MAX_US the spin grows to cover it (else a ping-pong whose round trip is a bit
        longer than the spin would miss every time and shrink for ever), beyond it the spin
        halves, so a rank waiting on a slow peer soon spins only SPIN_MIN_US per wait."""
        boxes = list(self._inbox.values())
        for b in boxes:
            b.set_spinning(True)
        end = time.perf_counter() + self.spin_us * 1e-6
        got: list[tuple[int, Packet]] = []
        hit = False
        spins = 0
        try:
            while True:
                got = self._from_inboxes()
                if got:
                    hit = True
                    break
                spins += 1
                if spins % SPIN_SYSCALL_EVERY == 0:
                    # the sockets and the clock cost a system call: look now and then
                    if self.poller.poll(0):
                        hit = True
                        break
                    if time.perf_counter() >= end:
                        break
                    # no sched_yield: on a loaded machine it hands the CPU to any of the
                    # other runnable tasks for a whole time slice (1-2 ms measured here);
                    # the spin is bounded, and an oversubscribed host does not spin at all
        finally:
            for b in boxes:
                b.set_spinning(False)
            mailbox.fence()
        if not got:  # the last look, after clearing the flag: a sender now wakes us
            got = self._from_inboxes()
            hit = hit or bool(got)
        if hit:
            self.spin_us = min(SPIN_MAX_US, self.spin_us * 2)
        else:
            self._missed_at = end - self.spin_us * 1e-6  # when the spin began
        return got

    def _from_inboxes(self) -> list[tuple[int, Packet]]:
        out: list[tuple[int, Packet]] = []
        for peer in self._inbox:
            while self._take_from_box(peer, out):
                pass
        return out

    def _take_from_box(self, peer: int, out: list[tuple[int, Packet]]) -> bool:
        """Accept the mailbox's oldest packet if it is the link's next; False when an earlier
        one is still on its way through the socket."""
        try:
            head = self.lane.peek(peer)
        except ValueError as e:
            raise RemoteProtocolError("bad-packet", str(e)) from None
        if head is None:
            return False
        seq = head[1]
        if seq != self._recv_seq[peer]:
            if seq < self._recv_seq[peer]:
                raise RemoteProtocolError(
                    "out-of-sequence", f"rank {peer}: packet {seq}, expected {self._recv_seq[peer]}"
                )
            return False
        data = self.lane.take(peer)  # consumed and counted (the link's next)
        pkt = self.signer.unpack([data], signed=False)
        if pkt.src != peer:
            raise RemoteProtocolError("bad-source", f"packet says rank {pkt.src}, link is {peer}")
        if pkt.kind == Kind.FIN:
            self.finished.add(peer)
        out.append((peer, pkt))
        return True
