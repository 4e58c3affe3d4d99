"""The base of every message content dataclass: field type checks and the map that travels.

A field made with ``optional(default)`` is left out of the map while it holds its default
(an ``evalue`` only errors carry, the error fields of an ok reply), so each dataclass packs
to the same map the processes sent before they used it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from zpar.wire.messages.enums import MsgType


def optional(default: Any = "") -> Any:
    """A field left out of the content map while it holds ``default`` (a factory is used
    for a list or dict default, as dataclasses require)."""
    if isinstance(default, list | dict):
        factory = type(default)
        return field(default_factory=factory, metadata={"optional": True})
    return field(default=default, metadata={"optional": True})


@dataclass(frozen=True, slots=True)
class Fields:
    """Base of a message's fields: checked on construction, the map that travels through
    as_dict(), and the same map without an instance through content() (the hot paths')."""

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
    def content(cls, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """``cls(*args, **kwargs).as_dict()``, the same checks and the same map, built
        without an instance: a function made from the fields once per class, as dataclasses
        makes ``__init__`` (about a tenth of the cost; the hot paths build with it)."""
        build = _BUILDERS.get(cls) or _builder(cls)
        return build(*args, **kwargs)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, slots=True)
class Content(Fields):
    """Base of message contents: typed, validated, msgpack-able through as_dict()."""

    msg_type: ClassVar[MsgType]


@dataclass(frozen=True, slots=True)
class ErrorContent(Fields):
    """The content of any reply whose status is ``error`` or ``aborted``, whatever its type
    (docs/protocol.md, "Error content"): zpar.errors.error_content builds it. A field
    without a value is left out of the map."""

    status: str
    ename: str
    evalue: str
    traceback: list | None = optional(None)
    engine_info: dict | None = optional(None)
    zpar_error: bool = optional(False)  # an error zpar decided: the client raises its class
    unknown: list | None = optional(None)  # the msg_ids a hub query did not know
    execution_count: int | None = optional(None)  # of an execute_reply
    elements: list | None = optional(None)  # of an element request's part (as ApplyReply's)
    final: bool = optional(False)


class _FieldTable(NamedTuple):
    """What __post_init__ and as_dict need of a content class, read once from its fields
    (dataclasses.fields and a default factory per call cost ~4 us a message)."""

    checks: tuple[tuple[str, type | tuple[type, ...]], ...]  # (name, expected type)
    fields: tuple[tuple[str, bool, Any], ...]  # (name, optional, default)


_TABLES: dict[type, _FieldTable] = {}
_BUILDERS: dict[type, Callable[..., dict[str, Any]]] = {}
#: a default-factory field not given to a builder
_NOT_GIVEN = object()


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


def _builder(cls: type) -> Callable[..., dict[str, Any]]:
    """The function ``cls.content`` calls: the parameters of ``cls.__init__``, the checks of
    __post_init__ and the map of as_dict, written out for this class's fields."""
    ns: dict[str, Any] = {"_NOT_GIVEN": _NOT_GIVEN}
    params, checks, puts = [], [], []
    for i, f in enumerate(dataclasses.fields(cls)):
        name, optional_ = f.name, bool(f.metadata.get("optional"))
        factory = f.default_factory is not dataclasses.MISSING
        if f.default is not dataclasses.MISSING:
            ns[f"_d{i}"] = f.default
            params.append(f"{name}=_d{i}")
        elif factory:
            ns[f"_f{i}"] = f.default_factory
            ns[f"_d{i}"] = f.default_factory()  # type: ignore[operator]  # only compared with
            params.append(f"{name}=_NOT_GIVEN")
        else:
            params.append(name)
        if name in _CHECKS:
            ns[f"_t{i}"] = _CHECKS[name]
            given = f" and {name} is not _NOT_GIVEN" if factory else ""
            checks.append(
                f"    if {name} is not None{given} and not isinstance({name}, _t{i}):\n"
                f"        raise TypeError(f'{cls.__name__}.{name} must be {{_t{i}}}, "
                f"got {{type({name}).__name__}}')"
            )
        if factory:
            # not given: a fresh default, left out if optional (it equals its default)
            put = "" if optional_ else f"        out[{name!r}] = _f{i}()\n"
            put = f"    if {name} is _NOT_GIVEN:\n{put or '        pass'}\n    else:\n"
            keep = f"if not ({name} == _d{i}): " if optional_ else ""
            puts.append(f"{put.rstrip(chr(10))}\n        {keep}out[{name!r}] = {name}")
        elif optional_:
            puts.append(f"    if not ({name} == _d{i}):\n        out[{name!r}] = {name}")
        else:
            puts.append(f"    out[{name!r}] = {name}")
    source = "\n".join(
        [f"def content({', '.join(params)}):", *checks, "    out = {}", *puts, "    return out"]
    )
    exec(compile(source, f"<{cls.__name__}.content>", "exec"), ns)  # noqa: S102
    build = ns["content"]
    build.__qualname__ = f"{cls.__name__}.content"
    _BUILDERS[cls] = build
    cls.content = staticmethod(build)  # type: ignore[attr-defined]  # later calls: no lookup
    return build
