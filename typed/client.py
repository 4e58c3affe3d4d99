"""The client side of typed calls: ``view.typed``.

``view.typed.register(f, args=[...], returns=...)`` serves f on the view's engines;
``view.typed.NAME(*columns, **columns)`` or ``view.typed.call(name_or_id, ...)`` checks the
columns against the signature (TypeError / ValueError naming the argument, before anything
is sent), splits the calls (DirectView: one contiguous range per engine; LoadBalancedView:
chunks the task scheduler places) and at most ``max_calls_per_message`` calls a message,
and sends each chunk as one typed_request: its counts in the content, one frame per type
array. Registration goes by apply (the function must travel); calls never pickle.
"""

from __future__ import annotations

import itertools
import random
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from zpar.client.partition import partition
from zpar.wire.messages import MsgType, TypedRequest

from .codec import pack_columns, type_frames
from .invoke import MAX_CALLS_WITHOUT_INPUTS
from .registry import register_here, signatures_here
from .result import TypedResult, empty_outputs
from .signature import TypedSignature, signature_of

#: AMUSE's max_message_length: calls in one message unless told otherwise.
MAX_CALLS_PER_MESSAGE = 1_000_000

#: A load-balanced typed call is cut into about this many chunks per engine (finer than a
#: default map, whose chunks hold at least 4,000 elements: client/mapping.py).
CHUNKS_PER_ENGINE = 8

_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
#: numpy kinds each type accepts from a column: b bool, i/u integers, f floats
_KINDS = {"int32": "iu", "int64": "iu", "float32": "iuf", "float64": "iuf", "bool": "b"}

_NO_VALUE = object()

_call_ids = itertools.count(random.randrange(1, 2**20))


def next_call_id() -> int:
    return next(_call_ids) % (2**31 - 1) + 1


class _Signatures:
    """Signatures one client knows, by name and id (shared by its views)."""

    def __init__(self) -> None:
        self.by_name: dict[str, TypedSignature] = {}
        self.by_id: dict[int, TypedSignature] = {}

    def add(self, sig: TypedSignature) -> None:
        old = self.by_name.pop(sig.name, None)
        if old is not None:
            self.by_id.pop(old.function_id, None)
        held = self.by_id.get(sig.function_id)
        if held is not None and held.name != sig.name:
            self.by_name.pop(held.name, None)
        self.by_name[sig.name] = sig
        self.by_id[sig.function_id] = sig

    def get(self, name_or_id: str | int) -> TypedSignature | None:
        if isinstance(name_or_id, str):
            return self.by_name.get(name_or_id)
        return self.by_id.get(name_or_id)


_SIGNATURES: weakref.WeakKeyDictionary[Any, _Signatures] = weakref.WeakKeyDictionary()


