"""Functions a `zpar amuse-worker` serves in the gateway tests (imported by the worker)."""

from __future__ import annotations

import zpar


@zpar.typed_function(
    args=[("x", "float64"), ("y", "float64"), ("z", "float64", "out")],
    returns="int32",
    vectorized=True,
)
def add(x, y):
    return 0, x + y


@zpar.typed_function(
    args=[("n", "int64", "inout"), ("s", "string"), ("k", "int32", "out")], returns="int32"
)
def twice(n, s):
    if s == "boom":
        raise ValueError("boom asked")
    return 7, 2 * n, len(s)


@zpar.typed_function(args=[("s", "string"), ("b", "bool")], returns="string")
def shout(s, b):
    return s.upper() + ("!" if b else "")


@zpar.typed_function(args=[("code", "int32")], returns="int32")
def exit_now(code):
    import os

    os._exit(code)
