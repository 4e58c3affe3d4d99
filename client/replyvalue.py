"""What a reply is worth to the user: its value, or the error it carries, raised as
ipyparallel raises it (one call's own error, a CompositeError of several).

Replies are decoded lazily, in the thread that asks for them, so the I/O thread stays fast;
a call's error is made once and the same object returned on every read.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

from zpar.errors import CompositeError, RemoteError, TaskAborted, TimeoutError
from zpar.serialize import deserialize_object
from zpar.wire import Message
from zpar.wire.messages import MsgType, ReplyStatus

from .executereply import ExecuteReply
from .mapparts import ElementReply
from .resultmeta import reply_metadata


def decode_reply(msg: Message) -> Any:
    """The value of an apply/execute reply, or raise the error it carries."""
    if type(msg) is ElementReply:  # one element of a map's part, decoded already
        if isinstance(msg.value, Exception):
            raise msg.value
        return msg.value
    c = msg.content
    status = c.get("status")
    if status == ReplyStatus.OK:
        if msg.buffers:
            if "function_id" in c:  # a typed_reply read back from the hub: raw type arrays
                from zpar.typed.codec import type_arrays

                return type_arrays(c.get("counts") or [], msg.buffers)
            return deserialize_object(msg.buffers)
        if msg.parent_header.get("msg_type") == MsgType.EXECUTE_REQUEST:  # Out[engine:count]
            return ExecuteReply(msg.parent_header.get("msg_id", ""), c, reply_metadata(msg))
        return None
    if status == ReplyStatus.ABORTED:
        raise TaskAborted(c.get("evalue") or f"task {msg.parent_header.get('msg_id')} aborted")
    raise RemoteError.from_content(c)


def value_or_error(f: Future) -> Any:
    """A done call's value, or its error (returned, not raised)."""
    error = getattr(f, "_decoded_error", None)
    if error is not None:
        return error
    try:
        exc = f.exception()
        if exc is not None:
            raise exc
        return decode_reply(f.result())
    except Exception as e:
        # one error object per call, on every read (ipyparallel compares them: a map's
        # errors from list(amr) == amr.get() with return_exceptions)
        with contextlib.suppress(AttributeError):
            f._decoded_error = e  # type: ignore[attr-defined]
        return e


def has_exception(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` is an exception: the types seen, in one C-level pass (a
    map's thousands of values cost a fraction of an isinstance per value)."""
    return any(issubclass(t, Exception) for t in set(map(type, values)))


def raise_errors(values: Sequence[Any], *, one_call: bool, fname: str, what: str) -> None:
    """Raise the errors among ``values`` as ipyparallel does: a one-call result its error, a
    result of several calls a CompositeError (even for one failure: ``except
    CompositeError`` holds); ``what`` names the calls in its message."""
    if not has_exception(values):
        return
    errors = [v for v in values if isinstance(v, Exception)]
    if one_call:
        raise errors[0]
    raise CompositeError(
        f"one or more exceptions raised in: {fname or 'unspecified'} "
        f"({len(errors)} of {len(values)} {what})",
        errors,
    )


def by_engine(values: Sequence[Any], engine_ids: Sequence[int]) -> dict[int, Any]:
    """``get_dict``: {engine_id: value}; an error if one engine ran several of the calls."""
    if len(set(engine_ids)) != len(engine_ids):
        raise ValueError(f"engines {engine_ids} ran more than one of these calls: no dict")
    return dict(zip(engine_ids, values, strict=True))


def not_ready(done: int, total: int, fname: str, timeout: float | None) -> TimeoutError:
    """The error of a ``get`` whose calls were not all done within ``timeout``."""
    return TimeoutError(
        f"Result not ready: {done}/{total} of {fname or 'the call'} done within {timeout} s"
    )
