"""A map chunk, run on an engine: sent by reference (engines import zpar too). Not named
zpar.remote, which is ipyparallel's decorator ``ipp.remote``."""

from __future__ import annotations

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
    return out


def _bound(f: Any) -> Any:
    """``f`` under the namespace rule of applied functions (engine.namespace.bind): one
    shipped by value sees the engine's namespace, as ipyparallel's mapped functions do
    (its engines uncan a map's function with the user namespace as globals)."""
    from zpar.engine import namespace

    try:
        ns = namespace.current()
    except RuntimeError:  # not on an engine (a test calling it here): nothing to bind to
        return f
    return namespace.bind(f, ns)
