"""What the hub is told on its monitor pipe, as typed records (not positional lists).

Two kinds of monitor message reach the hub's PULL socket (inproc, or ipc in the
controller's 0700 run directory, never the network):

- relay copies, ``[kind, ident, ident, <ZPAR|MSG>, signature, envelope, buffer…]`` from the
  MUX/control relays and from engines serving direct calls: the message as it passed, which
  the hub checks like any receiver (zpar.wire) before it records anything;
- the task scheduler's event batches, ``[task_batch, msgpack list of events]``, each event a
  TaskIn / TaskDest / TaskOut / TaskRetry below, built from messages the scheduler checked;
- an engine's direct-call copies in batches, ``[copy_batch, msgpack list of copies]``, each
  copy a relay copy's frames as above (pack_copies / unpack_copies below).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from operator import attrgetter
from typing import Any

import msgpack

from .messages import (
    MON_COPY_BATCH,
    MON_MUX_IN,
    MON_MUX_OUT,
    MON_TASK_BATCH,
    TASK_DEST,
    TASK_IN,
    TASK_OUT,
    TASK_RETRY,
)

_packb = msgpack.Packer(use_bin_type=True).pack


@dataclass(frozen=True, slots=True)
class TaskIn:
    """A load-balanced request reached the scheduler."""

    client: bytes
    header: dict[str, Any]
    metadata: dict[str, Any]

    kind = TASK_IN


@dataclass(frozen=True, slots=True)
class TaskDest:
    """The scheduler placed a task on an engine (engine "": took it back unstarted)."""

    msg_id: str
    engine: str

    kind = TASK_DEST


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
class TaskRetry:
    """A task left an engine (its error, or the engine's death) to be tried elsewhere."""

    msg_id: str
    engine: str
    why: str

    kind = TASK_RETRY


TaskEvent = TaskIn | TaskDest | TaskOut | TaskRetry

_KINDS: dict[str, type] = {c.kind: c for c in (TaskIn, TaskDest, TaskOut, TaskRetry)}
_TYPES: dict[type, dict[str, type | tuple[type, ...]]] = {
    TaskIn: {"client": bytes, "header": dict, "metadata": dict},
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
        if len(raw) != len(types) + 1:
            yield f"malformed {cls.__name__} event"
            continue
        for i, t in enumerate(types, 1):
            if not isinstance(raw[i], t):
                yield f"malformed {cls.__name__} event"
                break
        else:
            yield cls(*raw[1:])


def split_monitor(frames: list[Any]) -> tuple[bytes, list[Any]]:
    """(kind, the rest) of a monitor message."""
    first = frames[0]
    kind = first.bytes if hasattr(first, "bytes") else bytes(first)
    return kind, list(frames[1:])


# -- an engine's direct-call copies, batched (engine.monitorcopies) -----------------------------

#: Copies packed in one monitor message at most (a hub turn reads a batch whole).
COPY_BATCH_MAX = 256
#: Bytes a copy may hold to be packed: larger ones (a result for the store) travel alone,
#: without being copied into msgpack.
COPY_PACK_MAX = 64 * 1024
#: The kinds a copy batch may carry.
COPY_KINDS = frozenset({MON_MUX_IN, MON_MUX_OUT})


def batchable_copy(frames: list[Any]) -> bool:
    """Whether a copy may travel packed: all its frames bytes, together under COPY_PACK_MAX."""
    total = 0
    for f in frames:
        if type(f) is not bytes:
            return False
        total += len(f)
    return total <= COPY_PACK_MAX


def pack_copies(copies: list[list[bytes]]) -> list[bytes]:
    """The monitor message carrying these copies (each as batchable_copy allows)."""
    return [MON_COPY_BATCH, _packb(copies)]


def unpack_copies(data: Any) -> list[list[bytes]]:
    """The copies of a batch, each a list of bytes starting with its kind; ValueError
    naming what is wrong when the batch is malformed (it is then dropped whole)."""
    try:
        copies = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # msgpack raises several types for garbage
        raise ValueError(f"a copy batch must be msgpack: {e}") from None
    if type(copies) is not list or len(copies) > COPY_BATCH_MAX:
        raise ValueError(f"a copy batch must be a list of at most {COPY_BATCH_MAX} copies")
    for c in copies:
        if type(c) is not list or not c or not all(type(f) is bytes for f in c):
            raise ValueError("each copy of a batch must be a non-empty list of bin frames")
        if c[0] not in COPY_KINDS:
            raise ValueError(f"a copy batch cannot carry {c[0][:32]!r}")
    return copies
