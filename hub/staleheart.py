"""Engines the hub declared dead whose heart still beats: tell them their registration is gone.

An engine stopped (SIGSTOP) or cut off by a network partition for longer than the heartbeat
allows is unregistered: its tasks are failed or resubmitted and clients forget it. When it
runs again its heart echoes the hub's pings as before, and nothing else would tell it that
it is no longer in the cluster. The hub remembers the engines it unregistered (bounded) and
answers such a heart, at most once per interval, with the engine's own signed
``unregistration_notification`` on its signal line (``uuid + SIGNAL_SUFFIX``); the engine
then drops its stale work and registers again (engine/engine.py, docs/decisions.md).

``heard`` decides whom to tell (no I/O, tested alone); ``tell`` sends it.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict

import zmq

from zpar.constants import SIGNAL_SUFFIX, STALE_HEART_TELL_INTERVAL, STALE_HEARTS_KEPT
from zpar.wire import Session
from zpar.wire.messages import MsgType, UnregistrationNotification

log = logging.getLogger(__name__)


class StaleHearts:
    """Unregistered engines by heart identity (their uuid), the oldest forgotten first."""

    def __init__(
        self, kept: int = STALE_HEARTS_KEPT, interval: float = STALE_HEART_TELL_INTERVAL
    ) -> None:
        if kept < 1 or interval < 0:
            raise ValueError(f"kept must be >= 1 and interval >= 0, got {kept} and {interval}")
        self.kept = kept
        self.interval = interval
        #: uuid -> [engine id, reason, monotonic time of the last tell (-inf: never)]
        self._gone: OrderedDict[bytes, list] = OrderedDict()
        #: how many tells were sent (the controller's logs and tests)
        self.told = 0

    def __contains__(self, uuid: bytes) -> bool:
        return uuid in self._gone

    def __len__(self) -> int:
        return len(self._gone)

    def unregistered(self, uuid: bytes, engine_id: int, reason: str) -> None:
        """The hub unregistered this engine: remember it."""
        self._gone[uuid] = [engine_id, reason, float("-inf")]
        self._gone.move_to_end(uuid)
        while len(self._gone) > self.kept:
            self._gone.popitem(last=False)

    def registered(self, uuid: bytes) -> None:
        """This identity is registered (again): nothing to tell it."""
        self._gone.pop(uuid, None)

    def heard(self, uuid: bytes, now: float | None = None) -> tuple[int, str] | None:
        """A heartbeat from an identity the hub does not know. Returns (engine id, reason)
        when it is an engine the hub unregistered and it is time to tell it; else None."""
        entry = self._gone.get(uuid)
        if entry is None:
            return None
        now = time.monotonic() if now is None else now
        if now - entry[2] < self.interval:
            return None
        entry[2] = now
        self.told += 1
        return entry[0], entry[1]

    def tell(self, session: Session, query: zmq.Socket, uuid: bytes) -> bool:
        """Send the engine of this heart its own unregistration_notification on its signal
        line through the hub's registration ROUTER, if ``heard`` says it is time. A peer
        not connected there (not an engine of ours) gets nothing: the ROUTER drops it."""
        told = self.heard(uuid)
        if told is None:
            return False
        eid, reason = told
        name = uuid.decode("ascii", "replace")
        log.warning(
            "engine %d (uuid %s) still beats after it was unregistered (%s): telling it",
            eid,
            name,
            reason,
        )
        session.send(
            query,
            MsgType.UNREGISTRATION_NOTIFICATION,
            UnregistrationNotification(eid, name, reason).as_dict(),
            idents=[uuid + SIGNAL_SUFFIX],
        )
        return True
