"""Message types of capabilities: added without editing zpar/wire/messages/.

A capability outside the core declares its message types in the entry point group
``zpar.message_types`` (name: the capability, value: "module:attr", attr a mapping
{msg_type: its reply's msg_type, or None for a reply or a message without one}), or a
process that imports it calls register_message_types. The wire accepts them like a
MsgType; the hub's query table and the kernel's handlers then route them
(hub/queryapi.py, engine/handlers.py). The group is read once, the first
time a type that is not a MsgType arrives, so the hot path never pays for it.
"""

from __future__ import annotations

import logging

from zpar.wire.messages import REPLY_TYPE, MsgType

log = logging.getLogger(__name__)

#: The entry point group capabilities declare their message types in.
MESSAGE_TYPES_GROUP = "zpar.message_types"
_extension_types: dict[str, str | None] = {}
_extension_types_loaded = False


def register_message_types(types: dict[str, str | None]) -> None:
    """Make ``types`` (msg_type -> reply msg_type or None) known in this process. A name of
    the core (a MsgType) cannot be redeclared: its meaning is fixed."""
    for name, reply in types.items():
        if (
            not isinstance(name, str)
            or not name
            or (reply is not None and not isinstance(reply, str))
        ):
            raise TypeError(f"message types are non-empty strings, got {name!r}: {reply!r}")
        if name in _CORE_TYPES:
            raise ValueError(f"{name!r} is a core message type; a capability cannot redeclare it")
        _extension_types[name] = reply
        if reply is not None and reply not in _CORE_TYPES:
            _extension_types.setdefault(reply, None)


def _load_extension_types() -> None:
    global _extension_types_loaded
    _extension_types_loaded = True
    from importlib.metadata import entry_points  # here: most processes never need it

    for ep in entry_points(group=MESSAGE_TYPES_GROUP):
        try:
            register_message_types(dict(ep.load()))
        except Exception:  # one broken capability must not stop the process
            log.exception("message types of %r (%s) not loaded", ep.name, ep.value)


def extension_type(msg_type: str) -> bool:
    """Whether ``msg_type`` is a capability's (not a MsgType): registered, or declared in
    the entry point group (read the first time this is asked about an unknown name)."""
    if msg_type in _extension_types:
        return True
    if not _extension_types_loaded:
        _load_extension_types()
        return msg_type in _extension_types
    return False


def reply_type_of(msg_type: str) -> str | None:
    """The msg_type of the reply to a ``msg_type`` request (core or capability), or None."""
    core = REPLY_TYPE.get(msg_type)  # type: ignore[call-overload]
    if core is not None:
        return core
    if extension_type(msg_type):
        return _extension_types[msg_type]
    return None


_CORE_TYPES = frozenset(m.value for m in MsgType)
