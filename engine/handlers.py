"""Execution handlers that capabilities add to the kernel through entry points.

A package declares, in its pyproject.toml::

    [project.entry-points."zpar.engine_handlers"]
    typed_request = "zpar.typed.engine:make_handler"

name = the request's msg_type, value = "module:factory"; ``factory(kernel)`` returns
``handler(msg) -> (content, buffers)``, run by the kernel like apply_request (busy/idle,
captured output, the reply type from zpar.wire.msgtypes.reply_type_of: a MsgType of the core
or a type the capability declares in ``zpar.message_types``). The kernel looks a type up
the first time it sees it, so the apply hot path never pays for this.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from zpar.wire.msgtypes import reply_type_of

log = logging.getLogger(__name__)

#: entry point group of execution handlers
GROUP = "zpar.engine_handlers"

Handler = Callable[[Any], tuple[dict[str, Any], list[Any]]]


def find_handler(msg_type: str, kernel: Any) -> Handler | None:
    """The handler an installed package declares for ``msg_type``, or None.

    A handler that cannot be loaded becomes one that raises the load error, so the client
    gets an error reply naming it instead of no reply at all.
    """
    if reply_type_of(msg_type) is None:
        return None
    found = list(entry_points(group=GROUP, name=msg_type))
    if not found:
        return None
    if len(found) > 1:
        log.warning(
            "engine %s: %d handlers declared for %s (%s); using the first",
            getattr(kernel, "engine_id", "?"),
            len(found),
            msg_type,
            ", ".join(ep.value for ep in found),
        )
    ep = found[0]
    try:
        return ep.load()(kernel)
    except Exception as e:
        log.exception(
            "engine %s: cannot load the %s handler %s", kernel.engine_id, msg_type, ep.value
        )
        error = RuntimeError(f"the engine cannot load the {msg_type} handler {ep.value}: {e!r}")

        def broken(msg: Any) -> tuple[dict[str, Any], list[Any]]:
            raise error

        return broken
