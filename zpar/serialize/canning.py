"""ipyparallel's canning names under zpar: ``Reference``, ``PrePickled``, ``can`` /
``uncan`` and the ``can_map`` / ``uncan_map`` hooks, re-exported by zpar.serialize.

zpar needs no canning to send functions (cloudpickle sends them by value, see
zpar.serialize); these exist for code that uses them directly. ``can(obj)`` returns
something that pickles and ``uncan(canned, g)`` gives the object back, functions rebound to
the globals ``g``. A ``Reference('name')`` passed as an argument is replaced, on the
engine, by the value of ``name`` in the engine's namespace.
"""

from __future__ import annotations

import pickle
import types
from typing import Any

import cloudpickle

__all__ = [
    "CannedFunction",
    "CannedObject",
    "PrePickled",
    "Reference",
    "can",
    "can_map",
    "uncan",
    "uncan_map",
]


def resolve_reference(name: str) -> Any:
    """Engine side of a Reference: evaluate ``name`` in the engine's namespace."""
    from zpar import namespace

    try:
        ns = namespace.current()
    except RuntimeError:
        raise NameError(f"Reference({name!r}) is resolved only on an engine") from None
    return eval(name, ns)


class CannedObject:
    """Base of canned objects: ``get_object(g)`` gives the object back."""

    def get_object(self, g: dict[str, Any] | None = None) -> Any:
        raise NotImplementedError


class Reference(CannedObject):
    """A name to look up in the engine's namespace when the call runs there.

    ``view.apply(f, ipp.Reference('a'))`` calls ``f(a)`` with the engine's ``a``."""

    def __init__(self, name: str) -> None:
        if not isinstance(name, str):
            raise TypeError(f"illegal name: {name!r}")
        self.name = name

    def __repr__(self) -> str:
        return f"<Reference: {self.name!r}>"

    def get_object(self, g: dict[str, Any] | None = None) -> Any:
        return eval(self.name, {} if g is None else g)

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        # unpickled on the engine (the call's arguments): the engine's value of the name
        return (resolve_reference, (self.name,))


def _loads(data: bytes) -> Any:
    return pickle.loads(data)


class PrePickled:
    """An object pickled once, up front (e.g. an argument sent in many calls): sending it
    again costs no pickling. Unpickled on the receiving side as the original object."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.data = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (_loads, (self.data,))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.obj(*args, **kwargs)


class CannedFunction(CannedObject):
    """A function by value (cloudpickle), rebound to the globals given to get_object."""

    def __init__(self, f: types.FunctionType) -> None:
        self.data = cloudpickle.dumps(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.__name__ = f.__name__

    def get_object(self, g: dict[str, Any] | None = None) -> Any:
        f = pickle.loads(self.data)
        if g is None:
            return f
        from zpar.namespace import bind

        return bind(f, g)


def _can_function(f: types.FunctionType) -> CannedFunction:
    return CannedFunction(f)


#: type -> function canning it; extend it for types of your own, as in ipyparallel
can_map: dict[Any, Any] = {types.FunctionType: _can_function}
#: type -> function(obj, g) uncanning it
uncan_map: dict[Any, Any] = {CannedObject: lambda obj, g: obj.get_object(g)}


def can(obj: Any) -> Any:
    """Prepare ``obj`` for pickling (functions by value, containers element-wise)."""
    for cls, canner in can_map.items():
        if isinstance(cls, str):
            continue
        if isinstance(obj, cls):
            return canner(obj)
    if type(obj) is dict:
        return {k: can(v) for k, v in obj.items()}
    if type(obj) in (list, tuple, set):
        return type(obj)(can(x) for x in obj)
    return obj


def uncan(obj: Any, g: dict[str, Any] | None = None) -> Any:
    """Inverse of can: the object, functions bound to the globals ``g``."""
    for cls, uncanner in uncan_map.items():
        if isinstance(cls, str):
            continue
        if isinstance(obj, cls):
            return uncanner(obj, g)
    if type(obj) is dict:
        return {k: uncan(v, g) for k, v in obj.items()}
    if type(obj) in (list, tuple, set):
        return type(obj)(uncan(x, g) for x in obj)
    return obj
