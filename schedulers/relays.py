"""MUX, control and IOPub relays, each a thread of the controller.

::

    client DEALER ──► ROUTER ══ RouterRelay ══ ROUTER ◄── engine DEALER (identity uuid)
                                     │ PUSH inproc: [mux_in|ctl_in, engine, client, head]
                                     ▼            [mux_out|ctl_out, client, engine, msg…]
                               hub monitor PULL
    engine PUB ──► XSUB ══ zmq.proxy ══ XPUB ──► client SUB

A ROUTER-ROUTER relay swaps the first two identities, so a client's ``[engine_uuid,
msg…]`` reaches the engine as ``[client_ident, msg…]`` and the reply comes back as
``[engine_uuid, msg…]``. pyzmq's monitored_queue did that in C, but read two frames and
then "the rest" without checking the framing: a one-frame message left it mid-message,
and the next message (another peer's) was glued on and routed where the first sender
chose. This relay takes each message whole (recv_multipart), forwards it only if it is
``[sender, destination, <ZPAR|MSG>, signature, envelope, buffers…]`` or a batch
``[sender, destination, <ZPAR|BATCH>, index, …]`` whose index matches its frames, and
drops anything else whole, so a peer can only ever address its own message. A batch goes
on whole (the receiver checks each message); the hub gets one copy per message. Frames are passed on as zmq
Frames (refcounted, not copied). The threads end when the context is terminated.

The MUX relay's copies reach the hub as an engine's do (engine.monitorcopies): the first
after a quiet interval at once, the others queued and sent packed in one monitor batch at
most every COPY_INTERVAL (RelayCopies; the relay's poll wakes for it: a timer on the
copies, never on the messages relayed). Each copy sent alone woke the hub, which shares
this thread's GIL: a relayed message waited for the GIL while the hub checked copies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from zpar.hub.iopubgate import IOPubGate
from zpar.wire import checkable_copy, routing, unbatch
from zpar.wire.copybatch import COPY_BATCH_MAX, COPY_PACK_MAX, pack_copies
from zpar.wire.curve import secure
from zpar.wire.messages import MON_CONTROL_IN, MON_CONTROL_OUT, MON_MUX_IN, MON_MUX_OUT
from zpar.wire.sockets import bind_port, configure, recv_frames

log = logging.getLogger(__name__)


@dataclass
class Relay:
    """Bound addresses of one relay (as ``tcp://ip:port`` on the bind interface)."""

    name: str
    client: str
    engine: str
    thread: threading.Thread | None = field(default=None, repr=False)
    #: the same sockets on ipc, for peers on this host (see zpar.wire.transport)
    local_client: str = ""
    local_engine: str = ""
    #: messages dropped whole for their framing, by side ("client", "engine")
    dropped: Counter[str] = field(default_factory=Counter)
    #: the IOPub relay's gate on a keyed cluster (hub.iopubgate)
    gate: Any = field(default=None, repr=False)


#: Messages a relay moves from one side before looking at the other: bounded, so a flood
#: from one side cannot starve the other.
RELAY_BATCH = 256


#: Seconds between two batches of the MUX relay's copies while messages keep coming.
COPY_INTERVAL = 0.01


class RelayCopies:
    """The MUX relay's copies for the hub's monitor: ``send_multipart`` as on the monitor
    socket itself; the first after a quiet interval leaves at once, the others wait for
    ``flush`` (due when ``wait_ms`` says) and leave packed (zpar.wire.copybatch.pack_copies), a
    copy over COPY_PACK_MAX alone in its place, zero-copy."""

    def __init__(self, mon: zmq.Socket, interval: float = COPY_INTERVAL) -> None:
        self.mon = mon
        self.interval = interval
        self._queue: list[list[Any]] = []
        self._sent_at = -interval
        #: zmq messages sent, and copies in them
        self.sent_messages = 0
        self.sent_copies = 0

    def send_multipart(self, frames: list[Any], copy: bool = False) -> None:
        if not self._queue and time.monotonic() >= self._sent_at + self.interval:
            self._send(frames, 1)
            self._sent_at = time.monotonic()
        else:
            self._queue.append(frames)

    def due(self) -> bool:
        """Whether queued copies wait for a flush now."""
        return bool(self._queue) and time.monotonic() >= self._sent_at + self.interval

    def wait_ms(self) -> int | None:
        """Milliseconds until the queued copies are due; None when none are queued."""
        if not self._queue:
            return None
        return max(0, int((self._sent_at + self.interval - time.monotonic()) * 1000) + 1)

    def flush(self) -> None:
        """Send what is queued, in order."""
        queue, self._queue = self._queue, []
        packed: list[list[bytes]] = []
        for frames in queue:
            small = _small_copy(frames)
            if small is None:
                self._send_packed(packed)
                packed = []
                self._send(frames, 1)
                continue
            packed.append(small)
            if len(packed) == COPY_BATCH_MAX:
                self._send_packed(packed)
                packed = []
        self._send_packed(packed)
        self._sent_at = time.monotonic()

    def _send_packed(self, packed: list[list[bytes]]) -> None:
        if len(packed) == 1:
            self._send(packed[0], 1)
        elif packed:
            self._send(pack_copies(packed), len(packed))

    def _send(self, frames: list[Any], copies: int) -> None:
        self.mon.send_multipart(frames, copy=False)
        self.sent_messages += 1
        self.sent_copies += copies


def _small_copy(frames: list[Any]) -> list[bytes] | None:
    """A copy's frames as bytes when they are small enough to pack, else None."""
    if sum(len(f) for f in frames) > COPY_PACK_MAX:
        return None
    return [f.bytes if isinstance(f, zmq.Frame) else bytes(f) for f in frames]


def relay_one(
    frames: list[Any],
    out: zmq.Socket,
    mon: zmq.Socket | RelayCopies,
    prefix: bytes,
    with_buffers: bool,
) -> bool:
    """Forward one message or batch received on a ROUTER, identities swapped, and copy
    each message to the hub's monitor (with its buffers only for replies small enough to
    store); False when its framing is wrong (a batch's index included), and it was
    dropped whole."""
    framed = routing(frames)
    if framed is None or len(framed[0]) != 2:
        return False
    (sender, dest), msg = framed
    out.send_multipart([dest, sender, *msg], copy=False)
    for one in unbatch(msg):  # routing checked a batch's index: this cannot raise
        copy = checkable_copy(one, large=with_buffers)  # Frames: refcounted, not copied
        mon.send_multipart([prefix, dest, sender, *copy], copy=False)
    return True


def _relay(
    relay: Relay,
    front: zmq.Socket,
    back: zmq.Socket,
    mon: zmq.Socket,
    prefixes: tuple[bytes, bytes],
) -> None:
    """The relay's loop: client side to engine side and back, until the context ends."""
    poller = zmq.Poller()
    poller.register(front, zmq.POLLIN)
    poller.register(back, zmq.POLLIN)
    # only the MUX relay's copies are read by the hub (the control relay's are ignored)
    copies = RelayCopies(mon) if prefixes[0] == MON_MUX_IN else None
    sink: zmq.Socket | RelayCopies = copies if copies is not None else mon
    sides = {
        # MUX requests with their buffers when the store keeps them (for resubmit)
        front: (back, prefixes[0], copies is not None, "client"),
        back: (front, prefixes[1], True, "engine"),
    }
    while True:
        wait = copies.wait_ms() if copies is not None else None
        for sock, _ in poller.poll(wait):
            out, prefix, with_buffers, side = sides[sock]
            for _ in range(RELAY_BATCH):
                try:
                    frames = recv_frames(sock, zmq.NOBLOCK)
                except zmq.Again:
                    break
                if not relay_one(frames, out, sink, prefix, with_buffers):
                    relay.dropped[side] += 1
                    log.warning(
                        "%s relay: a message of %d frame(s) from the %s side is not "
                        "[sender, destination, delimiter, signature, envelope, buffers…]: "
                        "dropped whole (%d so far)",
                        relay.name,
                        len(frames),
                        side,
                        relay.dropped[side],
                    )
        if copies is not None and copies.due():
            copies.flush()


def _bind_local(sock: zmq.Socket, ipc_dir: str | None, name: str) -> str:
    if not ipc_dir:
        return ""
    addr = f"ipc://{ipc_dir}/{name}"
    sock.bind(addr)
    return addr


def _run_device(name: str, run, sockets: list[zmq.Socket]) -> None:
    try:
        run()
    except zmq.ContextTerminated:
        pass
    except zmq.ZMQError as e:  # pragma: no cover - a broken context only
        log.error("relay %s stopped: %s", name, e)
    finally:
        for s in sockets:
            s.close(linger=0)


def start_queue(
    ctx: zmq.Context,
    name: str,
    ip: str,
    monitor: str,
    prefixes: tuple[bytes, bytes],
    ipc_dir: str | None = None,
    curve: Any = None,
    ports: tuple[int, int] = (0, 0),
    guard: Any = None,
) -> Relay:
    """A ROUTER-ROUTER relay whose traffic is copied (headers and all) to ``monitor``.
    ``curve``: the cluster's zpar.wire.curve.CurveKeys, making both sides Curve servers.
    ``guard``: a ListenerGuard to watch both sides (before they bind)."""
    front = secure(configure(ctx.socket(zmq.ROUTER)), curve, server=True)
    back = secure(configure(ctx.socket(zmq.ROUTER)), curve, server=True)
    if guard is not None:
        guard.watch(front, f"{name} client")
        guard.watch(back, f"{name} engine")
    # A message for an engine that is not connected is dropped (ROUTER's default); the
    # client fails the request when the engine's death is announced.
    mon = configure(ctx.socket(zmq.PUSH))
    mon.connect(monitor)
    relay = Relay(name, bind_port(front, ip, ports[0]), bind_port(back, ip, ports[1]))
    relay.local_client = _bind_local(front, ipc_dir, f"{name}-client")
    relay.local_engine = _bind_local(back, ipc_dir, f"{name}-engine")

    def run() -> None:
        _relay(relay, front, back, mon, prefixes)

    relay.thread = threading.Thread(
        target=_run_device, args=(name, run, [front, back, mon]), name=f"zpar-{name}", daemon=True
    )
    relay.thread.start()
    return relay


def start_iopub(
    ctx: zmq.Context,
    ip: str,
    ipc_dir: str | None = None,
    curve: Any = None,
    topic: bytes = b"",
    ports: tuple[int, int] = (0, 0),
    guard: Any = None,
) -> Relay:
    """``topic``: the cluster's IOPub topic (zpar.wire.privacy); only its subscribers get output
    (hub.iopubgate). b"": an insecure cluster, a plain proxy."""
    xsub = secure(configure(ctx.socket(zmq.XSUB)), curve, server=True)
    xpub = secure(configure(ctx.socket(zmq.XPUB)), curve, server=True)
    if guard is not None:
        guard.watch(xpub, "iopub client")
        guard.watch(xsub, "iopub engine")
    gate = None
    if topic:
        xpub.setsockopt(zmq.XPUB_MANUAL, 1)
        gate = IOPubGate(xsub, xpub, topic)
    relay = Relay("iopub", bind_port(xpub, ip, ports[0]), bind_port(xsub, ip, ports[1]))
    relay.local_client = _bind_local(xpub, ipc_dir, "iopub-client")
    relay.local_engine = _bind_local(xsub, ipc_dir, "iopub-engine")
    relay.gate = gate

    def run() -> None:
        if gate is not None:
            gate.run()
        else:
            zmq.proxy(xsub, xpub)

    relay.thread = threading.Thread(
        target=_run_device, args=("iopub", run, [xsub, xpub]), name="zpar-iopub", daemon=True
    )
    relay.thread.start()
    return relay


def start_relays(
    ctx: zmq.Context,
    ip: str,
    monitor: str,
    ipc_dir: str | None = None,
    curve: Any = None,
    iopub_topic: bytes = b"",
    ports: Callable[[str], int] = lambda name: 0,
    guard: Any = None,
) -> dict[str, Relay]:
    """``ports``: the tcp port of "mux client", "iopub engine" ... (0: a random one).
    ``guard``: a zpar.wire.listenguard.ListenerGuard watching every side for strangers."""

    def sides(name: str) -> tuple[int, int]:
        return ports(f"{name} client"), ports(f"{name} engine")

    mux, control = (MON_MUX_IN, MON_MUX_OUT), (MON_CONTROL_IN, MON_CONTROL_OUT)
    return {
        "mux": start_queue(ctx, "mux", ip, monitor, mux, ipc_dir, curve, sides("mux"), guard),
        "control": start_queue(
            ctx, "control", ip, monitor, control, ipc_dir, curve, sides("control"), guard
        ),
        "iopub": start_iopub(ctx, ip, ipc_dir, curve, iopub_topic, sides("iopub"), guard),
    }
