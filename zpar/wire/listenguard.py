"""Strangers on a process's zmq listeners: a deadline to finish the handshake, a limit of
connections per peer address, and no starvation when descriptors run out.

libzmq accepts every connection a listener is offered and has no per-socket limit. What it
does on its own (libzmq 4.3.5, measured 2026-11-28; docs/decisions.md "zmq listeners and
strangers"):

- out of descriptors (EMFILE/ENFILE at accept) it emits ``EVENT_ACCEPT_FAILED`` and goes
  on (tcp_listener.cpp: "TODO: Handle specific errors like ENFILE/EMFILE"), but the
  listener stays readable in its level-triggered poller, so its I/O thread spins (one
  core, ~300,000 failed accepts a second) until a descriptor comes free, and the process
  can open no file and make no zmq socket meanwhile;
- a connection that does not finish its ZMTP handshake (greeting, and the Curve exchange
  on a ``--curve`` cluster) within ``ZMQ_HANDSHAKE_IVL`` (30 s by default) is closed.

So for each listening socket a :class:`ListenerGuard` sets ``HANDSHAKE_IVL`` to
``handshake_timeout()`` (10 s, the time a stranger has to authenticate, as ``zpar
impi-server``'s) and watches the socket's monitor from a thread of its own:

- ``EVENT_ACCEPTED`` carries the new connection's descriptor: its peer address is read
  (``getpeername``) and its connections counted; past ``max_per_address`` on one listener
  it is shut down at once (``shutdown(2)``, never ``close``: the descriptor stays
  libzmq's, which sees the end of the stream and closes it as any peer's);
- ``EVENT_ACCEPT_FAILED`` for want of descriptors (and the process still out of them):
  the newest *young* connections (younger than the handshake deadline: only those can be
  strangers mid-handshake, an older one finished its handshake or libzmq would have
  closed it) of the address that holds the most are shut down, which frees the
  descriptors libzmq needs; the engines and clients that connected before keep theirs;
- handshakes that failed or timed out are counted.

ipc connections are neither counted nor shut down: the ipc twins live in the controller's
0700 run directory. A ZAP handler cannot do this: libzmq asks it only once a peer has sent
a whole greeting (never for the silent connections that exhaust descriptors), and its
request names the peer's address but no descriptor or port to refuse by.

Counts go to a Counter by reason (``descriptors``, ``per-address``, ``handshake``), shown
by ``zpar cluster status``; each reason is logged at most once a second.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import time
from collections import Counter
from dataclasses import dataclass, field

import zmq

from zpar.wire.admission import AUTH_TIMEOUT, OUT_OF_DESCRIPTORS, RefusalLog
from zpar.wire.pollthread import PollThread

log = logging.getLogger(__name__)

#: Connections one peer address may hold on one listener: one per engine or client of its
#: host, so room for the engines of a 256-core host and their clients. ZPAR_MAX_CONNECTIONS_
#: PER_ADDRESS overrides it.
MAX_PER_ADDRESS = 512

#: Connections shut down per wake of the guard while libzmq cannot accept: enough to let
#: the waiting ones in, few enough that one wake never empties an address.
SHED_PER_WAKE = 8


_EVENTS = (
    zmq.EVENT_ACCEPTED
    | zmq.EVENT_ACCEPT_FAILED
    | zmq.EVENT_DISCONNECTED
    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
)  # never MONITOR_STOPPED: libzmq sends it blocking, also when nobody reads any more

#: Monitor events queued per listener, and read per wake.
EVENTS_QUEUED = 256

#: Seconds the guard pauses after a wake that found the process out of descriptors.
_STARVED_PAUSE = 0.01


def handshake_timeout() -> float:
    """Seconds a connection has to finish its handshake: ZPAR_HANDSHAKE_TIMEOUT, else
    AUTH_TIMEOUT."""
    raw = os.environ.get("ZPAR_HANDSHAKE_TIMEOUT", "")
    try:
        value = float(raw) if raw else AUTH_TIMEOUT
    except ValueError:
        raise ValueError(f"ZPAR_HANDSHAKE_TIMEOUT must be a number > 0, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"ZPAR_HANDSHAKE_TIMEOUT must be > 0, got {value}")
    return value


def per_address_limit() -> int:
    """The per-address limit: ZPAR_MAX_CONNECTIONS_PER_ADDRESS, else MAX_PER_ADDRESS."""
    raw = os.environ.get("ZPAR_MAX_CONNECTIONS_PER_ADDRESS", "")
    try:
        value = int(raw) if raw else MAX_PER_ADDRESS
    except ValueError:
        raise ValueError(
            f"ZPAR_MAX_CONNECTIONS_PER_ADDRESS must be an integer >= 1, got {raw!r}"
        ) from None
    if value < 1:
        raise ValueError(f"ZPAR_MAX_CONNECTIONS_PER_ADDRESS must be >= 1, got {value}")
    return value


@dataclass
class _Listener:
    """One watched socket's live tcp connections."""

    name: str
    monitor: zmq.Socket
    sock: zmq.Socket
    #: the guard's end of a pipe of copies of these events for the socket's owner
    forward: zmq.Socket | None = None
    forward_events: int = 0
    #: descriptor -> (peer address, its getpeername, when accepted), oldest first
    conns: dict[int, tuple[str, tuple, float]] = field(default_factory=dict)
    by_address: Counter[str] = field(default_factory=Counter)


