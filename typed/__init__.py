"""Typed batched calls (seed 000): n calls of one registered function in one message, its
arguments as one raw array per primitive type, no pickle; and a gateway to AMUSE's sockets
channel in both directions. See docs/typed.md."""

from .registry import REGISTRY, RegistrationError, Registry, typed_function
from .signature import Param, TypedSignature, function_id_for


def __getattr__(name: str):  # the gateway imports sockets and subprocess: only when used
    if name in ("AmuseWorker", "serve_amuse"):
        from . import amuse

        return getattr(amuse, name)
    if name == "RemoteCallError":
        from .result import RemoteCallError

        return RemoteCallError
    raise AttributeError(f"module 'zpar.typed' has no attribute {name!r}")


__all__ = [
    "REGISTRY",
    "AmuseWorker",
    "Param",
    "Registry",
    "RegistrationError",
    "RemoteCallError",
    "TypedSignature",
    "function_id_for",
    "serve_amuse",
    "typed_function",
]
