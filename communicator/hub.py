"""The hub's rendezvous: comm.rendezvous's state machine behind the registration ROUTER.

Loaded by the hub through the ``zpar.hub_services`` entry point. A member (comm.member)
is a DEALER whose identity names its engine and communicator; its messages are the IMPI
commands (zpar.wire.messages, "rendezvous"), the state machine decides, and this module sends
what it says: answers to one member or to all, and rendezvous_error to every member when a
member is missing at the timeout or its engine dies before FINI (also published to clients
on the notification socket).

Methods offered: zpar's KEY (an HMAC challenge over the cluster key) on a keyed cluster,
NONE on an insecure one (no key to prove).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from typing import Any

from zpar.comm.rendezvous import (
    AUTH_HMAC,
    AUTH_NONE,
    AuthChoice,
    CollReply,
    DoneReply,
    Failed,
    Finished,
    Instruction,
    RefuseMember,
    RendezvousTable,
    SizeReply,
)
from zpar.constants import RENDEZVOUS_TIMEOUT
from zpar.wire import Message
from zpar.wire.messages import (
    MsgType,
    RendezvousAuthReply,
    RendezvousCollReply,
    RendezvousDoneReply,
    RendezvousError,
    RendezvousImpiReply,
)

log = logging.getLogger(__name__)

#: Longest communicator id accepted (it is part of a zmq identity, at most 255 bytes).
MAX_COMM_ID = 200
#: Largest communicator: the client_mask is an int in msgpack; 4096 members keep it sane.
MAX_SIZE = 4096
#: Longest deadline a member may ask for.
MAX_TIMEOUT = 24 * 3600.0

Peer = tuple[bytes, ...]


class RendezvousService:
    """A hub service (hub/services.py): ``RendezvousService(hub)``."""

    msg_types = frozenset(
        {
            MsgType.RENDEZVOUS_AUTH_REQUEST,
            MsgType.RENDEZVOUS_KEY,
            MsgType.RENDEZVOUS_IMPI_REQUEST,
            MsgType.RENDEZVOUS_COLL_REQUEST,
            MsgType.RENDEZVOUS_DONE_REQUEST,
            MsgType.RENDEZVOUS_FINI,
        }
    )

    def __init__(self, hub: Any, *, timeout: float = RENDEZVOUS_TIMEOUT) -> None:
        self.hub = hub
        key: bytes = hub.session.key
        self.table = RendezvousTable(
            methods=(AUTH_HMAC,) if key else (AUTH_NONE,),
            key=key,
            timeout=timeout,
            max_size=MAX_SIZE,
        )
        #: engine uuid -> {(comm_id, peer)}: whose rendezvous an engine's death fails
        self.by_engine: dict[str, set[tuple[str, Peer]]] = defaultdict(set)

    # -- hub service interface -----------------------------------------------------------------

    def handle(self, msg: Message) -> None:
        c = msg.content
        peer: Peer = tuple(msg.idents)
        comm_id = c.get("comm_id")
        if not isinstance(comm_id, str) or not comm_id or len(comm_id) > MAX_COMM_ID:
            self._error(peer, str(comm_id)[:MAX_COMM_ID], f"invalid comm_id {comm_id!r}", [])
            return
        now = time.monotonic()
        t = msg.msg_type
        if t == MsgType.RENDEZVOUS_AUTH_REQUEST:
            timeout = c.get("timeout") or None
            if timeout is not None and (
                not isinstance(timeout, int | float)
                or isinstance(timeout, bool)
                or not 0 < timeout <= MAX_TIMEOUT
            ):
                self._error(peer, comm_id, f"invalid timeout {timeout!r}", [])
                return
            r = self.table.get(comm_id, now, timeout)
            out = r.auth_offer(peer, c.get("auth_mask"))
        else:
            r = self.table.comms.get(comm_id)
            if r is None:
                if t != MsgType.RENDEZVOUS_FINI:  # a late FINI of a failed one: nothing to do
                    self._error(peer, comm_id, f"no rendezvous {comm_id!r} (AUTH first)", [])
                return
            if t == MsgType.RENDEZVOUS_KEY:
                out = r.auth_proof(peer, c.get("proof"))
            elif t == MsgType.RENDEZVOUS_IMPI_REQUEST:
                out = r.impi(peer, c.get("rank"), size=c.get("size"), who=str(c.get("who", "")))
                uuid, m = c.get("engine_uuid"), r.members.get(peer)
                if isinstance(uuid, str) and uuid and m is not None and m.rank >= 0:
                    self.by_engine[uuid].add((comm_id, peer))
            elif t == MsgType.RENDEZVOUS_COLL_REQUEST:
                out = r.coll(peer, c.get("label"), c.get("payload", b""))
            elif t == MsgType.RENDEZVOUS_DONE_REQUEST:
                out = r.done(peer)
            else:  # FINI
                out = r.fini(peer)
        self._run(comm_id, self.table.settle(out), msg.header)

    def tick(self, now: float) -> None:
        for comm_id, out in self._by_comm(self.table.tick(now)):
            self._run(comm_id, out, None)

    def engine_lost(self, uuid: str, engine_id: int, reason: str) -> None:
        members = self.by_engine.pop(uuid, set())
        for comm_id, peer in members:
            r = self.table.comms.get(comm_id)
            if r is None:
                continue
            out = r.disconnect(peer, f"engine {engine_id} {reason}")
            self._run(comm_id, self.table.settle(out), None)

    # -- doing what the state machine says -------------------------------------------------------

    def _run(self, comm_id: str, out: list[Instruction], parent: dict[str, Any] | None) -> None:
        send = self.hub.send_to
        for ins in out:
            if isinstance(ins, AuthChoice):
                send(
                    list(ins.peer),
                    MsgType.RENDEZVOUS_AUTH_REPLY,
                    RendezvousAuthReply(comm_id, ins.which, ins.challenge).as_dict(),
                    parent,
                )
            elif isinstance(ins, SizeReply):
                send(
                    list(ins.peer),
                    MsgType.RENDEZVOUS_IMPI_REPLY,
                    RendezvousImpiReply(comm_id, ins.size).as_dict(),
                )
            elif isinstance(ins, CollReply):
                send(
                    list(ins.peer),
                    MsgType.RENDEZVOUS_COLL_REPLY,
                    RendezvousCollReply(comm_id, ins.label, ins.mask, list(ins.payloads)).as_dict(),
                )
            elif isinstance(ins, DoneReply):
                send(
                    list(ins.peer),
                    MsgType.RENDEZVOUS_DONE_REPLY,
                    RendezvousDoneReply(comm_id).as_dict(),
                )
            elif isinstance(ins, RefuseMember):
                self._error(ins.peer, comm_id, ins.reason, [])
            elif isinstance(ins, Failed):
                self._error(ins.peer, comm_id, ins.reason, list(ins.missing))
            elif isinstance(ins, Finished):
                self._forget(comm_id)
                failure = next((i for i in out if isinstance(i, Failed)), None)
                if not ins.ok and failure is not None:
                    self.hub.notify(
                        MsgType.RENDEZVOUS_ERROR,
                        RendezvousError(comm_id, failure.reason, list(failure.missing)).as_dict(),
                    )

    def _error(self, peer: Peer, comm_id: str, evalue: str, missing: list[int]) -> None:
        log.warning("rendezvous %s: error to member %r: %s", comm_id, peer[-1:], evalue)
        self.hub.send_to(
            list(peer),
            MsgType.RENDEZVOUS_ERROR,
            RendezvousError(comm_id, evalue, missing).as_dict(),
        )

    def _forget(self, comm_id: str) -> None:
        for uuid in list(self.by_engine):
            members = {m for m in self.by_engine[uuid] if m[0] != comm_id}
            if members:
                self.by_engine[uuid] = members
            else:
                del self.by_engine[uuid]

    @staticmethod
    def _by_comm(out: list[Instruction]) -> list[tuple[str, list[Instruction]]]:
        """Split the table's tick output per communicator (each ends with its Finished)."""
        groups: list[tuple[str, list[Instruction]]] = []
        current: list[Instruction] = []
        for ins in out:
            current.append(ins)
            if isinstance(ins, Finished):
                groups.append((ins.comm_id, current))
                current = []
        return groups