class ListenerGuard:
    """Watches the listeners of one process (``watch`` each before it binds, then
    ``start``); counts into ``counts``."""

    def __init__(
        self,
        counts: Counter[str] | None = None,
        *,
        what: str = "controller",
        max_per_address: int | None = None,
        auth_timeout: float | None = None,
    ) -> None:
        self.counts: Counter[str] = Counter() if counts is None else counts
        self.what = what
        self._refuse = RefusalLog(what, self.counts)
        self.max_per_address = max_per_address or per_address_limit()
        self.auth_timeout = auth_timeout or handshake_timeout()
        self._listeners: dict[zmq.Socket, _Listener] = {}
        self._thread: PollThread | None = None

    def watch(self, sock: zmq.Socket, name: str, *, forward: int = 0) -> zmq.Socket | None:
        """Guard ``sock`` (before it binds: a listener copies the socket's options when it
        binds). A socket has one monitor: an owner that needs some of its events
        (``forward``: a mask, e.g. zmq.EVENT_DISCONNECTED) gets a socket of copies of them,
        read as a monitor socket's, returned here; else None."""
        if self._thread is not None:
            raise RuntimeError("watch every socket before start()")
        sock.setsockopt(zmq.HANDSHAKE_IVL, int(self.auth_timeout * 1000))
        n = len(self._listeners)
        addr = f"inproc://zpar-listenguard-{id(self):x}-{n}"
        # libzmq sends events blocking (its I/O thread waits while this queue is full):
        # the thread reads them at once and never raises (_run)
        sock.monitor(addr, _EVENTS | forward)
        mon = sock.context.socket(zmq.PAIR)
        mon.setsockopt(zmq.LINGER, 0)
        mon.setsockopt(zmq.RCVHWM, EVENTS_QUEUED)
        mon.connect(addr)
        lst = _Listener(name, mon, sock)
        self._listeners[mon] = lst
        if not forward:
            return None
        lst.forward_events = forward
        lst.forward = sock.context.socket(zmq.PAIR)
        lst.forward.setsockopt(zmq.LINGER, 0)
        lst.forward.setsockopt(zmq.SNDHWM, 0)  # the owner's events are never dropped
        lst.forward.bind(f"{addr}-owner")
        owner = sock.context.socket(zmq.PAIR)
        owner.setsockopt(zmq.LINGER, 0)
        owner.setsockopt(zmq.RCVHWM, 0)
        owner.connect(f"{addr}-owner")
        return owner

    def refuse(self, reason: str, detail: str) -> None:
        """Count (and log, at most once a second) a refusal the owner made on a watched
        socket, with the guard's own."""
        self._refuse(reason, detail)

    def release(self) -> None:
        """Stop monitoring the watched sockets (before they close or the guard stops: an
        event sent to a monitor nobody reads would block its sender)."""
        for lst in self._listeners.values():
            try:
                lst.sock.monitor(None, 0)
            except zmq.ZMQError:
                pass  # closed already

    def start(self, ctx: zmq.Context) -> None:
        self._thread = PollThread(ctx, "zpar-listenguard", self._run).start()

    def stop(self) -> None:
        """Stop monitoring (``release``), end the thread and close its sockets (before the
        contexts terminate); safe to call twice."""
        self.release()
        if self._thread is None:
            self._close_monitors()
            self._listeners.clear()
            return
        self._thread.stop()

    def _close_monitors(self) -> None:
        for lst in self._listeners.values():
            lst.monitor.close(linger=0)
            if lst.forward is not None:
                lst.forward.close(linger=0)

    # -- the thread -----------------------------------------------------------------------

    def _run(self, wake: zmq.Socket) -> None:
        poller = zmq.Poller()
        poller.register(wake, zmq.POLLIN)
        for mon in self._listeners:
            poller.register(mon, zmq.POLLIN)
        try:
            while True:
                ready = dict(poller.poll())
                if wake in ready:
                    return
                for mon in ready:
                    lst = self._listeners.get(mon)
                    if lst is None:
                        continue
                    try:
                        self._drain(lst)
                    except zmq.ContextTerminated:
                        raise
                    except Exception:  # never stop reading: libzmq would block on us
                        log.exception("%s: listener guard of %s", self.what, lst.name)
        finally:
            self._close_monitors()

    def _drain(self, lst: _Listener) -> None:
        """Handle what ``lst``'s monitor has queued."""
        starved = 0
        accepted: list[int] = []
        for _ in range(EVENTS_QUEUED):
            try:
                frames = lst.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            event, value = struct.unpack("=hi", frames[0][:6])
            if lst.forward is not None and event & lst.forward_events:
                lst.forward.send_multipart(frames)
            if event == zmq.EVENT_ACCEPTED:
                accepted.append(value)
                self._accepted(lst, value)
            elif event == zmq.EVENT_DISCONNECTED:
                self._gone(lst, value)
            elif event == zmq.EVENT_ACCEPT_FAILED:
                if value in OUT_OF_DESCRIPTORS:
                    starved += 1
            elif event in (
                zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL,
                zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL,
            ):
                self._refuse(
                    "handshake",
                    f"{lst.name}: a connection closed before finishing its handshake "
                    f"(silent for {self.auth_timeout:g} s, cut, or not ZMTP)",
                )
        # over the limit: only connections still open after everything queued was read
        for fd in accepted:
            entry = lst.conns.get(fd)
            if entry is None or lst.by_address[entry[0]] <= self.max_per_address:
                continue
            self._prune(lst, entry[0])  # events the monitor dropped while libzmq spun
            if fd in lst.conns and lst.by_address[entry[0]] > self.max_per_address:
                self._shut(lst, fd)
                self._refuse(
                    "per-address",
                    f"{lst.name}: {entry[0]} already holds {self.max_per_address} "
                    "connections; the newest closed",
                )
        if starved and _out_of_descriptors():  # now, not only when the events were queued
            self._shed(lst)
        if starved:
            time.sleep(_STARVED_PAUSE)  # libzmq spins meanwhile: leave the GIL to the process

    def _accepted(self, lst: _Listener, fd: int) -> None:
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            return  # already closed
        try:
            peer = s.getpeername()
            family = s.family
        except OSError:
            return
        finally:
            s.detach()  # the descriptor stays libzmq's
        if family not in (socket.AF_INET, socket.AF_INET6):
            return  # ipc: the run directory's peers
        old = lst.conns.pop(fd, None)  # a reused number whose close we have not seen
        if old is not None:
            lst.by_address[old[0]] -= 1
        address = str(peer[0])
        lst.conns[fd] = (address, tuple(peer), time.monotonic())
        lst.by_address[address] += 1

    def _gone(self, lst: _Listener, fd: int) -> None:
        entry = lst.conns.pop(fd, None)
        if entry is not None:
            lst.by_address[entry[0]] -= 1
            if lst.by_address[entry[0]] <= 0:
                del lst.by_address[entry[0]]

    def _shed(self, lst: _Listener) -> None:
        """libzmq could not accept for want of descriptors: shut down the newest young
        connections (younger than the handshake deadline: only those can be strangers
        mid-handshake; an older one finished its handshake, or libzmq would have closed
        it) of the address holding the most of them, across every listener."""
        shed = 0
        for _ in range(SHED_PER_WAKE):
            young_since = time.monotonic() - self.auth_timeout
            young: dict[str, list[tuple[float, _Listener, int]]] = {}
            for other in self._listeners.values():
                for fd, (a, _, since) in other.conns.items():
                    if since > young_since:
                        young.setdefault(a, []).append((since, other, fd))
            if not young:
                break
            address, conns = max(young.items(), key=lambda kv: len(kv[1]))
            _, owner, fd = max(conns, key=lambda c: c[0])
            if not self._shut(owner, fd):
                continue  # closed already: its event was dropped
            shed += 1
            self._refuse(
                "descriptors",
                f"{lst.name}: out of file descriptors at accept; closed the newest young "
                f"connection of {address} (on {owner.name}), which holds the most",
            )
        if not shed:
            self._refuse(
                "descriptors",
                f"{lst.name}: out of file descriptors at accept, and no connection younger "
                f"than {self.auth_timeout:g} s to close: libzmq retries until one closes",
            )

    def _prune(self, lst: _Listener, address: str) -> None:
        """Forget ``address``'s connections that are not open any more (the monitor drops
        events past its queue's HWM, as while libzmq spins on a failing accept)."""
        for fd, (a, peer, _) in list(lst.conns.items()):
            if a == address and _peer_of(fd) != peer:
                self._gone(lst, fd)

    def _shut(self, lst: _Listener, fd: int) -> bool:
        """Shut the connection down (libzmq sees it end and closes it) and forget it;
        False if ``fd`` is not that connection any more (closed, its number reused)."""
        entry = lst.conns.get(fd)
        self._gone(lst, fd)
        if entry is None:
            return False
        try:
            s = socket.socket(fileno=fd)
        except OSError:
            return False
        try:
            if s.getpeername() != entry[1]:
                return False
            s.shutdown(socket.SHUT_RDWR)
            return True
        except OSError:
            return False
        finally:
            s.detach()


def _peer_of(fd: int) -> tuple | None:
    """getpeername of descriptor ``fd`` without taking it over; None if it is no socket."""
    try:
        s = socket.socket(fileno=fd)
    except OSError:
        return None
    try:
        return tuple(s.getpeername())
    except OSError:
        return None
    finally:
        s.detach()


def _out_of_descriptors() -> bool:
    """True if this process cannot open a descriptor right now."""
    try:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        return e.errno in OUT_OF_DESCRIPTORS
    os.close(fd)
    return False
