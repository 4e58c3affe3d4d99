"""An OutputStream's life (client/outputs.py), without a cluster: started on some calls'
output, stopped once they are done, finished at the end of a ``with`` block."""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Any

from zpar.client.outputs import OutputStream
from zpar.wire import Message


class FakeIO:
    """The sender's output watch: who watches which msg_ids."""

    def __init__(self) -> None:
        self.watched: dict[str, Any] = {}
        self.unwatched = threading.Event()

    def watch_output(self, msg_ids: list[str], cb: Any) -> None:
        self.watched.update(dict.fromkeys(msg_ids, cb))

    def unwatch_output(self, msg_ids: list[str]) -> None:
        for m in msg_ids:
            self.watched.pop(m, None)
        if not self.watched:
            self.unwatched.set()


def _msg(msg_type: str, content: dict[str, Any], engine_id: int = 0) -> Message:
    return Message([], {"msg_type": msg_type}, {}, {"engine_id": engine_id}, content)


def test_a_started_stream_shows_output_and_stops_once_its_calls_are_done():
    io, shown = FakeIO(), []
    f: concurrent.futures.Future = concurrent.futures.Future()
    stream = OutputStream.started(
        ["m"], io, lambda: [], lambda eid, name, text: shown.append((eid, name, text)), [f]
    )
    io.watched["m"]("m", _msg("stream", {"name": "stdout", "text": "hi\n"}, engine_id=3))
    assert shown == [(3, "stdout", "hi\n")] and "m" in io.watched
    f.set_result(None)  # done: the stream stops a moment later by itself
    assert io.unwatched.wait(10) and not io.watched and stream.done.is_set()


def test_until_finishes_with_what_the_replies_hold_once_the_calls_are_done():
    io, shown = FakeIO(), []
    mds = [{"msg_id": "m", "engine_id": 1, "stdout": "a\nb\n", "stderr": "", "outputs": []}]
    stream = OutputStream(["m"], io, lambda: mds, lambda *a: shown.append(a))
    stream.start()
    with stream.until(lambda: True):
        io.watched["m"]("m", _msg("stream", {"name": "stdout", "text": "a\n"}, engine_id=1))
        io.watched["m"]("m", _msg("status", {"execution_state": "idle"}))
    assert shown == [(1, "stdout", "a\n"), (1, "stdout", "b\n")]  # the rest from the reply


def test_until_leaves_a_stream_of_unfinished_calls_running():
    io = FakeIO()
    stream = OutputStream(["m"], io, lambda: [], None)
    stream.start()
    with stream.until(lambda: False):
        pass
    assert "m" in io.watched and not stream.done.is_set()
