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
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import psutil
import zmq

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

    # -- opening --------------------------------------------------------------------------

    def bind(self, tcp_ip: str = "127.0.0.1") -> dict[str, str]:
        """Bind the accepting socket on ipc (same-host peers) and tcp; return both."""
        tag = "".join(c for c in self.comm_id if c.isalnum())[:16]
        path = os.path.join(tempfile.gettempdir(), f"zpar-comm-{tag}-{os.getpid()}-{self.rank}")
        self.router.bind(f"ipc://{path}")
        self._ipc_path = path
        port = self.router.bind_to_random_port(f"tcp://{tcp_ip}")
        self.endpoints = {
            "pid": os.getpid(),
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
            d.connect(table[j]["ipc"] if table[j]["hostname"] == me else table[j]["tcp"])
            self.dealers[j] = d
            self.poller.register(d, zmq.POLLIN)
            self.send(
                j, Packet(Kind.HELLO, 0, ENC_PICKLE, self.rank, 0, 0, 0, 0, self.comm_id.encode())
            )
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
        for sock, _ in self.poller.poll(timeout_ms):
            if sock is self.router:
                peer = -1
            else:
                peer = next(r for r, d in self.dealers.items() if d is sock)
            # drain while zmq says more is queued (cheaper than a failing recv's exception)
            while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                frames = sock.recv_multipart(copy=False)
                if peer < 0:
                    src = self._peer_of(frames[0].bytes)
                    yield src, self._check(src, frames[1:])
                else:
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

    def check_peers(self) -> None:
        """Raise LinkError naming the peers found dead: ranks on this host whose process is
        gone (or a zombie), and higher ranks the ROUTER can no longer route to (their
        connection closed). Called when a wait has been quiet for a while: a socket monitor
        would tell at once, but attaching one doubles a round trip's latency in libzmq."""
        lost = [
            r for r, pid in self._local_pids.items() if r not in self.finished and not _alive(pid)
        ]
        lost += [r for r in self._unreachable_higher() if r not in lost]
        if lost:
            raise LinkError(
                f"rank {self.rank}: link to rank(s) {sorted(lost)} lost "
                "(the engine died or closed its communicator)",
                sorted(lost),
            )

    def _unreachable_higher(self) -> list[int]:
        """Higher ranks the ROUTER cannot reach: with ROUTER_MANDATORY the identity frame of
        a closed peer is refused at once; a live one gets a PING, which it ignores."""
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
        for d in self.dealers.values():
            d.close(linger=linger_ms)
        self.router.close(linger=linger_ms)
        if self._ipc_path:
            try:
                os.unlink(self._ipc_path)
            except OSError:
                pass


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True  # exists, not ours to inspect
