"""What a query handler sees of the hub, and how a capability adds queries of its own.

A query is a request on the registration ROUTER answered at once: ``handler(hub, msg)``
returns the reply content, or ``(content, buffers)``. Handlers are typed against
``HubState``, the part of the Hub they may read and change, not against the Hub class,
so hub/hub.py imports its query modules and none of them imports hub/hub.py.

A capability registers a query in the Python entry point group ``zpar.hub_queries``
(name: the request's msg_type, value: "module:handler"); the hub loads the group when a
request of a type it does not know first arrives (as ``zpar.hub_services``, so a
controller that never needs one pays nothing at start-up) and answers with the reply type
``<name minus _request>_reply``. A query cannot replace a built-in one. Use a hub
service (hub/services.py) instead when the answer must wait or go to other peers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from importlib.metadata import entry_points
from typing import Any, Protocol

from zpar.wire import Message
from zpar.wire.admission import OUT_OF_DESCRIPTORS

from .recorder import StoreWriter
from .records import EngineRecord, TaskTable
from .stores import TaskStore

log = logging.getLogger(__name__)

#: The entry point group capabilities register their queries in.
GROUP = "zpar.hub_queries"

#: A query's answer: the reply content, or the content and the reply's buffers.
QueryReply = dict[str, Any] | tuple[dict[str, Any], list[Any]]


class HubState(Protocol):
    """What of the hub a query handler may use (zpar.hub.hub.Hub is one)."""

    store: TaskStore
    writer: StoreWriter
    tasks: TaskTable
    engines: dict[int, EngineRecord]  # registered engines by id
    pending: dict[bytes, EngineRecord]  # engines still registering, by uuid

    def unregister(self, uuid: bytes, reason: str) -> None:
        """Forget a registered engine (its tasks are failed, clients notified)."""


QueryHandler = Callable[[HubState, Message], QueryReply]


def load_queries(builtin: Collection[str]) -> dict[str, QueryHandler]:
    """The handlers of the entry point group by msg_type. One that fails to load, or whose
    name is a built-in query's (``builtin``), is logged and left out. Out of file
    descriptors raises OSError: the caller tries again later."""
    found: dict[str, QueryHandler] = {}
    for ep in entry_points(group=GROUP):
        if ep.name in builtin:
            log.error("hub query %r (%s) would replace a built-in one: ignored", ep.name, ep.value)
            continue
        try:
            handler = ep.load()
            if not callable(handler):
                raise TypeError(f"{ep.value} is not callable")
        except OSError as e:
            if e.errno in OUT_OF_DESCRIPTORS:
                raise
            log.exception("hub query %r (%s) failed to load; running without it", ep.name, ep.value)
            continue
        except Exception:
            log.exception("hub query %r (%s) failed to load; running without it", ep.name, ep.value)
            continue
        log.info("hub query %r loaded from %s", ep.name, ep.value)
        found[ep.name] = handler
    return found
