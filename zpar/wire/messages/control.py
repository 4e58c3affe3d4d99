"""Contents of the control messages: signal, clear, abort, shutdown of an engine, and the
task scheduler's revoke of an engine's unstarted tasks (prefetch, issue 12).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from zpar.wire.messages.base import Content, optional
from zpar.wire.messages.enums import MsgType


@dataclass(frozen=True, slots=True)
class SignalRequest(Content):
    """Client -> hub (targets: engine ids, None for all); hub -> engine (no targets)."""

    msg_type = MsgType.SIGNAL_REQUEST
    signum: int
    targets: list | None = optional(None)


@dataclass(frozen=True, slots=True)
class SignalReply(Content):
    """engines: the ids the signal was relayed to."""

    msg_type = MsgType.SIGNAL_REPLY
    status: str
    engines: list = field(default_factory=list)
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class ClearRequest(Content):
    msg_type = MsgType.CLEAR_REQUEST


@dataclass(frozen=True, slots=True)
class ClearReply(Content):
    msg_type = MsgType.CLEAR_REPLY
    status: str


@dataclass(frozen=True, slots=True)
class AbortRequest(Content):
    msg_type = MsgType.ABORT_REQUEST
    msg_ids: list | None = None  # None aborts everything queued
    #: {request msg_id: [position, ...]}: just those elements of load-balanced maps'
    #: element requests (zpar.elements), each a task of its own for its user
    positions: dict | None = optional(None)


def abort_ids(content: dict) -> list[str] | None:
    """The msg_ids an abort_request names (None: everything queued), one id given as a str
    taken as a list of one; ValueError naming what is wrong otherwise (a signed request may
    still be malformed, and neither the scheduler nor an engine may die of it)."""
    msg_ids = content.get("msg_ids")
    if msg_ids is None:
        return None
    if isinstance(msg_ids, str):
        return [msg_ids]
    if not isinstance(msg_ids, list):
        raise ValueError(
            f"abort_request's msg_ids is {type(msg_ids).__name__}, not a list of msg_ids"
        )
    wrong = [m for m in msg_ids if not isinstance(m, str)]
    if wrong:
        raise ValueError(
            f"abort_request's msg_ids holds {len(wrong)} non-string id(s), e.g. {wrong[0]!r:.60}"
        )
    return msg_ids


def abort_positions(content: dict) -> dict[str, set[int]]:
    """The elements an abort_request names, {request msg_id: positions} (empty: none);
    ValueError naming what is wrong otherwise (as abort_ids)."""
    given = content.get("positions")
    if given is None:
        return {}
    if not isinstance(given, dict):
        raise ValueError(
            f"abort_request's positions is {type(given).__name__}, not a map of "
            "request msg_id to element positions"
        )
    out: dict[str, set[int]] = {}
    for msg_id, positions in given.items():
        if not isinstance(msg_id, str) or not isinstance(positions, list):
            raise ValueError(
                f"abort_request's positions maps {msg_id!r:.60} to "
                f"{type(positions).__name__}, not a msg_id to a list of positions"
            )
        wrong = [p for p in positions if type(p) is not int or p < 0]
        if wrong:
            raise ValueError(
                f"abort_request's positions of {msg_id:.60} hold {len(wrong)} that are "
                f"not positions (ints >= 0), e.g. {wrong[0]!r:.60}"
            )
        out[msg_id] = set(positions)
    return out


@dataclass(frozen=True, slots=True)
class AbortReply(Content):
    """``aborted``: the msg_ids the task scheduler removed (its reply alone carries it)."""

    msg_type = MsgType.ABORT_REPLY
    status: str
    aborted: list | None = optional(None)


@dataclass(frozen=True, slots=True)
class ShutdownRequest(Content):
    msg_type = MsgType.SHUTDOWN_REQUEST
    restart: bool = False


@dataclass(frozen=True, slots=True)
class ShutdownReply(Content):
    msg_type = MsgType.SHUTDOWN_REPLY
    status: str


# -- prefetch (issue 12, sched): revoking an engine's unstarted tasks ---------------------


@dataclass(frozen=True, slots=True)
class RevokeRequest(Content):
    """Task scheduler -> engine revoke socket: give these tasks back if not started."""

    msg_type = MsgType.REVOKE_REQUEST
    msg_ids: list
    tails: dict = optional({})  # {part id: elements to keep} of running element requests


@dataclass(frozen=True, slots=True)
class RevokeReply(Content):
    """``revoked``: the ids never started, which the engine will now drop unrun."""

    msg_type = MsgType.REVOKE_REPLY
    status: str
    revoked: list = field(default_factory=list)
    tails: dict = optional({})  # {part id: [a, b]}: the elements given back
