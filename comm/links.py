"""One rank's peer links: opened in the IMPI dance order, then packets in and out.

::

    rank r                                    rank j < r                rank k > r
    ┌──────────────────────────────┐
    │ ROUTER (bound: ipc + tcp) ◄──┼──────────────────────────────────── DEALER of rank k
    │ DEALER to rank j ────────────┼──► ROUTER of rank j
    │ monitor sockets (disconnects)│
    └──────────────────────────────┘

The dance (seed 003, "Shall We Dance?"): the higher rank connects to each lower one and sends
its rank first (a signed HELLO carrying the communicator id); the lower one accepts from
anybody, checks the rank and the id, and answers WELCOME. A link to a peer on the same host
uses ipc, to another host tcp. Every pair has exactly one connection, so packets between two
ranks arrive in the order they were sent.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import zmq
from zmq.utils.monitor import recv_monitor_message

from zpar.errors import RemoteProtocolError

from .peerwire import ENC_PICKLE, Kind, Packet, Signer

log = logging.getLogger(__name__)


class LinkError(ConnectionError):
    """A peer link could not be opened or was lost."""

    def __init__(self, message: str, ranks: list[int] | None = None) -> None:
        super().__init__(message)
        self.ranks = ranks or []


def _ident(rank: int) -> bytes:
    return b"r%d" % rank


class PeerLinks:
    """The sockets of rank ``rank`` in a communicator of ``size`` named ``comm_id``."""

    def __init__(
        self,
        rank: int,
        size: int,
        comm_id: str,
        key: bytes,
        *,
        context: zmq.Context | None = None,
    ) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} out of range for size {size}")
        self.rank, self.size, self.comm_id = rank, size, comm_id
        self.signer = Signer(key)
        self.ctx = context or zmq.Context.instance()
        self.router = self.ctx.socket(zmq.ROUTER)
        for opt, val in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.router.setsockopt(opt, val)
        self.router.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.dealers: dict[int, zmq.Socket] = {}
        self.endpoints: dict[str, str] = {}
        self._send_seq = [0] * size
        self._recv_seq = [0] * size
        self._monitors: dict[zmq.Socket, int | None] = {}
        self._ipc_path: str | None = None
        self.poller = zmq.Poller()
        self.closed = False
        #: peers that sent FIN: their links closing is expected
        self.finished: set[int] = set()
        #: packets that arrived during the dance from peers already done with it
        self.early: list[tuple[int, Packet]] = []

    # -- opening --------------------------------------------------------------------------

    def bind(self, tcp_ip: str = "127.0.0.1") -> dict[str, str]:
        """Bind the accepting socket on ipc (same-host peers) and tcp; return both."""
        tag = "".join(c for c in self.comm_id if c.isalnum())[:16]
        path = os.path.join(tempfile.gettempdir(), f"zpar-comm-{tag}-{os.getpid()}-{self.rank}")
        self.router.bind(f"ipc://{path}")
        self._ipc_path = path
        port = self.router.bind_to_random_port(f"tcp://{tcp_ip}")
        self.endpoints = {
            "hostname": socket.gethostname(),
            "ipc": f"ipc://{path}",
            "tcp": f"tcp://{tcp_ip}:{port}",
        }
        return self.endpoints

    def dance(self, table: list[dict[str, str]], timeout: float = 60.0) -> None:
        """Connect to every lower rank and accept every higher one, as IMPI's dance; return
        when every link is confirmed both ways, or raise LinkError naming who is missing."""
        if len(table) != self.size:
            raise ValueError(f"endpoint table has {len(table)} entries for size {self.size}")
        me = table[self.rank]["hostname"]
        for j in range(self.rank):
            d = self.ctx.socket(zmq.DEALER)
            for opt, val in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
                d.setsockopt(opt, val)
            d.setsockopt(zmq.ROUTING_ID, _ident(self.rank))
            self._watch(d, j)
            d.connect(table[j]["ipc"] if table[j]["hostname"] == me else table[j]["tcp"])
            self.dealers[j] = d
            self.poller.register(d, zmq.POLLIN)
            self.send(
                j, Packet(Kind.HELLO, 0, ENC_PICKLE, self.rank, 0, 0, 0, 0, self.comm_id.encode())
            )
        self._watch(self.router, None)
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
                    if bytes(pkt.payload) != self.comm_id.encode():
                        raise LinkError(f"rank {peer} said HELLO for another communicator")
                    waiting_hello.discard(peer)
                    self.send(peer, Packet(Kind.WELCOME, 0, 0, self.rank, 0, 0, 0, 0))
                elif pkt.kind == Kind.WELCOME and peer in waiting_welcome:
                    waiting_welcome.discard(peer)
                elif pkt.kind in (Kind.HELLO, Kind.WELCOME):
                    raise LinkError(
                        f"rank {self.rank}: second {Kind(pkt.kind).name} "
                        f"from rank {peer} during the dance"
                    )
                else:  # a peer done dancing already talks: keep it for the communicator
                    self.early.append((peer, pkt))
        log.debug("comm %s rank %d: %d links open", self.comm_id, self.rank, self.size - 1)

    def _watch(self, sock: zmq.Socket, peer: int | None) -> None:
        mon = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._monitors[mon] = peer
        self.poller.register(mon, zmq.POLLIN)

    # -- traffic --------------------------------------------------------------------------

    def send(self, peer: int, pkt: Packet, *, track: bool = False, copy: bool = True) -> Any:
        """Send one packet to ``peer``, numbering it; return a MessageTracker when asked."""
        pkt.seq = self._send_seq[peer]
        self._send_seq[peer] += 1
        frames = self.signer.pack(pkt)
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

    def poll(self, timeout_ms: int) -> Iterator[tuple[int, Packet]]:
        """Yield the packets that arrive within timeout_ms (all that are ready, at least one
        wait); raise LinkError when a link drops."""
        if self.early:
            early, self.early = self.early, []
            yield from early
            timeout_ms = 0
        ready = [sock for sock, _ in self.poller.poll(timeout_ms)]
        # data first: a peer's last packets are read before the news that it closed
        ready.sort(key=lambda sock: sock in self._monitors)
        for sock in ready:
            if sock in self._monitors:
                self._on_monitor(sock)
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                if sock is self.router:
                    peer = self._peer_of(frames[0].bytes)
                    frames = frames[1:]
                else:
                    peer = next(r for r, d in self.dealers.items() if d is sock)
                yield peer, self._check(peer, frames)

    def _peer_of(self, ident: bytes) -> int:
        try:
            peer = int(ident[1:])
        except ValueError:
            raise RemoteProtocolError("bad-identity", repr(ident)) from None
        if not self.rank < peer < self.size:
            raise RemoteProtocolError("bad-identity", f"rank {peer} may not connect to {self.rank}")
        return peer

    def _check(self, peer: int, frames: list[Any]) -> Packet:
        pkt = self.signer.unpack([f.buffer if isinstance(f, zmq.Frame) else f for f in frames])
        if pkt.src != peer:
            raise RemoteProtocolError("bad-source", f"packet says rank {pkt.src}, link is {peer}")
        if pkt.seq != self._recv_seq[peer]:
            raise RemoteProtocolError(
                "out-of-sequence", f"rank {peer}: packet {pkt.seq}, expected {self._recv_seq[peer]}"
            )
        self._recv_seq[peer] += 1
        if pkt.kind == Kind.FIN:
            self.finished.add(peer)
        if len(frames) == 2:
            pkt.payload = frames[1]  # keep the zmq.Frame: its buffer stays valid with it
        return pkt

    def _on_monitor(self, mon: zmq.Socket) -> None:
        lost: list[int] = []
        disconnected = False
        while True:
            try:
                event = recv_monitor_message(mon, zmq.NOBLOCK)
            except zmq.Again:
                break
            if event["event"] == zmq.EVENT_DISCONNECTED:
                peer = self._monitors[mon]
                gone = [peer] if peer is not None else self._unreachable_higher()
                lost.extend(r for r in gone if r not in self.finished)
                disconnected = disconnected or peer is None or peer not in self.finished
        if disconnected and (lost or self._monitors[mon] is not None):
            raise LinkError(
                f"rank {self.rank}: link to rank(s) {sorted(set(lost)) or 'above me'} lost "
                "(the engine died or closed its communicator)",
                sorted(set(lost)),
            )

    def _unreachable_higher(self) -> list[int]:
        """Which higher ranks the ROUTER can no longer reach (it forgets a peer whose
        connection closed; a probe frame is never sent since ROUTER_MANDATORY refuses first)."""
        while True:  # FINs that came in meanwhile first: a freed peer is not a lost one
            try:
                frames = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            peer = self._peer_of(frames[0].bytes)
            self.early.append((peer, self._check(peer, frames[1:])))
        gone = []
        for k in range(self.rank + 1, self.size):
            if k in self.finished:
                continue
            try:
                self.router.send(_ident(k), zmq.SNDMORE | zmq.NOBLOCK)
            except zmq.ZMQError:
                gone.append(k)
                continue
            pkt = Packet(Kind.PING, 0, 0, self.rank, 0, self._send_seq[k], 0, 0)
            self._send_seq[k] += 1
            self.router.send_multipart(self.signer.pack(pkt))
        return gone

    def close(self, linger_ms: int = 0) -> None:
        """Close every socket; ``linger_ms`` lets packets already queued go out first."""
        if self.closed:
            return
        self.closed = True
        for sock in (self.router, *self.dealers.values()):
            try:
                sock.disable_monitor()
            except zmq.ZMQError:
                pass
        for mon in self._monitors:
            mon.close(linger=0)
        for d in self.dealers.values():
            d.close(linger=linger_ms)
        self.router.close(linger=linger_ms)
        if self._ipc_path:
            try:
                os.unlink(self._ipc_path)
            except OSError:
                pass
