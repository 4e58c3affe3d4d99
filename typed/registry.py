"""The functions a process serves to typed calls, by id and by name.

Each engine (and each ``zpar amuse-worker``) has one registry, ``REGISTRY``: filled by
``@zpar.typed_function(...)`` when a module is imported there, or by a client's
``view.typed.register``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from .signature import TypedSignature, signature_of


class RegistrationError(ValueError):
    """A function id already belongs to another name."""


class Registry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_id: dict[int, tuple[TypedSignature, Callable[..., Any]]] = {}
        self.by_name: dict[str, int] = {}

    def add(self, sig: TypedSignature, func: Callable[..., Any]) -> TypedSignature:
        """Serve ``func`` under ``sig``. Registering a name again replaces it; an id that
        belongs to another name is a RegistrationError."""
        with self._lock:
            held = self.by_id.get(sig.function_id)
            if held is not None and held[0].name != sig.name:
                raise RegistrationError(
                    f"function id {sig.function_id} of {sig.name!r} is already {held[0].name!r}'s; "
                    "pass another function_id"
                )
            old = self.by_name.get(sig.name)
            if old is not None and old != sig.function_id:
                del self.by_id[old]
            self.by_id[sig.function_id] = (sig, func)
            self.by_name[sig.name] = sig.function_id
        return sig

    def get(self, function_id: int) -> tuple[TypedSignature, Callable[..., Any]] | None:
        return self.by_id.get(function_id)

    def lookup(self, name_or_id: str | int) -> TypedSignature | None:
        fid = self.by_name.get(name_or_id) if isinstance(name_or_id, str) else name_or_id
        entry = self.by_id.get(fid) if isinstance(fid, int) else None
        return entry[0] if entry is not None else None

    def signatures(self) -> list[dict[str, Any]]:
        """Every signature in plain form (what a client asks for to call by name or id)."""
        with self._lock:
            return [sig.to_dict() for sig, _ in self.by_id.values()]

    def remove(self, name: str) -> None:
        with self._lock:
            fid = self.by_name.pop(name, None)
            if fid is not None:
                self.by_id.pop(fid, None)

    def __len__(self) -> int:
        return len(self.by_id)


#: This process's registry.
REGISTRY = Registry()


def typed_function(
    args: Sequence[Any] = (),
    returns: str | None = None,
    name: str | None = None,
    function_id: int | None = None,
    vectorized: bool = False,
    defaults: dict[str, Any] | None = None,
    registry: Registry | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: serve the function to typed calls in this process (an engine imports the
    module). The function is returned unchanged, with its signature as ``__typed__``."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = signature_of(func, args, returns, name, function_id, vectorized, defaults)
        (registry or REGISTRY).add(sig, func)
        func.__typed__ = sig  # type: ignore[attr-defined]
        return func

    return register


def register_here(func: Callable[..., Any], signature: dict[str, Any]) -> dict[str, Any]:
    """Run on an engine by ``view.typed.register``: serve func there. Returns the signature."""
    sig = TypedSignature.from_dict(signature)
    REGISTRY.add(sig, func)
    return sig.to_dict()


def signatures_here() -> list[dict[str, Any]]:
    """Run on an engine by a client that calls a name or id it has not registered itself."""
    return REGISTRY.signatures()
