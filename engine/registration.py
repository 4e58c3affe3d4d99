"""Registering an engine with the hub: one request, one reply, or a clear failure; then
connecting its sockets and waiting for their handshakes."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Sequence
from typing import Any

import zmq

from zpar.cluster.launchers.mpirank import mpi_rank
from zpar.constants import BAD_KEY, HUB_TIMEOUT
from zpar.errors import RegistrationRefused, TimeoutError, WrongKey
from zpar.wire import Session
from zpar.wire.curve import secure
from zpar.wire.messages import (
    ConnectionRequest,
    MsgType,
    RegistrationReply,
    RegistrationRequest,
    ReplyStatus,
)
from zpar.wire.sockets import configure, recv_monitor_event

log = logging.getLogger(__name__)


def register(
    context: zmq.Context,
    session: Session,
    address: str,
    uuid: str,
    timeout: float = HUB_TIMEOUT,
    requested_id: int = -1,
    curve: Any = None,
) -> RegistrationReply:
    """Ask the hub at ``address`` to register ``uuid``; return its (ok) reply.

    Raises RegistrationRefused if the hub says no, zpar.errors.TimeoutError if it is silent.
    """
    rank = mpi_rank()
    if requested_id < 0 and rank >= 0:
        # started by mpiexec: the engine id is the MPI rank, as ipyparallel's engines ask
        # (the hub gives another id only if that one is taken)
        requested_id = rank
    sock = secure(configure(context.socket(zmq.DEALER)), curve)
    try:
        sock.connect(address)
        request = RegistrationRequest(
            uuid, socket.gethostname(), os.getpid(), id=requested_id, rank=rank
        )
        header = session.send(sock, MsgType.REGISTRATION_REQUEST, request.as_dict())
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sock.poll(int(remaining * 1000) + 1):
                raise TimeoutError(
                    f"no registration reply from the controller at {address} within "
                    f"{timeout:g} s: is it running, and reachable from this host?"
                )
            frames = sock.recv_multipart()
            if frames == [BAD_KEY]:
                raise WrongKey(
                    f"the controller at {address} refused this engine's signature: the key "
                    "of its connection file is not the running cluster's"
                )
            msg = session.feed(frames, "registration")
            if msg is None or msg.msg_type != MsgType.REGISTRATION_REPLY:
                continue
            if msg.parent_header.get("msg_id", header["msg_id"]) != header["msg_id"]:
                continue
            return _check(msg.content, address)
    finally:
        sock.close(linger=0)


def still_registered(
    context: zmq.Context,
    session: Session,
    address: str,
    uuid: str,
    engine_id: int,
    timeout: float,
    curve: Any = None,
) -> bool | None:
    """Whether the hub at ``address`` counts engine ``engine_id`` as ``uuid`` now (its
    connection_reply lists the registered engines); None when it does not answer within
    ``timeout`` (a controller busy or gone: the heartbeat decides then)."""
    sock = secure(configure(context.socket(zmq.DEALER)), curve)
    try:
        sock.connect(address)
        header = session.send(sock, MsgType.CONNECTION_REQUEST, ConnectionRequest().as_dict())
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not sock.poll(int(remaining * 1000) + 1):
                return None
            msg = session.feed(sock.recv_multipart(), "registration check")
            if msg is None or msg.msg_type != MsgType.CONNECTION_REPLY:
                continue
            if msg.parent_header.get("msg_id") != header["msg_id"]:
                continue
            engines = msg.content.get("engines")
            if not isinstance(engines, dict):
                return None
            return engines.get(engine_id, engines.get(str(engine_id))) == uuid
    finally:
        sock.close(linger=0)


def _check(content: dict[str, Any], address: str) -> RegistrationReply:
    if content.get("status") != ReplyStatus.OK:
        reason = content.get("evalue") or "no reason given"
        raise RegistrationRefused(f"registration refused by the controller at {address}: {reason}")
    try:
        reply = RegistrationReply.from_dict(content)
    except TypeError as e:
        raise RegistrationRefused(f"malformed registration reply from {address}: {e}") from e
    missing = [k for k in ("mux", "control", "task", "iopub") if not getattr(reply, k)]
    if missing or len(reply.heartbeat) != 2 or reply.id < 0:
        raise RegistrationRefused(
            f"incomplete registration reply from {address}: missing "
            f"{', '.join(missing) or 'heartbeat or id'}"
        )
    return reply


def connect_and_wait(pairs: Sequence[tuple[zmq.Socket, str]], timeout: float) -> None:
    """Connect each socket and wait until each has completed its ZMTP handshake.

    The monitors are attached before connecting: on loopback a handshake can finish before
    a monitor attached after connect() sees it (zpar.wire.sockets.wait_handshakes would then
    time out).
    """
    monitors = [s.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED) for s, _ in pairs]
    try:
        for s, addr in pairs:
            s.connect(addr)
        deadline = time.monotonic() + timeout
        for (_, addr), mon in zip(pairs, monitors, strict=True):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not mon.poll(int(remaining * 1000) + 1):
                raise TimeoutError(
                    f"no handshake with {addr} within {timeout:g} s: is the controller "
                    "reachable from this host?"
                )
            recv_monitor_event(mon)
    finally:
        for (s, _), mon in zip(pairs, monitors, strict=True):
            s.disable_monitor()
            mon.close(linger=0)
