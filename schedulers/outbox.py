"""Outbox: what the task scheduler sends during one pass over the book's instructions,
gathered per route and sent as wire batches at the end of the pass (issue 12, item 4).

A route is the two routing frames a message goes behind: (engine uuid, client) for a task
(the engine answers each with the client's identity, so one batch carries one client's
tasks), (client, engine uuid) for replies. ``take`` returns, per route, the multiparts to
send: a lone message as it is, several as ``zpar.wire.batch`` frames them (at most
MAX_BATCH each, and at most ``max_bytes`` of frames each when set: a batch is one message
for libzmq's high-water mark, so the replies toward a client that stopped reading stay
bounded in bytes as they were when each went alone). Nothing waits for company: the pass
ends when the book has nothing more to say about what the loop received, and everything
gathered goes then (no timer).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Generic, TypeVar

from zpar.constants import MAX_BATCH
from zpar.wire import batch, frame_view

Route = tuple[bytes, bytes]
Item = TypeVar("Item")


def _size(frames: list[Any]) -> int:
    return sum(len(f) if type(f) is bytes else memoryview(frame_view(f)).nbytes for f in frames)


class Outbox(Generic[Item]):
    """Messages (frames from the delimiter on) by route, each with the item it sends (a
    task, a reply) for the caller's bookkeeping once the send is done."""

    __slots__ = ("_routes", "max_bytes")

    def __init__(self, max_bytes: int | None = None) -> None:
        self._routes: dict[Route, list[tuple[list[Any], Item]]] = {}
        self.max_bytes = max_bytes

    def __bool__(self) -> bool:
        return bool(self._routes)

    def __len__(self) -> int:
        return sum(len(messages) for messages in self._routes.values())

    def add(self, route: Route, frames: list[Any], item: Item) -> None:
        messages = self._routes.get(route)
        if messages is None:
            self._routes[route] = [(frames, item)]
        else:
            messages.append((frames, item))

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
            routes = {r: m for r, m in self._routes.items() if r[at] == key}
            for r in routes:
                del self._routes[r]
        for route, messages in routes.items():
            for group in self._groups(messages):
                yield route, batch([frames for frames, _ in group]), [item for _, item in group]

    def _groups(self, messages: list[tuple[list[Any], Item]]) -> Iterator[list[Any]]:
        """``messages`` in order, in runs of at most MAX_BATCH and max_bytes (a message
        larger than max_bytes alone)."""
        limit = self.max_bytes
        if limit is None:
            for i in range(0, len(messages), MAX_BATCH):
                yield messages[i : i + MAX_BATCH]
            return
        group: list[Any] = []
        size = 0
        for message in messages:
            n = _size(message[0])
            if group and (size + n > limit or len(group) == MAX_BATCH):
                yield group
                group, size = [], 0
            group.append(message)
            size += n
        if group:
            yield group
