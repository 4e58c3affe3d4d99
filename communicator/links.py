"""One rank's peer links: opened in the IMPI dance order, then packets in and out.

::

    rank r                                    rank j < r                rank k > r
    ┌──────────────────────────────┐
    │ ROUTER (bound: ipc + tcp) ◄──┼──────────────────────────────────── DEALER of rank k
    │ DEALER to rank j ────────────┼──► ROUTER of rank j
    │ liveness: pids, ROUTER probes │
    └──────────────────────────────┘

The dance (seed 003, "Shall We Dance?"): the higher rank connects to each lower one and sends
its rank first (a signed HELLO carrying the communicator id); the lower one accepts from
anybody, checks the rank and the id, and answers WELCOME. A link to a peer on the same host
uses ipc, to another host tcp. Every pair has exactly one connection, so packets between two
ranks arrive in the order they were sent.

On a --curve cluster (``curve=True``) the links are CurveZMQ too: each rank makes a key pair
of its own, its ROUTER is a Curve server with it, the public key travels in its endpoints
(through the hub's rendezvous, itself over Curve) and its DEALERs connect as Curve clients
of each lower rank's key. Packets are signed with the cluster key either way; Curve adds
that their bytes are unreadable on the network.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from collections import Counter
from typing import Any

import psutil
import zmq

from zpar.errors import RemoteProtocolError
from zpar.wire.listenguard import ListenerGuard

from . import mailbox
from .lane import Lane
from .linkpoll import FUTEX_SPIN_ROOM_US, FUTEX_YIELD_US, SPIN_MAX_US, LinkPolling
from .mailbox import Mailbox
from .peerwire import ENC_PICKLE, INLINE, Kind, Packet, PeerSigner

log = logging.getLogger(__name__)


class LinkError(ConnectionError):
    """A peer link could not be opened or was lost."""

    def __init__(self, message: str, ranks: list[int] | None = None) -> None:
        super().__init__(message)
        self.ranks = ranks or []


def _ident(rank: int) -> bytes:
    return b"r%d" % rank


#: seconds a mailbox packet may wait for an earlier one from the socket before the link is
#: refused as out of sequence (on one host the socket brings it within milliseconds)
MAILBOX_GAP_S = 5.0


class PeerLinks(LinkPolling):
    """The sockets of rank ``rank`` in a communicator of ``size`` named ``comm_id``."""

    def __init__(
        self,
        rank: int,
        size: int,
        comm_id: str,
        key: bytes,
        *,
        context: zmq.Context | None = None,
        curve: bool = False,
        refused: Counter[str] | None = None,
    ) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} out of range for size {size}")
        self.rank, self.size, self.comm_id = rank, size, comm_id
        self.signer = PeerSigner(key)
        self.ctx = context or zmq.Context.instance()
        self.router = self.ctx.socket(zmq.ROUTER)
        for opt, val in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.router.setsockopt(opt, val)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        #: this rank's Curve key pair (public, secret) on a --curve cluster (module doc)
        self._curve = zmq.curve_keypair() if curve else None
        if self._curve is not None:
            self.router.setsockopt(zmq.CURVE_SERVER, 1)
            self.router.setsockopt(zmq.CURVE_SECRETKEY, self._curve[1])
        #: the accepting socket's guard against strangers on its tcp port (a handshake
        #: deadline, a limit per peer address, descriptor exhaustion survived:
        #: zpar.wire.listenguard), counting into ``refused`` (the engine's, which it
        #: reports to the hub)
        self.guard = ListenerGuard(refused, what=f"rank {rank} of communicator {comm_id}")
        self.dealers: dict[int, zmq.Socket] = {}
        self.endpoints: dict[str, str] = {}
        #: the same-host lane (compiled, or its twin): mailboxes, and the links' sequence
        #: numbers, one sequence per link over the mailbox and the socket
        self.lane = Lane(size)
        self._send_seq = self.lane.send_seq
        self._recv_seq = self.lane.recv_seq
        #: pid of each rank on this host (liveness checks without socket monitors)
        self._local_pids: dict[int, int] = {}
        self.same_host: set[int] = set()
        self._ipc_path: str | None = None
        self.poller = zmq.Poller()
        self.closed = False
        #: peers that sent FIN: their links closing is expected
        self.finished: set[int] = set()
        #: packets that arrived during the dance from peers already done with it
        self.early: list[tuple[int, Packet]] = []
        #: shared-memory mailboxes for small packets to / from ranks on this host
        self.use_mailboxes = mailbox.SUPPORTED
        self._outbox: dict[int, Mailbox | None] = {}
        self._inbox: dict[int, Mailbox] = {}
        #: peers whose mailbox this rank writes (after the dance)
        self.mail_out: set[int] = set()
        #: every peer on this host with mailboxes both ways: waits sleep on futex words
        self.futex = False
        self.lane.rank = rank
        self.spin_us = SPIN_MAX_US  # start long: a fresh communicator is usually busy
        self._mail_ready = False  # from the end of the dance on
        self.spins = False
        self._skipped_polls = 0
        self._missed_at: float | None = None
        self._gap_since: dict[int, float] = {}

    # -- opening --------------------------------------------------------------------------

    def bind(self, tcp_ip: str = "127.0.0.1") -> dict[str, str]:
        """Bind the accepting socket on ipc (same-host peers) and tcp; return both."""
        self.guard.watch(self.router, "peer links")  # before binding: the listeners copy it
        tag = "".join(c for c in self.comm_id if c.isalnum())[:16]
        path = os.path.join(tempfile.gettempdir(), f"zpar-comm-{tag}-{os.getpid()}-{self.rank}")
        self.router.bind(f"ipc://{path}")
        self._ipc_path = path
        port = self.router.bind_to_random_port(f"tcp://{tcp_ip}")
        self.guard.start(self.ctx)
        self.endpoints = {
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            "ipc": f"ipc://{path}",
            "tcp": f"tcp://{tcp_ip}:{port}",
        }
        if self._curve is not None:
            self.endpoints["curve"] = self._curve[0].decode("ascii")
        return self.endpoints

    def dance(self, table: list[dict[str, str]], timeout: float = 60.0) -> None:
        """Connect to every lower rank and accept every higher one, as IMPI's dance; return
        when every link is confirmed both ways, or raise LinkError naming who is missing."""
        if len(table) != self.size:
            raise ValueError(f"endpoint table has {len(table)} entries for size {self.size}")
        me = table[self.rank]["hostname"]
        #: ranks on this host (same hostname): shared memory may carry long messages
        self.same_host = {r for r, e in enumerate(table) if r != self.rank and e["hostname"] == me}
        self._local_pids = {
            r: int(e["pid"])
            for r, e in enumerate(table)
            if r != self.rank and e["hostname"] == me and "pid" in e and e["pid"] != os.getpid()
        }
        for j in range(self.rank):
            d = self.ctx.socket(zmq.DEALER)
            for opt, val in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
                d.setsockopt(opt, val)
            d.setsockopt(zmq.ROUTING_ID, _ident(self.rank))
            if self._curve is not None:
                server = table[j].get("curve")
                if not isinstance(server, str) or len(server) != 40:
                    d.close()
                    raise LinkError(f"rank {j} offers no Curve key on a --curve cluster", [j])
                d.setsockopt(zmq.CURVE_SERVERKEY, server.encode("ascii"))
                d.setsockopt(zmq.CURVE_PUBLICKEY, self._curve[0])
                d.setsockopt(zmq.CURVE_SECRETKEY, self._curve[1])
            d.connect(table[j]["ipc"] if table[j]["hostname"] == me else table[j]["tcp"])
            self.dealers[j] = d
            self.poller.register(d, zmq.POLLIN)
            hello = self.comm_id.encode() + b"\0" + self._open_outbox(j)
            self.send(j, Packet(Kind.HELLO, 0, ENC_PICKLE, self.rank, 0, 0, 0, 0, hello))
        self.poller.register(self.router, zmq.POLLIN)
        waiting_hello = set(range(self.rank + 1, self.size))
        waiting_welcome = set(range(self.rank))
        deadline = time.monotonic() + timeout
        while waiting_hello or waiting_welcome:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LinkError(
                    f"rank {self.rank}: peer links not opened within {timeout:g} s; no HELLO "
                    f"from {sorted(waiting_hello)}, no WELCOME from {sorted(waiting_welcome)}",
                    sorted(waiting_hello | waiting_welcome),
                )
            for peer, pkt in self.poll(int(left * 1000) + 1):
                if pkt.kind == Kind.HELLO and peer in waiting_hello:
                    cid, _, path = bytes(pkt.payload).partition(b"\0")
                    if cid != self.comm_id.encode():
                        raise LinkError(f"rank {peer} said HELLO for another communicator")
                    waiting_hello.discard(peer)
                    self._attach_inbox(peer, path)
                    welcome = self._open_outbox(peer)
                    self.send(
                        peer, Packet(Kind.WELCOME, 0, ENC_PICKLE, self.rank, 0, 0, 0, 0, welcome)
                    )
                elif pkt.kind == Kind.WELCOME and peer in waiting_welcome:
                    waiting_welcome.discard(peer)
                    self._attach_inbox(peer, bytes(pkt.payload or b""))
                elif pkt.kind in (Kind.HELLO, Kind.WELCOME):
                    raise LinkError(
                        f"rank {self.rank}: second {Kind(pkt.kind).name} "
                        f"from rank {peer} during the dance"
                    )
                else:  # a peer done dancing already talks: keep it for the communicator
                    self.early.append((peer, pkt))
        self._mail_ready = True
        self.mail_out = {p for p, b in self._outbox.items() if b is not None}
        # spin only with a CPU per rank of this host: oversubscribed, a spinning rank steals
        # the CPU its peer needs to answer (Open MPI's yield-when-idle for the same reason)
        self.spins = len(self.same_host) + 1 <= _cpus()
        others = set(range(self.size)) - {self.rank}
        self.futex = bool(others) and others == self.mail_out == set(self._inbox)
        if self.futex:
            self.lane.set_state(mailbox.ST_BUSY)
            self.lane.futex_mode = True
            # each wait spins while the host has a CPU for every runnable task, else takes
            # turns with sched_yield, then sleeps (linkpoll's FUTEX_* say why)
            self.lane.host_cpus = os.cpu_count() or 1
            self.lane.spin_room_ns = 1000 * FUTEX_SPIN_ROOM_US if self.spins else 0
            self.lane.yield_ns = 1000 * FUTEX_YIELD_US
        log.debug("comm %s rank %d: %d links open", self.comm_id, self.rank, self.size - 1)

    # -- traffic --------------------------------------------------------------------------

    def send(self, peer: int, pkt: Packet, *, track: bool = False, copy: bool = True) -> Any:
        """Send one packet to ``peer``, numbering it; return a MessageTracker when asked.
        A one-frame packet to a rank on this host goes through its mailbox when there is
        room (and an empty frame wakes the receiver unless it is spinning)."""
        mail = peer in self.mail_out
        payload = pkt.payload
        if mail and (payload is None or len(payload) <= INLINE):
            # unsigned into the mailbox (PeerSigner.unpack says why); signed if it must go
            # through the socket after all (mailbox full)
            r = self.lane.send(
                peer, pkt.kind, pkt.ctx, pkt.enc, pkt.acks, pkt.src, pkt.tag, pkt.msgid,
                pkt.arg, payload,
            )  # fmt: skip
            if r:
                pkt.seq = int(self._send_seq[peer]) - 1
                if r == 2:
                    self.wake(peer)
                return None
        pkt.seq = int(self._send_seq[peer])
        self._send_seq[peer] += 1
        frames = self.signer.pack(pkt)
        out = self._send_frames(peer, frames, track, copy)
        if mail:
            self.lane.note_socket_send(peer)  # a sleeping receiver looks at its sockets
        return out

    @property
    def sleeps(self) -> int:
        """Waits that went to sleep on the futex (their spin found nothing)."""
        return self.lane.sleeps

    def wake(self, peer: int) -> None:
        """An empty frame to a receiver blocked on its sockets (lane.send said so): no
        wake-up when an earlier packet is still unread, as that one's wake-up (or the
        receiver's spin) is still to come and the receiver then takes all of them."""
        try:
            self._send_frames(peer, [b""])
        except LinkError:
            # it may have read the packet and closed since: the packet is delivered, and a
            # dead peer is found by the liveness checks
            pass

    def _send_frames(
        self, peer: int, frames: list[Any], track: bool = False, copy: bool = True
    ) -> Any:
        try:
            if peer < self.rank:
                sock = self.dealers[peer]
            else:
                sock = self.router
                sock.send(_ident(peer), zmq.SNDMORE)
            if len(frames) == 1:
                return sock.send(frames[0])
            sock.send(frames[0], zmq.SNDMORE)
            return sock.send(frames[1], copy=copy, track=track)
        except zmq.ZMQError as e:
            if e.errno == zmq.EHOSTUNREACH:
                raise LinkError(f"rank {peer} is unreachable (its engine is gone?)", [peer]) from e
            raise

    def _open_outbox(self, peer: int) -> bytes:
        """A mailbox toward a rank on this host, its path to send in the dance's HELLO or
        WELCOME (so the peer maps it before either side is done dancing, and no packet can
        outlive a file nobody mapped); b"" for other hosts or when /dev/shm refuses."""
        box = None
        if self.use_mailboxes and peer in self.same_host:
            try:
                box = Mailbox.create()
                self.lane.set_out(peer, box.mapping, box.slots, box.slot_size)
            except OSError as e:
                log.warning(
                    "comm %s rank %d: no mailbox toward rank %d (%s): using the socket",
                    self.comm_id,
                    self.rank,
                    peer,
                    e,
                )
        self._outbox[peer] = box
        return b"" if box is None else box.path.encode()

    def _peer_of(self, ident: bytes) -> int | None:
        """The rank a packet on the accepting socket comes from; None for a stranger's (an
        identity no higher rank of this communicator has: anyone who reaches the tcp port
        can connect and send), which is dropped and counted, so it cannot break the
        communicator."""
        try:
            peer = int(ident[1:]) if ident[:1] == b"r" else -1
        except ValueError:
            peer = -1
        if not self.rank < peer < self.size:
            self.guard.refuse(
                "stranger-packet",
                f"peer links: a packet from identity {ident[:32]!r}, no rank that may "
                f"connect to rank {self.rank}; dropped",
            )
            return None
        return peer

    def _accept(
        self, peer: int, frames: list[Any], *, signed: bool = True
    ) -> list[tuple[int, Packet]]:
        """Check one packet from the socket or a mailbox; return it, preceded by the
        mailbox's packets numbered before it (a link's packets are one sequence over both
        paths, so the socket's packet n+1 means packet n is already in the mailbox)."""
        pkt = self.signer.unpack(
            [f.buffer if isinstance(f, zmq.Frame) else f for f in frames], signed=signed
        )
        if pkt.src != peer:
            raise RemoteProtocolError("bad-source", f"packet says rank {pkt.src}, link is {peer}")
        out: list[tuple[int, Packet]] = []
        if peer in self._inbox:
            while pkt.seq > self._recv_seq[peer] and self._take_from_box(peer, out):
                pass
        if pkt.seq != self._recv_seq[peer]:
            raise RemoteProtocolError(
                "out-of-sequence", f"rank {peer}: packet {pkt.seq}, expected {self._recv_seq[peer]}"
            )
        self._recv_seq[peer] += 1
        if pkt.kind == Kind.FIN:
            self.finished.add(peer)
        if len(frames) == 2:
            pkt.payload = frames[1]  # keep the zmq.Frame: its buffer stays valid with it
        out.append((peer, pkt))
        return out

    def _attach_inbox(self, peer: int, path: bytes) -> None:
        """Map the mailbox a peer announced in the dance (none: b"")."""
        if not path:
            return
        if peer in self._inbox or peer not in self.same_host:
            raise RemoteProtocolError("bad-mailbox", f"rank {peer}: unexpected mailbox {path!r}")
        try:
            box = Mailbox.attach(path.decode(errors="replace"))
            self._inbox[peer] = box
            self.lane.set_in(peer, box.mapping, box.slots, box.slot_size)
        except (OSError, ValueError) as e:
            raise RemoteProtocolError("bad-mailbox", f"rank {peer}: {e}") from e

    def check_peers(self) -> None:
        """Raise LinkError naming the peers found dead: ranks on this host whose process is
        gone (or a zombie), and higher ranks the ROUTER can no longer route to (their
        connection closed). Called when a wait has been quiet for a while: a socket monitor
        would tell at once, but attaching one doubles a round trip's latency in libzmq."""
        lost = [
            r for r, pid in self._local_pids.items() if r not in self.finished and not _alive(pid)
        ]
        lost += [r for r in self._unreachable_higher() if r not in lost]
        gaps = self._mailbox_gaps()
        if gaps and not lost:
            raise LinkError(
                f"rank {self.rank}: out-of-sequence packets in the mailbox of rank(s) {gaps}: "
                f"the earlier ones never came through the socket ({MAILBOX_GAP_S:g} s)"
            )
        if lost:
            raise LinkError(
                f"rank {self.rank}: link to rank(s) {sorted(lost)} lost "
                "(the engine died or closed its communicator)",
                sorted(lost),
            )

    def _mailbox_gaps(self) -> list[int]:
        """Peers whose mailbox has held a packet numbered ahead for over MAILBOX_GAP_S."""
        now = time.monotonic()
        gaps = []
        for peer in self._inbox:
            try:
                head = self.lane.peek(peer)
            except ValueError:
                head = None
            ahead = head is not None and head[1] > self._recv_seq[peer]
            if not ahead:
                self._gap_since.pop(peer, None)
            elif now - self._gap_since.setdefault(peer, now) > MAILBOX_GAP_S:
                gaps.append(peer)
        return gaps

    def _unreachable_higher(self) -> list[int]:
        """Higher ranks the ROUTER cannot reach: with ROUTER_MANDATORY the identity frame of
        a closed peer is refused at once; a live one gets a PING, which it ignores."""
        self._drain_for_fins()
        gone = []
        for k in range(self.rank + 1, self.size):
            if k in self.finished:
                continue
            try:
                self.router.send(_ident(k), zmq.SNDMORE | zmq.NOBLOCK)
            except zmq.ZMQError:
                gone.append(k)
                continue
            pkt = Packet(Kind.PING, 0, 0, self.rank, 0, int(self._send_seq[k]), 0, 0)
            self._send_seq[k] += 1
            self.router.send_multipart(self.signer.pack(pkt))
            if k in self.mail_out:
                self.lane.note_socket_send(k)
        if gone:  # a peer that sent FIN and closed while we probed was freed, not lost
            self._drain_for_fins()
            gone = [k for k in gone if k not in self.finished]
        return gone

    def _drain_for_fins(self) -> None:
        """Take every packet already here into ``early``, so FINs are noted."""
        self.early.extend(self._from_inboxes())
        while True:
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            peer = self._peer_of(frames[0].bytes)
            if peer is None:
                continue
            if len(frames) == 2 and len(frames[1]) == 0:
                continue  # a wake-up
            self.early.extend(self._accept(peer, frames[1:]))
        # and what the socket's packets let through (a FIN numbered after them)
        self.early.extend(self._from_inboxes())

    def close(self, linger_ms: int = 0) -> None:
        """Close every socket; ``linger_ms`` lets packets already queued go out first."""
        if self.closed:
            return
        self.closed = True
        self.guard.stop()  # before the router closes (its monitor would block libzmq)
        for d in self.dealers.values():
            d.close(linger=linger_ms)
        self.lane.close()  # before the mappings it points into
        self.mail_out = set()
        self.futex = False
        for box in [*self._outbox.values(), *self._inbox.values()]:
            if box is not None:
                # after the dance the receiver may still be about to map our mailbox (its
                # WELCOME or HELLO in flight): it unlinks the file then, not us
                box.close(unlink=not self._mail_ready)
        self._outbox.clear()
        self._inbox.clear()
        self.router.close(linger=linger_ms)
        if self._ipc_path:
            try:
                os.unlink(self._ipc_path)
            except OSError:
                pass


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, not ours to inspect
