"""What the hub is told on its monitor pipe, as typed records (not positional lists).

These kinds of monitor message reach the hub's PULL socket (inproc, or ipc in the
controller's 0700 run directory, never the network); ``split_monitor`` parts the kind from
the rest, and the functions below read the rest, so the hub indexes no frame itself:

- relay copies, ``[kind, ident, ident, <ZPAR|MSG>, signature, envelope, buffer…]`` from the
  MUX/control relays and from engines serving direct calls: the message as it passed, which
  the hub checks like any receiver (zpar.wire) before it records anything;
- copy batches, ``[copy_batch, msgpack list of copies]`` (zpar.wire.copybatch; the one
  frame: ``packed_body``);
- the task scheduler's event batches, ``[task_batch, msgpack list of events]``, each event a
  TaskIn / TaskDest / TaskOut / TaskRetry below, built from messages the scheduler checked
  (``unpack_batch(packed_body(rest))``);
- large load-balanced results, ``[task_result, msg_id, buffer…]`` (``split_task_result``).

The records are slotted dataclasses, not frozen: a frozen one's __init__ costs five times
as much (each field set through object.__setattr__), and the scheduler and the hub build
several per task. Nothing changes a record once made.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import msgpack

from zpar.constants import STORE_RESULT_LIMIT
from zpar.wire.frames import HEAD_FRAMES, frame_bytes, nbytes
from zpar.wire.messages import MON_TASK_BATCH, TASK_DEST, TASK_IN, TASK_OUT, TASK_RETRY

_packb = msgpack.Packer(use_bin_type=True).pack


@dataclass(slots=True)
class TaskIn:
    """A load-balanced request reached the scheduler; ``engine``: the engine it was placed
    on before this batch left (its TaskDest folded in: one event, one record update for
    the hub), "" if it was not; ``request``: its envelope and buffers for the store (so any
    client can resubmit it), None when larger than the store keeps (request_parts)."""

    client: bytes
    header: dict[str, Any]
    metadata: dict[str, Any]
    engine: str = ""
    request: list[bytes] | None = None

    kind = TASK_IN


@dataclass(slots=True)
class TaskDest:
    """The scheduler placed a task on an engine (engine "": took it back unstarted)."""

    msg_id: str
    engine: str

    kind = TASK_DEST


@dataclass(slots=True)
class TaskOut:
    """A reply (an engine's, or the scheduler's in its stead) went to the client; buffers
    are the result's when small enough to travel here, else None."""

    engine: str
    client: bytes
    msg_id: str
    metadata: dict[str, Any]
    content: dict[str, Any]
    buffers: list[bytes] | None = None

    kind = TASK_OUT


@dataclass(slots=True)
class TaskRetry:
    """A task left an engine (its error, or the engine's death) to be tried elsewhere."""

    msg_id: str
    engine: str
    why: str

    kind = TASK_RETRY


TaskEvent = TaskIn | TaskDest | TaskOut | TaskRetry

_KINDS: dict[str, type] = {c.kind: c for c in (TaskIn, TaskDest, TaskOut, TaskRetry)}
_TYPES: dict[type, dict[str, type | tuple[type, ...]]] = {
    TaskIn: {
        "client": bytes,
        "header": dict,
        "metadata": dict,
        "engine": str,
        "request": (list, type(None)),
    },
    TaskDest: {"msg_id": str, "engine": str},
    TaskOut: {
        "engine": str,
        "client": bytes,
        "msg_id": str,
        "metadata": dict,
        "content": dict,
        "buffers": (list, type(None)),
    },
    TaskRetry: {"msg_id": str, "engine": str, "why": str},
}


#: per record type: its kind and a getter of its fields' values in order, in one C call
#: (dataclasses.astuple deep-copies every dict it meets: it was a third of the scheduler's
#: time under load)
_ROWS: dict[type, tuple[str, attrgetter]] = {
    c: (c.kind, attrgetter(*(f.name for f in fields(c)))) for c in _TYPES
}


def pack_batch(events: list[TaskEvent]) -> list[bytes]:
    """The monitor message carrying these events."""
    rows = []
    for e in events:
        kind, values = _ROWS[type(e)]
        rows.append((kind, *values(e)))
    return [MON_TASK_BATCH, _packb(rows)]


#: per kind: its record type and the types of its fields in order (one pass per event)
_CHECKS: dict[str, tuple[type, tuple[type | tuple[type, ...], ...]]] = {
    c.kind: (c, tuple(types.values())) for c, types in _TYPES.items()
}


def unpack_batch(data: Any) -> Iterator[TaskEvent | str]:
    """The events of a batch; a malformed one is yielded as a str saying what is wrong."""
    events = msgpack.unpackb(data, raw=False, strict_map_key=False)
    if not isinstance(events, list):
        yield "a task batch must be a list"
        return
    checks = _CHECKS
    for raw in events:
        kind = raw[0] if type(raw) is list and raw else None
        check = checks.get(kind) if type(kind) is str else None
        if check is None:
            yield f"unknown task event {str(raw)[:64]}"
            continue
        cls, types = check
        values = raw[1:]
        # the fields' types checked in one C loop (a Python loop over them was a tenth of
        # the hub's time per task)
        if len(values) != len(types) or not all(map(isinstance, values, types)):
            yield f"malformed {cls.__name__} event"
            continue
        yield cls(*values)


def request_parts(frames: list[Any]) -> list[bytes] | None:
    """A request's envelope and buffers (``frames`` from the delimiter on) as the hub's
    store keeps them for resubmit; None when they are larger than it keeps results
    (STORE_RESULT_LIMIT): the store's bound on a record's bytes applies to requests too."""
    parts = frames[HEAD_FRAMES - 1 :]  # envelope_and_buffers, without a call per task
    if sum(map(nbytes, parts)) > STORE_RESULT_LIMIT:
        return None
    return [p if type(p) is bytes else frame_bytes(p) for p in parts]


def split_monitor(frames: list[Any]) -> tuple[bytes, list[Any]]:
    """(kind, the rest) of a monitor message."""
    first = frames[0]
    kind = first.bytes if hasattr(first, "bytes") else bytes(first)
    return kind, list(frames[1:])


def packed_body(rest: list[Any]) -> Any:
    """The one frame of a task batch or a copy batch (``rest``: its frames after the kind,
    as split_monitor gives them), for unpack_batch / unpack_copies; ValueError if it is
    not one frame."""
    if len(rest) != 1:
        raise ValueError(f"a packed monitor message is one frame after its kind, not {len(rest)}")
    return rest[0]


def split_task_result(rest: list[Any]) -> tuple[str, list[Any]]:
    """(msg_id, result buffers) of a MON_TASK_RESULT message (``rest``: its frames after
    the kind, ``[msg_id, buffer, ...]``); ValueError if it has no msg_id."""
    if not rest:
        raise ValueError("a task result without its msg_id")
    return frame_bytes(rest[0]).decode("ascii", "replace"), list(rest[1:])
