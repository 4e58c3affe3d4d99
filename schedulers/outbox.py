"""Outbox: what the task scheduler sends during one pass over the book's instructions,
gathered per route and sent as wire batches at the end of the pass (issue 12, item 4).

A route is the two routing frames a message goes behind: (engine uuid, client) for a task
(the engine answers each with the client's identity, so one batch carries one client's
tasks), (client, engine uuid) for replies. ``take`` returns, per route, the multiparts to
send: a lone message as it is, several as ``zpar.wire.batch`` frames them (at most
MAX_BATCH each). Nothing waits for company: the pass ends when the book has nothing more
to say about what the loop received, and everything gathered goes then (no timer).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Generic, TypeVar

from zpar.constants import MAX_BATCH
from zpar.wire import batch

Route = tuple[bytes, bytes]
Item = TypeVar("Item")


class Outbox(Generic[Item]):
    """Messages (frames from the delimiter on) by route, each with the item it sends (a
    task, a reply) for the caller's bookkeeping once the send is done."""

    __slots__ = ("_routes",)

    def __init__(self) -> None:
        self._routes: dict[Route, tuple[list[list[Any]], list[Item]]] = {}

    def __bool__(self) -> bool:
        return bool(self._routes)

    def __len__(self) -> int:
        return sum(len(frames) for frames, _ in self._routes.values())

    def add(self, route: Route, frames: list[Any], item: Item) -> None:
        entry = self._routes.get(route)
        if entry is None:
            self._routes[route] = ([frames], [item])
        else:
            entry[0].append(frames)
            entry[1].append(item)

    def holds(self, key: Hashable, at: int) -> bool:
        """Whether anything waits on a route whose frame ``at`` (0 or 1) is ``key``."""
        return any(route[at] == key for route in self._routes)

    def take(
        self, key: Hashable | None = None, at: int = 0
    ) -> Iterator[tuple[Route, list[Any], list[Item]]]:
        """Empty the outbox (or only the routes whose frame ``at`` is ``key``): per route,
        each multipart to send (from its delimiter on) with the items it carries."""
        if key is None:
            routes, self._routes = self._routes, {}
        else:
            routes = {r: e for r, e in self._routes.items() if r[at] == key}
            for r in routes:
                del self._routes[r]
        for route, (messages, items) in routes.items():
            if len(messages) == 1:
                yield route, messages[0], items
                continue
            for i in range(0, len(messages), MAX_BATCH):
                yield route, batch(messages[i : i + MAX_BATCH]), items[i : i + MAX_BATCH]
