"""A map chunk, run on an engine: sent by reference (engines import zpar too). Not named
zpar.remote, which is ipyparallel's decorator ``ipp.remote``."""

from __future__ import annotations

import sys
from typing import Any


def map_chunk(f: Any, *seqs: Any, start: int = 0) -> list[Any]:
    """``list(map(f, *seqs))`` for one chunk of a map, whose first element is element
    ``start`` of the whole map. An error says which element raised (a note on it, shown
    with its remote traceback): a chunk fails as a whole, as in ipyparallel."""
    f = _bound(f)
    out: list[Any] = []
    try:
        # extend keeps what was appended before an error: len(out) is the failed index
        out.extend(map(f, *seqs))
    except Exception as e:
        e.add_note(f"(raised by element {start + len(out)} of the map)")
        raise
    if out and type(out[0]) in _numpy_scalar_types():
        return _as_numpy_scalars(out)
    return out


def _bound(f: Any) -> Any:
    """``f`` under the namespace rule of applied functions (engine.namespace.bind): one
    shipped by value sees the engine's namespace, as ipyparallel's mapped functions do
    (its engines uncan a map's function with the user namespace as globals)."""
    # looked up, not imported: ~1.5 us a chunk less (an import with a fromlist runs
    # Python code), and an engine has always imported it (its kernel binds with it)
    namespace = sys.modules.get("zpar.namespace")
    if namespace is None:  # not on an engine: nothing to bind to
        return f
    try:
        ns = namespace.current()
    except RuntimeError:  # not on an engine (a test calling it here): nothing to bind to
        return f
    return namespace.bind(f, ns)


# -- results that are numpy scalars ---------------------------------------------------------
#
# f over a numpy array usually returns numpy scalars (np.float64...), which pickle one by
# one at ~13 us each (63 ms for 5,000): a chunk of them travels as ONE array instead and is
# a plain list of the same scalars again when unpickled (list(array)), ~0.2 us each.

_SCALAR_TYPES: frozenset[type] | None = None


def _numpy_scalar_types() -> frozenset[type]:
    """The numpy scalar types whose type alone fixes their dtype (numbers and bools);
    empty while numpy is not imported (then no result can be one)."""
    global _SCALAR_TYPES
    if _SCALAR_TYPES is None:
        np = sys.modules.get("numpy")
        if np is None:
            return frozenset()
        names = "bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32"
        names += " float64 complex64 complex128"
        _SCALAR_TYPES = frozenset(getattr(np, n) for n in names.split())
    return _SCALAR_TYPES


class NumpyScalars(list[Any]):
    """A chunk's results, all numpy scalars of one type: pickled as one array."""

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        import numpy as np

        return (scalars_from_array, (np.array(self, dtype=type(self[0])),))


def _as_numpy_scalars(out: list[Any]) -> list[Any]:
    t = type(out[0])
    for x in out:
        if type(x) is not t:
            return out
    return NumpyScalars(out)


def scalars_from_array(array: Any) -> list[Any]:
    """Unpickling a NumpyScalars: the plain list of the array's scalars."""
    return list(array)