def columns_of(
    sig: TypedSignature, args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[int, list[Any]]:
    """(ncalls, one column per input) from a call's arguments, checked: TypeError or
    ValueError naming the argument. A scalar (0-d) column stays 0-d: it broadcasts."""
    if len(args) > len(sig.inputs):
        raise TypeError(f"{sig.name} takes {len(sig.inputs)} input column(s), {len(args)} given")
    values: dict[str, Any] = dict(zip((p.name for p in sig.inputs), args, strict=False))
    for k, v in kwargs.items():
        p = next((p for p in sig.params if p.name == k), None)
        if p is None:
            raise TypeError(f"{sig.name} has no parameter {k!r}; it is {sig.describe()}")
        if p.direction == "out":
            raise TypeError(f"{sig.name}: {k!r} is an out parameter: it is returned, not passed")
        if k in values:
            raise TypeError(f"{sig.name} got {k!r} twice (by position and by name)")
        values[k] = v
    cols, lengths = [], {}
    for p in sig.inputs:
        if p.name in values:
            v = values[p.name]
        elif p.name in sig.defaults:
            v = sig.defaults[p.name]
        else:
            raise TypeError(
                f"{sig.name} is missing argument {p.name!r} ({p.type}); it is {sig.describe()}"
            )
        col = _check_column(sig.name, p.name, p.type, v)
        if np.ndim(col) == 1:
            lengths[p.name] = len(col)
        cols.append(col)
    ncalls = max(lengths.values(), default=1)
    for name, n in lengths.items():
        if n != ncalls:
            longest = max(lengths, key=lengths.__getitem__)
            raise ValueError(
                f"{sig.name}: argument {name!r} has {n} values but {longest!r} has {ncalls}: "
                "columns must be as long as the longest (a scalar broadcasts)"
            )
    return ncalls, cols


def _check_column(fname: str, name: str, ptype: str, v: Any) -> Any:
    if ptype == "string":
        if isinstance(v, str):
            return v  # a scalar: broadcasts
        if isinstance(v, np.ndarray) and v.dtype.kind == "U":
            if v.ndim != 1:
                raise ValueError(
                    f"{fname}: argument {name!r} must be a str or a 1-d column of str, got shape {v.shape}"
                )
            return v
        try:
            items = list(v)
        except TypeError:
            raise TypeError(
                f"{fname}: argument {name!r} is string, got {type(v).__name__}"
            ) from None
        bad = next((x for x in items if not isinstance(x, str)), _NO_VALUE)
        if bad is not _NO_VALUE:
            raise TypeError(
                f"{fname}: argument {name!r} (string) holds {type(bad).__name__} {bad!r}, not str"
            )
        return items
    arr = np.asarray(v)
    if arr.dtype.kind not in _KINDS[ptype]:
        raise TypeError(
            f"{fname}: argument {name!r} is {ptype}, got a column of dtype {arr.dtype} "
            f"({type(v).__name__})"
        )
    if arr.ndim > 1:
        raise ValueError(
            f"{fname}: argument {name!r} must be a scalar or a 1-d column, got shape {arr.shape}"
        )
    bounds = _INT_RANGE.get(ptype)
    if bounds is not None and arr.size and arr.dtype.kind in "iu":
        lo, hi = int(arr.min()), int(arr.max())
        if lo < bounds[0] or hi > bounds[1]:
            raise ValueError(f"{fname}: argument {name!r} has values {lo}..{hi}, outside {ptype}")
    return arr


def request_arrays(sig: TypedSignature, cols: list[Any], start: int, stop: int) -> dict[str, Any]:
    """The type arrays of calls start..stop (argument n of a type at [n * ncalls + m])."""
    n = stop - start
    by_type: dict[str, list[Any]] = {}
    for p, col in zip(sig.inputs, cols, strict=True):
        part = col[start:stop] if np.ndim(col) else col
        if p.type == "string":
            part = [part] * n if isinstance(part, str) else list(part)
        by_type.setdefault(p.type, []).append(part)
    return {t: pack_columns(parts, t, n) for t, parts in by_type.items()}


def chunks_of(start: int, stop: int, size: int) -> list[tuple[int, int]]:
    return [(a, min(a + size, stop)) for a in range(start, stop, size)]


class TypedFunction:
    """``view.typed.NAME``: calling it makes one typed call of NAME."""

    def __init__(self, calls: TypedCalls, sig: TypedSignature) -> None:
        self._calls = calls
        self.signature = sig

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._calls._call(self.signature, args, kwargs)

    def __repr__(self) -> str:
        return f"<typed {self.signature.describe()} id={self.signature.function_id}>"


class TypedCalls:
    """``view.typed``: register typed functions and call them through the view."""

    def __init__(self, view: Any) -> None:
        self._view = view
        self._signatures = _SIGNATURES.setdefault(view.client, _Signatures())
        #: calls in one message at most (a keyword of every call overrides it)
        self.max_calls_per_message = MAX_CALLS_PER_MESSAGE

    # -- registration -------------------------------------------------------------------

    def register(
        self,
        func: Callable[..., Any] | None = None,
        args: Sequence[Any] = (),
        returns: str | None = None,
        name: str | None = None,
        function_id: int | None = None,
        vectorized: bool = False,
        defaults: dict[str, Any] | None = None,
    ) -> Any:
        """Serve func on the view's engines (every engine for a load-balanced view) under a
        typed signature; without func, a decorator. Returns the callable ``view.typed.NAME``."""
        if func is None:
            return lambda f: self.register(
                f, args, returns, name, function_id, vectorized, defaults
            )
        sig = signature_of(func, args, returns, name, function_id, vectorized, defaults)
        held = self._signatures.get(sig.function_id)
        if held is not None and held.name != sig.name:
            raise ValueError(
                f"function id {sig.function_id} of {sig.name!r} is already {held.name!r}'s; pass another function_id"
            )
        self._engines_view().apply_sync(register_here, func, sig.to_dict())
        self._signatures.add(sig)
        return TypedFunction(self, sig)

    def _engines_view(self) -> Any:
        view = self._view
        if view.engine_ids() is not None:  # a DirectView
            return view
        targets = view.targets if view.targets is not None else "all"
        return view.client.direct_view(targets)

    def signature(self, name_or_id: str | int) -> TypedSignature:
        """The signature of a name or id: known here, else asked of the engines."""
        sig = self._signatures.get(name_or_id)
        if sig is None:
            for d in self._fetch():
                self._signatures.add(TypedSignature.from_dict(d))
            sig = self._signatures.get(name_or_id)
        if sig is None:
            raise AttributeError(
                f"no typed function {name_or_id!r} is registered on the engines of {self._view!r}"
            )
        return sig

    def _fetch(self) -> list[dict[str, Any]]:
        view = self._engines_view()
        ids = view._ids()
        if not ids:
            return []
        found: list[dict[str, Any]] = []
        for sigs in view.client.direct_view(ids).apply_sync(signatures_here):
            found.extend(sigs)
        return found

    # -- calls --------------------------------------------------------------------------

    def __getattr__(self, name: str) -> TypedFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return TypedFunction(self, self.signature(name))

    def call(self, name_or_id: str | int, *args: Any, **kwargs: Any) -> Any:
        """One typed call of a function by name or by raw function id (as AMUSE sends it)."""
        return self._call(self.signature(name_or_id), args, kwargs)

    def _call(self, sig: TypedSignature, args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        limit = kwargs.pop("max_calls_per_message", None)
        block = kwargs.pop("block", True)
        limit = self.max_calls_per_message if limit is None else limit
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_calls_per_message must be an int >= 1, got {limit!r}")
        ncalls, cols = columns_of(sig, args, kwargs)
        if ncalls == 0:
            return empty_outputs(sig)
        ar = self._send(sig, cols, ncalls, limit, bool(block))
        return ar.get() if block else ar

    def _send(
        self, sig: TypedSignature, cols: list[Any], ncalls: int, limit: int, block: bool = False
    ) -> TypedResult:
        """One typed_request per chunk. A blocking call that is one message to one engine
        of this host is sent and awaited by this thread (client.directcall), as apply is."""
        view = self._view
        client = view.client
        ids = view.engine_ids()
        if not sig.inputs:  # no frame bounds its calls: the engine's bound does
            limit = min(limit, MAX_CALLS_WITHOUT_INPUTS)
        if ids is not None:  # a DirectView: one contiguous range per engine
            plan = [
                (eid, a, b)
                for eid, sl in zip(ids, partition(ncalls, len(ids)), strict=True)
                for a, b in chunks_of(sl.start, sl.stop, limit)
            ]
            channel, md = "mux", view._metadata()
        else:
            engines = max(1, len(client.ids))
            size = min(limit, max(1, -(-ncalls // (engines * CHUNKS_PER_ENGINE))))
            plan = [(None, a, b) for a, b in chunks_of(0, ncalls, size)]
            channel, md = "task", view._metadata()
        msg_ids, futs, chunks = [], [], []
        for eid, a, b in plan:
            call_id = next_call_id()
            counts, frames = type_frames(request_arrays(sig, cols, a, b))
            content = TypedRequest.content(call_id, sig.function_id, b - a, counts)
            here = None
            if block and eid is not None and len(plan) == 1 and not view.track:
                here = client.sender.call_here(eid, frames, md, MsgType.TYPED_REQUEST, content)
            if here is None:
                here = client.sender.send(
                    channel,
                    MsgType.TYPED_REQUEST,
                    content,
                    buffers=frames,
                    metadata=md,
                    engine_id=eid,
                )
            msg_ids.append(here.msg_id)
            futs.append(here.future)
            chunks.append((call_id, a, b - a))
        return client.sender.remember(TypedResult(client, msg_ids, futs, sig, chunks))

    def __repr__(self) -> str:
        return f"<typed calls of {self._view!r}: {', '.join(sorted(self._signatures.by_name)) or 'none known yet'}>"


__all__ = ["MAX_CALLS_PER_MESSAGE", "TypedCalls", "TypedFunction", "columns_of", "request_arrays"]
