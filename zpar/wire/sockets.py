"""Small socket facts every process needs: binding on a free port, waiting for handshakes."""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Iterable
from typing import Any

import zmq

from zpar.errors import TimeoutError


def recv_monitor_event(sock: zmq.Socket, flags: int = 0) -> dict[str, Any]:
    """One socket-monitor event: {event, value, endpoint}.

    zmq.utils.monitor does the same but imports asyncio (and ssl) into every process that
    uses it: several MB of resident memory for a 6-byte struct.
    """
    frames = sock.recv_multipart(flags)
    event, value = struct.unpack("=hi", frames[0][:6])
    return {"event": event, "value": value, "endpoint": frames[1] if len(frames) > 1 else b""}


def socket_identity(fd: int) -> tuple[int, int] | None:
    """The open socket behind descriptor ``fd`` as (device, inode), None if ``fd`` is closed.

    A monitor event names a connection by its descriptor, and the OS reuses a closed
    descriptor's number for the next accept at once; the socket's inode is not reused while
    that socket lives (Linux numbers sockfs inodes in sequence), so it tells the connection
    a number names now from the one it named when a message came on it."""
    try:
        st = os.fstat(fd)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def recv_frames(sock: zmq.Socket, flags: int = 0) -> list[zmq.Frame]:
    """One whole multipart as zmq.Frames: ``sock.recv_multipart(flags, copy=False)`` without
    its getsockopt(RCVMORE) per frame, which in pyzmq 27 builds a SocketOption enum each
    time (Socket.get): a Frame knows whether more follow. For the relays and the hub's
    monitor, which take every message a direct call makes."""
    frame = sock.recv(flags, copy=False)
    frames = [frame]
    while frame.more:
        frame = sock.recv(flags, copy=False)
        frames.append(frame)
    return frames


def bind_random(sock: zmq.Socket, ip: str = "127.0.0.1", transport: str = "tcp") -> str:
    """Bind on an ephemeral port and return the full address."""
    if transport == "tcp":
        port = sock.bind_to_random_port(f"tcp://{ip}")
        return f"tcp://{ip}:{port}"
    sock.bind(f"{transport}://{ip}")
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def bind_port(sock: zmq.Socket, ip: str, port: int = 0) -> str:
    """Bind tcp on ``port`` (0: an ephemeral one) and return the full address."""
    if not port:
        return bind_random(sock, ip)
    sock.bind(f"tcp://{ip}:{port}")
    return f"tcp://{ip}:{port}"


#: Socket types whose high-water mark is lifted: at the HWM a ROUTER silently drops and a
#: DEALER/PUSH blocks, and zpar can afford neither (a lost request, a relay stalled behind a
#: slow hub). Queues grow in memory instead. PUB sockets keep the HWM: dropping is their job.
_UNBOUNDED = frozenset({zmq.ROUTER, zmq.DEALER, zmq.PUSH, zmq.PULL})


def configure(sock: zmq.Socket, identity: bytes | None = None) -> zmq.Socket:
    """Linger 0 so that closing never blocks on an unreachable peer; no HWM on queues."""
    sock.setsockopt(zmq.LINGER, 0)
    if sock.type in _UNBOUNDED:
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.RCVHWM, 0)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    return sock


def wait_handshakes(sockets: Iterable[zmq.Socket], timeout: float) -> None:
    """Block until every socket has completed a ZMTP handshake with its peer.

    A ROUTER learns a peer's identity only at handshake; waiting for it means a message
    routed to us right after our registration is not silently dropped.
    """
    deadline = time.monotonic() + timeout
    monitors = [s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) for s in sockets]
    try:
        for s, mon in zip(sockets, monitors, strict=True):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not mon.poll(int(remaining * 1000)):
                raise TimeoutError(
                    f"no handshake with {s.getsockopt_string(zmq.LAST_ENDPOINT)} within "
                    f"{timeout:.1f} s: is the controller reachable from this host?"
                )
            recv_monitor_event(mon)
    finally:
        for s, mon in zip(sockets, monitors, strict=True):
            s.disable_monitor()
            mon.close(linger=0)
