"""RequestSender: the send side of a Client, the interface views and capabilities use.

Views (client.view), typed calls, distributed arrays and the magics build their calls
through it: they name engines by id and get back a client.request.PendingRequest (msg_id, the
reply's future, a broadcast's futures per engine), never touching the Client's or the I/O
thread's members. Everything here runs in the calling thread; the signed frames are
handed to the I/O thread (ClientIO.submit), which owns the PendingRequest from then on.
"""

from __future__ import annotations

import builtins
import functools
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from zpar import sharedmem
from zpar.constants import HUB_TIMEOUT
from zpar.dependency import to_wire
from zpar.errors import (
    HubRefused,
    InvalidDependency,
    NoEnginesRegistered,
    NoSuchEngine,
    TimeoutError,
    remote_error,
)
from zpar.serialize import pack_apply
from zpar.wire import Message, Session
from zpar.wire.messages import ApplyRequest, MsgType, ReplyStatus, ResultRequest

from .datapub import LiveData
from .directcall import DirectCaller
from .handles import Handles
from .ioloop import ClientIO
from .request import PendingRequest, engine_of, outcome_of

if TYPE_CHECKING:
    from .clientcompat import History
from .window import WINDOWED_CHANNELS

#: Requests remembered in Client.history: the work sent, which get_result(-1) refers to.
HISTORY_TYPES = frozenset({MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST})
#: the content of every apply_request (the call travels in its buffers), built once: it is
#: only ever packed, never changed
_APPLY = ApplyRequest().as_dict()


def _same_host(
    session: str, uuid: str, metadata: dict[str, Any] | None, buffers: Sequence[Any]
) -> tuple[dict[str, Any] | None, Sequence[Any]]:
    """A direct apply's metadata and buffers for the same-host data plane (zpar.sharedmem):
    this client's offer until the engine answered it (it then answers through shared
    memory), and the large buffers carried by segments once it did, from this host."""
    if not sharedmem.enabled():
        return metadata, buffers
    dest = sharedmem.peer_pid(session, uuid)
    if dest is None:
        return {**metadata, "shm": sharedmem.offer()} if metadata else {
            "shm": sharedmem.offer()
        }, buffers
    if len(buffers) > 1:  # out-of-band buffers after the pickle stream: large ones
        buffers = sharedmem.outbound(buffers, dest)
    return metadata, buffers


