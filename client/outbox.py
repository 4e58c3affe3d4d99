"""RequestOutbox: the send side of the client's I/O thread.

What is queued goes out in order per socket: load-balanced requests together as batches,
work past its window held until replies make room, a request signed for an engine's own
ipc socket (``PendingRequest.private``: the route decided before signing, by
client.sender) on that socket. The I/O thread (client.ioloop.ClientIO) owns one and calls
``flush`` once per pass of its loop; functions queued with ``put`` run there too, after
everything queued before them has been sent.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

import zmq

from zpar.wire import batches, send_frames

from .request import PendingRequest, PendingTable

#: Channels whose queued requests go out as one batch. The task scheduler takes batches
#: (Session.feed_all in its handlers); engines take MUX and control messages one at a time.
BATCHED_CHANNELS = frozenset({"task"})


class RequestOutbox:
    """Requests to send and functions to call in the I/O thread, in order.

    sockets: the I/O thread's sockets by channel ("task", "mux", ...), read at each send;
    pending: the table whose windows hold work back and let it out;
    private_socket: the socket to an engine's own ipc endpoint (by uuid, at an address),
    made on first use.
    """

    def __init__(
        self,
        sockets: dict[str, zmq.Socket],
        pending: PendingTable,
        private_socket: Callable[[str, str], zmq.Socket],
    ) -> None:
        self._sockets = sockets
        self._pending = pending
        self._private_socket = private_socket
        self._queue: deque[PendingRequest | Callable[[], None]] = deque()
        #: queue a request or a function (any thread; deque.append is atomic)
        self.put: Callable[[PendingRequest | Callable[[], None]], None] = self._queue.append

    def flush(self) -> None:
        """Send what is queued, in order per socket: the requests for a BATCHED_CHANNELS
        socket together, as few batches as wire.MAX_BATCH allows (one request alone goes
        as itself). A queued function runs after everything queued before it was sent."""
        queue = self._queue
        runs: dict[str, list[PendingRequest]] = {}
        admitted = self._pending.admitted  # let out by replies: older than the queue
        requests = self._pending.requests
        while admitted:
            let_out = admitted.popleft()
            if let_out.msg_id in requests:  # not failed meanwhile (its engine died)
                self._send_or_batch(let_out, runs)
        windows = self._pending.windows
        while queue:
            item = queue.popleft()
            if type(item) is not PendingRequest:
                self._send_runs(runs)
                item()  # type: ignore[operator]  # not a request: a queued function
                continue
            if item.windowed and not windows.offer(item):
                continue  # held in its window until replies make room
            self._send_or_batch(item, runs)
        if runs:
            self._send_runs(runs)

    def _send_or_batch(self, item: PendingRequest, runs: dict[str, list[PendingRequest]]) -> None:
        if item.channel in BATCHED_CHANNELS and item.trackers is None:
            runs.setdefault(item.channel, []).append(item)
        else:
            self._send_one(item)

    def _send_runs(self, runs: dict[str, list[PendingRequest]]) -> None:
        if not runs:
            return
        for channel, requests in runs.items():
            sock = self._sockets[channel]
            for frames in batches([r.frames for r in requests]):  # type: ignore[misc]
                send_frames(sock, frames)
            now = time.time()
            for r in requests:
                r.sent = now
                if not r.resend:
                    r.frames = None
        runs.clear()

    def _send_one(self, request: PendingRequest) -> None:
        frames = request.frames
        assert frames is not None
        if request.private is not None:  # signed for the engine's own socket: no identity
            sock = self._private_socket(request.engine_uuid or "", request.private)
        else:
            sock = self._sockets[request.channel]
        send_frames(sock, frames, request.trackers)
        request.sent = time.time()
        if not request.resend:
            request.frames = None
