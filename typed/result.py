"""The handle of a typed call: an AsyncResult whose replies are typed_reply messages.

Each reply is checked against its request (call_id, function_id, call_count: a mismatch is
a RemoteProtocolError), decoded from its frames without pickle, and the chunks are joined
back into one column per output, in call order.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import Any

import numpy as np

from zpar.client.asyncresult import AsyncResult
from zpar.errors import RemoteError, RemoteProtocolError, TaskAborted
from zpar.wire.messages import ReplyStatus

from .codec import TYPES, CodecError, param_columns, type_arrays
from .signature import TypedSignature


class RemoteCallError(RemoteError):
    """A typed call raised on the engine; ``call_index`` is the call (in the whole call,
    not the chunk), -1 when not known (a vectorized function runs every call at once)."""

    def __init__(
        self,
        ename: str,
        evalue: str,
        traceback: Any = "",
        engine_info: Any = None,
        call_index: int = -1,
    ):
        self.call_index = call_index
        super().__init__(ename, evalue, traceback, engine_info)

    def __str__(self) -> str:
        text = super().__str__()
        return f"call {self.call_index}: {text}" if self.call_index >= 0 else text

    def __reduce__(self):
        return (
            type(self),
            (self.ename, self.evalue, self.traceback, self.engine_info, self.call_index),
        )


#: One chunk's request: (call_id, first call index, number of calls).
Chunk = tuple[int, int, int]


def decode_typed_reply(msg: Any, sig: TypedSignature, chunk: Chunk) -> list[Any]:
    """The output columns of one chunk's reply, or raise what it carries."""
    call_id, start, ncalls = chunk
    c = msg.content
    status = c.get("status")
    if status == ReplyStatus.ABORTED:
        raise TaskAborted(c.get("evalue") or "typed call aborted")
    if status != ReplyStatus.OK and (c.get("zpar_error") or "call_id" not in c):
        # not the handler's answer: the scheduler's (EngineError, TaskTimeout...) or the
        # kernel's own (a handler that failed to load, a reply it could not encode)
        raise RemoteError.from_content(c)
    if msg.msg_type != "typed_reply":
        raise RemoteProtocolError("not a typed_reply", f"a {msg.msg_type} answered a typed call")
    if c.get("call_id") != call_id or c.get("function_id") != sig.function_id:
        raise RemoteProtocolError(
            "typed_reply mismatch",
            f"expected call_id {call_id} of function {sig.name} (id {sig.function_id}), "
            f"got call_id {c.get('call_id')} of function id {c.get('function_id')}",
        )
    if status != ReplyStatus.OK:
        index = c.get("call_index", -1)
        index = start + index if isinstance(index, int) and index >= 0 else -1
        raise RemoteCallError(
            c.get("ename", "RemoteError"),
            c.get("evalue", ""),
            c.get("traceback", ""),
            c.get("engine_info"),
            index,
        )
    if c.get("call_count") != ncalls:
        raise RemoteProtocolError(
            "typed_reply mismatch", f"{ncalls} calls sent, the reply has {c.get('call_count')}"
        )
    expected = [n * ncalls for n in sig.out_counts]
    if list(c.get("counts") or [0] * len(TYPES)) != expected:
        raise RemoteProtocolError(
            "typed_reply mismatch", f"{sig.name}: counts {expected} expected, got {c.get('counts')}"
        )
    try:
        arrays = type_arrays(c.get("counts") or [0] * len(TYPES), msg.buffers)
    except CodecError as e:
        raise RemoteProtocolError("bad typed_reply", str(e)) from None
    return param_columns(
        arrays, sig.out_counts, ncalls, [(p.type, p.output_index) for p in sig.outputs]
    )


def join_chunks(sig: TypedSignature, chunks: list[list[Any]]) -> Any:
    """One array per output over every chunk; a tuple, or the array if there is one."""
    cols = []
    for i, p in enumerate(sig.outputs):
        parts = [ch[i] for ch in chunks]
        if p.type == "string":
            merged: list[str] = []
            for part in parts:
                merged.extend(part)
            cols.append(np.array(merged, dtype=str))
        elif len(parts) == 1:
            cols.append(np.array(parts[0]))  # own memory: the reply's frame is released
        else:
            cols.append(np.concatenate(parts))
    if not cols:
        return None
    return cols[0] if len(cols) == 1 else tuple(cols)


def empty_outputs(sig: TypedSignature) -> Any:
    """The value of a call with no calls in it (every column empty)."""
    return join_chunks(
        sig, [[[] if p.type == "string" else np.empty(0, p.type) for p in sig.outputs]]
    )


class TypedResult(AsyncResult):
    """Results of one typed call over one or several messages (chunks)."""

    __slots__ = ("_sig", "_chunks")

    def __init__(
        self,
        client: Any,
        msg_ids: Sequence[str],
        futures: Sequence[concurrent.futures.Future],
        sig: TypedSignature,
        chunks: Sequence[Chunk],
        **kw: Any,
    ) -> None:
        self._sig = sig
        self._chunks = {id(f): ch for f, ch in zip(futures, chunks, strict=True)}
        super().__init__(client, msg_ids, futures, fname=sig.name, postprocess=self._join, **kw)

    def _join(self, values: list[Any]) -> Any:
        errors = [v for v in values if isinstance(v, Exception)]
        if errors:  # get(return_exceptions=True): the errors, not a join
            return values
        return join_chunks(self._sig, values)

    def _collect(self) -> list[Any]:
        """Every chunk's columns; a failed chunk raises its own error, the earliest one (a
        typed call is one call to its user, not a CompositeError of messages)."""
        values = [self._value_or_error(f) for f in self._futures]
        for v in values:
            if isinstance(v, Exception):
                raise v
        return values

    def _value_or_error(self, f: concurrent.futures.Future) -> Any:  # type: ignore[override]
        try:
            exc = f.exception()
            if exc is not None:
                raise exc
            return decode_typed_reply(f.result(), self._sig, self._chunks[id(f)])
        except Exception as e:
            return e
