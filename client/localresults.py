"""Client.results and Client.metadata: the results no AsyncResult owns (ipyparallel's).

In ipyparallel every reply lands in the client's ``results`` / ``metadata`` dicts, and the
AsyncResult that owns it (``owner=True``: every view's) pops it again once done; what stays
is what nobody owns: results fetched with ``get_result(..., owner=False)``, and what the
user put there. zpar never stores the owned ones in the first place (results live in their
AsyncResults), and keeps the unowned ones here until ``purge_local_results``, or until an
owning ``get_result`` of the same msg_id takes them, as ipyparallel does.
"""

from __future__ import annotations

import collections
from concurrent.futures import Future
from typing import Any

from .resultmeta import Metadata


class LocalResults:
    """The unowned results of one Client, by msg_id, with the futures that hold them."""

    def __init__(self) -> None:
        #: {msg_id: value or error}: ``rc.results`` (a plain dict users may write to)
        self.results: dict[str, Any] = {}
        #: {msg_id: Metadata}: ``rc.metadata`` (reading an unknown msg_id makes an empty one)
        self.metadata: collections.defaultdict[str, Metadata] = collections.defaultdict(Metadata)
        self._futures: dict[str, Future] = {}

    def keep(self, ar: Any) -> None:
        """Store a finished AsyncResult that does not own its results."""
        for m, f, md in zip(ar.msg_ids, ar._futures, ar._metadatas(), strict=True):
            self.results[m] = ar._value_or_error(f)
            self.metadata[m] = Metadata(md)
            self._futures[m] = f

    def keep_when_done(self, ar: Any) -> None:
        ar.add_done_callback(lambda _: self.keep(ar))

    def future(self, msg_id: str, *, take: bool) -> Future | None:
        """The finished future of ``msg_id`` kept here (None if none); ``take``: an owner
        takes it, so it leaves results and metadata (ipyparallel's owner pop)."""
        if take:
            fut = self._futures.pop(msg_id, None)
            if fut is not None:
                self.results.pop(msg_id, None)
                self.metadata.pop(msg_id, None)
            return fut
        return self._futures.get(msg_id)

    def purge(self, msg_ids: Any) -> None:
        """Forget ``msg_ids`` ('all': everything)."""
        if msg_ids == "all":
            self.results.clear()
            self.metadata.clear()
            self._futures.clear()
            return
        for m in msg_ids:
            self.results.pop(m, None)
            self.metadata.pop(m, None)
            self._futures.pop(m, None)