class RequestSender:
    """Builds, signs and submits requests for one Client (``client.sender``)."""

    def __init__(
        self,
        session: Session,
        io: ClientIO,
        direct_caller: DirectCaller,
        history: History,
        where: str,
    ) -> None:
        self.session = session
        self._io = io
        #: the I/O thread's engine table (client.enginetable): ids, uuids, routes
        self._engines = io.table
        self._direct_caller = direct_caller
        self._history = history
        #: the history of the view whose call is sending on this thread (View.history)
        self.view_history = threading.local()
        self._where = where
        #: set when the Client closes: nothing is sent after that
        self.closed = False
        #: AsyncResults the user still holds, by msg_id (weakly: results are kept by their
        #: handles, never by the client; ipyparallel's grows with every result it ever got)
        self.handles = Handles()

    # -- engines ------------------------------------------------------------------------

    @property
    def ids(self) -> list[int]:
        """Ids of the engines registered now, ascending."""
        return sorted(self._engines.engines)

    def engine_uuid(self, eid: int) -> str:
        """The uuid of engine ``eid``; NoSuchEngine (NoEnginesRegistered) if it is not
        registered."""
        engines = self._engines.engines
        if not isinstance(eid, int) or isinstance(eid, bool):
            raise TypeError(f"engine ids are ints, got {eid!r}")
        if eid not in engines:
            if not engines:
                raise NoEnginesRegistered(f"engine {eid} is not registered: no engines are")
            raise NoSuchEngine(f"engine {eid} is not registered; registered ids: {sorted(engines)}")
        return engines[eid]

    def resolve_targets(self, targets: Any) -> list[int]:
        """Engine ids of ``targets``: None or 'all', an int (negative: from the end of
        ids), a slice of ids, or a sequence of ints; each checked to be registered."""
        if targets is None or targets == "all":
            ids = self.ids
            if not ids:
                raise NoEnginesRegistered("no engines are registered")
            return ids
        if isinstance(targets, slice):
            return self.ids[targets]
        if isinstance(targets, int):
            targets = [targets]
        known: list[int] | None = None
        out = []
        for t in targets:
            if isinstance(t, int) and not isinstance(t, bool) and t < 0:
                known = known or self.ids  # negative: from the end of ids, as rc[-1]
                if -t > len(known):
                    raise IndexError(f"engine index {t} out of range: ids are {known}")
                t = known[t]
            self.engine_uuid(t)
            out.append(t)
        return out

    # -- sending ------------------------------------------------------------------------

    def send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any] | None = None,
        *,
        buffers: Sequence[Any] = (),
        metadata: dict[str, Any] | None = None,
        engine_id: int | None = None,
        track: bool = False,
        broadcast: list[int] | None = None,
        elements: int | None = None,
        waiters: Any = None,
    ) -> PendingRequest:
        """Sign a request and queue it on ``channel`` ("mux", "control", "task",
        "query"), bound to engine ``engine_id`` or, on "task", to the task scheduler.
        broadcast: engine ids each of which replies (``PendingRequest.replies``); elements:
        the positions of an element request, answered in parts (``PendingRequest.parts``)."""
        if self.closed:
            raise RuntimeError("this Client is closed")
        uuid = self.engine_uuid(engine_id) if engine_id is not None else None
        # bound to where it may run: that engine, or the task scheduler's choice
        dest = uuid if uuid is not None else "task" if channel == "task" else None
        # the route, decided once, before signing: a direct request to an engine on this
        # host goes on the engine's own ipc socket, signed private (its large buffers are
        # not hashed: see wire.Session.serialize), and the I/O thread sends it there
        private = (
            self._engines.private_address(uuid) if uuid is not None and channel == "mux" else None
        )
        if uuid is not None and channel == "mux" and msg_type == MsgType.APPLY_REQUEST:
            metadata, buffers = _same_host(self.session.session, uuid, metadata, buffers)
        header, frames = self.session.serialize(
            msg_type,
            content,
            metadata=metadata,
            buffers=buffers,
            dest=dest,
            private=private is not None,
        )
        msg_id = header["msg_id"]
        if uuid is not None and private is None:
            frames = [uuid.encode(), *frames]  # the relay routes by the engine's identity
        uuids = [self.engine_uuid(i) for i in broadcast] if broadcast is not None else None
        request = PendingRequest(
            msg_id,
            channel,
            frames,
            engine_uuid=uuid,
            private=private,
            submitted=header["date"],
            track=track,
            broadcast=uuids,
            resend=channel == "task" and bool(metadata and metadata.get("retries")),
            windowed=msg_type in HISTORY_TYPES and channel in WINDOWED_CHANNELS,
            elements=elements,
            waiters=waiters,
        )
        if metadata and metadata.get("label") is not None:
            for fut in request.reply_futures():
                fut.label = metadata["label"]
        self._io.submit(request)
        if msg_type in HISTORY_TYPES:  # work, not queries and control (as ipyparallel)
            if elements is None:
                self._remember_sent(msg_id)
            else:  # each element is a task of its own (ipyparallel: one apply each)
                self._remember_sent_elements(msg_id, elements)
        return request

    def apply(
        self,
        channel: str,
        engine_id: int | None,
        f: Any,
        args: Sequence[Any],
        kwargs: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        buffers: list[Any] | None = None,
        track: bool = False,
        elements: int | None = None,
        waiters: Any = None,
    ) -> PendingRequest:
        """An apply_request of ``f(*args, **kwargs)`` (or of ready ``buffers``)."""
        if buffers is None:
            buffers = pack_apply(f, args, kwargs)
        return self.send(
            channel,
            MsgType.APPLY_REQUEST,
            _APPLY,
            buffers=buffers,
            metadata=metadata,
            engine_id=engine_id,
            track=track,
            elements=elements,
            waiters=waiters,
        )

    def call_here(
        self,
        engine_id: int,
        buffers: Sequence[Any],
        metadata: dict[str, Any] | None,
        msg_type: str = MsgType.APPLY_REQUEST,
        content: dict[str, Any] | None = None,
    ) -> PendingRequest | None:
        """A blocking request (apply, or a capability's, e.g. typed_request) on one engine,
        sent and awaited by the calling thread (client.directcall): its PendingRequest, answered,
        or None when the engine has no endpoint on this host and the call must go through
        the I/O thread."""
        if self.closed:
            raise RuntimeError("this Client is closed")
        uuid = self.engine_uuid(engine_id)
        if self._io.has_pending_for(uuid):
            return None  # earlier requests to it are on their way: this one goes after them
        private = self._engines.private_address(uuid)
        if private is None or not self._direct_caller.reachable(uuid, private):
            return None
        if msg_type == MsgType.APPLY_REQUEST:
            metadata, buffers = _same_host(self.session.session, uuid, metadata, buffers)
        header, frames = self.session.serialize(
            msg_type,
            content or _APPLY,
            metadata=metadata,
            buffers=buffers,
            dest=uuid,
            private=True,  # the engine's own ipc socket in the controller's 0700 directory
        )
        msg_id = header["msg_id"]
        if msg_type in HISTORY_TYPES:
            self._remember_sent(msg_id)
        request = PendingRequest(
            msg_id, "direct", frames, engine_uuid=uuid, private=private, submitted=header["date"]
        )
        if metadata and metadata.get("label") is not None:
            request.future.label = metadata["label"]
        self._direct_caller.call(request)
        return request

    def query(
        self, msg_type: str, content: dict[str, Any], timeout: float = HUB_TIMEOUT
    ) -> Message:
        """Ask the hub and wait for its answer; HubRefused when it answers an error."""
        request = self.send("query", msg_type, content)
        try:
            reply: Message = request.future.result(timeout)
        except builtins.TimeoutError:
            raise TimeoutError(
                f"the hub at {self._where} did not answer {msg_type} within {timeout} s: "
                "is the controller running?"
            ) from None
        if reply.content.get("status") == ReplyStatus.ERROR:
            raise HubRefused(
                f"hub refused {msg_type}: {reply.content.get('evalue', '')}", reply.content
            )
        return reply

    # -- output -------------------------------------------------------------------------

    def watch_output(self, msg_ids: list[str], callback: Any) -> None:
        """Have ``callback(msg_id, message)`` called (in the I/O thread) for the IOPub
        stream messages of these requests (ClientIO.watch_output)."""
        self._io.watch_output(msg_ids, callback)

    def unwatch_output(self, msg_ids: list[str]) -> None:
        self._io.unwatch_output(msg_ids)

    @functools.cached_property
    def live_data(self) -> LiveData:
        """Data running tasks publish (client.datapub), for ``ar.data``."""
        return LiveData(self)

    # -- results ------------------------------------------------------------------------

    def _remember_sent(self, msg_id: str) -> None:
        """Client.history, and the history of the view sending on this thread, if any."""
        self._history.append(msg_id)
        view_history = getattr(self.view_history, "current", None)
        if view_history is not None:
            view_history.append(msg_id)

    def _remember_sent_elements(self, msg_id: str, n: int) -> None:
        """The histories of an element request: its elements' ids (``ar.msg_ids``), as
        ipyparallel's histories list each task of a default map (made when first read:
        client.clientcompat.History)."""
        self._history.add_elements(msg_id, n)
        view_history = getattr(self.view_history, "current", None)
        if view_history is not None:
            view_history.add_elements(msg_id, n)

    def remember(self, ar: Any) -> Any:
        """Remember ``ar`` (weakly) under its msg_ids: rc.results, rc.metadata, rc.wait()."""
        self.handles.add(_request_ids(ar), ar)
        return ar

    def future_of(self, msg_id: str) -> Any:
        """The future of one of this client's requests (pending, or held by an
        AsyncResult); None for a broadcast, or a msg_id this client no longer knows."""
        request = self._io.request(msg_id)
        if request is not None:
            return None if request.replies is not None else request.future
        ar = self.handles.get(msg_id)
        if ar is None:
            return None
        return ar._futures[_request_ids(ar).index(msg_id)]

    # -- dependencies -------------------------------------------------------------------

    def dependency_metadata(self, md: dict[str, Any], after: Any, follow: Any) -> None:
        """Put after / follow in ``md`` with the outcomes this client already knows, and
        have direct calls among them reported to the scheduler when they finish."""
        outcomes: dict[str, list[Any]] = {}
        watch = {}
        strangers: list[str] = []
        for key, deps in (("after", after), ("follow", follow)):
            wire = to_wire(deps)
            if wire is None:
                continue
            md[key] = wire
            for m in wire["ids"]:
                fut = self.future_of(m)
                if fut is None:
                    if m not in self._history:
                        strangers.append(m)
                    continue  # not ours, or forgotten: the scheduler may still know it
                if fut.done():
                    outcomes[m] = outcome_of(fut)
                elif engine_of(fut) is not None:
                    watch[m] = fut  # a direct call: the scheduler will not see its reply
        if outcomes:
            md["outcomes"] = outcomes
        if watch:
            self._io.watch_outcomes(watch)
        if strangers:
            self._check_known(strangers)

    def _check_known(self, msg_ids: list[str]) -> None:
        """InvalidDependency, before sending, for dependencies on msg_ids that neither this
        client nor the hub ever saw (a task would wait for them forever)."""
        try:
            self.query(MsgType.RESULT_REQUEST, ResultRequest(msg_ids, statusonly=True).as_dict())
        except HubRefused as e:
            unknown = e.content.get("unknown")
            if unknown:
                raise remote_error(  # a RemoteError too, as ipyparallel's scheduler's
                    InvalidDependency,
                    f"dependency on unknown msg_ids {unknown}: no task of this or any client "
                    "has them (nothing was sent)",
                ) from None
            raise


def _request_ids(ar: Any) -> list[str]:
    """The ids of the requests behind a handle (a map of elements: not its elements')."""
    ids = getattr(ar, "request_ids", None)
    return ids if ids is not None else ar.msg_ids
