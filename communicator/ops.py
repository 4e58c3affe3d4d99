"""Reduction operations for the communicator, named and behaving as mpi4py's ``MPI.SUM`` ….

One ``Op`` serves both families of methods: lowercase (Python objects, ``op(x, y)`` as
mpi4py's ``Op.__call__``) and uppercase (numpy buffers, element-wise through a ufunc).
MAXLOC / MINLOC take ``(value, index)`` pairs for objects and two-field structured arrays
(value, index) for buffers — mpi4py's pair datatypes such as ``MPI.DOUBLE_INT``; ties go to the
smaller index, as in MPI.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def _maxloc(x: Any, y: Any) -> Any:
    (u, i), (v, j) = x, y
    if u > v:
        return u, i
    if v > u or j < i:
        return v, j
    return u, i


def _minloc(x: Any, y: Any) -> Any:
    (u, i), (v, j) = x, y
    if u < v:
        return u, i
    if v < u or j < i:
        return v, j
    return u, i


def _loc_arrays(a: np.ndarray, b: np.ndarray, better: Callable[..., Any]) -> np.ndarray:
    names = a.dtype.names
    if names is None or len(names) != 2:
        raise TypeError(
            f"MAXLOC/MINLOC need a structured array of (value, index) pairs, got dtype {a.dtype}"
        )
    val, loc = names
    out = b.copy()
    take_a = better(a[val], b[val]) | ((a[val] == b[val]) & (a[loc] < b[loc]))
    out[take_a] = a[take_a]
    return out


class Op:
    """A reduction operation. ``commute`` says whether operand order may be changed, which
    lets the collectives regroup by host and use the ring."""

    def __init__(
        self,
        name: str,
        py: Callable[[Any, Any], Any],
        array: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
        *,
        commute: bool = True,
    ) -> None:
        self.name = name
        self._py = py
        self._array = array
        self.commute = commute

    def __call__(self, x: Any, y: Any) -> Any:
        """x op y for Python objects (x comes from the lower rank)."""
        return self._py(x, y)

    def combine(self, lower: np.ndarray, higher: np.ndarray) -> np.ndarray:
        """lower op higher, element-wise, as a new array (the operands are not changed)."""
        if self._array is None:
            return self._py(lower, higher)
        return self._array(lower, higher)

    def __repr__(self) -> str:
        return f"<Op {self.name}>"

    def __reduce__(self) -> Any:
        # predefined ops travel by name so identity checks survive pickling
        if PREDEFINED.get(self.name) is self:
            return (_predefined, (self.name,))
        return (Op, (self.name, self._py, self._array), {"commute": self.commute})

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.commute = state["commute"]

    @classmethod
    def Create(cls, function: Callable[..., Any], commute: bool = False) -> Op:  # noqa: N802
        """A user-defined op, as ``MPI.Op.Create``: ``function(invec, inoutvec, datatype)``
        combines buffers in place (inoutvec = invec op inoutvec); for objects it is called
        ``function(x, y, None)`` and its result used, as mpi4py does."""
        if not callable(function):
            raise TypeError(f"Op.Create needs a callable, got {function!r}")

        def on_arrays(lower: np.ndarray, higher: np.ndarray) -> np.ndarray:
            out = higher.copy()
            function(lower, out, lower.dtype)
            return out

        name = getattr(function, "__name__", "user")
        return cls(name, lambda x, y: function(x, y, None), on_arrays, commute=commute)


def as_op(op: Any) -> Op:
    """An Op from an Op or a plain ``f(x, y)`` (mpi4py accepts both for objects); a plain
    function is taken as non-commutative, the safe choice."""
    if isinstance(op, Op):
        return op
    if callable(op):
        return Op(getattr(op, "__name__", "user"), op, op, commute=False)
    raise TypeError(f"op must be a zpar.comm Op or a callable f(x, y), got {op!r}")


def _ufunc(f: np.ufunc) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    def on_arrays(lower: np.ndarray, higher: np.ndarray) -> np.ndarray:
        return f(lower, higher).astype(lower.dtype, copy=False)

    return on_arrays


SUM = Op("SUM", lambda x, y: x + y, _ufunc(np.add))
PROD = Op("PROD", lambda x, y: x * y, _ufunc(np.multiply))
MAX = Op("MAX", lambda x, y: y if y > x else x, _ufunc(np.maximum))
MIN = Op("MIN", lambda x, y: y if y < x else x, _ufunc(np.minimum))
LAND = Op("LAND", lambda x, y: bool(x) & bool(y), _ufunc(np.logical_and))
LOR = Op("LOR", lambda x, y: bool(x) | bool(y), _ufunc(np.logical_or))
LXOR = Op("LXOR", lambda x, y: bool(x) ^ bool(y), _ufunc(np.logical_xor))
BAND = Op("BAND", lambda x, y: x & y, _ufunc(np.bitwise_and))
BOR = Op("BOR", lambda x, y: x | y, _ufunc(np.bitwise_or))
BXOR = Op("BXOR", lambda x, y: x ^ y, _ufunc(np.bitwise_xor))
MAXLOC = Op("MAXLOC", _maxloc, lambda a, b: _loc_arrays(a, b, np.greater))
MINLOC = Op("MINLOC", _minloc, lambda a, b: _loc_arrays(a, b, np.less))

#: every predefined op by its MPI name
PREDEFINED: dict[str, Op] = {
    op.name: op for op in (SUM, PROD, MAX, MIN, LAND, LOR, LXOR, BAND, BOR, BXOR, MAXLOC, MINLOC)
}


def _predefined(name: str) -> Op:
    return PREDEFINED[name]
