"""The rendezvous: the IMPI server's role as one sans-IO state machine (seeds 003, 004).

Members of a communicator meet here before they talk to each other. Each member
authenticates (AUTH), gives its rank (IMPI: the answer is the size, once every rank is in),
contributes labelled payloads (COLL: each label is answered to everyone with the mask of
the ranks that sent it and their payloads in ascending rank order), says it has nothing
more to contribute (DONE: answered once all have said it) and finally that it is finished
(FINI: no answer). The hub (comm.hubservice) and the byte-exact IMPI server
(comm.impi_server) both drive this class: events go in, instructions come out, nothing
here touches a socket or a clock.

A member is a ``peer``: any hashable the driver uses to know where to send (a zmq identity,
a connection number). Before IMPI it has no rank; after it, losing it fails the rendezvous.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

log = logging.getLogger(__name__)

Peer = Hashable

#: Labels are IMPI_Int4: a COLL label outside this range cannot be put on the wire.
LABEL_MIN = -(2**31)
LABEL_MAX = 2**31 - 1
#: Clients of the IMPI wire are limited by the 32-bit client_mask.
MAX_MEMBERS_IMPI = 32
#: A challenge of the HMAC key method: 32 random bytes, fresh for each member.
CHALLENGE_SIZE = 32


# -- authentication ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthMethod:
    """An authentication method: ``which`` is its IMPI number (bit ``1 << which`` of the
    client's auth_mask). After choosing it the server sends ``challenge_size`` random bytes
    and the member answers with ``prove(key, challenge)``."""

    name: str
    which: int
    challenge_size: int
    proof_size: int
    prove: Callable[[bytes, bytes], bytes]

    @property
    def bit(self) -> int:
        return 1 << self.which


def _no_proof(key: bytes, challenge: bytes) -> bytes:
    return b""


def impi_key_value(key: bytes) -> bytes:
    """The spec's IMPI_AUTH_KEY proof: the 64-bit key itself, big-endian (IMPI_Uint8).
    ``key`` is its decimal text, as the IMPI_AUTH_KEY environment variable holds it."""
    try:
        value = int(key.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError(f"an IMPI key is a decimal 64-bit integer, got {key[:32]!r}") from None
    return (value % 2**64).to_bytes(8, "big")


def _impi_key(key: bytes, challenge: bytes) -> bytes:
    return impi_key_value(key)


def hmac_proof(key: bytes, challenge: bytes) -> bytes:
    """zpar's key method: HMAC-SHA256 of the server's challenge under the shared key, so
    the key itself never crosses the wire."""
    return hmac.new(key, b"zpar-rendezvous\0" + challenge, hashlib.sha256).digest()


#: IMPI_AUTH_NONE (spec value 0): no proof; must be enabled deliberately.
AUTH_NONE = AuthMethod("none", 0, 0, 0, _no_proof)
#: IMPI_AUTH_KEY (spec value 1): the 64-bit key in the clear, as LAM's client sends it.
#: Offered only by the IMPI wire server, for clients that know nothing better.
AUTH_KEY = AuthMethod("impi-key", 1, 0, 8, _impi_key)
#: zpar's key method (value 2, a method number of our own, which the spec allows): an
#: HMAC-SHA256 challenge over the shared key. The hub offers only this one (and NONE on
#: an insecure cluster); "key" in zpar's API means this method.
AUTH_HMAC = AuthMethod("key", 2, CHALLENGE_SIZE, 32, hmac_proof)

AUTH_METHODS: dict[int, AuthMethod] = {m.which: m for m in (AUTH_NONE, AUTH_KEY, AUTH_HMAC)}


def auth_mask(methods: Iterable[AuthMethod]) -> int:
    mask = 0
    for m in methods:
        mask |= m.bit
    return mask


# -- instructions (what the driver must do) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class AuthChoice:
    """Tell ``peer`` which method was chosen, and the challenge it must answer."""

    peer: Peer
    which: int
    challenge: bytes


@dataclass(frozen=True, slots=True)
class RefuseMember:
    """RefuseMember ``peer`` (close its connection, or answer it with an error); it is no
    member any more."""

    peer: Peer
    reason: str


@dataclass(frozen=True, slots=True)
class SizeReply:
    peer: Peer
    size: int


@dataclass(frozen=True, slots=True)
class CollReply:
    """The answer to ``label``: bit r of ``mask`` is set when rank r sent it; ``payloads``
    are theirs in ascending rank order (the IMPI wire concatenates them)."""

    peer: Peer
    label: int
    mask: int
    payloads: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class DoneReply:
    peer: Peer


@dataclass(frozen=True, slots=True)
class Failed:
    """The rendezvous failed for ``peer``: a member is missing (timeout) or vanished.
    ``missing`` are the ranks to blame."""

    peer: Peer
    reason: str
    missing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Finished:
    """The rendezvous is over: every member sent FINI (``ok``), or it failed (after the
    Failed instructions). The driver forgets it."""

    comm_id: str
    ok: bool


Instruction = AuthChoice | RefuseMember | SizeReply | CollReply | DoneReply | Failed | Finished


class RendezvousProtocolError(ValueError):
    """A command a member may not send now (the member is refused)."""


# -- the state machine --------------------------------------------------------------------------


class Stage(Enum):
    AUTH = "auth"  # connected, waiting for its auth_mask
    PROOF = "proof"  # challenged, waiting for the proof
    AUTHED = "authed"  # waiting for its rank
    JOINED = "joined"  # rank given; COLL once everyone has joined
    DONE = "done"  # sent DONE
    FINI = "fini"  # sent FINI


@dataclass(slots=True)
class _Member:
    peer: Peer
    stage: Stage = Stage.AUTH
    method: AuthMethod | None = None
    challenge: bytes = b""
    rank: int = -1
    who: str = ""
    label: int | None = None  # the last label it sent


@dataclass(slots=True)
class _Label:
    payloads: dict[int, bytes] = field(default_factory=dict)


class Rendezvous:
    """One communicator's rendezvous.

    ``size``: the number of members, or None to take it from the first IMPI (the hub; every
    later member must give the same). ``methods``: the server's methods, most preferred
    first. ``timeout``: seconds from creation until every member's DONE; past it, every
    member fails with an error naming the missing ranks.
    """

    def __init__(
        self,
        comm_id: str,
        *,
        size: int | None,
        methods: Sequence[AuthMethod],
        key: bytes,
        timeout: float,
        now: float,
        max_size: int | None = None,
        token: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        if not methods:
            raise ValueError("a rendezvous needs at least one authentication method")
        if size is not None and size < 1:
            raise ValueError(f"a communicator has at least one member, got size {size}")
        self.comm_id = comm_id
        self.size = size
        self.methods = tuple(methods)
        self.key = key
        self.timeout = timeout
        self.deadline = now + timeout
        self.max_size = max_size
        self._token = token
        self.members: dict[Peer, _Member] = {}
        self.by_rank: dict[int, _Member] = {}
        self.labels: dict[int, _Label] = {}
        self.joined = False  # every rank in, sizes answered
        self.complete = False  # every DONE answered
        self.failure: str | None = None
        self.finished = False

    # -- events -----------------------------------------------------------------------------

    def auth_offer(self, peer: Peer, mask: int) -> list[Instruction]:
        """A member offers the methods of ``mask``; the server picks its most preferred."""
        if self._over():
            return [RefuseMember(peer, self._gone_reason())]
        m = self.members.get(peer)
        if m is not None and m.stage is not Stage.AUTH:
            return self._refuse(peer, "AUTH sent twice")
        m = m or self.members.setdefault(peer, _Member(peer))
        if not isinstance(mask, int) or isinstance(mask, bool) or not 0 <= mask < 2**32:
            return self._refuse(peer, f"auth_mask must be a 32-bit unsigned int, got {mask!r}")
        chosen = next((meth for meth in self.methods if mask & meth.bit), None)
        if chosen is None:
            offered = [meth.name for meth in self.methods]
            return self._refuse(
                peer,
                f"no common authentication method: member offered mask {mask:#x}, "
                f"this server offers {offered} (mask {auth_mask(self.methods):#x})",
            )
        m.method = chosen
        m.challenge = self._token(chosen.challenge_size) if chosen.challenge_size else b""
        if chosen.proof_size:
            m.stage = Stage.PROOF
        else:
            m.stage = Stage.AUTHED
            log.warning(
                "rendezvous %s: member %r authenticated with %s (no proof)",
                self.comm_id,
                peer,
                chosen.name,
            )
        return [AuthChoice(peer, chosen.which, m.challenge)]

    def auth_proof(self, peer: Peer, proof: bytes) -> list[Instruction]:
        if self._over():
            return [RefuseMember(peer, self._gone_reason())]
        m = self.members.get(peer)
        if m is None or m.stage is not Stage.PROOF or m.method is None:
            return self._refuse(peer, "authentication proof sent without a challenge")
        expected = m.method.prove(self.key, m.challenge)
        if not isinstance(proof, bytes | bytearray) or not hmac.compare_digest(
            bytes(proof), expected
        ):
            return self._refuse(peer, f"wrong key ({m.method.name} proof does not match)")
        m.stage = Stage.AUTHED
        m.challenge = b""
        log.info("rendezvous %s: member %r authenticated (%s)", self.comm_id, peer, m.method.name)
        return []

    def authenticated(self, peer: Peer) -> bool:
        """Whether ``peer`` has passed authentication (a server stops its auth deadline)."""
        m = self.members.get(peer)
        return m is not None and m.stage not in (Stage.AUTH, Stage.PROOF)

    def impi(
        self, peer: Peer, rank: int, *, size: int | None = None, who: str = ""
    ) -> list[Instruction]:
        """A member gives its rank (and, on the hub, the size it expects)."""
        if self._over():
            return [RefuseMember(peer, self._gone_reason())]
        m = self.members.get(peer)
        if m is None or m.stage in (Stage.AUTH, Stage.PROOF):
            return self._refuse(peer, "IMPI before authentication")
        if m.stage is not Stage.AUTHED:
            return self._refuse(peer, f"IMPI sent twice (rank {m.rank})")
        if size is not None:
            if not _is_int(size) or size < 1 or (self.max_size and size > self.max_size):
                limit = f" (at most {self.max_size})" if self.max_size else ""
                return self._refuse(peer, f"invalid communicator size {size!r}{limit}")
            if self.size is None:
                self.size = size
            elif size != self.size:
                return self._refuse(
                    peer, f"size {size} differs from the communicator's size {self.size}"
                )
        if self.size is None:
            return self._refuse(peer, "IMPI without a size, and the communicator has none yet")
        if not _is_int(rank) or not 0 <= rank < self.size:
            return self._refuse(peer, f"rank {rank!r} out of range for size {self.size}")
        if rank in self.by_rank:
            return self._refuse(peer, f"rank {rank} is already taken by another member")
        m.rank, m.who, m.stage = rank, who, Stage.JOINED
        self.by_rank[rank] = m
        log.info(
            "rendezvous %s: rank %d joined (%s), %d/%d",
            self.comm_id,
            rank,
            who or peer,
            len(self.by_rank),
            self.size,
        )
        if len(self.by_rank) < self.size:
            return []
        self.joined = True
        return [SizeReply(self.by_rank[r].peer, self.size) for r in range(self.size)]

    def coll(self, peer: Peer, label: int, payload: bytes) -> list[Instruction]:
        if self._over():
            return [RefuseMember(peer, self._gone_reason())]
        m = self.members.get(peer)
        if m is None or m.stage is not Stage.JOINED or not self.joined:
            stage = "before every member joined" if m and m.stage is Stage.JOINED else "now"
            return self._refuse(peer, f"COLL may not be sent {stage}")
        if not _is_int(label) or not LABEL_MIN <= label <= LABEL_MAX:
            return self._refuse(peer, f"label {label!r} is not a 32-bit int")
        if m.label is not None and label <= m.label:
            return self._refuse(
                peer, f"labels must ascend: rank {m.rank} sent {label:#x} after {m.label:#x}"
            )
        if not isinstance(payload, bytes | bytearray | memoryview):
            return self._refuse(peer, f"COLL payload must be bytes, got {type(payload).__name__}")
        self.labels.setdefault(label, _Label()).payloads[m.rank] = bytes(payload)
        m.label = label
        return self._answer_ready()

    def done(self, peer: Peer) -> list[Instruction]:
        if self._over():
            return [RefuseMember(peer, self._gone_reason())]
        m = self.members.get(peer)
        if m is None or m.stage is not Stage.JOINED or not self.joined:
            return self._refuse(peer, "DONE may not be sent now")
        m.stage = Stage.DONE
        out = self._answer_ready()
        if all(x.stage is Stage.DONE for x in self.by_rank.values()):
            self.complete = True
            log.info("rendezvous %s: complete (%d members)", self.comm_id, self.size)
            out += [DoneReply(self.by_rank[r].peer) for r in range(self.size or 0)]
        return out

    def fini(self, peer: Peer) -> list[Instruction]:
        m = self.members.get(peer)
        if m is None or m.stage is not Stage.DONE or not self.complete:
            if self.failure is not None:
                return self._forget(peer)
            return self._refuse(peer, "FINI before the rendezvous completed (DONE)")
        m.stage = Stage.FINI
        if all(x.stage is Stage.FINI for x in self.by_rank.values()):
            self.finished = True
            log.info("rendezvous %s: every member finished", self.comm_id)
            return [Finished(self.comm_id, True)]
        return []

    def disconnect(self, peer: Peer, reason: str = "disconnected") -> list[Instruction]:
        """``peer`` is gone (connection closed, engine dead). A member with a rank that
        had not sent FINI fails the rendezvous: the others are told who vanished."""
        m = self.members.get(peer)
        if m is None:
            return []
        if self.failure is not None or m.rank < 0 or m.stage is Stage.FINI:
            return self._forget(peer)
        what = f"rank {m.rank}{_who(m)} vanished before FINI ({reason})"
        if not self.complete:
            what = f"rank {m.rank}{_who(m)} vanished during the rendezvous ({reason})"
        log.error("rendezvous %s: %s", self.comm_id, what)
        del self.members[peer]
        return self._fail(what, (m.rank,))

    def tick(self, now: float) -> list[Instruction]:
        """Fail every member if the rendezvous is still incomplete past its deadline."""
        if self.complete or self.failure is not None or now < self.deadline:
            return []
        missing = self.missing()
        names = ", ".join(
            f"{r}{_who(self.by_rank[r])}" if r in self.by_rank else str(r) for r in missing
        )
        what = (
            f"rendezvous {self.comm_id!r} did not complete within {self.timeout:g} s: "
            f"waiting for rank(s) {names or '?'}"
        )
        log.error("%s", what)
        return self._fail(what, missing)

    # -- queries ----------------------------------------------------------------------------

    def missing(self) -> tuple[int, ...]:
        """The ranks holding the rendezvous up now."""
        if self.size is None:
            return ()
        if not self.joined:
            return tuple(r for r in range(self.size) if r not in self.by_rank)
        pending = sorted(self.labels)
        members = self.by_rank.values()
        if pending:
            low = pending[0]
            return tuple(
                sorted(
                    m.rank
                    for m in members
                    if m.stage is Stage.JOINED
                    and m.rank not in self.labels[low].payloads
                    and (m.label is None or m.label < low)
                )
            )
        return tuple(sorted(m.rank for m in members if m.stage is Stage.JOINED))

    @property
    def peers(self) -> list[Peer]:
        return list(self.members)

    # -- helpers ----------------------------------------------------------------------------

    def _answer_ready(self) -> list[Instruction]:
        """Answer every pending label, lowest first, that each member has sent or moved
        past (a higher label, or DONE)."""
        out: list[Instruction] = []
        members = [self.by_rank[r] for r in range(self.size or 0)]
        for label in sorted(self.labels):
            got = self.labels[label].payloads
            ready = all(
                m.rank in got
                or m.stage is not Stage.JOINED
                or (m.label is not None and m.label > label)
                for m in members
            )
            if not ready:
                break
            del self.labels[label]
            mask = 0
            for r in got:
                mask |= 1 << r
            payloads = tuple(got[r] for r in sorted(got))
            log.debug("rendezvous %s: label %#x answered, mask %#x", self.comm_id, label, mask)
            out += [CollReply(m.peer, label, mask, payloads) for m in members]
        return out

    def _fail(self, reason: str, missing: Sequence[int]) -> list[Instruction]:
        """Tell every member still there why the rendezvous failed; it is over."""
        self.failure = reason
        self.finished = True
        out: list[Instruction] = [
            Failed(m.peer, reason, tuple(missing))
            for m in self.members.values()
            if m.stage is not Stage.FINI
        ]
        self.members.clear()
        return [*out, Finished(self.comm_id, False)]

    def _forget(self, peer: Peer) -> list[Instruction]:
        self.members.pop(peer, None)
        return []

    def _refuse(self, peer: Peer, reason: str) -> list[Instruction]:
        """RefuseMember a peer; a member with a rank takes the rendezvous down with it."""
        m = self.members.pop(peer, None)
        log.warning("rendezvous %s: refused %r: %s", self.comm_id, peer, reason)
        out: list[Instruction] = [RefuseMember(peer, reason)]
        if m is not None and m.rank >= 0 and self.failure is None:
            self.by_rank.pop(m.rank, None)
            out += self._fail(f"rank {m.rank}{_who(m)} was refused: {reason}", (m.rank,))
        return out

    def _over(self) -> bool:
        return self.failure is not None or self.finished

    def _gone_reason(self) -> str:
        if self.failure is not None:
            return f"rendezvous {self.comm_id!r} failed: {self.failure}"
        return f"rendezvous {self.comm_id!r} is finished"


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _who(m: _Member) -> str:
    return f" ({m.who})" if m.who else ""


class RendezvousTable:
    """Several communicators at once, each by its own id (the hub's side)."""

    def __init__(
        self,
        *,
        methods: Sequence[AuthMethod],
        key: bytes,
        timeout: float,
        max_size: int | None = None,
        token: Callable[[int], bytes] = secrets.token_bytes,
    ) -> None:
        self.methods = tuple(methods)
        self.key = key
        self.timeout = timeout
        self.max_size = max_size
        self._token = token
        self.comms: dict[str, Rendezvous] = {}

    def get(self, comm_id: str, now: float, timeout: float | None = None) -> Rendezvous:
        """The rendezvous ``comm_id``, created on first use (its deadline from now)."""
        r = self.comms.get(comm_id)
        if r is None:
            r = self.comms[comm_id] = Rendezvous(
                comm_id,
                size=None,
                methods=self.methods,
                key=self.key,
                timeout=self.timeout if timeout is None else timeout,
                now=now,
                max_size=self.max_size,
                token=self._token,
            )
        return r

    def settle(self, out: list[Instruction]) -> list[Instruction]:
        """Forget the communicators ``out`` reports finished; pass ``out`` through."""
        for ins in out:
            if isinstance(ins, Finished):
                self.comms.pop(ins.comm_id, None)
        return out

    def tick(self, now: float) -> list[Instruction]:
        out: list[Instruction] = []
        for r in list(self.comms.values()):
            out += r.tick(now)
        return self.settle(out)

    def disconnect(self, peers: Iterable[Peer], reason: str) -> list[Instruction]:
        out: list[Instruction] = []
        gone = set(peers)
        for r in list(self.comms.values()):
            for p in [p for p in r.peers if p in gone]:
                out += r.disconnect(p, reason)
        return self.settle(out)
