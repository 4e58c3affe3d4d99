"""Task dependencies as users write them, and as they travel to the task scheduler.

``after`` (time) and ``follow`` (location) take msg_ids, AsyncResults or a Dependency.
On the wire a dependency is ``{"ids": [...], "all": bool, "success": bool, "failure": bool}``
in the request metadata; the scheduler evaluates it incrementally (schedulers/graph.py).

``depend`` and ``require`` are checked on the engine: an engine where they do not hold
raises UnmetDependency, and the scheduler moves the task to another engine.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable, Iterable
from typing import Any

from zpar.elements import PART_SEP, origin_of

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
        if isinstance(dependencies, dict):  # Dependency.as_dict() of ipyparallel
            all = dependencies.get("all", True)  # noqa: A001
            success = dependencies.get("success", success)
            failure = dependencies.get("failure", failure)
            dependencies = dependencies.get("dependencies", dependencies.get("ids", []))
        if not (success or failure):
            raise ValueError("a Dependency must accept success, failure or both")
        super().__init__(msg_ids_of(dependencies))
        self.all = bool(all)
        self.success = bool(success)
        self.failure = bool(failure)

    def as_dict(self) -> dict[str, Any]:
        """ipyparallel's form: {dependencies, all, success, failure}."""
        return {
            "dependencies": sorted(self),
            "all": self.all,
            "success": self.success,
            "failure": self.failure,
        }

    def check(self, completed: set[str], failed: set[str] | None = None) -> bool:
        """Whether the dependency is met, given the ids that completed and failed."""
        if not self:
            return True
        against: set[str] = set(completed) if self.success else set()
        if failed is not None and self.failure:
            against |= set(failed)
        return self.issubset(against) if self.all else not self.isdisjoint(against)

    def unreachable(self, completed: set[str], failed: set[str] | None = None) -> bool:
        """Whether the dependency can no longer be met."""
        if not self:
            return False
        against: set[str] = set(completed) if not self.success else set()
        if failed is not None and not self.failure:
            against |= set(failed)
        return not self.isdisjoint(against) if self.all else self.issubset(against)

    def to_wire(self) -> dict[str, Any]:
        """The form the task scheduler reads (request metadata)."""
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
    if isinstance(deps, str):  # an element of a load-balanced map: its request's id
        return [origin_of(deps)] if PART_SEP in deps else [deps]
    ids = getattr(deps, "request_ids", None)  # a map's: one per request, not per element
    if ids is None:
        ids = getattr(deps, "msg_ids", None)  # an AsyncResult
    if ids is not None:
        return list(dict.fromkeys(origin_of(m) for m in ids))
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
    return dep.to_wire() if dep else None


# -- checked on the engine ------------------------------------------------------------------


class dependent:  # noqa: N801 - ipyparallel's name
    """A function that runs only where ``df(*dargs, **dkwargs)`` is not False (a class, not
    a closure, as in ipyparallel). Elsewhere it raises UnmetDependency and the task
    scheduler moves the task to another engine."""

    def __init__(
        self,
        _wrapped_f: Callable[..., Any],
        _wrapped_df: Callable[..., Any],
        *dargs: Any,
        **dkwargs: Any,
    ) -> None:
        self.f = _wrapped_f
        self.__name__ = getattr(_wrapped_f, "__name__", "f")
        self.__doc__ = getattr(_wrapped_f, "__doc__", None)
        self.df = _wrapped_df
        self.dargs = dargs
        self.dkwargs = dkwargs

    def check_dependency(self) -> None:
        try:
            ok = self.df(*self.dargs, **self.dkwargs)
        except UnmetDependency:
            raise
        if ok is False:
            name = getattr(self.df, "__name__", self.df)
            raise UnmetDependency(f"{name!s} is false on this engine")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.check_dependency()
        return _bound(self.f)(*args, **kwargs)


def _bound(f: Callable[..., Any]) -> Callable[..., Any]:
    """On an engine, ``f`` over the engine's namespace (as the kernel does for the
    function it calls); elsewhere ``f`` itself."""
    import sys

    namespace = sys.modules.get("zpar.namespace")
    if namespace is None:
        return f
    ns = namespace.current_or_none()
    return f if ns is None else namespace.bind(f, ns)


class depend:  # noqa: N801 - ipyparallel's name
    """Decorator: ``@depend(df, *args, **kwargs)`` runs the function only on engines where
    ``df(*args, **kwargs)`` does not return False (nor raise UnmetDependency)."""

    def __init__(self, _wrapped_f: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        if not callable(_wrapped_f):
            raise TypeError(f"depend() takes a predicate function, not {_wrapped_f!r}")
        self.f = _wrapped_f
        self.args = args
        self.kwargs = kwargs

    def __call__(self, f: Callable[..., Any]) -> dependent:
        return dependent(f, self.f, *self.args, **self.kwargs)


def _require(*modules: str, **mapping: Any) -> bool:
    """Engine side of @require: import the modules, bind the objects (in the globals of
    the function, ``_globals``)."""
    g = mapping.pop("_globals")
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise UnmetDependency(f"module {name!r} cannot be imported: {e}") from None
        top = name.partition(".")[0]
        g[top] = importlib.import_module(top)
    g.update(mapping)
    return True


class _Required(dependent):
    """A function decorated with @require: its requirements bound in the globals it runs
    with (on an engine, the engine's namespace)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        f = _bound(self.f)
        g = getattr(f, "__globals__", None)
        _require(*self.dargs, _globals={} if g is None else g, **self.dkwargs)
        return f(*args, **kwargs)


def require(*objects: Any, **mapping: Any) -> Callable[[Callable[..., Any]], dependent]:
    """Decorator: the function needs these modules (names or module objects: imported into
    its globals on the engine, which must have them) and objects (functions positionally,
    under their ``__name__``, anything by keyword: sent with the task and bound there)."""
    names: list[str] = []
    for obj in objects:
        if isinstance(obj, types.ModuleType):
            obj = obj.__name__
        if isinstance(obj, str):
            names.append(obj)
        elif hasattr(obj, "__name__"):
            mapping[obj.__name__] = obj
        else:
            raise TypeError(
                "Objects other than modules and functions must be passed by kwarg, "
                f"but got: {type(obj)}"
            )

    def decorate(f: Callable[..., Any]) -> dependent:
        return _Required(f, _require, *names, **mapping)

    return decorate
