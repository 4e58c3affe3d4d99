"""Task dependencies as users write them, and as they travel to the task scheduler.

``after`` (time) and ``follow`` (location) take msg_ids, AsyncResults or a Dependency.
On the wire a dependency is ``{"ids": [...], "all": bool, "success": bool, "failure": bool}``
in the request metadata; the scheduler evaluates it incrementally (schedulers/graph.py).

``depend`` and ``require`` are checked on the engine: an engine where they do not hold
raises UnmetDependency, and the scheduler moves the task to another engine.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable
from typing import Any

from .errors import UnmetDependency


class Dependency(set):
    """A set of msg_ids with the rule for when they count as met.

    all: every id must be met (else: any one). success / failure: whether a task that
    succeeded / failed counts as met. Both False can never be met and is refused.
    """

    def __init__(
        self,
        dependencies: Any = (),
        all: bool = True,  # noqa: A002 - the ipyparallel name
        success: bool = True,
        failure: bool = False,
    ) -> None:
        if not (success or failure):
            raise ValueError("a Dependency must accept success, failure or both")
        super().__init__(msg_ids_of(dependencies))
        self.all = bool(all)
        self.success = bool(success)
        self.failure = bool(failure)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ids": sorted(self),
            "all": self.all,
            "success": self.success,
            "failure": self.failure,
        }

    @classmethod
    def from_wire(cls, obj: Any) -> Dependency:
        """Parse what a client sent; ValueError naming what is wrong."""
        if isinstance(obj, list):
            obj = {"ids": obj}
        if not isinstance(obj, dict) or not isinstance(obj.get("ids", []), list):
            raise ValueError(f"a dependency must be a list of msg_ids or a dict, got {obj!r}")
        ids = obj.get("ids", [])
        if not all(isinstance(i, str) for i in ids):
            raise ValueError(f"dependency ids must be msg_id strings, got {ids!r}")
        return cls(
            ids,
            all=obj.get("all", True),
            success=obj.get("success", True),
            failure=obj.get("failure", False),
        )

    def __repr__(self) -> str:
        return (
            f"Dependency({sorted(self)!r}, all={self.all}, success={self.success}, "
            f"failure={self.failure})"
        )


def msg_ids_of(deps: Any) -> list[str]:
    """msg_ids named by a msg_id, an AsyncResult, a Dependency or an iterable of those."""
    if deps is None:
        return []
    if isinstance(deps, str):
        return [deps]
    ids = getattr(deps, "msg_ids", None)  # an AsyncResult
    if ids is not None:
        return list(ids)
    if not isinstance(deps, Iterable):
        raise TypeError(
            f"dependencies must be msg_ids, AsyncResults or a Dependency, got {type(deps)}"
        )
    out: list[str] = []
    for d in deps:
        out.extend(msg_ids_of(d))
    return out


def to_wire(deps: Any) -> dict[str, Any] | None:
    """The metadata form of after= / follow=; None when there is nothing to wait for."""
    if deps is None:
        return None
    dep = deps if isinstance(deps, Dependency) else Dependency(deps)
    return dep.as_dict() if dep else None


# -- checked on the engine ------------------------------------------------------------------


def depend(predicate: Callable[..., bool], *args: Any, **kwargs: Any) -> Callable[..., Any]:
    """Decorator: run the function only on engines where ``predicate(*args, **kwargs)`` is
    true; elsewhere the scheduler moves the task on."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def checked(*a: Any, **kw: Any) -> Any:
            if not predicate(*args, **kwargs):
                raise UnmetDependency(
                    f"{getattr(predicate, '__name__', predicate)!s} is false on this engine"
                )
            return f(*a, **kw)

        return checked

    return decorate


def require(*needs: str | Callable[[], bool]) -> Callable[..., Any]:
    """Decorator: the function needs these modules (imported into its globals on the engine)
    or predicates (called there, must return True)."""
    for n in needs:
        if not (isinstance(n, str) or callable(n)):
            raise TypeError(f"require takes module names or callables, got {n!r}")

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def checked(*a: Any, **kw: Any) -> Any:
            g = getattr(f, "__globals__", {})
            for n in needs:
                if isinstance(n, str):
                    try:
                        importlib.import_module(n)
                    except ImportError as e:
                        raise UnmetDependency(f"module {n!r} cannot be imported: {e}") from None
                    top = n.partition(".")[0]
                    g[top] = importlib.import_module(top)
                elif not n():
                    raise UnmetDependency(f"{getattr(n, '__name__', n)!s}() is false here")
            return f(*a, **kw)

        return checked

    return decorate
