"""Hub services: capabilities other packages add to the hub without editing it.

A service is named in the Python entry point group ``zpar.hub_services`` (name ->
"module:factory"); ``factory(hub)`` returns an object that declares the ``msg_types`` it
handles on the registration ROUTER. The hub hands it each such message instead of
answering it; the service replies now or later to any peer by identity (``hub.send_to``).
It also hears of engines the hub unregisters and is ticked with the heartbeat. Services
are loaded when the first message of a type the hub does not know arrives, so a
controller that never needs one pays nothing for them at start-up.
zpar.comm's rendezvous (comm.hubservice) is the first one.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from importlib.metadata import entry_points
from typing import Any, Protocol

from zpar.wire import Message
from zpar.wire.admission import OUT_OF_DESCRIPTORS

log = logging.getLogger(__name__)

#: The entry point group services are found in.
GROUP = "zpar.hub_services"


class HubService(Protocol):
    #: msg_types of requests on the registration ROUTER this service handles
    msg_types: Collection[str]

    def handle(self, msg: Message) -> None:
        """A message of one of ``msg_types`` (signature checked); reply via hub.send_to."""

    def tick(self, now: float) -> None:
        """Called about every heartbeat period with time.monotonic()."""

    def engine_lost(self, uuid: str, engine_id: int, reason: str) -> None:
        """The hub unregistered an engine (died, stopped, restarted)."""


def load_services(hub: Any) -> list[HubService]:
    """Every service of the entry point group, built for ``hub``. A service that fails to
    load is logged and left out: the hub runs without it. Out of file descriptors (a flood
    of connections) raises OSError instead: the caller tries again later."""
    services: list[HubService] = []
    for ep in entry_points(group=GROUP):
        try:
            service = ep.load()(hub)
            if not all(isinstance(t, str) for t in service.msg_types):
                raise TypeError(f"msg_types must be strings, got {service.msg_types!r}")
        except OSError as e:
            if e.errno in OUT_OF_DESCRIPTORS:
                raise
            log.exception(
                "hub service %r (%s) failed to load; running without it", ep.name, ep.value
            )
            continue
        except Exception:
            log.exception(
                "hub service %r (%s) failed to load; running without it", ep.name, ep.value
            )
            continue
        log.info("hub service %r loaded: handles %s", ep.name, sorted(service.msg_types))
        services.append(service)
    return services
