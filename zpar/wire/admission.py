"""Admission of strangers on a plain listening socket: at most so many connections, a
deadline to authenticate, and no death by descriptor exhaustion.

For the sockets zpar serves outside zmq (``zpar impi-server``, the AMUSE gateway's
listener, a web dashboard): anyone who reaches the port can connect, so the server

- holds at most ``max_peers`` connections at once: past it, the oldest connection that
  has not authenticated yet is closed to make room (a flood of silent strangers cannot
  lock a real peer out: it authenticates within a round trip, long before the flood
  rotates 64 connections), and when every slot is authenticated the new connection is
  accepted and closed at once (so the kernel's backlog never fills);
- gives each connection ``auth_timeout`` seconds to authenticate (``authenticated``),
  then closes it: a stranger cannot hold a slot by saying nothing;
- survives EMFILE/ENFILE (the process or the system out of descriptors): it closes the
  oldest connection not authenticated yet and accepts the new one in its place; with none
  to close, it frees a descriptor kept in reserve to accept and close the waiting
  connection, and takes it back, so the listener neither spins (a pending connection keeps
  it readable) nor dies.

Each refusal is logged (at most once a second per reason) and counted by reason.
Sans-IO where it can be: ``accept`` is the one call that touches the socket.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
import time
from collections import Counter
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)

#: Connections one server holds at once by default, authenticated or not: an IMPI job
#: has at most 32 clients, an AMUSE worker one; the rest is room for strangers' attempts
#: while the real peers connect.
MAX_PEERS = 64

#: Seconds a connection has to authenticate: LAM's IMPI client and zpar's send AUTH on
#: connecting; a peer silent this long is not one of them.
AUTH_TIMEOUT = 10.0

#: errnos of accept() (and open()) that say "no descriptor for it now", not "broken".
OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

#: Seconds between two log lines of the same refusal reason.
_LOG_EVERY = 1.0


class RefusalLog:
    """Refused connections counted by reason into ``counts``; each reason logged at most
    once a second (a flood must not flood the log too)."""

    def __init__(self, what: str, counts: Counter[str] | None = None) -> None:
        self.what = what
        self.counts: Counter[str] = Counter() if counts is None else counts
        self._logged: dict[str, float] = {}

    def __call__(self, reason: str, detail: str) -> None:
        self.counts[reason] += 1
        now = time.monotonic()
        if now - self._logged.get(reason, float("-inf")) >= _LOG_EVERY:
            self._logged[reason] = now
            log.warning(
                "%s: connection refused (%s): %s; %d refused so far",
                self.what,
                reason,
                detail,
                sum(self.counts.values()),
            )


class Admission:
    """One listener's admission: which peers are in, since when, and who authenticated."""

    def __init__(
        self,
        what: str,
        *,
        max_peers: int = MAX_PEERS,
        auth_timeout: float = AUTH_TIMEOUT,
        evict: Callable[[Hashable], None] | None = None,
    ) -> None:
        """``evict(peer)``: close a peer's connection (the server's own clean-up) when its
        slot or its descriptor is needed for a newer connection."""
        if max_peers < 1:
            raise ValueError(f"max_peers must be >= 1, got {max_peers}")
        self.what = what
        self.max_peers = max_peers
        self.auth_timeout = auth_timeout
        self.evict = evict
        #: connections not authenticated yet: peer -> deadline (monotonic), oldest first
        self.pending: dict[Hashable, float] = {}
        #: authenticated connections
        self.admitted: set[Hashable] = set()
        #: refused connections by reason: ``full``, ``evicted``, ``descriptors``,
        #: ``auth-timeout``
        self.refused: Counter[str] = Counter()
        self._refuse = RefusalLog(what, self.refused)
        self._reserve: int | None = None
        self._take_reserve()

    # -- the listener ---------------------------------------------------------------------

    def accept(self, listener: socket.socket) -> tuple[socket.socket, str] | None:
        """Accept one connection if there is room: (socket, "ip:port"), else None (none
        waiting, or one refused: closed at once, counted and logged)."""
        try:
            sock, addr = listener.accept()
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            if e.errno not in OUT_OF_DESCRIPTORS:
                raise
            if not (self.pending and self.evict is not None):
                self._shed(listener, e)
                return None
            self._evict_oldest(f"out of file descriptors ({e.strerror})")
            try:
                sock, addr = listener.accept()
            except OSError as e2:
                if e2.errno in OUT_OF_DESCRIPTORS:
                    self._shed(listener, e2)
                return None
        where = _address(addr)
        if len(self.admitted) >= self.max_peers:
            sock.close()
            self._refuse("full", f"{where}: already {self.max_peers} connections")
            return None
        return sock, where

    def _shed(self, listener: socket.socket, e: OSError) -> None:
        """Out of descriptors: free the reserve, accept the waiting connection and close it
        (so it stops making the listener readable), take the reserve back."""
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None
        try:
            sock, addr = listener.accept()
        except OSError:
            where = "a peer"
            time.sleep(0.05)  # no descriptor even so: do not spin on a readable listener
        else:
            where = _address(addr)
            sock.close()
        self._take_reserve()
        self._refuse("descriptors", f"{where}: out of file descriptors ({e.strerror})")

    def _take_reserve(self) -> None:
        try:
            self._reserve = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._reserve = None  # taken back at the next shed, once a descriptor is free

    # -- the peers ------------------------------------------------------------------------

    def opened(self, peer: Hashable, now: float | None = None) -> list[Hashable]:
        """A connection ``accept`` returned, known from now on as ``peer``; returns the
        peers evicted to make room (the oldest not authenticated), each already given to
        ``evict`` when there is one, else for the caller to close."""
        evicted = []
        while self.pending and len(self.pending) + len(self.admitted) >= self.max_peers:
            evicted.append(self._evict_oldest(f"already {self.max_peers} connections"))
        self.pending[peer] = (time.monotonic() if now is None else now) + self.auth_timeout
        return evicted

    def _evict_oldest(self, why: str) -> Hashable:
        oldest = next(iter(self.pending))
        del self.pending[oldest]
        self._refuse("evicted", f"peer {oldest} not authenticated, closed for a newer one: {why}")
        if self.evict is not None:
            self.evict(oldest)
        return oldest

    def authenticated(self, peer: Hashable) -> None:
        """``peer`` proved who it is: no deadline any more."""
        if self.pending.pop(peer, None) is not None:
            self.admitted.add(peer)

    def closed(self, peer: Hashable) -> None:
        self.pending.pop(peer, None)
        self.admitted.discard(peer)

    def overdue(self, now: float | None = None) -> list[Hashable]:
        """Peers past their deadline, forgotten here and counted: the caller closes them."""
        now = time.monotonic() if now is None else now
        late = [p for p, due in self.pending.items() if due <= now]
        for p in late:
            del self.pending[p]
            self._refuse(
                "auth-timeout", f"peer {p} did not authenticate within {self.auth_timeout:g} s"
            )
        return late

    def close(self) -> None:
        if self._reserve is not None:
            os.close(self._reserve)
            self._reserve = None


def _address(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)
