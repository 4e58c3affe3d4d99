"""Run n calls of a registered function on the type arrays of a request: the part the
engine's handler and the AMUSE worker share, without sockets.

A vectorized function is called once with whole columns (numpy arrays; strings as a numpy
str array); a plain one once per call index with Python scalars. The function returns its
outputs (the result, then out/inout parameters in declaration order): one value if there is
one output, else a tuple.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .codec import DTYPES, TYPES, pack_columns, param_columns
from .signature import TypedSignature

#: Most calls of one request to a function without inputs, whose call_count no frame
#: bounds (2**40 calls of one once wedged an engine): AMUSE's own max_message_length, the
#: default chunk of zpar's client (typed.client.MAX_CALLS_PER_MESSAGE); the outputs of that
#: many calls of a float64 result are 8 MB. A function with inputs is bounded by its
#: frames: call_count times its inputs per call must be the values that arrived.
MAX_CALLS_WITHOUT_INPUTS = 1_000_000


class CallFailed(Exception):
    """The function raised (or returned the wrong shape); ``index`` is the call, -1 if not
    known (a vectorized function runs every call at once)."""

    def __init__(self, cause: BaseException, index: int) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.index = index


class BadRequest(ValueError):
    """Type arrays that do not match the signature they are for."""


def input_columns(sig: TypedSignature, arrays: dict[str, Any], ncalls: int) -> list[Any]:
    """The column of each input (in, inout) in declaration order: views on the arrays."""
    if not isinstance(ncalls, int) or isinstance(ncalls, bool) or ncalls < 0:
        raise BadRequest(f"call_count must be an int >= 0, got {ncalls!r}")
    if not sig.inputs and ncalls > MAX_CALLS_WITHOUT_INPUTS:
        raise BadRequest(
            f"{sig.name} takes no inputs: at most {MAX_CALLS_WITHOUT_INPUTS} calls a request, "
            f"got call_count {ncalls}"
        )
    for t, per_call in zip(TYPES, sig.in_counts, strict=True):
        got = 0 if arrays.get(t) is None else len(arrays[t])
        if got != per_call * ncalls:
            raise BadRequest(
                f"{sig.name} takes {per_call} {t} value(s) per call: {per_call * ncalls} for "
                f"{ncalls} calls, the request has {got}"
            )
    return param_columns(
        arrays, sig.in_counts, ncalls, [(p.type, p.input_index) for p in sig.inputs]
    )


def run_calls(
    sig: TypedSignature, func: Callable[..., Any], arrays: dict[str, Any], ncalls: int
) -> dict[str, Any]:
    """The reply's type arrays of ``ncalls`` calls of func on the request's arrays."""
    columns = input_columns(sig, arrays, ncalls)
    names = [p.name for p in sig.inputs]
    nout = len(sig.outputs)
    if sig.vectorized:
        cols = [
            np.asarray(c) if p.type == "string" else c
            for p, c in zip(sig.inputs, columns, strict=True)
        ]
        try:
            ret = func(**dict(zip(names, cols, strict=True)))
        except Exception as e:
            raise CallFailed(e, -1) from e
        outs = _split_outputs(sig, ret, -1)
        out_cols = [_column(p, v, ncalls) for p, v in zip(sig.outputs, outs, strict=True)]
    else:
        lists = [c if isinstance(c, list) else c.tolist() for c in columns]
        results: list[Any] = []
        try:
            if lists:
                results.extend(map(func, *lists))
            else:
                results.extend(func() for _ in range(ncalls))
        except Exception as e:
            raise CallFailed(e, len(results)) from e
        if nout == 0:
            out_cols = []
        elif nout == 1:
            out_cols = [_column(sig.outputs[0], results, ncalls)]
        else:
            for i, r in enumerate(results):
                if not isinstance(r, tuple | list) or len(r) != nout:
                    _split_outputs(sig, r, i)  # raises with the reason
            out_cols = (
                [
                    _column(p, list(col), ncalls)
                    for p, col in zip(sig.outputs, zip(*results, strict=True), strict=True)
                ]
                if results
                else [_column(p, [], ncalls) for p in sig.outputs]
            )
    by_type: dict[str, list[Any]] = {}
    for p, col in zip(sig.outputs, out_cols, strict=True):
        by_type.setdefault(p.type, []).append(col)  # outputs are in output_index order
    return {t: pack_columns(cols, t, ncalls) for t, cols in by_type.items()}


def _split_outputs(sig: TypedSignature, ret: Any, index: int) -> list[Any]:
    nout = len(sig.outputs)
    if nout == 0:
        return []
    if nout == 1:
        return [ret]
    if not isinstance(ret, tuple | list) or len(ret) != nout:
        names = ", ".join("the result" if p.name == "__result" else p.name for p in sig.outputs)
        got = f"{len(ret)} values" if isinstance(ret, tuple | list) else type(ret).__name__
        raise CallFailed(
            TypeError(f"{sig.name} must return a tuple of {nout} values ({names}), returned {got}"),
            index,
        )
    return list(ret)


def _column(p: Any, value: Any, ncalls: int) -> Any:
    """One output column of ncalls values of p's type (a scalar broadcasts)."""
    what = "the result" if p.name == "__result" else f"output {p.name!r}"
    try:
        if p.type == "string":
            if isinstance(value, str):
                return [value] * ncalls
            col = [str(v) for v in (value.tolist() if isinstance(value, np.ndarray) else value)]
        else:
            col = np.asarray(value, dtype=DTYPES[p.type])
            if col.ndim == 0:
                return np.full(ncalls, col, dtype=col.dtype)
    except (TypeError, ValueError, OverflowError) as e:
        raise CallFailed(TypeError(f"{what} is not {p.type}: {e}"), -1) from e
    if len(col) != ncalls:
        raise CallFailed(ValueError(f"{what} has {len(col)} values for {ncalls} calls"), -1)
    return col
