"""ClientLedger: the task scheduler's per-client delivery policy, sans-IO (issue 13 item 3).

Why: a client that stops reading (SIGSTOP, a laptop asleep, a notebook stuck in a cell) must
not make the scheduler buffer every result of its queued tasks (20,000 results of 100 KB
took it to 2 GB), and a client that is gone must not keep engines busy with tasks whose
results nobody will read. The ledger decides and records; the client link
(schedulers/clientlink.py) does the I/O and tells it what each send found. It is the task book's Ledger
(schedulers/ledger.py): the book asks ``admit(client)`` before placing a client's task and
holds the task, for that client alone, while the answer is no.

- A reply the client's pipe refuses (libzmq's EAGAIN at the socket's SNDHWM, under
  ROUTER_MANDATORY) is *parked* and the client is *stalled*: its later replies park behind
  it (order kept) and ``admit`` says no, so its tasks not yet on an engine are held instead
  of run into more results, and the engines serve other clients. The link's ``flush``
  retries the parked replies, oldest first, and names the clients that caught up (the book then places their held
  tasks, in order). Nothing is lost and nothing fails for a client that is merely slow.
  What a stalled client costs the scheduler: the SNDHWM messages in libzmq's pipe plus the
  replies of its tasks that were already running.
- Every client message's connection (its file descriptor) is noted; when that connection
  closes the client is *gone* (libzmq gives a reconnected DEALER a new routing identity, so
  a gone identity never comes back): its parked replies are dropped, ``admit`` says no for
  ever and the caller cancels its tasks not yet on an engine. A stopped client's connection
  stays open (its kernel still holds the socket): stopped is slow, not gone.
- The close events come through the listener guard's thread (zpar.wire.listenguard), so one
  can be read after a new client's first message on the same, reused descriptor number.
  The caller therefore names the socket too (its inode, zpar.wire.sockets.socket_identity):
  a close whose number still names the socket the client was seen on is not that client's
  (the caller looks again a moment later: libzmq emits the event just before it closes the
  descriptor), and a message on a number that names another socket now proves the client
  seen there before gone.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Hashable
from enum import Enum
from typing import Any

#: Gone identities remembered, to cancel a submission or drop a reply that was already on
#: its way when the connection closed; the oldest are forgotten (identities never repeat).
GONE_REMEMBERED = 4096


class Delivery(Enum):
    """What the ledger says of a reply handed to it."""

    SEND = "send"  # send it now
    PARKED = "parked"  # kept until the client reads again
    DROPPED = "dropped"  # its client is gone


class ClientLedger:
    """Per-client state of delivery: parked replies, connections, gone clients. It decides
    and records; the caller (schedulers/clientlink.py) sends and reports what the send
    found (``full``, ``forget``, ``sent_oldest``)."""

    def __init__(self, gone_remembered: int = GONE_REMEMBERED) -> None:
        self._parked: dict[bytes, deque[Any]] = {}  # stalled clients' replies, oldest first
        self._by_fd: dict[int, bytes] = {}  # open connection -> the client last seen on it
        #: client -> (fd, the socket it named when the client was seen on it, or None)
        self._conn_of: dict[bytes, tuple[int, Hashable | None]] = {}
        self._gone: OrderedDict[bytes, None] = OrderedDict()
        self._gone_remembered = gone_remembered

    # -- connections ------------------------------------------------------------------------

    def known(self, client: bytes, fd: int) -> bool:
        """True if ``client`` was already seen on connection ``fd`` (the common case: the
        caller need not look at connection events before noting it again)."""
        conn = self._conn_of.get(client)
        return conn is not None and conn[0] == fd

    def owner(self, fd: int) -> bytes | None:
        """The client last seen on connection ``fd``."""
        return self._by_fd.get(fd)

    def seen(self, client: bytes, fd: int, sock: Hashable | None = None) -> bytes | None:
        """A message of ``client`` came on connection ``fd``, which names socket ``sock``
        now (None: unknown). Call it after every close event already read. Returns the
        client seen on ``fd`` before whose socket this proves closed (gone: the caller
        forgets it), else None."""
        if client in self._gone:
            return None
        previous = self._by_fd.get(fd)
        displaced = None
        if previous is not None and previous != client:
            was = self._conn_of[previous][1]
            if sock is not None and was == sock:
                return None  # previous's socket, open: this message came on an earlier one
            del self._conn_of[previous]
            if sock is not None:  # the number names another socket: previous's closed
                displaced = previous
        old = self._conn_of.get(client)
        if old is not None and old[0] != fd:
            self._by_fd.pop(old[0], None)
        self._by_fd[fd] = client
        self._conn_of[client] = (fd, sock)
        return displaced

    def closed(self, fd: int, sock: Hashable | None = None) -> bytes | None:
        """Connection ``fd`` closed, and ``fd`` names socket ``sock`` now (None: closed, or
        unknown): the client last seen on it, now gone (the caller cancels its tasks through
        ``forget``); None for a connection no client used, or when ``fd`` still names the
        socket its client was seen on (the event was about an earlier connection on that
        number, or came just before libzmq closed it: ``owner(fd)`` still names the client
        and the caller asks again soon)."""
        client = self._by_fd.get(fd)
        if client is None:
            return None
        if sock is not None and self._conn_of[client][1] == sock:
            return None
        del self._by_fd[fd]
        del self._conn_of[client]
        return client

    def is_gone(self, client: bytes) -> bool:
        return client in self._gone

    def forget(self, client: bytes) -> None:
        """``client`` is gone: drop its parked replies; its later replies are dropped and its
        tasks never admitted (the caller cancels those it holds)."""
        self._gone[client] = None
        while len(self._gone) > self._gone_remembered:
            self._gone.popitem(last=False)
        conn = self._conn_of.pop(client, None)
        if conn is not None and self._by_fd.get(conn[0]) == client:
            del self._by_fd[conn[0]]
        self._parked.pop(client, None)

    # -- replies ----------------------------------------------------------------------------

    def stalled(self, client: bytes) -> bool:
        return client in self._parked

    def deliver(self, client: bytes, reply: Any) -> Delivery:
        """What to do with ``reply`` for ``client``: SEND it now (then report a full pipe
        with ``full``, a gone client with ``forget``), or it is PARKED behind those already
        waiting, or DROPPED (its client is gone)."""
        if client in self._gone:
            return Delivery.DROPPED
        park = self._parked.get(client)
        if park is not None:
            park.append(reply)
            return Delivery.PARKED
        return Delivery.SEND

    def full(self, client: bytes, reply: Any) -> None:
        """The client's pipe refused ``reply`` (at its high-water mark): parked, and the
        client is stalled until ``flush`` gets its replies out."""
        self._parked.setdefault(client, deque()).appendleft(reply)

    def stalled_clients(self) -> list[bytes]:
        """The clients with parked replies, for the caller's flush."""
        return list(self._parked)

    def oldest(self, client: bytes) -> Any:
        """``client``'s oldest parked reply, the next to try (None if none)."""
        park = self._parked.get(client)
        return park[0] if park else None

    def sent_oldest(self, client: bytes) -> bool:
        """The oldest parked reply of ``client`` went out; True if it has caught up (its
        tasks are admitted again)."""
        park = self._parked[client]
        park.popleft()
        if park:
            return False
        del self._parked[client]
        return True

    # -- the task book's Ledger -------------------------------------------------------------

    #: the limit is the client's pipe, not its tasks in flight: ``placed`` / ``answered``
    #: count nothing (and the book does not call them)
    counts_tasks = False

    def admit(self, client: bytes) -> bool:
        """May a task of ``client`` go to an engine now? Not while it is not reading (its
        result would wait here), never once it is gone (nobody would read it)."""
        return client not in self._parked and client not in self._gone

    def placed(self, client: bytes) -> None:
        """Nothing to count: the limit is the client's pipe, not its tasks in flight."""

    def answered(self, client: bytes) -> None:
        """Nothing to count (see ``placed``)."""

    # -- reports ----------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        """True while any reply is parked (the link retries its ``flush`` on a timer)."""
        return bool(self._parked)

    def counts(self) -> dict[str, int]:
        """{stalled, parked, connections}: for logs and status queries."""
        return {
            "stalled": len(self._parked),
            "parked": sum(len(p) for p in self._parked.values()),
            "connections": len(self._by_fd),
        }

    def parked_of(self, client: bytes) -> int:
        park = self._parked.get(client)
        return len(park) if park is not None else 0
