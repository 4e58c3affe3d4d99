"""The parameters of an echo of every typed-call type, shared by the in-memory and the end
to end tests of typed calls."""

from __future__ import annotations


def every_type_args(inout: str) -> list[tuple[str, ...]]:
    """An IN parameter of each type, an INOUT one of type `inout`, an OUT one of each type
    but string (the string comes back as the result)."""
    return [
        ("i32", "int32"),
        ("i64", "int64"),
        ("f32", "float32"),
        ("f64", "float64"),
        ("b", "bool"),
        ("s", "string"),
        ("io", inout, "inout"),
        ("o32", "int32", "out"),
        ("o64", "int64", "out"),
        ("of32", "float32", "out"),
        ("of64", "float64", "out"),
        ("ob", "bool", "out"),
    ]
