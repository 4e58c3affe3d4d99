"""The hub's answers to launchers: an engine process has exited; where each engine runs.

A launcher waits on the processes it started, so it knows of an engine's death in
milliseconds; the heartbeat takes ``hb_period * hb_misses``. An engine is named by host and
pid, which every engine sends when it registers (a launcher does not know engine ids).
"""

from __future__ import annotations

import logging
from typing import Any

from zpar.errors import HubRefused, error_content
from zpar.wire import Message
from zpar.wire.messages import EngineExitedReply, EngineInfoReply, ReplyStatus

from .queryapi import HubState

log = logging.getLogger(__name__)


def engine_exited(hub: HubState, msg: Message) -> dict[str, Any]:
    c = msg.content
    hostname, pid, code = c.get("hostname"), c.get("pid"), c.get("exit_code")
    if not isinstance(hostname, str) or not isinstance(pid, int) or pid <= 0:
        return error_content(HubRefused, f"bad engine_exited {hostname!r} {pid!r}")
    ids = []
    gone = [rec for rec in hub.engines.values() if (rec.hostname, rec.pid) == (hostname, pid)]
    for rec in gone:
        ids.append(rec.id)
        hub.unregister(rec.uuid.encode(), f"its launcher saw the process exit (exit code {code})")
    # one still registering will never heartbeat: drop it now rather than at its deadline
    for key, rec in list(hub.pending.items()):
        if (rec.hostname, rec.pid) == (hostname, pid):
            del hub.pending[key]
    log.info(
        "launcher: engine process %s:%d exited (code %s); engines %s", hostname, pid, code, ids
    )
    return EngineExitedReply(ReplyStatus.OK, ids=ids).as_dict()


def engine_info(hub: HubState, msg: Message) -> dict[str, Any]:
    engines = {
        rec.id: {"hostname": rec.hostname, "pid": rec.pid, "rank": rec.rank}
        for rec in hub.engines.values()
    }
    return EngineInfoReply(ReplyStatus.OK, engines=engines).as_dict()
