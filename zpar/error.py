"""ipyparallel's ``ipyparallel.error`` under zpar: the same names over zpar's one error tree
(zpar.errors), and the helpers ipyparallel code imports from here.

``IPythonError`` and ``KernelError`` are zpar's root ``ZparError``, so ``except
KernelError`` catches every zpar error as it catches every ipyparallel one.
"""

from __future__ import annotations

import builtins
import sys
import traceback
from collections.abc import Iterable
from typing import Any

from .errors import (
    AlreadyDisplayedError,
    CompositeError,
    DependencyTimeout,
    EngineError,
    ImpossibleDependency,
    InvalidDependency,
    NoEnginesRegistered,
    RemoteError,
    SerializationError,
    TaskAborted,
    TaskRejectError,
    TaskTimeout,
    UnmetDependency,
    ZparError,
    error_content,
)

#: ipyparallel's base classes; in zpar every error derives from ZparError.
IPythonError = ZparError
KernelError = ZparError

#: As in ipyparallel 9: the builtin TimeoutError (zpar's own TimeoutError subclasses it,
#: so ``except ipp.error.TimeoutError`` catches a zpar timeout).
TimeoutError = builtins.TimeoutError  # noqa: A001

__all__ = [
    "AlreadyDisplayedError",
    "CompositeError",
    "DependencyTimeout",
    "EngineError",
    "IPythonError",
    "ImpossibleDependency",
    "InvalidDependency",
    "KernelError",
    "NoEnginesRegistered",
    "RemoteError",
    "SerializationError",
    "TaskAborted",
    "TaskRejectError",
    "TaskTimeout",
    "TimeoutError",
    "UnmetDependency",
    "collect_exceptions",
    "unwrap_exception",
    "wrap_exception",
]


def collect_exceptions(rdict_or_list: dict[Any, Any] | Iterable[Any], method: str = "unspecified"):
    """Raise a CompositeError if the results hold RemoteErrors (CompositeErrors among them
    are flattened); return the results unchanged otherwise."""
    rlist = rdict_or_list.values() if isinstance(rdict_or_list, dict) else rdict_or_list
    errors: list[BaseException] = []
    for r in rlist:
        if isinstance(r, CompositeError):
            errors.extend(r.errors)
        elif isinstance(r, RemoteError):
            errors.append(r)
    if not errors:
        return rdict_or_list
    raise CompositeError(f"one or more exceptions raised in: {method}", errors)


def wrap_exception(engine_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The error content of the exception being handled (call inside ``except``)."""
    etype, evalue, tb = sys.exc_info()
    if etype is None or evalue is None:
        raise RuntimeError("wrap_exception() is called while an exception is being handled")
    return error_content(
        evalue,
        traceback=traceback.format_exception(etype, evalue, tb),
        engine_info=dict(engine_info or {}),
    )


def unwrap_exception(content: dict[str, Any]) -> RemoteError:
    """The RemoteError an error content describes (inverse of wrap_exception)."""
    tb = content.get("traceback", "")
    return RemoteError(
        content["ename"],
        content["evalue"],
        "\n".join(tb) if isinstance(tb, list) else tb,
        content.get("engine_info", {}),
    )
