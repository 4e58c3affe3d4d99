"""EngineTable: the engines as one client knows them, and how each is reached.

The table is kept from the hub's notifications (read by the I/O thread,
client.ioloop.ClientIO) and read by every thread: ``engines`` is replaced, never mutated,
so a reader needs no lock, and ``changed`` wakes who waits for engines. It also says, once
per engine, whether the engine takes this client's direct requests on its own ipc socket
(``private_address``: same host, the controller's 0700 run directory): the sender signs
for that route before sending, so the decision is made in one place. The blocking direct
calls other threads send and await themselves (client.directcall) are watched here: an
engine's death, or the client closing, fails them.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

from zpar.errors import EngineError, remote_error
from zpar.wire.messages import MsgType
from zpar.wire.transport import direct_address, usable_ipc

from .futures import resolve


class EngineTable:
    """Registered engines, their private endpoints, and the direct calls watched on them.

    direct_dir: the controller's run directory when this client is on its host (engines
    there have an ipc socket of their own), else None; set once the connection reply says.
    """

    def __init__(self, direct_dir: str | None = None) -> None:
        #: registered engines, {id: uuid}; replaced (never mutated) under ``changed``
        self.engines: dict[int, str] = {}
        self.changed = threading.Condition()
        #: set once the hub's notification stream reaches this client
        self.subscribed = threading.Event()
        self.direct_dir = direct_dir
        #: notifications seen before the connection snapshot is applied ({id: uuid or None})
        self._notified: dict[int, str | None] | None = {}
        #: engine uuid -> its ipc address, or None (none usable): decided once per engine
        self._private: dict[str, str | None] = {}
        self._watched: dict[str, set[Future]] = {}
        self._watch_lock = threading.Lock()
        self._closed = False

    # -- the table ---------------------------------------------------------------------

    def notified(self, msg_type: str, content: dict[str, Any]) -> tuple[int, str, str] | None:
        """Apply a (un)registration notification; (id, uuid, reason) of an engine that is
        gone, for the caller to fail what it owed, else None."""
        eid = int(content["id"])
        uuid = content["uuid"]
        registered = msg_type == MsgType.REGISTRATION_NOTIFICATION
        with self.changed:  # read-modify-write against apply_snapshot
            engines = dict(self.engines)
            if registered:
                engines[eid] = uuid
            elif engines.get(eid) == uuid:  # not an engine restarted under its old id
                engines.pop(eid, None)
            if self._notified is not None:
                self._notified[eid] = uuid if registered else None
            self.engines = engines
            self.changed.notify_all()
        if registered:
            return None
        reason = str(content.get("reason", "") or "")
        self._private.pop(uuid, None)
        self.fail_direct(
            uuid, f"engine {eid} ({uuid}) died before replying" + (f": {reason}" if reason else "")
        )
        return eid, uuid, reason

    def apply_snapshot(self, engines: dict[int, str]) -> None:
        """The connection reply's engines, with the notifications that overtook it (they
        travel on another socket, so a registration after the snapshot may arrive first)."""
        with self.changed:
            merged = dict(engines)
            for eid, uuid in (self._notified or {}).items():
                if uuid is None:
                    merged.pop(eid, None)
                else:
                    merged[eid] = uuid
            self._notified = None
            self.engines = merged
            self.changed.notify_all()

    def set_engines(self, engines: dict[int, str]) -> None:
        with self.changed:
            self.engines = engines
            self.changed.notify_all()

    # -- routes ------------------------------------------------------------------------

    def private_address(self, uuid: str) -> str | None:
        """The ipc address on which engine ``uuid`` takes this client's direct requests
        (signed ``private``: see wire.Session.serialize), or None: another host, another
        user, or ZPAR_TRANSPORT=tcp. Decided on first use and kept until the engine goes."""
        try:
            return self._private[uuid]
        except KeyError:
            pass
        addr: str | None = None
        if self.direct_dir is not None:
            addr = direct_address(self.direct_dir, uuid)
            if not usable_ipc(addr):
                addr = None
        self._private[uuid] = addr
        return addr

    # -- direct calls awaited by their own thread ----------------------------------------

    def watch_direct(self, uuid: str, fut: Future) -> None:
        """Fail ``fut`` if engine ``uuid`` dies (or the client closes) before it is done."""
        with self._watch_lock:
            self._watched.setdefault(uuid, set()).add(fut)
        if self._closed:
            self.fail_direct(None, "the client was closed before the reply came")
        elif uuid not in self.engines.values():  # died before we watched
            self.fail_direct(uuid, f"engine {uuid} is not registered")

    def unwatch_direct(self, uuid: str, fut: Future) -> None:
        with self._watch_lock:
            futs = self._watched.get(uuid)
            if futs is not None:
                futs.discard(fut)
                if not futs:
                    del self._watched[uuid]

    def fail_direct(self, uuid: str | None, why: str) -> None:
        """Fail the blocking direct calls waiting on engine ``uuid`` (None: all)."""
        with self._watch_lock:
            if uuid is None:
                futs = [f for fs in self._watched.values() for f in fs]
                self._watched.clear()
            else:
                futs = list(self._watched.pop(uuid, ()))
        for fut in futs:
            resolve(fut, error=remote_error(EngineError, why))

    def close(self, why: str) -> None:
        """The client closed: fail every watched call, and any watched from now on."""
        self._closed = True
        self.fail_direct(None, why)
