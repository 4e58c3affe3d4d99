"""Typed signatures: what a registered function takes and returns, and where each value
sits in the type arrays of a message.

As AMUSE's LegacyFunctionSpecification: parameters in declaration order with a type and a
direction; the inputs (in, inout) of each type fill that type's request array in order; the
outputs fill the reply's arrays, the declared result first within its type, then the out and
inout parameters in declaration order. The default function id is AMUSE's:
``abs`` of the signed CRC-32 of the ASCII name.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .codec import TYPES

DIRECTIONS = ("in", "out", "inout")

#: Keywords every typed call takes, so no parameter may be named so.
CALL_KEYWORDS = frozenset({"max_calls_per_message", "block"})

#: Function id 0 stops an AMUSE worker (its ``_stop_worker``): never a registered function.
STOP_FUNCTION_ID = 0

_INT32_MAX = 2**31 - 1


def function_id_for(name: str) -> int:
    """AMUSE's id of a function name: abs of the signed CRC-32 of its ASCII bytes."""
    crc = zlib.crc32(name.encode("ascii"))
    return abs(crc - ((crc & 0x80000000) << 1))


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str
    direction: str = "in"
    #: index among the inputs of its type (in, inout), -1 for an out parameter
    input_index: int = -1
    #: index among the outputs of its type (the result first), -1 for an in parameter
    output_index: int = -1

    @property
    def is_input(self) -> bool:
        return self.direction != "out"

    @property
    def is_output(self) -> bool:
        return self.direction != "in"


@dataclass(frozen=True, slots=True)
class TypedSignature:
    name: str
    function_id: int
    params: tuple[Param, ...]
    returns: str | None = None
    vectorized: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
    #: inputs (in, inout) in declaration order
    inputs: tuple[Param, ...] = ()
    #: outputs: the result (named "__result") first, then out/inout in declaration order
    outputs: tuple[Param, ...] = ()
    #: values of each type in one call's request / reply (TYPES order)
    in_counts: tuple[int, ...] = ()
    out_counts: tuple[int, ...] = ()

    @classmethod
    def build(
        cls,
        name: str,
        args: Sequence[Any] = (),
        returns: str | None = None,
        function_id: int | None = None,
        vectorized: bool = False,
        defaults: dict[str, Any] | None = None,
    ) -> TypedSignature:
        """Validate a declaration (``args``: (name, type) or (name, type, direction)) and
        place every value; errors name what is wrong."""
        if not isinstance(name, str) or not name.isidentifier() or not name.isascii():
            raise ValueError(f"a typed function's name must be an ASCII identifier, got {name!r}")
        if returns is not None and returns not in TYPES:
            raise ValueError(
                f"{name}: returns must be one of {', '.join(TYPES)} or None, got {returns!r}"
            )
        if function_id is None:
            function_id = function_id_for(name)
        if isinstance(function_id, bool) or not isinstance(function_id, int):
            raise TypeError(f"{name}: function_id must be an int, got {type(function_id).__name__}")
        if not 0 < function_id <= _INT32_MAX:
            raise ValueError(
                f"{name}: function_id must be in 1..{_INT32_MAX} (an int32; 0 stops a worker), got {function_id}"
            )
        defaults = dict(defaults or {})
        decl = [_param_decl(name, a) for a in args]
        _check_names(name, decl, defaults)
        in_pos = dict.fromkeys(TYPES, 0)
        out_pos = dict.fromkeys(TYPES, 0)
        if returns is not None:
            out_pos[returns] = 1
        params = []
        for pname, ptype, direction in decl:
            ii = oi = -1
            if direction != "out":
                ii = in_pos[ptype]
                in_pos[ptype] += 1
            if direction != "in":
                oi = out_pos[ptype]
                out_pos[ptype] += 1
            params.append(Param(pname, ptype, direction, ii, oi))
        outputs = [p for p in params if p.is_output]
        if returns is not None:
            outputs.insert(0, Param("__result", returns, "out", -1, 0))
        return cls(
            name=name,
            function_id=function_id,
            params=tuple(params),
            returns=returns,
            vectorized=bool(vectorized),
            defaults=defaults,
            inputs=tuple(p for p in params if p.is_input),
            outputs=tuple(outputs),
            in_counts=tuple(in_pos[t] for t in TYPES),
            out_counts=tuple(out_pos[t] for t in TYPES),
        )

    # -- plain form, for the wire (msgpack-able) ---------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "function_id": self.function_id,
            "args": [[p.name, p.type, p.direction] for p in self.params],
            "returns": self.returns,
            "vectorized": self.vectorized,
            "defaults": self.defaults,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TypedSignature:
        return cls.build(
            d["name"],
            d.get("args", ()),
            d.get("returns"),
            d.get("function_id"),
            d.get("vectorized", False),
            d.get("defaults"),
        )

    def describe(self) -> str:
        """``name(x: float64, n: inout int32) -> float64`` for messages."""
        args = ", ".join(
            f"{p.name}: {p.type}" if p.direction == "in" else f"{p.name}: {p.direction} {p.type}"
            for p in self.params
        )
        return f"{self.name}({args}) -> {self.returns or 'None'}"


def _check_names(fname: str, decl: list[tuple[str, str, str]], defaults: dict[str, Any]) -> None:
    seen: set[str] = set()
    for pname, _, _ in decl:
        if pname in seen:
            raise ValueError(f"{fname}: parameter {pname!r} declared twice")
        if pname in CALL_KEYWORDS:
            raise ValueError(
                f"{fname}: {pname!r} is a keyword of every typed call; rename the parameter"
            )
        seen.add(pname)
    by_name = {p: d for p, _, d in decl}
    for k in defaults:
        if k not in by_name:
            raise ValueError(f"{fname}: default for unknown parameter {k!r}")
        if by_name[k] == "out":
            raise ValueError(f"{fname}: out parameter {k!r} cannot have a default")


def _param_decl(fname: str, a: Any) -> tuple[str, str, str]:
    if isinstance(a, Param):
        a = (a.name, a.type, a.direction)
    if not isinstance(a, list | tuple) or len(a) not in (2, 3):
        raise ValueError(
            f"{fname}: each argument is (name, type) or (name, type, direction), got {a!r}"
        )
    pname, ptype = a[0], a[1]
    direction = a[2] if len(a) == 3 else "in"
    if not isinstance(pname, str) or not pname.isidentifier():
        raise ValueError(f"{fname}: parameter name must be an identifier, got {pname!r}")
    if ptype not in TYPES:
        raise ValueError(
            f"{fname}: parameter {pname!r} has type {ptype!r}; types: {', '.join(TYPES)}"
        )
    if direction not in DIRECTIONS:
        raise ValueError(
            f"{fname}: parameter {pname!r} has direction {direction!r}; directions: {', '.join(DIRECTIONS)}"
        )
    return pname, ptype, direction


def signature_of(
    func: Callable[..., Any],
    args: Sequence[Any] = (),
    returns: str | None = None,
    name: str | None = None,
    function_id: int | None = None,
    vectorized: bool = False,
    defaults: dict[str, Any] | None = None,
) -> TypedSignature:
    """The signature of ``func`` as registered (its name unless one is given)."""
    if not callable(func):
        raise TypeError(f"{func!r} is not callable")
    return TypedSignature.build(
        name or getattr(func, "__name__", ""), args, returns, function_id, vectorized, defaults
    )
