"""Resubmit: stored tasks run again under new msg_ids, asked by any client (ipyparallel's
``Client.resubmit``, its hub's ``resubmit_task``).

```
 client ──resubmit_request {msg_ids}──► hub (registration ROUTER)
                                         │ the stored request (records.pack_request),
                                         │ re-signed: its header with a new msg_id and date
                                         ▼
 hub DEALER (identity RESUBMIT_IDENT) ──► task scheduler's client ROUTER
 hub DEALER ◄── the reply: dropped (the record learns it from the scheduler's TaskOut)
 client ◄──resubmit_reply {resubmitted: {old: new}}── hub; the client polls the new ids
```

As in ipyparallel every resubmission is load balanced and keeps the old header but for
its msg_id and date (and ``dest``, now the task scheduler); its parent is the old header.
Its metadata keeps the flags (label, retries, timeout, targets) but not ``after`` /
``follow`` (their tasks are done or gone) nor ``broadcast``. A task still running may be
resubmitted (ipyparallel allows it too); an aborted one as well.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import zmq

from zpar.constants import STORE_RESULT_LIMIT
from zpar.elements import ELEMENTS, element_id, element_range, split_element_id
from zpar.errors import HubRefused, RemoteProtocolError, error_content
from zpar.wire import Message, Session, envelope_and_buffers, send_frames
from zpar.wire.frames import decode
from zpar.wire.messages import ReplyStatus, ResubmitReply

from .elementparts import MAP_QUEUE, RESUBMITTED
from .queries import _msg_ids, _sync
from .queryapi import HubState
from .records import pack_request, unpack_request

log = logging.getLogger(__name__)

#: The identity of the hub's DEALER on the task scheduler's client ROUTER: the "client"
#: of resubmitted tasks in their records.
RESUBMIT_IDENT = b"zpar-hub-resubmit"

#: Metadata a resubmission drops: dependencies on tasks already done (or purged), and the
#: fan-out of a broadcast (a resubmission runs once, load balanced).
DROPPED_FLAGS = ("after", "follow", "broadcast")


class Resubmitter:
    """The hub's DEALER to the task scheduler, and the requests it sends again."""

    def __init__(self, socket: zmq.Socket, session: Session) -> None:
        self.socket = socket
        self.session = session
        self.sent = 0

    def drain(self) -> None:
        """Read and drop the scheduler's replies (their outcome reaches the record as
        every task's does): unread, they would fill the scheduler's pipe to the hub."""
        for _ in range(1024):
            try:
                self.socket.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return

    def send(
        self, blob: bytes, element: int | None = None
    ) -> tuple[dict[str, Any], dict[str, Any], bytes]:
        """Send a stored request again (``element``: only that element of a map's request,
        as a request of one element); (its new header, metadata, stored request)."""
        envelope, buffers = unpack_request(blob)
        parts = decode(envelope)
        if type(parts) is not list or len(parts) < 4:
            raise ValueError("a stored request's envelope is not a message's")
        old, _parent, metadata, content = parts[:4]
        # the envelope was checked when its copy arrived; its large buffers are checked
        # against their signed tags now, once, rather than on every copy's arrival
        self.session.check_buffers(parts[4] if len(parts) > 4 else [], buffers, private=True)
        header = dict(old)
        fresh = self.session.make_header(str(old.get("msg_type", "")))
        header.update(msg_id=fresh["msg_id"], date=fresh["date"], dest="task")
        metadata = {k: v for k, v in (metadata or {}).items() if k not in DROPPED_FLAGS}
        if element is not None:
            metadata[ELEMENTS] = [element, element + 1]
        _, frames = self.session.serialize(
            header["msg_type"],
            content,
            parent=old,
            metadata=metadata,
            header=header,
            buffers=buffers,
        )
        send_frames(self.socket, frames)
        self.sent += 1
        return header, metadata, pack_request(envelope_and_buffers(frames))


