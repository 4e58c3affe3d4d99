"""EngineControl: the Client's hold on engines' lives (waiting for them to register,
shutting them down or restarting them, signalling them) and its control requests (abort,
clear), owned by the Client, which keeps ipyparallel's names for them as thin methods."""

from __future__ import annotations

import concurrent.futures
import logging
import signal
import threading
import time
from typing import Any

from zpar.constants import HUB_TIMEOUT
from zpar.elements import origin_of, split_element_id
from zpar.errors import TimeoutError
from zpar.wire.messages import (
    AbortRequest,
    ClearRequest,
    MsgType,
    ShutdownHubRequest,
    ShutdownRequest,
    SignalRequest,
)

from .callresult import AsyncResult
from .taskstore import msg_ids_of

log = logging.getLogger(__name__)


def signal_number(sig: int | str) -> int:
    """The number of a signal given as a number, a Signals member, 'SIGINT' or 'INT'."""
    if isinstance(sig, str):
        name = sig.upper() if sig.upper().startswith("SIG") else "SIG" + sig.upper()
        try:
            return int(signal.Signals[name])
        except KeyError:
            raise ValueError(f"unknown signal name {sig!r}") from None
    if isinstance(sig, int) and not isinstance(sig, bool):
        if sig not in signal.valid_signals():
            raise ValueError(f"{sig} is not a valid signal number")
        return int(sig)
    raise TypeError(f"a signal is a number or a name like 'SIGINT', not {sig!r}")


