"""What an AsyncResult knows about its calls: metadata (ipyparallel's keys, never waiting
for them), timestamps as aware UTC datetimes, and the timings derived from them.

A mixin of AsyncResult (needs msg_ids, _futures, _submitted, _single, ready()).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from zpar.errors import TimeoutError
from zpar.util import as_datetime
from zpar.wire.messages import ExecuteResult

from .datapub import reply_data
from .request import submitted_of

#: Metadata keys every result has (ipyparallel's Metadata), with their value until known.
METADATA_DEFAULTS: dict[str, Any] = {
    "msg_id": None,
    "submitted": None,
    "started": None,
    "completed": None,
    "received": None,
    "engine_uuid": None,
    "engine_id": None,
    "follow": None,
    "after": None,
    "status": None,
    "execute_input": None,
    "execute_result": None,
    "error": None,
    "stdout": "",
    "stderr": "",
    "outputs": [],
    "data": {},
    "label": None,
}
_DATES = ("submitted", "started", "completed", "received")


class Metadata(dict):
    """One call's metadata: a dict whose keys are also attributes (``md.engine_id``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def fill_from_reply(md: dict[str, Any], reply: Any) -> None:
    """Add what a reply says to ``md``: its metadata, its status, and ``execute_result`` in
    ipyparallel's shape (an IPython engine sends the whole mime bundle; a plain-Python one
    the text of the last expression, in the reply content)."""
    md.update(reply.metadata)
    md.setdefault("status", None)
    md["status"] = md["status"] or reply.content.get("status")
    text = reply.content.get("execute_result")
    if text is not None and not md.get("execute_result"):
        count = reply.content.get("execution_count")
        md["execute_result"] = ExecuteResult(count, {"text/plain": text}).as_dict()


def reply_metadata(reply: Any) -> Metadata:
    """One call's metadata from its reply alone (the ExecuteReply of an execute)."""
    md = Metadata(METADATA_DEFAULTS, outputs=[], data={})
    md["msg_id"] = reply.parent_header.get("msg_id")
    fill_from_reply(md, reply)
    md["received"] = md.get("received") or md.get("completed")
    for key in _DATES:
        md[key] = as_datetime(md.get(key))
    return md


class MetadataMixin:
    """Metadata and timing of AsyncResult."""

    __slots__ = ()

    def __getattr__(self, key: str) -> Any:
        """ar.received, ar.status, ar.execute_result…: metadata as attributes."""
        if key in METADATA_DEFAULTS:
            return self._meta(key)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(METADATA_DEFAULTS))

    # -- metadata -------------------------------------------------------------------------

    def _metadatas(self) -> list[Metadata]:
        """One metadata dict per message, as known now (never waits)."""
        out = []
        for m, f in zip(self.msg_ids, self._futures, strict=True):
            md = Metadata(METADATA_DEFAULTS, outputs=[], data={})
            md.update(msg_id=m, submitted=submitted_of(f) or self._submitted)
            md["label"] = getattr(f, "label", None)
            if f.done():
                if f.exception() is None:
                    fill_from_reply(md, f.result())
                else:
                    md["status"] = "error"
                    md["error"] = f.exception()
                md["received"] = md.get("received") or md.get("completed")
                md["data"] = reply_data(md) or {}
            elif (live := self._live_data()) is not None:
                md["data"] = live.get(m)
            for key in _DATES:
                md[key] = as_datetime(md.get(key))
            out.append(md)
        return out

    def _meta(self, key: str) -> Any:
        mds = self._metadatas()
        if any(key not in md for md in mds):
            raise KeyError(key)  # not a metadata key, as ipyparallel
        values = [md[key] for md in mds]
        return values[0] if self._single else values

    @property
    def metadata(self) -> Any:
        mds = self._metadatas()
        return mds[0] if self._single else mds

    @property
    def data(self) -> Any:
        """What the task published (zpar.datapub.publish_data): the merge so far while it
        runs, everything once done (ipyparallel's ``ar.data``)."""
        if not self.ready():
            self._client.sender.live_data.watch(self.msg_ids)
        else:
            self._client.sender.live_data.forget(self.msg_ids)
        return self._meta("data")

    def _live_data(self) -> Any:
        """The client's LiveData once some ``ar.data`` was read while its task ran."""
        sender = getattr(self._client, "sender", None)
        return None if sender is None else sender.__dict__.get("live_data")

    @property
    def engine_id(self) -> Any:
        return self._meta("engine_id")

    @property
    def stdout(self) -> Any:
        return self._meta("stdout")

    @property
    def stderr(self) -> Any:
        return self._meta("stderr")

    @property
    def submitted(self) -> Any:
        return self._meta("submitted")

    @property
    def started(self) -> Any:
        return self._meta("started")

    @property
    def completed(self) -> Any:
        return self._meta("completed")

    @property
    def received(self) -> Any:
        return self._meta("received")

    def _check_ready(self) -> None:
        if not self.ready():
            raise TimeoutError("Result not ready.")

    @property
    def elapsed(self) -> float:
        """Seconds since submission: the wall time once done."""
        if self.ready():
            return self.wall_time
        return time.time() - self._submitted

    @property
    def serial_time(self) -> float:
        """Sum of the engines' compute times (completed - started): what a serial run
        would have taken. TimeoutError before the result is ready."""
        self._check_ready()
        total = 0.0
        for md in self._metadatas():
            if md.get("started") is not None and md.get("completed") is not None:
                total += (md["completed"] - md["started"]).total_seconds()
        return total

    @property
    def wall_time(self) -> float:
        """Seconds from the first submission to the last result (its engine's completion
        time: zpar does not stamp receipt separately). TimeoutError before it is ready."""
        self._check_ready()
        return self.timedelta(self.submitted, self.received)

    def timedelta(
        self, start: Any, end: Any, start_key: Callable = min, end_key: Callable = max
    ) -> float:
        """Seconds between two times or lists of times (reduced by start_key / end_key);
        times are datetimes or seconds since the epoch."""
        if isinstance(start, list | tuple):
            start = start_key([s for s in start if s is not None])
        if isinstance(end, list | tuple):
            end = end_key([e for e in end if e is not None])
        start, end = as_datetime(start), as_datetime(end)
        return (end - start).total_seconds()


def element_metadata(
    msg_id: str,
    submitted: float,
    reply: Any,
    value: Any,
    error: BaseException | None,
    label: str | None = None,
) -> Metadata:
    """ipyparallel's metadata of one element of a map (client.mapparts), as known now:
    ``reply`` is the part that answered it (None: not yet), ``value`` its value or error,
    ``error`` what ended the wait for its whole request."""
    md = Metadata(METADATA_DEFAULTS, outputs=[], data={})
    md.update(msg_id=msg_id, submitted=submitted, label=label)
    if reply is not None:
        md.update(reply.metadata)
        failed = isinstance(value, Exception)
        md["status"] = "error" if failed else "ok"
        if failed:
            md["error"] = value
        md["received"] = md.get("received") or md.get("completed")
    elif error is not None:
        md["status"] = "error"
        md["error"] = error
    for key in _DATES:
        md[key] = as_datetime(md.get(key))
    return md
