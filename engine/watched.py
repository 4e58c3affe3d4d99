"""Sockets capabilities add to the engine's poll loop, so they are served between tasks on
the engine's main thread without a thread of their own.

Two ways in. At start: a package names a factory in the entry point group
``zpar.engine_sockets`` (name: the capability, value: "module:factory");
``factory(engine)`` returns the ``(socket, handler)`` pairs to watch (or none), read once
when the engine starts serving. At run time: code on the engine (a task, a capability's
setup) calls ``zpar.engine.engine.this_engine().watch(socket, handler)``.

``handler(socket)`` is called when the socket is readable and the engine is between
tasks; it must read what is ready and return without blocking (the engine's own queues
wait meanwhile). A handler that raises is logged and left in place: no input may stop
the engine. The engine closes the watched sockets when it stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Any

import zmq

log = logging.getLogger(__name__)

#: The entry point group of socket factories.
GROUP = "zpar.engine_sockets"

SocketHandler = Callable[[zmq.Socket], object]


class WatchedSockets:
    """The capabilities' sockets and their handlers, kept in step with the loop's poller."""

    def __init__(self, engine_id: Any = "?") -> None:
        self.engine_id = engine_id
        self.handlers: dict[zmq.Socket, SocketHandler] = {}
        self._poller: zmq.Poller | None = None

    def watch(self, socket: zmq.Socket, handler: SocketHandler) -> None:
        if not isinstance(socket, zmq.Socket) or not callable(handler):
            raise TypeError(
                f"watch(socket, handler) needs a zmq.Socket and a callable, got "
                f"{type(socket).__name__}, {type(handler).__name__}"
            )
        self.handlers[socket] = handler
        if self._poller is not None:
            self._poller.register(socket, zmq.POLLIN)

    def unwatch(self, socket: zmq.Socket) -> None:
        if self.handlers.pop(socket, None) is not None and self._poller is not None:
            self._poller.unregister(socket)

    def attach(self, poller: zmq.Poller) -> None:
        """Register every watched socket with the loop's ``poller``, and later ones too."""
        self._poller = poller
        for socket in self.handlers:
            poller.register(socket, zmq.POLLIN)

    def serve(self, socket: Any) -> bool:
        """Call the handler of ``socket`` if it is a watched one; whether it was."""
        handler = self.handlers.get(socket)
        if handler is None:
            return False
        try:
            handler(socket)
        except Exception:
            log.exception("engine %s: the handler of a watched socket failed", self.engine_id)
        return True

    def load(self, engine: Any) -> None:
        """Watch the sockets of every factory in the entry point group. One that fails is
        logged and left out: the engine serves without it."""
        for ep in entry_points(group=GROUP):
            try:
                pairs: Iterable[tuple[zmq.Socket, SocketHandler]] = ep.load()(engine) or ()
                for socket, handler in pairs:
                    self.watch(socket, handler)
            except Exception:
                log.exception(
                    "engine %s: engine socket %r (%s) failed to load",
                    self.engine_id,
                    ep.name,
                    ep.value,
                )
                continue
            log.info("engine %s: watching the sockets of %r", self.engine_id, ep.name)

    def serve_ready(self) -> None:
        """Serve every watched socket readable now (the loop calls this between tasks when
        its queues are never empty, so the watched sockets do not starve)."""
        for socket in list(self.handlers):
            if socket.get(zmq.EVENTS) & zmq.POLLIN:
                self.serve(socket)

    def close(self) -> None:
        """Close the watched sockets: the engine is stopping, its context ends with it."""
        for socket in self.handlers:
            socket.close(linger=0)
        self.handlers.clear()
        self._poller = None
