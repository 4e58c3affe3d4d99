"""The controller's status: every process's refused messages (zpar.wire.refusals), for
``rc.controller_status()`` and ``zpar cluster status``.

The controller's own parts (the hub's sockets, the relays, IOPub, heartbeats, Curve
handshakes) are read when asked; the task scheduler and the engines report theirs when
they change (refused_report), and the last report of each is kept.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from zpar.constants import REFUSAL_PROCESSES_KEPT, SIGNAL_SUFFIX
from zpar.wire import Message
from zpar.wire.messages import ControllerStatusReply, ReplyStatus
from zpar.wire.refusals import checked_counts

log = logging.getLogger(__name__)


class RefusalBook:
    """Refusal counts by process (or part of the controller), by reason."""

    def __init__(self, kept: int = REFUSAL_PROCESSES_KEPT) -> None:
        self.kept = kept
        #: the controller's parts, read when asked: name -> () -> {reason: count}
        self.parts: dict[str, Callable[[], Mapping[str, int]]] = {}
        #: other processes' last reports, oldest first
        self.reports: OrderedDict[str, dict[str, int]] = OrderedDict()

    def add_part(self, name: str, counts: Callable[[], Mapping[str, int]]) -> None:
        self.parts[name] = counts

    def record(self, process: str, content: Mapping[str, Any]) -> None:
        """Keep ``process``'s report; a malformed one is logged and dropped."""
        try:
            counts = checked_counts(content.get("refused"))
        except ValueError as e:
            log.warning("refused_report from %s dropped: %s", process, e)
            return
        self.reports.pop(process, None)
        self.reports[process] = counts
        while len(self.reports) > self.kept:
            self.reports.popitem(last=False)

    def snapshot(self) -> dict[str, dict[str, int]]:
        out = {
            name: {r: n for r, n in dict(counts()).items() if n}
            for name, counts in self.parts.items()
        }
        out.update((p, dict(c)) for p, c in self.reports.items())
        return out


class StatusState(Protocol):
    """What of the hub these handlers use (zpar.hub.hub.Hub is one)."""

    engines: dict[int, Any]  # registered engines by id
    by_uuid: dict[bytes, Any]  # the same, by uuid
    refusals: RefusalBook


def engine_report(hub: StatusState, msg: Message) -> None:
    """A refused_report from an engine's signal thread (identity uuid + SIGNAL_SUFFIX)."""
    ident = msg.idents[0] if msg.idents else b""
    rec = (
        hub.by_uuid.get(ident.removesuffix(SIGNAL_SUFFIX))
        if ident.endswith(SIGNAL_SUFFIX)
        else None
    )
    if rec is None:
        log.warning(
            "refused_report %s from %r, not a registered engine: dropped", msg.msg_id, ident[:64]
        )
        return None
    hub.refusals.record(f"engine {rec.id}", msg.content)
    return None


def engine_stats(hub: StatusState, msg: Message) -> None:
    """An engine_stats report (engine/stats.py): kept on its engine's record for the
    dashboard; one from an identity that is no registered engine's is dropped."""
    ident = msg.idents[0] if msg.idents else b""
    rec = (
        hub.by_uuid.get(ident.removesuffix(SIGNAL_SUFFIX))
        if ident.endswith(SIGNAL_SUFFIX)
        else None
    )
    cpu, rss = msg.content.get("cpu"), msg.content.get("rss")
    if rec is None or not isinstance(cpu, int | float) or not isinstance(rss, int):
        return None
    rec.cpu, rec.rss, rec.stats_at = float(cpu), rss, time.time()
    return None


def controller_status(hub: StatusState, msg: Message) -> dict[str, Any]:
    refused = hub.refusals.snapshot()
    return ControllerStatusReply(
        ReplyStatus.OK,
        pid=os.getpid(),
        engines=sorted(hub.engines),
        refused=refused,
        total_refused=sum(sum(c.values()) for c in refused.values()),
        # the dashboard's link, token included (the asker holds the cluster key already)
        dashboard=getattr(hub, "dashboard_link", ""),
    ).as_dict()


def add_refusal_parts(book: RefusalBook, relays: Mapping[str, Any], zap: Any) -> None:
    """The controller's relay threads and ZAP handler as parts of the status: messages a
    relay dropped for their framing (by side), IOPub subscriptions refused, Curve
    handshakes refused (by peer address, counted here as one reason)."""
    for name in ("mux", "control"):
        relay = relays[name]
        book.add_part(
            f"{name} relay",
            lambda r=relay: {f"misframed-{k}": n for k, n in dict(r.dropped).items()},
        )
    gate = relays["iopub"].gate
    if gate is not None:
        book.add_part("iopub", lambda: gate.refused)
    if zap is not None:
        book.add_part("curve", lambda: {"handshake": sum(dict(zap.refused).values())})
