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
from zpar.errors import HubRefused, RemoteProtocolError, error_content
from zpar.wire import Message, Session, send_frames
from zpar.wire.frames import decode
from zpar.wire.messages import ReplyStatus, ResubmitReply

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

    def send(self, blob: bytes) -> tuple[dict[str, Any], dict[str, Any], bytes]:
        """Send a stored request again; (its new header, metadata, stored request)."""
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
        return header, metadata, pack_request([frames[2], *buffers])


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
    requests = hub.store.requests(msg_ids)
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
        try:
            header, metadata, blob = resubmitter.send(requests[m])
        except (ValueError, RemoteProtocolError) as e:
            return error_content(HubRefused, f"cannot resubmit {m}: {e}")
        new = header["msg_id"]
        header["date"] = header.get("date", now)
        hub.tasks.submitted(header, "task", RESUBMIT_IDENT, None, metadata, request=blob)
        resubmitted[m] = new
        log.info("task %s resubmitted as %s", m, new)
    hub.store.mark_resubmitted(resubmitted)
    return ResubmitReply(ReplyStatus.OK, resubmitted=resubmitted).as_dict()
