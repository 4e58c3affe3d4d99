"""HeartMonitor: pings every engine's heart and notices who stopped answering.

The hub PUBs ``PING + counter`` every period; each heart echoes it on the pong ROUTER as
``[uuid, PING + counter]``. An engine whose newest echo is more than ``max_misses`` pings
old is declared dead. Counting pings rather than seconds means a stalled hub loop (a long
database flush) delays everyone's verdict equally instead of killing healthy engines.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import zmq

from zpar.constants import PING

log = logging.getLogger(__name__)

PROBE = PING + b"probe"


class HeartMonitor:
    def __init__(
        self,
        ping: zmq.Socket,
        pong: zmq.Socket,
        *,
        period: float,
        max_misses: int,
        on_new_heart: Callable[[bytes], None],
        on_heart_failure: Callable[[bytes], None],
    ) -> None:
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
        self.counter = 0
        #: uuid -> newest ping counter it echoed
        self.hearts: dict[bytes, int] = {}

    def watch(self, uuid: bytes, counter: int | None = None) -> None:
        self.hearts[uuid] = self.counter if counter is None else counter

    def forget(self, uuid: bytes) -> None:
        self.hearts.pop(uuid, None)

    def probe(self) -> None:
        """An extra ping that counts for nothing but noticing new hearts.

        Sent every few ms while an engine is registering, so its registration completes
        as soon as its heart is up instead of at the next regular beat (up to a period).
        """
        self.ping.send(PROBE)

    def beat(self) -> None:
        """Send the next ping and declare dead every heart too far behind."""
        self.counter += 1
        self.ping.send(PING + str(self.counter).encode("ascii"))
        limit = self.counter - self.max_misses - 1
        dead = [(u, last) for u, last in self.hearts.items() if last < limit]
        for uuid, last in dead:
            del self.hearts[uuid]
            log.warning(
                "engine %s missed %d heartbeats (%.2f s): declared dead",
                uuid.decode("ascii", "replace"),
                self.counter - 1 - last,
                (self.counter - 1 - last) * self.period,
            )
            self.on_heart_failure(uuid)

    def handle_pong(self) -> None:
        """Drain the pong socket."""
        pong = self.pong
        while True:
            try:
                frames = pong.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2 or not frames[1].startswith(PING):
                log.warning("malformed heartbeat of %d frames ignored", len(frames))
                continue
            uuid, payload = frames
            if payload == PROBE:
                if uuid not in self.hearts:
                    self.on_new_heart(uuid)
                continue
            try:
                n = int(payload[len(PING) :])
            except ValueError:
                log.warning("malformed heartbeat %r from %r ignored", payload[:32], uuid[:64])
                continue
            if n > self.counter:
                log.warning("heartbeat %d > %d (sent) from %r ignored", n, self.counter, uuid[:64])
                continue
            last = self.hearts.get(uuid)
            if last is None:
                self.on_new_heart(uuid)  # may call watch()
            elif n > last:
                self.hearts[uuid] = n
