"""What a user names as jobs (``rc.wait(jobs)``): AsyncResults, Futures, msg_ids or
indices into the client's history, as the futures to wait on."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Sequence
from typing import Any

from zpar.elements import origin_of, split_element_id

from .callresult import AsyncResult
from .mapparts import ElementFuture
from .request import PendingRequest


def futures_of(
    jobs: Any,
    *,
    history: Sequence[str],
    request: Callable[[str], PendingRequest | None],
    known: Callable[[str], bool],
) -> list[concurrent.futures.Future]:
    """The futures of ``jobs`` (not None): an int is an index into ``history`` (as in
    ipyparallel), a msg_id is looked up with ``request`` (None once answered); a msg_id (a
    map's element's too, by its id) neither in ``history`` nor ``known`` (sent by a view, a
    result kept here) is a KeyError naming it."""
    jobs = jobs if isinstance(jobs, list | tuple | set) else [jobs]
    futures: list[concurrent.futures.Future] = []
    for j in jobs:
        if isinstance(j, int) and not isinstance(j, bool):
            j = history[j]
        if isinstance(j, AsyncResult):
            futures.extend(j._futures)
        elif isinstance(j, concurrent.futures.Future):  # any Future, as ipyparallel
            futures.append(j)
        elif isinstance(j, str):
            sent, j = j, origin_of(j)  # an element of a map: its request
            pending = request(j)
            element = split_element_id(sent) if pending is not None else None
            if pending is not None and element is not None and pending.parts is not None:
                if not element[1] < pending.parts.n:
                    raise KeyError(f"no job {sent!r} was sent by this client")
                # that element alone, as ipyparallel's task of its own
                futures.append(ElementFuture(pending.parts, element[1]))
            elif pending is not None:
                futures.extend(pending.reply_futures())
            elif j not in history and sent not in history and not known(j):
                raise KeyError(f"no job {j!r} was sent by this client")
        else:
            raise TypeError(f"jobs are AsyncResults, Futures or msg_ids, not {type(j).__name__}")
    return futures