def resubmit_request(hub: HubState, msg: Message) -> dict[str, Any]:
    """Resubmit the tasks named; KeyError (as ipyparallel's hub) for unknown msg_ids."""
    resubmitter = getattr(hub, "resubmitter", None)
    if resubmitter is None:
        return error_content(HubRefused, "this hub has no task scheduler to resubmit to")
    msg_ids = _msg_ids(msg.content.get("msg_ids", []), "msg_ids")
    if isinstance(msg_ids, str):
        return error_content(HubRefused, msg_ids)
    msg_ids = list(dict.fromkeys(msg_ids))
    err = _sync(hub)
    if err:
        return error_content(HubRefused, err)
    # a map's element (zpar.elements.element_id) is resubmitted from its request's bytes
    elements = {m: s for m in msg_ids if (s := split_element_id(m)) is not None}
    known = hub.store.requests([*(m for m in msg_ids if m not in elements), *_origins(elements)])
    requests = {m: known[m] for m in msg_ids if m in known}
    for m, (origin, pos) in elements.items():
        if origin in known and _has_element(hub, origin, pos):
            requests[m] = known[origin]
    unknown = [m for m in msg_ids if m not in requests]
    if unknown:
        return error_content(KeyError, f"No such msg(s): {unknown!r}", unknown=unknown)
    unkept = [m for m in msg_ids if not requests[m]]
    if unkept:
        return error_content(
            HubRefused,
            f"cannot resubmit {', '.join(unkept[:5])}: the hub did not keep the request "
            f"(larger than the store keeps, {STORE_RESULT_LIMIT} bytes, or recorded by an "
            "older controller)",
        )
    resubmitted: dict[str, str] = {}
    now = time.time()
    for m in msg_ids:
        pos = elements[m][1] if m in elements else None
        try:
            header, metadata, blob = resubmitter.send(requests[m], pos)
        except (ValueError, RemoteProtocolError) as e:
            return error_content(HubRefused, f"cannot resubmit {m}: {e}")
        new = header["msg_id"]
        header["date"] = header.get("date", now)
        hub.tasks.submitted(header, "task", RESUBMIT_IDENT, None, metadata, request=blob)
        resubmitted[m] = new if pos is None else element_id(new, pos)
        log.info("task %s resubmitted as %s", m, resubmitted[m])
    plain = {m: n for m, n in resubmitted.items() if m not in elements}
    if plain:
        hub.store.mark_resubmitted(plain)
    if len(plain) < len(resubmitted):
        _mark_elements(hub, {m: n for m, n in resubmitted.items() if m in elements})
    return ResubmitReply(ReplyStatus.OK, resubmitted=resubmitted).as_dict()


def _origins(elements: dict[str, tuple[str, int]]) -> list[str]:
    return list(dict.fromkeys(origin for origin, _ in elements.values()))


def _has_element(hub: HubState, origin: str, pos: int) -> bool:
    """Whether ``origin`` is a map's request with an element at ``pos``."""
    rec = hub.tasks.records.get(origin)
    if rec is not None and rec.elements is not None:
        return rec.elements.lo <= pos < rec.elements.hi
    row = hub.store.get([origin], with_buffers=False).get(origin)
    if row is None or row.get("queue") != MAP_QUEUE:
        return False
    rng = element_range((row.get("metadata") or {}).get(ELEMENTS))
    return rng is not None and rng[0] <= pos < rng[1]


def _mark_elements(hub: HubState, pairs: dict[str, str]) -> None:
    """Each resubmitted element's ``resubmitted``, kept in its request's summary
    (hub/elementparts.py): in the record while it runs, else in the stored row."""
    by_origin: dict[str, dict[str, str]] = {}
    for old, new in pairs.items():
        split = split_element_id(old)
        if split is not None:
            by_origin.setdefault(split[0], {})[str(split[1])] = new
    for origin, marks in by_origin.items():
        rec = hub.tasks.records.get(origin)
        if rec is not None and rec.elements is not None:
            rec.elements.resubmitted.update(marks)
            hub.tasks.dirty[origin] = rec
            continue
        row = hub.store.get([origin], with_buffers=False).get(origin)
        if row is None:
            continue
        summary = dict(row.get("result_content") or {})
        summary[RESUBMITTED] = {**(summary.get(RESUBMITTED) or {}), **marks}
        row["result_content"] = summary
        row.pop("buffers", None)
        hub.store.save([row], {})
