"""The add and twice that the AMUSE interop and gateway tests declare on an AmuseWorker (the
functions typed_gateway_module serves, and the C and AMUSE Python workers implement)."""

from __future__ import annotations

from zpar.typed import AmuseWorker


def declare_add_and_twice(w: AmuseWorker) -> None:
    """add(x, y) -> z and rc; twice(n inout, s) -> k and rc (7)."""
    w.declare(
        "add",
        args=[("x", "float64"), ("y", "float64"), ("z", "float64", "out")],
        returns="int32",
    )
    w.declare(
        "twice",
        args=[("n", "int64", "inout"), ("s", "string"), ("k", "int32", "out")],
        returns="int32",
    )
