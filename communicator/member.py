"""A communicator's member at the hub's rendezvous (the IMPI client's role, seed 003).

Runs on an engine (``RendezvousMember.from_engine``) or anywhere that holds the cluster's
registration address and key. Every call blocks the calling thread on its own DEALER to
the hub's registration ROUTER, up to the rendezvous' timeout; any failure the hub reports
(refused, a member missing at the timeout, a member's engine dead) is raised as
RendezvousFailed naming the ranks to blame.

    m = RendezvousMember.from_engine("halo", rank, size)   # AUTH and IMPI
    mask, payloads = m.coll(ZPAR_LABEL_HOSTNAME, socket.gethostname().encode())
    m.done()
    ...
    m.fini()                                                  # when the communicator is freed
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib
from typing import Any

import zmq

from zpar.constants import RENDEZVOUS_SUFFIX, RENDEZVOUS_TIMEOUT, SIGNAL_REPLAY_HISTORY
from zpar.errors import ZparError
from zpar.wire import Session
from zpar.wire.curve import secure
from zpar.wire.messages import (
    Content,
    MsgType,
    RendezvousAuthRequest,
    RendezvousCollRequest,
    RendezvousDoneRequest,
    RendezvousFini,
    RendezvousImpiRequest,
    RendezvousKey,
)
from zpar.wire.sockets import configure

from .rendezvous import AUTH_HMAC, AUTH_METHODS, AUTH_NONE, hmac_proof

log = logging.getLogger(__name__)

#: Methods a member may ask for: "key" proves the cluster key by HMAC, "none" proves nothing
#: (an insecure cluster's hub offers only that).
AUTH_BY_NAME = {"key": AUTH_HMAC, "none": AUTH_NONE}

#: Seconds a member waits beyond the rendezvous' timeout before it blames the hub itself
#: (the hub fails a late rendezvous within a heartbeat period of its deadline).
HUB_GRACE = 10.0


class RendezvousFailed(ZparError, RuntimeError):
    """The rendezvous failed for this member; ``missing`` are the ranks to blame."""

    def __init__(self, message: str, missing: tuple[int, ...] | list[int] = ()) -> None:
        super().__init__(message)
        self.missing = list(missing)

    def __reduce__(self) -> Any:  # picklable: it travels from an engine to the client
        return (type(self), (str(self), self.missing))


class RendezvousMember:
    """One member of communicator ``comm_id``: AUTH and IMPI happen in the constructor,
    which returns once every rank has joined."""

    def __init__(
        self,
        hub_url: str,
        key: bytes | str,
        comm_id: str,
        rank: int,
        size: int,
        *,
        auth: str = "key",
        timeout: float = RENDEZVOUS_TIMEOUT,
        engine_uuid: str = "",
        who: str = "",
        context: zmq.Context | None = None,
        curve: Any = None,
    ) -> None:
        """``curve``: the cluster's zpar.wire.curve keys (or its ConnectionInfo) on a --curve
        cluster, whose hub takes only Curve peers."""
        if auth not in AUTH_BY_NAME:
            raise ValueError(f"auth must be one of {sorted(AUTH_BY_NAME)}, got {auth!r}")
        if not isinstance(comm_id, str) or not comm_id:
            raise ValueError(f"comm_id must be a non-empty str, got {comm_id!r}")
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} out of range for size {size}")
        if timeout <= 0:
            raise ValueError(f"timeout must be positive, got {timeout}")
        key = key.encode("ascii") if isinstance(key, str) else key
        self.comm_id, self.rank, self.size = comm_id, rank, size
        self.timeout = timeout
        self.who = who or f"rank {rank}"
        # a few dozen messages in its life: a short replay history, not a task path's 2 MB
        self.session = Session(
            key or None, allow_insecure=not key, replay_history=SIGNAL_REPLAY_HISTORY
        )
        self._key = key
        self._deadline = time.monotonic() + timeout + HUB_GRACE
        ident = (engine_uuid or uuidlib.uuid4().hex).encode() + RENDEZVOUS_SUFFIX
        ctx = context or zmq.Context.instance()
        #: readable when the hub has something to say (after done(): a member lost)
        self.socket = secure(configure(ctx.socket(zmq.DEALER), ident + comm_id.encode()), curve)
        self.socket.connect(hub_url)
        self._label: int | None = None
        self._error: RendezvousFailed | None = None
        self._finished = False
        self._lost: list[int] = []
        try:
            self._authenticate(AUTH_BY_NAME[auth])
            self._send(RendezvousImpiRequest(comm_id, rank, size, engine_uuid, self.who))
            reply = self._wait(MsgType.RENDEZVOUS_IMPI_REPLY)
        except BaseException:
            self.socket.close(linger=0)
            raise
        if reply.get("size") != size:
            self.socket.close(linger=0)
            raise RendezvousFailed(f"the hub answered size {reply.get('size')!r}, not {size}")
        log.info("rendezvous %s: rank %d/%d joined (%s)", comm_id, rank, size, self.who)

    @classmethod
    def from_engine(
        cls,
        comm_id: str,
        rank: int,
        size: int,
        *,
        auth: str = "key",
        timeout: float = RENDEZVOUS_TIMEOUT,
    ) -> RendezvousMember:
        """A member for the engine this process runs (its hub, key and identity)."""
        from zpar.engine.engine import this_engine

        engine = this_engine()
        if engine is None:
            raise RuntimeError("from_engine runs only inside a registered zpar engine")
        return cls(
            engine.info.registration,
            engine.session.key,
            comm_id,
            rank,
            size,
            auth=auth,
            timeout=timeout,
            engine_uuid=engine.uuid,
            who=f"engine {engine.id}",
            curve=engine.info,
        )

    # -- the IMPI commands -----------------------------------------------------------------------

    def coll(self, label: int, payload: bytes) -> tuple[int, list[bytes | None]]:
        """Contribute ``payload`` under ``label`` (labels ascend); returns (client_mask,
        [payload of rank r, or None when bit r is unset])."""
        if self._label is not None and label <= self._label:
            raise ValueError(f"labels must ascend: {label:#x} after {self._label:#x}")
        self._label = label
        self._send(RendezvousCollRequest(self.comm_id, label, bytes(payload)))
        while True:
            reply = self._wait(MsgType.RENDEZVOUS_COLL_REPLY)
            if reply.get("label") == label:
                return self._unpack(reply)
            # the answer to a lower label this member skipped: not ours to read

    def done(self) -> None:
        """No more labels; returns once every member said DONE."""
        self._send(RendezvousDoneRequest(self.comm_id))
        self._wait(MsgType.RENDEZVOUS_DONE_REPLY)
        log.info("rendezvous %s: rank %d done", self.comm_id, self.rank)

    def fini(self) -> None:
        """Finished with the communicator (no answer); closes the socket. Safe twice."""
        if self._finished:
            return
        self._finished = True
        if self._error is None:
            try:
                self._send(RendezvousFini(self.comm_id))
            except zmq.ZMQError as e:
                log.warning("rendezvous %s: FINI not sent: %s", self.comm_id, e)
        self.socket.close(linger=1000)

    close = fini

    def lost(self) -> list[int]:
        """Ranks the hub has reported gone since done() (without blocking)."""
        if self._error is None and not self._finished:
            while self.socket.poll(0):
                msg = self.session.feed(self.socket.recv_multipart(), "rendezvous member")
                if msg is not None and msg.msg_type == MsgType.RENDEZVOUS_ERROR:
                    self._fail(msg.content)
        if self._error is not None:
            return list(self._error.missing)
        return []

    def __enter__(self) -> RendezvousMember:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.fini()

    # -- helpers ----------------------------------------------------------------------------------

    def _authenticate(self, method: Any) -> None:
        self._send(RendezvousAuthRequest(self.comm_id, method.bit, self.timeout))
        reply = self._wait(MsgType.RENDEZVOUS_AUTH_REPLY)
        chosen = AUTH_METHODS.get(reply.get("which"))  # type: ignore[arg-type]
        if chosen is None or chosen is not method:
            raise RendezvousFailed(
                f"the hub chose method {reply.get('which')!r}, not {method.name}"
            )
        if chosen.proof_size:
            challenge = reply.get("challenge")
            if not isinstance(challenge, bytes) or len(challenge) != chosen.challenge_size:
                raise RendezvousFailed("the hub's challenge is malformed")
            self._send(RendezvousKey(self.comm_id, hmac_proof(self._key, challenge)))

    def _send(self, content: Content) -> None:
        if self._error is not None:
            raise self._error
        self.session.send(self.socket, content.msg_type, content.as_dict())

    def _wait(self, msg_type: str) -> dict[str, Any]:
        while True:
            left = self._deadline - time.monotonic()
            if left <= 0 or not self.socket.poll(int(left * 1000) + 1):
                raise RendezvousFailed(
                    f"rendezvous {self.comm_id!r}: no answer from the hub within "
                    f"{self.timeout + HUB_GRACE:g} s (is the controller running?)"
                )
            msg = self.session.feed(self.socket.recv_multipart(), "rendezvous member")
            if msg is None:
                continue
            if msg.content.get("status") == "error" and "comm_id" not in msg.content:
                # a hub without the rendezvous service answers "does not handle"
                self._fail({"evalue": f"the hub refused: {msg.content.get('evalue', '?')}"})
                assert self._error is not None
                raise self._error
            if msg.content.get("comm_id") != self.comm_id:
                continue
            if msg.msg_type == MsgType.RENDEZVOUS_ERROR:
                self._fail(msg.content)
                assert self._error is not None
                raise self._error
            if msg.msg_type == msg_type:
                return msg.content
            log.debug("rendezvous %s: %s ignored while waiting", self.comm_id, msg.msg_type)

    def _fail(self, content: dict[str, Any]) -> None:
        missing = [r for r in content.get("missing", []) if isinstance(r, int)]
        self._error = RendezvousFailed(str(content.get("evalue", "rendezvous failed")), missing)
        self._lost = missing
        log.error("rendezvous %s: rank %d: %s", self.comm_id, self.rank, self._error)

    def _unpack(self, reply: dict[str, Any]) -> tuple[int, list[bytes | None]]:
        mask, payloads = reply.get("client_mask"), reply.get("payloads")
        if not isinstance(mask, int) or not isinstance(payloads, list):
            raise RendezvousFailed(f"malformed COLL reply from the hub: {reply!r:.200}")
        ranks = [r for r in range(self.size) if mask >> r & 1]
        if len(ranks) != len(payloads) or mask >> self.size:
            raise RendezvousFailed(
                f"COLL reply mask {mask:#x} does not match {len(payloads)} payloads"
            )
        out: list[bytes | None] = [None] * self.size
        for r, p in zip(ranks, payloads, strict=True):
            out[r] = p
        return mask, out
