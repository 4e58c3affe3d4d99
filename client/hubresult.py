"""Results of tasks this client did not submit, fetched from the hub's task store."""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from typing import Any

from zpar.elements import ELEMENTS, element_range, origin_of, split_element_id
from zpar.errors import (
    EngineError,
    HubRefused,
    RemoteError,
    ResultNotStored,
    TaskLost,
    error_content,
)
from zpar.serialize import deserialize_object
from zpar.wire import Message
from zpar.wire.messages import MsgType, ResultRequest

from .mapparts import ElementReply, whole_run_error

log = logging.getLogger(__name__)

#: Seconds between polls of the hub while fetched tasks are still pending (doubling to 1 s).
POLL_START, POLL_MAX = 0.02, 1.0
#: Seconds the hub may take to hear of a task: it learns from copies that engines and the
#: scheduler send in batches (an engine's direct calls at most every 10 ms), so a task
#: submitted or answered a moment ago can still be unknown there, to its own client (which
#: may wait longer: it knows the id is real) and to another one that was handed the id.
UNKNOWN_GRACE = 2.0
FOREIGN_GRACE = 0.5


class HubResultFetcher(threading.Thread):
    """Resolves futures from result_request replies, polling while tasks are pending."""

    def __init__(self, client: Any, wanted: list[tuple[str, Future]]) -> None:
        super().__init__(name="zpar-hub-result", daemon=True)
        self.client = client
        self.wanted = dict(wanted)

    def run(self) -> None:
        delay = POLL_START
        started = time.monotonic()
        while self.wanted and not self.client.sender.closed:
            try:
                reply = self.client.sender.query(
                    MsgType.RESULT_REQUEST, ResultRequest(list(self.wanted)).as_dict()
                )
            except HubRefused as e:
                if self._not_heard_of_yet(e.content.get("unknown"), started):
                    time.sleep(delay)
                    delay = min(POLL_MAX, delay * 2)
                    continue
                self._fail(e)
                return
            except Exception as e:  # hub gone, store failing: every waiter learns why
                self._fail(e)
                return
            results = reply.content.get("results", {})
            for m in reply.content.get("completed", []):
                fut = self.wanted.pop(m, None)
                if fut is not None:
                    fut.set_result(as_reply(results.get(m, {}), reply.buffers))
            if self.wanted:
                time.sleep(delay)
                delay = min(POLL_MAX, delay * 2)

    def _not_heard_of_yet(self, unknown: Any, started: float) -> bool:
        """The unknown ids may still be on their way to the hub: within UNKNOWN_GRACE of the
        first ask for ids this client sent, FOREIGN_GRACE for any other (a wrong id fails
        after that)."""
        if not unknown:
            return False
        # a map's elements are in the history by element id; its request ids by origin
        history = set(self.client.history)
        own = all(m in history or origin_of(m) in history for m in unknown)
        return time.monotonic() - started < (UNKNOWN_GRACE if own else FOREIGN_GRACE)

    def _fail(self, e: BaseException) -> None:
        for fut in self.wanted.values():
            if not fut.done():
                fut.set_exception(e)


def as_reply(record: dict[str, Any], buffers: list[Any]) -> Message:
    """A stored record in the shape of the engine's reply, for AsyncResult."""
    first, count = record.get("buffers") or (0, 0)
    metadata = dict(record.get("metadata") or {})
    metadata.update(
        stdout=record.get("stdout") or "",
        stderr=record.get("stderr") or "",
        engine_uuid=record.get("engine_uuid"),
        started=record.get("started"),
        completed=record.get("completed"),
    )
    status = record.get("status")
    content = record.get("result_content") or error_content(
        EngineError if status == "engine_died" else TaskLost,
        f"task ended without a result ({status}): its engine died, or the "
        "controller stopped while it ran",
        zpar_error=status == "engine_died",
    )
    msg_type = (record.get("header") or {}).get("msg_type")
    has_result = msg_type in (MsgType.APPLY_REQUEST, MsgType.TYPED_REQUEST)
    if has_result and record.get("result_size") is None and content.get("status") == "ok":
        content = error_content(
            ResultNotStored, "the hub did not store this result (larger than its store limit)"
        )
    msg = Message(
        idents=[],
        header={},
        parent_header=record.get("header") or {},
        metadata=metadata,
        content=content,
        buffers=list(buffers[first : first + count]),
    )
    rng = element_range(record.get(ELEMENTS))
    if rng is None:
        return msg
    return _element_reply(msg, rng)


def _element_reply(msg: Message, rng: tuple[int, int]) -> Message:
    """A map's element fetched from the hub: its part's values come whole (the hub never
    unpickles), the element's own taken here, as ipyparallel's element task gives it."""
    split = split_element_id(str(msg.parent_header.get("msg_id", "")))
    value: Any
    if msg.content.get("status") != "ok":
        value = whole_run_error(msg) or RemoteError.from_content(msg.content)
    elif split is None or not rng[0] <= split[1] < rng[1]:
        value = ResultNotStored(f"the hub's record of {split} names no value of its part")
    else:
        try:
            value = deserialize_object(msg.buffers)[split[1] - rng[0]]
        except Exception as e:  # noqa: BLE001 - a part that cannot be read: that element's error
            value = ResultNotStored(f"the stored part of {split[0]} cannot be read: {e}")
    return ElementReply(msg, value)  # type: ignore[return-value]
