"""MUX, control and IOPub relays: C device threads that never need the GIL.

::

    client DEALER ──► ROUTER ══ monitored_queue ══ ROUTER ◄── engine DEALER (identity uuid)
                                     │ PUSH inproc: [mux_in|ctl_in, engine, client, msg…]
                                     ▼                [mux_out|ctl_out, client, engine, msg…]
                               hub monitor PULL
    engine PUB ──► XSUB ══ zmq.proxy ══ XPUB ──► client SUB

A ROUTER-ROUTER monitored_queue swaps the first two identities, so a client's
``[engine_uuid, msg…]`` reaches the engine as ``[client_ident, msg…]`` and the reply comes
back as ``[engine_uuid, msg…]``. The monitor copies are refcounted by zmq over inproc, not
copied. The threads end when the context is terminated.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

import zmq
from zmq.devices import monitored_queue

from zpar.messages import MON_CONTROL_IN, MON_CONTROL_OUT, MON_MUX_IN, MON_MUX_OUT
from zpar.sockets import bind_random, configure

log = logging.getLogger(__name__)


@dataclass
class Relay:
    """Bound addresses of one relay (as ``tcp://ip:port`` on the bind interface)."""

    name: str
    client: str
    engine: str
    thread: threading.Thread | None = field(default=None, repr=False)
    #: the same sockets on ipc, for peers on this host (see zpar.transport)
    local_client: str = ""
    local_engine: str = ""


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
) -> Relay:
    """A ROUTER-ROUTER relay whose traffic is copied (headers and all) to ``monitor``."""
    front = configure(ctx.socket(zmq.ROUTER))
    back = configure(ctx.socket(zmq.ROUTER))
    # A message for an engine that is not connected raises inside the device instead of
    # vanishing... but monitored_queue would stop on the error; so keep ROUTER's default
    # (drop) and let the client fail the request when the engine's death is announced.
    mon = configure(ctx.socket(zmq.PUSH))
    mon.connect(monitor)
    relay = Relay(name, bind_random(front, ip), bind_random(back, ip))
    relay.local_client = _bind_local(front, ipc_dir, f"{name}-client")
    relay.local_engine = _bind_local(back, ipc_dir, f"{name}-engine")

    def run() -> None:
        monitored_queue(front, back, mon, prefixes[0], prefixes[1])

    relay.thread = threading.Thread(
        target=_run_device, args=(name, run, [front, back, mon]), name=f"zpar-{name}", daemon=True
    )
    relay.thread.start()
    return relay


def start_iopub(ctx: zmq.Context, ip: str, ipc_dir: str | None = None) -> Relay:
    xsub = configure(ctx.socket(zmq.XSUB))
    xpub = configure(ctx.socket(zmq.XPUB))
    relay = Relay("iopub", bind_random(xpub, ip), bind_random(xsub, ip))
    relay.local_client = _bind_local(xpub, ipc_dir, "iopub-client")
    relay.local_engine = _bind_local(xsub, ipc_dir, "iopub-engine")

    def run() -> None:
        zmq.proxy(xsub, xpub)

    relay.thread = threading.Thread(
        target=_run_device, args=("iopub", run, [xsub, xpub]), name="zpar-iopub", daemon=True
    )
    relay.thread.start()
    return relay


def start_relays(
    ctx: zmq.Context, ip: str, monitor: str, ipc_dir: str | None = None
) -> dict[str, Relay]:
    return {
        "mux": start_queue(ctx, "mux", ip, monitor, (MON_MUX_IN, MON_MUX_OUT), ipc_dir),
        "control": start_queue(
            ctx, "control", ip, monitor, (MON_CONTROL_IN, MON_CONTROL_OUT), ipc_dir
        ),
        "iopub": start_iopub(ctx, ip, ipc_dir),
    }
