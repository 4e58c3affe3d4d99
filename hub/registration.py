"""An engine's registration, from its registration_request to its first heartbeat.

The Registrar checks the request's fields, gives the engine an id (the one it asks for
when free, so a restarted engine keeps its id), answers the same request asked again with
the same reply, and holds the engine as pending until its heart beats (``admit``) or its
deadline passes (``expire``). It sends nothing: the hub answers with the content it returns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from zpar.errors import RegistrationRefused, error_content
from zpar.wire.messages import RegistrationReply, ReplyStatus

from .records import EngineRecord

log = logging.getLogger(__name__)

#: Longest hostname an engine may register with (POSIX HOST_NAME_MAX is 255).
MAX_HOSTNAME = 255
#: Largest pid an engine may give (Linux's pid_max is at most 2**22; a 32-bit pid_t).
MAX_PID = 2**31 - 1
#: Longest engine uuid taken (a uuid4 is 36 chars; the hub keys its tables by it).
MAX_UUID = 255


def registration_fields(c: dict[str, Any]) -> tuple[str, int] | str:
    """(hostname, pid) of a registration_request, or what is wrong with its fields."""
    hostname, pid = c.get("hostname", ""), c.get("pid", 0)
    if not isinstance(hostname, str) or len(hostname) > MAX_HOSTNAME:
        return f"hostname must be a str of at most {MAX_HOSTNAME} chars, got {hostname!r:.80}"
    if pid is None:
        pid = 0
    if not isinstance(pid, int) or isinstance(pid, bool) or not 0 <= pid <= MAX_PID:
        return f"pid must be an int in 0..{MAX_PID}, got {pid!r:.80}"
    for key in ("id", "rank"):
        v = c.get(key)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or abs(v) > MAX_PID):
            return f"{key} must be an int, got {v!r:.80}"
    return hostname, pid


class Registrar:
    """Engines registering: their ids, their pending records and deadlines.

    ``engines`` and ``by_uuid`` are the hub's tables of registered engines, read here (an id
    or a uuid in use); ``unregister(uuid, reason)`` is the hub's, called when an engine
    restarting itself asks for its old id. ``engine_addresses`` go into every reply."""

    def __init__(
        self,
        *,
        engines: Mapping[int, EngineRecord],
        by_uuid: Mapping[bytes, EngineRecord],
        unregister: Callable[[bytes, str], None],
        engine_addresses: Mapping[str, Any],
        timeout: float,
    ) -> None:
        self.engines = engines
        self.by_uuid = by_uuid
        self.unregister = unregister
        self.engine_addresses = engine_addresses
        #: seconds a registered engine has to start heartbeating
        self.timeout = timeout
        #: engines registered but not heartbeating yet, by uuid
        self.pending: dict[bytes, EngineRecord] = {}
        self.next_id = 0

    def request(self, c: dict[str, Any]) -> dict[str, Any]:
        """The reply content to a registration_request's content ``c``."""
        uuid = c.get("uuid")
        if not isinstance(uuid, str) or not uuid or len(uuid) > MAX_UUID:
            return error_content(RegistrationRefused, f"invalid engine uuid {uuid!r}")
        key = uuid.encode()
        retry = self._retry(key, c)
        if retry is not None:
            return retry
        if key in self.by_uuid or key in self.pending:
            state = "registered" if key in self.by_uuid else "registering"
            log.warning("registration refused: uuid %s is already %s", uuid, state)
            return error_content(
                RegistrationRefused,
                f"identity {uuid} is already in use by an engine that is {state}",
            )
        fields = registration_fields(c)
        if isinstance(fields, str):
            log.warning("registration of %s refused: %s", uuid[:64], fields)
            return error_content(RegistrationRefused, fields)
        hostname, pid = fields
        eid = self._engine_id_for(c.get("id", -1), hostname, pid)
        rec = EngineRecord(eid, uuid, hostname, pid, deadline=time.monotonic() + self.timeout)
        rec.rank = c.get("rank", -1) if isinstance(c.get("rank"), int) else -1
        self.pending[key] = rec
        log.info("engine %d (uuid %s, %s pid %d) registering", eid, uuid, rec.hostname, rec.pid)
        return RegistrationReply(ReplyStatus.OK, id=eid, **self.engine_addresses).as_dict()

    def _retry(self, key: bytes, c: dict[str, Any]) -> dict[str, Any] | None:
        """The same reply again for an engine asking anew under a uuid still registering,
        from the same host and pid: its first reply went to a socket it had closed (a
        controller too busy to answer within the engine's timeout), and the id it was
        given must not be held by a request nobody waits for."""
        rec = self.pending.get(key)
        fields = registration_fields(c)
        if rec is None or isinstance(fields, str) or (rec.hostname, rec.pid) != fields:
            return None
        rec.deadline = time.monotonic() + self.timeout
        log.info("engine %d (uuid %s) asked again while registering; same reply", rec.id, rec.uuid)
        return RegistrationReply(ReplyStatus.OK, id=rec.id, **self.engine_addresses).as_dict()

    def _engine_id_for(self, wanted: Any, hostname: str, pid: int) -> int:
        """The id asked for when it is free (an engine restarting itself asks for its old
        one; its old record, same host and pid, is replaced), else the next new one."""
        if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 0:
            old = self.engines.get(wanted)
            if old is not None and (old.hostname, old.pid) == (hostname, pid):
                self.unregister(old.uuid.encode(), "restarted")
                old = None
            if old is None and all(r.id != wanted for r in self.pending.values()):
                self.next_id = max(self.next_id, wanted + 1)
                return wanted
            log.info("engine id %d asked for is taken; giving a new one", wanted)
        eid = self.next_id
        self.next_id += 1
        return eid

    def admit(self, uuid: bytes) -> EngineRecord | None:
        """The pending record of an engine whose heart now beats, no longer pending; None
        if it is not registering (dead already, or never registered)."""
        return self.pending.pop(uuid, None)

    def expire(self, now: float | None = None) -> list[EngineRecord]:
        """Drop the engines registered whose heart has not beaten by their deadline."""
        now = time.monotonic() if now is None else now
        dropped = [rec for rec in self.pending.values() if rec.deadline < now]
        for rec in dropped:
            del self.pending[rec.uuid.encode()]
            log.warning(
                "engine %d (uuid %s) registered but never heartbeat; dropped", rec.id, rec.uuid
            )
        return dropped
