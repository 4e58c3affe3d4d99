"""HeartMonitor: pings every engine's heart and notices who stopped answering.

The hub PUBs ``PING + counter`` every period; each heart echoes it on the pong ROUTER as
``[uuid, PING + counter]``. An engine whose newest echo is more than ``max_misses`` pings
old is declared dead. Counting pings rather than seconds means a stalled hub loop (a long
database flush) delays everyone's verdict equally instead of killing healthy engines.

Faster, when it can: the pong ROUTER's TCP connection to a heart closes the moment its
process dies. The monitor remembers which connection (file descriptor) each heart echoes
on; when one closes, that engine becomes a suspect and is probed every few ms. A live
heart reconnects within zmq's reconnect interval and answers; a dead one is declared dead
after ``suspect_grace`` seconds instead of ``max_misses`` periods.

A disconnect event names a descriptor, and the OS gives a closed descriptor's number to
the next connection at once; the events come through the listener guard's thread
(zpar.wire.listenguard), so one can be read after a new engine's first echo on the same
number. The monitor therefore remembers the socket (its inode, ``socket_identity``) each
heart echoes on, not just its number: an event whose number still names the heart's own
socket is about an earlier connection (looked at again for a moment: libzmq emits the
event just before it closes the descriptor), and an echo on a number that now names
another socket proves the heart remembered there lost its connection.

Probes (``PROBE + n``) count for nothing but liveness: they also let an engine that is
registering be noticed as soon as its heart is up.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable

import zmq

from zpar.constants import PING
from zpar.wire.sockets import recv_monitor_event, socket_identity

log = logging.getLogger(__name__)

PROBE = PING + b"probe"

#: Seconds a heart whose connection closed has to answer a probe before it is dead.
SUSPECT_GRACE = 0.5


class HeartMonitor:
    def __init__(
        self,
        ping: zmq.Socket,
        pong: zmq.Socket,
        *,
        period: float,
        max_misses: int,
        on_new_heart: Callable[[bytes], None],
        on_heart_failure: Callable[[bytes, str], None],
        suspect_grace: float = SUSPECT_GRACE,
        identity: Callable[[int], Hashable | None] = socket_identity,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``identity``: the socket a descriptor names now, None if it is closed; it and
        ``clock`` are the seams of the sans-IO tests."""
        if period <= 0 or max_misses < 1:
            raise ValueError(
                f"heartbeat period must be > 0 and misses >= 1, got {period} and {max_misses}"
            )
        self.ping = ping
        self.pong = pong
        self.period = period
        self.max_misses = max_misses
        self.on_new_heart = on_new_heart
        self.on_heart_failure = on_heart_failure
        self.suspect_grace = suspect_grace
        self.counter = 0
        #: heartbeats ignored, by reason (malformed, future-beat): the controller's status
        self.refused: Counter[str] = Counter()
        self.probes = 0
        #: uuid -> newest ping counter it echoed
        self.hearts: dict[bytes, int] = {}
        self.identity = identity
        self.clock = clock
        #: connection (descriptor, socket identity) of each heart, to know whose closed
        self._conn_of: dict[bytes, tuple[int, Hashable]] = {}
        self._uuid_of_fd: dict[int, bytes] = {}
        #: uuid -> (first probe number that proves life, deadline)
        self.suspects: dict[bytes, tuple[int, float]] = {}
        #: uuid -> deadline: an event named its descriptor while its socket was still open
        self.rechecks: dict[bytes, float] = {}
        self.events: zmq.Socket | None = None

    def watch_connections(self, events: zmq.Socket | None = None) -> zmq.Socket:
        """A socket of the pong ROUTER's disconnect events, for the hub loop to poll:
        ``events`` when another part owns the socket's monitor (zpar.wire.listenguard)."""
        self.events = events or self.pong.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        return self.events

    def watch(self, uuid: bytes, counter: int | None = None) -> None:
        self.hearts[uuid] = self.counter if counter is None else counter

    def forget(self, uuid: bytes) -> None:
        self.hearts.pop(uuid, None)
        self.suspects.pop(uuid, None)
        self.rechecks.pop(uuid, None)
        self._unmap(uuid)

    def _unmap(self, uuid: bytes) -> None:
        conn = self._conn_of.pop(uuid, None)
        if conn is not None and self._uuid_of_fd.get(conn[0]) == uuid:
            del self._uuid_of_fd[conn[0]]

    def _is_open(self, uuid: bytes) -> bool:
        """True if the descriptor ``uuid`` echoed on still names the socket it echoed on."""
        fd, ident = self._conn_of[uuid]
        return self.identity(fd) == ident

    def _lost(self, uuid: bytes, now: float) -> None:
        """``uuid``'s connection closed: a suspect, probed until it answers or its grace ends."""
        self._unmap(uuid)
        self.rechecks.pop(uuid, None)
        if uuid not in self.hearts or uuid in self.suspects:
            return  # a suspect already: its grace is not extended (queued echoes)
        self.suspects[uuid] = (self.probes + 1, now + self.suspect_grace)
        log.info("engine %s: heartbeat connection closed; probing", uuid.decode("ascii", "replace"))

    @property
    def probing(self) -> bool:
        """True while someone must hear a probe soon (suspects), or an event must be looked
        at again (rechecks)."""
        return bool(self.suspects or self.rechecks)

    def probe(self) -> None:
        """An extra ping that counts for nothing but liveness (see the module doc)."""
        self.probes += 1
        self.ping.send(PROBE + str(self.probes).encode("ascii"))

    def beat(self) -> None:
        """Send the next ping and declare dead every heart too far behind."""
        self.counter += 1
        self.ping.send(PING + str(self.counter).encode("ascii"))
        limit = self.counter - self.max_misses - 1
        dead = [(u, last) for u, last in self.hearts.items() if last < limit]
        for uuid, last in dead:
            self.forget(uuid)
            log.warning(
                "engine %s missed %d heartbeats (%.2f s): declared dead",
                uuid.decode("ascii", "replace"),
                self.counter - 1 - last,
                (self.counter - 1 - last) * self.period,
            )
            self.on_heart_failure(uuid, f"missed {self.counter - 1 - last} heartbeats")

    def check_suspects(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        for uuid, until in list(self.rechecks.items()):
            if uuid not in self._conn_of:
                del self.rechecks[uuid]
            elif not self._is_open(uuid):
                self._lost(uuid, now)
            elif until <= now:  # the event was about an earlier connection on its number
                del self.rechecks[uuid]
        for uuid, (_, deadline) in list(self.suspects.items()):
            if deadline <= now:
                self.forget(uuid)
                log.warning(
                    "engine %s: its heartbeat connection closed and it did not answer within "
                    "%.2f s: declared dead",
                    uuid.decode("ascii", "replace"),
                    self.suspect_grace,
                )
                self.on_heart_failure(
                    uuid,
                    f"its connection closed and it did not answer within {self.suspect_grace} s",
                )

    def handle_events(self) -> None:
        """Drain the disconnect events: each closed heart connection makes a suspect."""
        if self.events is None:
            return
        while True:
            try:
                event = recv_monitor_event(self.events, zmq.NOBLOCK)
            except zmq.Again:
                return
            if event["event"] != zmq.EVENT_DISCONNECTED:
                continue
            uuid = self._uuid_of_fd.get(int(event["value"]))
            if uuid is None:
                continue
            t = self.clock()
            if self._is_open(uuid):
                # its socket is still there: the event is about an earlier connection on
                # this number (read late), or libzmq has not closed it yet: look again
                self.rechecks[uuid] = t + self.suspect_grace
                log.debug(
                    "engine %s: a disconnect event for descriptor %d, which still names its "
                    "heartbeat connection",
                    uuid.decode("ascii", "replace"),
                    event["value"],
                )
                continue
            self._lost(uuid, t)

    def handle_pong(self) -> None:
        """Drain the pong socket."""
        pong = self.pong
        while True:
            try:
                frames = pong.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            if len(frames) != 2:
                self.refused["malformed"] += 1
                log.warning("malformed heartbeat of %d frames ignored", len(frames))
                continue
            uuid, payload = frames[0].bytes, frames[1].bytes
            if not payload.startswith(PING):
                self.refused["malformed"] += 1
                log.warning("malformed heartbeat %r from %r ignored", payload[:32], uuid[:64])
                continue
            known = uuid in self.hearts
            if payload.startswith(PROBE):
                self._probe_echo(uuid, payload, known)
            else:
                self._beat_echo(uuid, payload, known)
            if uuid in self.hearts and uuid not in self._conn_of:
                self._remember_connection(uuid, frames[0])

    def _beat_echo(self, uuid: bytes, payload: bytes, known: bool) -> None:
        try:
            n = int(payload[len(PING) :])
        except ValueError:
            self.refused["malformed"] += 1
            log.warning("malformed heartbeat %r from %r ignored", payload[:32], uuid[:64])
            return
        if n > self.counter:
            self.refused["future-beat"] += 1
            log.warning("heartbeat %d > %d (sent) from %r ignored", n, self.counter, uuid[:64])
            return
        if not known:
            self.on_new_heart(uuid)  # may call watch()
        elif n > self.hearts[uuid]:
            self.hearts[uuid] = n

    def _probe_echo(self, uuid: bytes, payload: bytes, known: bool) -> None:
        if not known:
            self.on_new_heart(uuid)
            return
        suspect = self.suspects.get(uuid)
        if suspect is None:
            return
        try:
            n = int(payload[len(PROBE) :] or 0)
        except ValueError:
            return
        if n >= suspect[0]:  # an answer to a probe sent after the connection closed
            del self.suspects[uuid]
            log.info("engine %s answered after reconnecting", uuid.decode("ascii", "replace"))

    def _remember_connection(self, uuid: bytes, frame: zmq.Frame) -> None:
        try:
            fd = frame.get(zmq.SRCFD)
        except zmq.ZMQError:  # a transport without file descriptors (inproc)
            return
        if fd is None or fd < 0:
            return
        ident = self.identity(fd)
        if ident is None:  # closed already (its event may name nobody): probe it
            self._lost(uuid, self.clock())
            return
        owner = self._uuid_of_fd.get(fd)
        if owner is not None and owner != uuid:
            if self._conn_of[owner][1] == ident:
                return  # owner's socket, open: this echo was queued from an earlier one
            # the number names another socket now: owner's connection closed (its event
            # is still on its way through the listener guard)
            self._lost(owner, self.clock())
        self._conn_of[uuid] = (fd, ident)
        self._uuid_of_fd[fd] = uuid
