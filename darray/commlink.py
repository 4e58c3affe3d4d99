"""The engines' communicator a distributed array's collective operations run over: one per
client and target list (rank i = target i = grid rank i), opened through
``DirectView.communicator`` on first use and kept in the engines' namespace."""

from __future__ import annotations

import logging
import threading
import uuid
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from zpar.errors import RemoteError

log = logging.getLogger("zpar.darray")

_open: weakref.WeakKeyDictionary[Any, dict[tuple[int, ...], str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def communicator_key(client: Any, targets: Sequence[int], fresh: bool = False) -> str:
    """The namespace name of the communicator over ``targets`` (opened if needed)."""
    ids = tuple(targets)
    with _lock:
        known = _open.setdefault(client, {})
        if fresh or ids not in known:
            name = f"_darray_comm_{uuid.uuid4().hex[:12]}"
            client[list(ids)].communicator(name)
            log.info("darray: communicator %s over engines %s", name, list(ids))
            known[ids] = name
        return known[ids]


def with_communicator(client: Any, targets: Sequence[int], call: Callable[[str], Any]) -> Any:
    """``call(comm_key)``; once more over a new communicator if the engines lost theirs
    (``rc.clear()`` empties their namespaces, a restarted engine has none)."""
    key = communicator_key(client, targets)
    try:
        return call(key)
    except RemoteError as e:
        if key not in str(e):
            raise
        log.info("darray: communicator %s gone on an engine, opening a new one", key)
        return call(communicator_key(client, targets, fresh=True))
