"""Contents of the rendezvous messages (issue 16): a communicator's members <-> the hub."""

from __future__ import annotations

from dataclasses import dataclass, field

from zpar.wire.messages.base import Content
from zpar.wire.messages.enums import MsgType

# -- rendezvous (issue 16) ---------------------------------------------------------------------
# A member (zpar.comm.member) -> the hub (zpar.comm.hub); every one names its
# communicator. Answers come when the rendezvous can give them (IMPI: once every rank is in;
# COLL: once every member sent the label or moved past it; DONE: after the last DONE), or a
# rendezvous_error at any time (refused, a member missing at the timeout or vanished).


@dataclass(frozen=True, slots=True)
class RendezvousAuthRequest(Content):
    """IMPI's AUTH: the methods the member offers (bit 1 << which, comm.rendezvous);
    ``timeout``: the rendezvous' deadline in seconds, taken from its first member."""

    msg_type = MsgType.RENDEZVOUS_AUTH_REQUEST
    comm_id: str
    auth_mask: int
    timeout: float = 0.0


@dataclass(frozen=True, slots=True)
class RendezvousAuthReply(Content):
    """The method chosen and its challenge (KEY: answer with rendezvous_key)."""

    msg_type = MsgType.RENDEZVOUS_AUTH_REPLY
    comm_id: str
    which: int
    challenge: bytes = b""
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousKey(Content):
    """The proof: HMAC-SHA256 of the challenge under the cluster key. No answer: a
    rendezvous_error if it is wrong."""

    msg_type = MsgType.RENDEZVOUS_KEY
    comm_id: str
    proof: bytes


@dataclass(frozen=True, slots=True)
class RendezvousImpiRequest(Content):
    """IMPI: the member's rank, the size it expects, and the engine it runs on (whose
    death the hub reports to the others)."""

    msg_type = MsgType.RENDEZVOUS_IMPI_REQUEST
    comm_id: str
    rank: int
    size: int
    engine_uuid: str = ""
    who: str = ""


@dataclass(frozen=True, slots=True)
class RendezvousImpiReply(Content):
    msg_type = MsgType.RENDEZVOUS_IMPI_REPLY
    comm_id: str
    size: int
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousCollRequest(Content):
    """COLL: one labelled payload (labels ascend; zpar's own are zpar.constants.ZPAR_LABEL_*)."""

    msg_type = MsgType.RENDEZVOUS_COLL_REQUEST
    comm_id: str
    label: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class RendezvousCollReply(Content):
    """Bit r of client_mask set when rank r sent ``label``; ``payloads`` theirs, ascending
    rank (IMPI concatenates them; here each keeps its length)."""

    msg_type = MsgType.RENDEZVOUS_COLL_REPLY
    comm_id: str
    label: int
    client_mask: int
    payloads: list = field(default_factory=list)
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousDoneRequest(Content):
    msg_type = MsgType.RENDEZVOUS_DONE_REQUEST
    comm_id: str


@dataclass(frozen=True, slots=True)
class RendezvousDoneReply(Content):
    msg_type = MsgType.RENDEZVOUS_DONE_REPLY
    comm_id: str
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousFini(Content):
    """The member is finished with the communicator. No answer."""

    msg_type = MsgType.RENDEZVOUS_FINI
    comm_id: str


@dataclass(frozen=True, slots=True)
class RendezvousError(Content):
    """To a member: its request was refused, or the rendezvous failed (``missing``: the
    ranks to blame). Also published on the notification socket for clients."""

    msg_type = MsgType.RENDEZVOUS_ERROR
    comm_id: str
    evalue: str
    missing: list = field(default_factory=list)
    status: str = "error"
