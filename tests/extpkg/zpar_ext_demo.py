"""A capability outside zpar's core, installed by tests/e2e/test_extension_points.py as a
distribution of its own (entry points in a dist-info it writes): a message type, a hub
query answering it, and a socket served by each engine's loop. Nothing in zpar names it.
"""

from __future__ import annotations

from typing import Any

import zmq

from zpar.engine.engine import this_engine
from zpar.wire.msgtypes import register_message_types

#: [zpar.message_types] demo = zpar_ext_demo:MESSAGE_TYPES
MESSAGE_TYPES = {"demo_echo_request": "demo_echo_reply"}

# a process that imports the capability knows its messages without reading entry points
register_message_types(MESSAGE_TYPES)


def echo_query(hub: Any, msg: Any) -> dict[str, Any]:
    """[zpar.hub_queries] demo_echo_request: the text back, and what the hub knows."""
    text = msg.content.get("text")
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return {"status": "ok", "echo": text, "engines": sorted(hub.engines)}


#: the port of this engine's demo socket, once the engine watches it
PORT: int | None = None
#: requests the engine's loop handed to the demo socket's handler
SERVED: list[bytes] = []


def engine_sockets(engine: Any) -> list[tuple[zmq.Socket, Any]]:
    """[zpar.engine_sockets] demo: a REP socket on 127.0.0.1 answering "pong"."""
    global PORT
    sock = engine.ctx.socket(zmq.REP)
    PORT = sock.bind_to_random_port("tcp://127.0.0.1")
    return [(sock, answer)]


def answer(sock: zmq.Socket) -> None:
    request = sock.recv()
    SERVED.append(request)
    engine = this_engine()
    sock.send(b"pong " + request + f" from engine {engine.id if engine else '?'}".encode())


def watch_one_more() -> int:
    """Run as a task: watch another socket from inside the engine, at run time."""
    engine = this_engine()
    assert engine is not None
    sock = engine.ctx.socket(zmq.REP)
    port = sock.bind_to_random_port("tcp://127.0.0.1")

    def late(s: zmq.Socket) -> None:
        s.send(b"late " + s.recv())

    engine.watch(sock, late)
    return port