class EngineControl:
    """Built with the sender (targets, uuids, hub queries), the I/O thread (the engine
    table and its condition, requests still held) and ``owner``: the Client, owner of
    the AsyncResults of its control requests."""

    def __init__(self, sender: Any, io: Any, *, owner: Any) -> None:
        self.sender = sender
        self._io = io
        self.owner = owner

    def control(
        self,
        msg_type: str,
        content: dict[str, Any],
        targets: Any,
        block: bool = True,
        timeout: float = HUB_TIMEOUT,
    ) -> AsyncResult:
        """Send a control request to each engine of ``targets``; its AsyncResult (waited
        for ``timeout`` s with ``block``)."""
        ids = self.sender.resolve_targets(targets)
        sent = [self.sender.send("control", msg_type, content, engine_id=i) for i in ids]
        ar = AsyncResult(
            self.owner, [r.msg_id for r in sent], [r.future for r in sent], fname=msg_type
        )
        if block:
            ar.get(timeout)
        return ar

    def abort(
        self,
        jobs: Any = None,
        targets: Any = None,
        block: bool = True,
        *,
        foreign: set[str] | frozenset[str] = frozenset(),
    ) -> AsyncResult:
        """Abort work that has not started: queued on engines (``targets``, default all) and,
        for load-balanced tasks, still held by the task scheduler. jobs: msg_ids or
        AsyncResults, None for everything this client queued. Running tasks finish. An
        element of a load-balanced map (``<msg_id>#<pos>``) is a task of its own: just the
        elements named are aborted, as ipyparallel's tasks of a chunksize=1 map.
        ``foreign``: ids of other clients' tasks among ``jobs`` (their maps' state is not
        known here: their elements are named to the scheduler whatever it is)."""
        if jobs is None:
            msg_ids, named = None, None
        else:
            msg_ids, named = self._elements_apart(msg_ids_of(jobs), foreign)
        content = AbortRequest(msg_ids, named or None).as_dict()
        ids = self.sender.resolve_targets(targets)
        send = self.sender.send
        sent = []
        if msg_ids is None or msg_ids:  # engines run no element requests' parts alone
            self._io.abort_held(msg_ids)  # still in this client: aborted here
            sent = [send("control", MsgType.ABORT_REQUEST, content, engine_id=i) for i in ids]
        if self._io.has_channel("task"):
            sent.append(send("task", MsgType.ABORT_REQUEST, content))
        ar = AsyncResult(
            self.owner, [r.msg_id for r in sent], [r.future for r in sent], fname="abort"
        )
        if block:
            ar.get(HUB_TIMEOUT)
        return ar

    def _elements_apart(
        self, msg_ids: list[str], foreign: set[str] | frozenset[str]
    ) -> tuple[list[str], dict[str, list[int]]]:
        """(whole tasks' msg_ids, {element request: unanswered positions named}): an
        element id names its element alone; one of this client's maps already answered is
        left out (aborting a finished task does nothing, as in ipyparallel)."""
        whole: dict[str, None] = {}
        named: dict[str, set[int]] = {}
        for m in msg_ids:
            element = split_element_id(m)
            if element is None:
                whole[origin_of(m)] = None  # a part id: its request (never a user's id)
                continue
            origin, pos = element
            request = self._io.request(origin)
            if m in foreign:
                pass  # another client's map: the scheduler knows what is left of it
            elif request is None or request.parts is None or request.parts.done(pos):
                continue  # answered: nothing left to abort
            named.setdefault(origin, set()).add(pos)
        return list(whole), {o: sorted(p) for o, p in named.items()}

    def clear(self, targets: Any = None, block: bool = True) -> AsyncResult:
        """Clear the engines' namespaces."""
        return self.control(MsgType.CLEAR_REQUEST, ClearRequest().as_dict(), targets, block)

    def wait_for_engines(
        self,
        n: int,
        timeout: float | None = -1,
        *,
        block: bool = True,
        interactive: bool | None = None,
        widget: bool | None = None,
    ) -> Any:
        """Block until at least n engines are registered; TimeoutError after ``timeout`` s
        (-1/None: never). block=False returns a Future; ``interactive`` shows a progress
        bar."""
        if timeout is not None and timeout < 0:
            timeout = None
        if not block:
            fut: concurrent.futures.Future = concurrent.futures.Future()

            def wait_in_thread() -> None:
                try:
                    self.wait_for_engines(n, timeout, interactive=interactive, widget=widget)
                except BaseException as e:
                    fut.set_exception(e)
                else:
                    fut.set_result(None)

            threading.Thread(target=wait_in_thread, name="zpar-wait-engines", daemon=True).start()
            return fut
        bar = None
        if interactive:
            from zpar.util import progress

            bar = progress(total=n, unit="engine", desc="engines", widget=widget)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            with self._io.engines_changed:
                while len(self._io.engines) < n:
                    if bar is not None:
                        bar.update(min(n, len(self._io.engines)) - bar.n)
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(
                            f"{len(self._io.engines)} of {n} engines registered within {timeout} s"
                        )
                    self._io.engines_changed.wait(remaining)
        finally:
            if bar is not None:
                bar.update(min(n, len(self._io.engines)) - bar.n)
                bar.close()
        return None

    def shutdown(
        self,
        targets: Any = "all",
        restart: bool = False,
        hub: bool = False,
        block: bool | None = None,
        timeout: float = HUB_TIMEOUT,
    ) -> None:
        """Stop engines (and the controller with hub=True, which implies all engines).

        With block (the default), returns once the engines are gone from ``ids``.
        restart=True: each engine starts afresh in its own process (same pid, new namespace,
        same id); with block, returns once all are registered again. Unlike ipyparallel,
        where restart is not implemented."""
        block = True if block is None else block
        if hub:
            targets = "all"
        if restart and hub:
            raise ValueError(
                "restart applies to engines: a controller cannot restart itself "
                "(stop it with hub=True, then start it again with zpar controller)"
            )
        if self._io.engines and targets is not None:
            old = {i: self.sender.engine_uuid(i) for i in self.sender.resolve_targets(targets)}
            content = ShutdownRequest(restart=bool(restart)).as_dict()
            ar = self.control(MsgType.SHUTDOWN_REQUEST, content, list(old), block=False)
            if block:
                ar.get(timeout) if restart else ar.wait(timeout)
                if restart:
                    self._wait_for_restart(old, timeout)
                else:
                    self._wait_for_unregistration(old, timeout)
        if hub:
            fut = self.sender.send(
                "query", MsgType.SHUTDOWN_HUB_REQUEST, ShutdownHubRequest().as_dict()
            ).future
            if block:
                fut.result(timeout)

    def _wait_for_restart(self, old: dict[int, str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._io.engines_changed:
            while waiting := [i for i, u in old.items() if self._io.engines.get(i) in (None, u)]:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"engines {waiting} did not register again within {timeout:g} s of "
                        "their restart: see their logs"
                    )
                self._io.engines_changed.wait(remaining)

    def _wait_for_unregistration(self, old: dict[int, str], timeout: float) -> None:
        """Until the hub has told us the engines are gone (so ``ids`` no longer lists them)."""
        deadline = time.monotonic() + timeout
        with self._io.engines_changed:
            while any(self._io.engines.get(i) == u for i, u in old.items()):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    log.warning("engines %s still registered %g s after shutdown", old, timeout)
                    return
                self._io.engines_changed.wait(remaining)

    def send_signal(self, sig: int | str, targets: Any = None, block: bool = True) -> Any:
        """Raise signal ``sig`` (a number or a name, 'SIGINT' or 'INT') in engine processes,
        even while they run a task: SIGINT interrupts the task (its error is
        KeyboardInterrupt). Returns the ids the hub relayed it to (a Future of them when
        block=False)."""
        signum = signal_number(sig)
        ids = self.sender.resolve_targets(targets)
        content = SignalRequest(signum, targets=ids).as_dict()
        if not block:
            fut = self.sender.send("query", MsgType.SIGNAL_REQUEST, content).future
            return fut
        return list(self.sender.query(MsgType.SIGNAL_REQUEST, content).content["engines"])
