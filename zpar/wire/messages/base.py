"""The base of every message content dataclass: field type checks and the map that travels.

A field made with ``optional(default)`` is left out of the map while it holds its default
(an ``evalue`` only errors carry, the error fields of an ok reply), so each dataclass packs
to the same map the processes sent before they used it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from zpar.wire.messages.enums import MsgType


@dataclass(frozen=True, slots=True)
class Content:
    """Base of message contents: typed, validated, msgpack-able through as_dict()."""

    msg_type: ClassVar[MsgType]

    def __post_init__(self) -> None:
        table = _TABLES.get(type(self)) or _table(type(self))
        for name, expected in table.checks:
            value = getattr(self, name)
            if value is not None and not isinstance(value, expected):
                raise TypeError(
                    f"{type(self).__name__}.{name} must be {expected}, got {type(value).__name__}"
                )

    def as_dict(self) -> dict[str, Any]:
        """The content map that travels: every field, but optional ones at their default."""
        table = _TABLES.get(type(self)) or _table(type(self))
        out = {}
        for name, optional_, default in table.fields:
            value = getattr(self, name)
            if optional_ and value == default:
                continue
            out[name] = value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Content:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, slots=True)
class ErrorContent:
    """The content of any reply whose status is ``error`` or ``aborted``, whatever its type
    (docs/protocol.md, "Error content"): zpar.errors.error_content builds it. Fields at
    their default are left out of the map."""

    status: str
    ename: str
    evalue: str
    traceback: list | None = None
    engine_info: dict | None = None
    zpar_error: bool = False  # an error zpar decided: the client raises it as its class
    unknown: list | None = None  # the msg_ids a hub query did not know
    execution_count: int | None = None  # of an execute_reply
    elements: list | None = None  # of an element request's part (as ApplyReply's)
    final: bool = False

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "ename": self.ename, "evalue": self.evalue}
        for name in _ERROR_OPTIONAL:
            value = getattr(self, name)
            if value is not None and value is not False:
                out[name] = value
        return out


_ERROR_OPTIONAL = (
    "traceback",
    "engine_info",
    "zpar_error",
    "unknown",
    "execution_count",
    "elements",
    "final",
)


def optional(default: Any = "") -> Any:
    """A field left out of the content map while it holds ``default`` (a factory is used
    for a list or dict default, as dataclasses require)."""
    if isinstance(default, list | dict):
        factory = type(default)
        return field(default_factory=factory, metadata={"optional": True})
    return field(default=default, metadata={"optional": True})


class _FieldTable(NamedTuple):
    """What __post_init__ and as_dict need of a content class, read once from its fields
    (dataclasses.fields and a default factory per call cost ~4 us a message)."""

    checks: tuple[tuple[str, type | tuple[type, ...]], ...]  # (name, expected type)
    fields: tuple[tuple[str, bool, Any], ...]  # (name, optional, default)


_TABLES: dict[type, _FieldTable] = {}


def _table(cls: type) -> _FieldTable:
    fields = dataclasses.fields(cls)
    table = _FieldTable(
        tuple((f.name, _CHECKS[f.name]) for f in fields if f.name in _CHECKS),
        # a factory's default is made once and only compared with, never handed out
        tuple((f.name, bool(f.metadata.get("optional")), _default_of(f)) for f in fields),
    )
    _TABLES[cls] = table
    return table


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING  # a required field: never equal to a value


_CHECKS: dict[str, type | tuple[type, ...]] = {
    "uuid": str,
    "id": int,
    "status": str,
    "msg_ids": (list, str),
    "targets": list,
    "verbose": bool,
    "statusonly": bool,
    "code": str,
    "name": str,
    "text": str,
}
