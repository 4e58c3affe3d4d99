"""The client's submission windows: how much of its work a client leaves in the controller.

Why (issue 13 item 3): the task scheduler holds every load-balanced request it has not
finished (~3.5 KB of Python objects per queued task), and the MUX relay holds the replies of
direct requests toward a client that stopped reading. 50 clients submitting 2,000 tasks
each took the scheduler to +349 MB. A client's own backlog belongs in the client: its I/O
thread keeps at most ``limit`` work requests per channel (and ``max_bytes`` of their frames,
always at least one) unanswered in the controller, and holds the rest, in order, until
replies come back. The scheduler refuses what a client sends past its own limit
(schedulers/quota.py), so a client that ignores its window cannot grow it either.

Sans-IO: a Window takes requests (anything with ``msg_id`` and ``frames``) and says which
may go now; the I/O thread (client.ioloop) does the sending. Order is FIFO per channel,
so a task held here is always sent after every task it may depend on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import zmq

from zpar.constants import WINDOW_BYTES, WINDOW_REQUESTS
from zpar.errors import TaskAborted

#: Channels whose work requests are windowed: load-balanced ("task") and direct ("mux").
WINDOWED_CHANNELS = ("task", "mux")


def frames_nbytes(frames: Iterable[Any]) -> int:
    """Bytes of a request's frames (bytes, buffers or zmq Frames)."""
    total = 0
    for f in frames:
        kind = type(f)
        if kind is bytes or kind is zmq.Frame:
            total += len(f)  # a Frame's len is its size in bytes
        else:
            total += f.nbytes if kind is memoryview else memoryview(f).nbytes
    return total


def check_window(limit: int, max_bytes: int) -> None:
    """ValueError naming the bad value (a window below one request or one byte)."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ValueError(f"window must be an int >= 1 (requests in flight), got {limit!r}")
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 1:
        raise ValueError(f"window_bytes must be an int >= 1, got {max_bytes!r}")


class Window:
    """One channel's window: requests in flight (sent, not answered) and those held."""

    def __init__(self, limit: int = WINDOW_REQUESTS, max_bytes: int = WINDOW_BYTES) -> None:
        check_window(limit, max_bytes)
        self.limit = limit
        self.max_bytes = max_bytes
        self._in_flight: dict[str, int] = {}  # msg_id -> bytes of its frames
        self._bytes = 0
        self._held: deque[tuple[Any, int]] = deque()  # (request, bytes of its frames)
        self._held_ids: set[str] = set()

    def offer(self, request: Any) -> bool:
        """True: send ``request`` now (it counts as in flight); False: it is held here,
        behind those held before it, until ``answered`` makes room."""
        nbytes = frames_nbytes(request.frames)
        in_flight = self._in_flight
        # the room check inline (always at least one in flight): once per task, in the I/O
        # thread
        if not self._held and (
            not in_flight
            or (len(in_flight) < self.limit and self._bytes + nbytes <= self.max_bytes)
        ):
            in_flight[request.msg_id] = nbytes
            self._bytes += nbytes
            return True
        self._held.append((request, nbytes))
        self._held_ids.add(request.msg_id)
        return False

    def answered(self, msg_id: str) -> list[Any]:
        """``msg_id`` is answered (a reply, an error in its stead): the held requests that
        may go now, oldest first (already counted in flight). A request answered while
        still held (its engine died) is withdrawn: it will never be sent."""
        nbytes = self._in_flight.pop(msg_id, None)
        if nbytes is None:
            if msg_id in self._held_ids:
                self.withdraw((msg_id,))
            return []
        self._bytes -= nbytes
        return self._release() if self._held else []

    def _release(self) -> list[Any]:
        out = []
        held, in_flight, limit, max_bytes = self._held, self._in_flight, self.limit, self.max_bytes
        while held:
            request, nbytes = held[0]
            if in_flight and (len(in_flight) >= limit or self._bytes + nbytes > max_bytes):
                break
            held.popleft()
            self._held_ids.discard(request.msg_id)
            in_flight[request.msg_id] = nbytes
            self._bytes += nbytes
            out.append(request)
        return out

    def withdraw(self, msg_ids: Iterable[str] | None) -> list[Any]:
        """Take held requests out (``msg_ids`` None: every one), never to be sent: the
        requests withdrawn, in order. In-flight ones are the controller's to abort."""
        if msg_ids is None:
            out = [r for r, _ in self._held]
            self._held.clear()
            self._held_ids.clear()
            return out
        wanted = self._held_ids.intersection(msg_ids)
        if not wanted:
            return []
        out = [r for r, _ in self._held if r.msg_id in wanted]
        self._held = deque(h for h in self._held if h[0].msg_id not in wanted)
        self._held_ids -= wanted
        return out

    def reset(self) -> list[Any]:
        """Forget everything (the controller is gone): the held requests, for the caller
        to fail."""
        self._in_flight.clear()
        self._bytes = 0
        return self.withdraw(None)

    def is_held(self, msg_id: str) -> bool:
        return msg_id in self._held_ids

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    @property
    def in_flight_bytes(self) -> int:
        return self._bytes

    @property
    def held(self) -> int:
        return len(self._held)


class Windows:
    """The client's windows by channel (WINDOWED_CHANNELS), the hook ClientIO calls."""

    def __init__(self, limit: int = WINDOW_REQUESTS, max_bytes: int = WINDOW_BYTES) -> None:
        self.by_channel = {c: Window(limit, max_bytes) for c in WINDOWED_CHANNELS}

    def offer(self, request: Any) -> bool:
        """True: send it now. Requests that are not work (queries, aborts, control) or on
        another channel always go at once."""
        if not request.windowed:
            return True
        window = self.by_channel.get(request.channel)
        return True if window is None else window.offer(request)

    def answered(self, request: Any) -> list[Any]:
        """A windowed request is answered for good: those that may go now."""
        if not request.windowed:
            return []
        window = self.by_channel.get(request.channel)
        return [] if window is None else window.answered(request.msg_id)

    def withdraw(self, msg_ids: Iterable[str] | None) -> list[Any]:
        ids = None if msg_ids is None else set(msg_ids)
        return [r for w in self.by_channel.values() for r in w.withdraw(ids)]

    def reset(self) -> list[Any]:
        return [r for w in self.by_channel.values() for r in w.reset()]

    def held(self, channel: str | None = None) -> int:
        """Requests held in this client (on ``channel``, or all)."""
        if channel is not None:
            return self.by_channel[channel].held
        return sum(w.held for w in self.by_channel.values())


def aborted_here(msg_id: str) -> TaskAborted:
    """The error of a held request aborted before it left the client: the class and words
    of the task scheduler's own abort (TaskBook.abort), so a caller cannot tell them apart."""
    return TaskAborted(f"task {msg_id} was aborted before it ran")
