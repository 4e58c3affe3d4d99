"""The base of every message content dataclass: field type checks and the map that travels.

A field made with ``optional(default)`` is left out of the map while it holds its default
(an ``evalue`` only errors carry, the error fields of an ok reply), so each dataclass packs
to the same map the processes sent before they used it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .enums import MsgType


@dataclass(frozen=True, slots=True)
class Content:
    """Base of message contents: typed, validated, msgpack-able through as_dict()."""

    msg_type: ClassVar[MsgType]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            expected = _CHECKS.get(f.name)
            if expected is not None and value is not None and not isinstance(value, expected):
                raise TypeError(
                    f"{type(self).__name__}.{f.name} must be {expected}, got {type(value).__name__}"
                )

    def as_dict(self) -> dict[str, Any]:
        """The content map that travels: every field, but optional ones at their default."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("optional") and value == _default_of(f):
                continue
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Content:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def optional(default: Any = "") -> Any:
    """A field left out of the content map while it holds ``default`` (a factory is used
    for a list or dict default, as dataclasses require)."""
    if isinstance(default, list | dict):
        factory = type(default)
        return field(default_factory=factory, metadata={"optional": True})
    return field(default=default, metadata={"optional": True})


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
