"""What an AsyncResult knows about its calls: metadata (ipyparallel's keys, never waiting
for them), timestamps as aware UTC datetimes, and the timings derived from them.

Functions of what they are given (a call's msg_id, future and submission time; metadata
dicts), which AsyncResult's metadata properties call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from zpar.elements import split_element_id, with_own_metadata
from zpar.errors import TaskAborted
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


def call_metadata(msg_id: str, future: Any, submitted: float, live: Any = None) -> Metadata:
    """One call's metadata as known now (never waits): from its reply once it is in; while
    it runs, what it published so far (``live``: the client's LiveData, if any)."""
    md = Metadata(METADATA_DEFAULTS, outputs=[], data={})
    md.update(msg_id=msg_id, submitted=submitted_of(future) or submitted)
    md["label"] = getattr(future, "label", None)
    if future.done():
        if future.exception() is None:
            fill_from_reply(md, future.result())
        else:
            md["status"] = "error"
            md["error"] = future.exception()
        md["received"] = md.get("received") or md.get("completed")
        md["data"] = reply_data(md) or {}
    elif live is not None:
        md["data"] = live.get(msg_id)
    for key in _DATES:
        md[key] = as_datetime(md.get(key))
    return md


def calls_metadata(
    msg_ids: list[str], futures: list[Any], submitted: float, client: Any
) -> list[Metadata]:
    """One metadata dict per call, as known now (never waits); what a running call
    published once some ``ar.data`` was read while it ran (``client``'s LiveData)."""
    sender = getattr(client, "sender", None)
    live = None if sender is None else sender.__dict__.get("live_data")
    return [call_metadata(m, f, submitted, live) for m, f in zip(msg_ids, futures, strict=True)]


def serial_time(mds: list[Metadata]) -> float:
    """Sum of the engines' compute times (completed - started): what a serial run would
    have taken."""
    total = 0.0
    for md in mds:
        if md.get("started") is not None and md.get("completed") is not None:
            total += (md["completed"] - md["started"]).total_seconds()
    return total


def timedelta(start: Any, end: Any, start_key: Callable = min, end_key: Callable = max) -> float:
    """Seconds between two times or lists of times (reduced by start_key / end_key); times
    are datetimes or seconds since the epoch."""
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
        split = split_element_id(msg_id)
        if split is not None:
            with_own_metadata(md, reply.content, split[1])
        failed = isinstance(value, Exception)
        # an aborted element's status is its reply's, as ipyparallel's aborted task's
        md["status"] = (
            ("aborted" if isinstance(value, TaskAborted) else "error") if failed else "ok"
        )
        if failed:
            md["error"] = value
        md["received"] = md.get("received") or md.get("completed")
    elif error is not None:
        md["status"] = "error"
        md["error"] = error
    for key in _DATES:
        md[key] = as_datetime(md.get(key))
    return md
