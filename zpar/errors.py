"""The one error tree of zpar: every exception a user or a process can see."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any


class ZparError(Exception):
    """Root of every zpar error."""


class ProtocolError(ZparError):
    """A message that does not follow the wire protocol."""


class LocalProtocolError(ProtocolError):
    """We tried to build or send something the protocol does not allow (our bug or misuse)."""


class RemoteProtocolError(ProtocolError):
    """A peer sent something we refuse: malformed, badly signed, replayed.

    ``reason`` is a short stable token used for counting refusals (see Session.refused).
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail
        #: the refused message's header when it was sound (a bound on its other parts was
        #: broken), so a receiver that answers queries can say which field (hub.hub)
        self.header: dict[str, Any] | None = None
        super().__init__(f"{reason}: {detail}" if detail else reason)


class SegmentGone(RemoteProtocolError):
    """A shared-memory segment a message names cannot be read: its owner died or let go
    of it (zpar.sharedmem)."""

    def __init__(self, detail: str) -> None:
        super().__init__("shm-gone", detail)


class SerializationError(ZparError, TypeError):
    """An object cannot be serialized; raised at the caller before anything is sent."""


class ConnectionFileError(ZparError):
    """A connection file is missing, unreadable or incomplete."""


class WrongKey(ConnectionFileError):
    """The controller refused our signature, or the Curve handshake: the keys of the
    connection file we hold are not the running cluster's (an old file, another cluster's)."""


class TimeoutError(ZparError, builtins.TimeoutError):  # noqa: A001 - the name users expect
    """Waiting for a result, an engine or the hub took longer than allowed."""


class NoEnginesRegistered(ZparError):
    """An operation needs engines and the cluster has none."""


class HubRefused(ZparError, RuntimeError):
    """The hub answered a query with an error; ``content`` is its reply (evalue, and for
    result_request the ``unknown`` msg_ids)."""

    def __init__(self, message: str, content: dict) -> None:
        super().__init__(message)
        self.content = content


class EngineError(ZparError):
    """An engine died or became unreachable while it held the work."""


class NoSuchEngine(EngineError, IndexError):
    """A target names an engine id that is not registered (an IndexError, as ipyparallel's
    ``rc[id]``)."""


class TaskAborted(ZparError):
    """A task was aborted before it ran."""


class TaskCancelled(TaskAborted):
    """A load-balanced task was cancelled before it ran because its client disconnected
    (the store records it as ``cancelled``; issue 13, backpressure)."""


class SubmissionRefused(ZparError):
    """The task scheduler refused a load-balanced task because its client already had as
    many tasks (or bytes) unfinished there as it holds for one client: a client that
    ignored its submission window (client/window.py; issue 13, credits)."""


class TaskTimeout(TimeoutError):
    """A task's dependencies were not met within its timeout, or it ran past its time_limit."""


class UnmetDependency(ZparError):
    """Raised on an engine where a task's depend/require does not hold: the scheduler
    moves the task to another engine (never seen by users unless none qualifies)."""


class ImpossibleDependency(UnmetDependency):
    """A task depends on something that can never happen (as in ipyparallel, a kind of
    UnmetDependency: ``except UnmetDependency`` catches both)."""


class DependencyTimeout(ImpossibleDependency):
    """ipyparallel's name for a dependency that timed out; zpar raises TaskTimeout, which
    ``except DependencyTimeout`` does not catch (kept for code that names it)."""


class InvalidDependency(ImpossibleDependency):
    """A dependency that is not msg_ids, AsyncResults or a Dependency (ipyparallel's name)."""


#: ipyparallel's name for the error a task raises to refuse an engine: zpar's
#: UnmetDependency, which makes the task scheduler try another engine.
TaskRejectError = UnmetDependency


class RemoteError(ZparError):
    """An exception raised by user code on an engine, with the remote traceback."""

    def __init__(
        self,
        ename: str,
        evalue: str,
        traceback: str | list[str] = "",
        engine_info: dict[str, Any] | None = None,
    ) -> None:
        self.ename = ename
        self.evalue = evalue
        self.traceback = "".join(traceback) if isinstance(traceback, list) else traceback
        self.engine_info = engine_info or {}
        super().__init__(ename, evalue)

    @property
    def engine_id(self) -> int | None:
        return self.engine_info.get("engine_id")

    def __str__(self) -> str:
        where = f"[engine {self.engine_id}] " if self.engine_id is not None else ""
        head = f"{where}{self.ename}: {self.evalue}"
        if self.traceback:
            return f"{head}\n\nRemote traceback:\n{self.traceback.rstrip()}"
        return head

    def __reduce__(self):  # keep picklable through the custom __init__
        return (type(self), (self.ename, self.evalue, self.traceback, self.engine_info))

    @staticmethod
    def _get_engine_str(engine_info: dict[str, Any] | None) -> str:
        if not engine_info:
            return "[Engine Exception]"
        method = str(engine_info.get("method", "apply")).partition("_")[0]  # apply_request
        return f"[{engine_info.get('engine_id', '?')}:{method}]"

    def render_traceback(self) -> list[str]:
        """The remote traceback as a list of lines, headed by ``[engine_id:method]``; IPython
        shows this instead of the local traceback (``_render_traceback_``)."""
        return [self._get_engine_str(self.engine_info)] + (
            self.traceback or "No traceback available"
        ).splitlines()

    def _render_traceback_(self) -> list[str]:
        return self.render_traceback()

    def print_traceback(self, excid: int | None = None) -> None:
        print("\n".join(self.render_traceback()))

    def __repr__(self) -> str:
        eid = self.engine_info.get("engine_id", " ")
        return f"<{type(self).__name__}[{eid}]:{self.ename}({self.evalue})>"

    @classmethod
    def from_content(cls, content: dict[str, Any]) -> ZparError:
        """Build the right error from an error reply's content."""
        ename = content.get("ename", "RemoteError")
        evalue = content.get("evalue", "")
        special = _BY_NAME.get(ename)
        if special is not None and content.get("zpar_error"):
            return remote_error(special, evalue, content.get("engine_info") or {})
        info = dict(content.get("engine_info") or {})
        if isinstance(info.get("method"), str):  # ipyparallel's: "apply", "execute"
            info["method"] = info["method"].partition("_")[0]
        return cls(ename, evalue, content.get("traceback", ""), info)


class CompositeError(RemoteError):
    """Several engines raised; one RemoteError per failing engine, in submission order.

    ``errors`` holds the exceptions; ``elist`` the same as ipyparallel's
    ``(ename, evalue, traceback, engine_info)`` tuples. ``str`` and ``render_traceback``
    show at most ``tb_limit`` of them (a class attribute, 4, as in ipyparallel).
    """

    tb_limit = 4

    def __init__(self, message: str, errors: Sequence[BaseException]) -> None:
        self.errors = list(errors)
        self.msg = message
        super().__init__("CompositeError", message)
        self.args = tuple(e[0] for e in self.elist)

    @property
    def elist(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        return [_as_tuple(e) for e in self.errors]

    def __str__(self) -> str:
        lines = [str(self.msg)]
        for en, ev, _, ei in self.elist[: self.tb_limit]:
            lines.append(f"{self._get_engine_str(ei)} {en}: {ev}")
        if len(self.errors) > self.tb_limit:
            lines.append(f".... {len(self.errors) - self.tb_limit} more exceptions ...")
        lines.append("raise_exception(i) re-raises one of them with its remote traceback.")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"CompositeError({len(self.errors)})"

    def __reduce__(self):
        return (type(self), (self.msg, self.errors))

    def render_traceback(self, excid: int | None = None) -> list[str]:
        """One (``excid``) or the first ``tb_limit`` remote tracebacks as lines."""
        elist = self.elist
        lines: list[str] = []
        if excid is None:
            for _, _, etb, ei in elist[: self.tb_limit]:
                lines.append(self._get_engine_str(ei) + ":")
                lines.extend((etb or "No traceback available").splitlines())
                lines.append("")
            if len(elist) > self.tb_limit:
                lines.append(f"... {len(elist) - self.tb_limit} more exceptions ...")
            return lines
        try:
            _, _, etb, ei = elist[excid]
        except IndexError:
            raise IndexError(f"an exception with index {excid} does not exist") from None
        lines.append(self._get_engine_str(ei) + ":")
        lines.extend((etb or "No traceback available").splitlines())
        return lines

    def print_traceback(self, excid: int | None = None) -> None:
        print("\n".join(self.render_traceback(excid)))

    def raise_exception(self, excid: int = 0) -> None:
        """Re-raise one of the errors (with its remote traceback)."""
        try:
            err = self.errors[excid]
        except IndexError:
            raise IndexError(f"an exception with index {excid} does not exist") from None
        if isinstance(err, tuple):
            raise RemoteError(*err)
        raise err


def _as_tuple(e: Any) -> tuple[str, str, str, dict[str, Any]]:
    if isinstance(e, tuple):
        return e
    return (
        getattr(e, "ename", type(e).__name__),
        getattr(e, "evalue", str(e)),
        getattr(e, "traceback", "") or "",
        getattr(e, "engine_info", {}) or {},
    )


class AlreadyDisplayedError(RemoteError):
    """Raised by %%px --stream when the engines' errors were already shown as they
    happened: IPython then prints only "N errors"."""

    def __init__(self, original_error: CompositeError) -> None:
        self.original_error = original_error
        self.n = len(original_error.elist)
        super().__init__("AlreadyDisplayedError", f"{self.n} errors")

    def __repr__(self) -> str:
        return f"<{type(self).__name__}({self.n} errors)>"

    def __str__(self) -> str:
        return f"{self.n} errors"

    def __reduce__(self):
        return (type(self), (self.original_error,))

    def render_traceback(self) -> list[str]:
        return [str(self)]


# -- faults (issue 13) ---------------------------------------------------------------------


class SchedulerLost(EngineError):
    """The task scheduler died holding this load-balanced task, which carried no retries
    (the controller started a new scheduler: resubmit it, or give tasks ``retries``)."""


class ControllerLost(ZparError):
    """The controller this client was connected to is gone: every pending request fails
    with this error naming it, and later ones at once."""


# -- processes: starting, stopping, owning a cluster ---------------------------------------


class LaunchError(ZparError):
    """A controller or engine could not be started (or stopped)."""


class ControllerError(ZparError):
    """The controller could not start or lost a part it cannot run without."""


class ClusterBusy(ZparError):
    """Another live controller owns this profile and cluster id."""


class ExposureRefused(ZparError, ValueError):
    """An ``--insecure`` controller asked to listen beyond loopback without ``--force``."""


class RegistrationRefused(ZparError):
    """The hub answered an engine's registration request with an error."""


class StoreError(ZparError):
    """The task store cannot be opened or used; the message says which file/URL and why."""


class UnwritableRecords(StoreError):
    """The store refused the data of a batch (a value it cannot encode or hold: nesting
    past the store's bound, a string longer than its column, an int past BIGINT, NUL in
    PostgreSQL text), not a store that is down: the hub's writer isolates the record(s) at
    fault and writes the others (hub/recorder.py)."""


# -- client ----------------------------------------------------------------------------------


class NotReadyError(ZparError, RuntimeError, ValueError):
    """A question only a finished result can answer (``successful()``) was asked early."""


class TaskLost(ZparError):
    """A stored task ended without a result: the controller stopped while it ran."""


class ResultNotStored(ZparError):
    """The hub did not keep this task's result (larger than its store limit)."""


# -- error replies ---------------------------------------------------------------------------

#: zpar's own errors a client rebuilds as themselves (not as RemoteError) when an error
#: reply says ``zpar_error``: named by their classes, so a rename cannot go out of step.
_BY_NAME: dict[str, type[ZparError]] = {
    cls.__name__: cls
    for cls in (
        EngineError,
        TaskAborted,
        TaskCancelled,
        TaskTimeout,
        ImpossibleDependency,
        InvalidDependency,
    )
}

#: cls -> its remote flavour (remote_error), made once per class
_FLAVOURS: dict[type[ZparError], type[RemoteError]] = {}


def remote_error(
    cls: type[ZparError], evalue: str, engine_info: dict[str, Any] | None = None
) -> RemoteError:
    """zpar's own error ``cls`` as a task's outcome, the way ipyparallel raises it: a
    RemoteError whose ``ename`` is the class's name (ipyparallel's tests check
    ``e.ename == 'EngineError'``) that is also an instance of ``cls`` (``except
    EngineError`` and ``pytest.raises(TaskAborted)`` work too). Its class is
    ``Remote<Name>``, a module attribute, so it pickles."""
    flavour = _FLAVOURS.get(cls)
    if flavour is None:
        name = f"Remote{cls.__name__}"
        doc = f"{cls.__name__} as a task's outcome: also a RemoteError (ename {cls.__name__!r})."
        flavour = type(name, (cls, RemoteError), {"__module__": __name__, "__doc__": doc})
        flavour.__qualname__ = name
        _FLAVOURS[cls] = globals()[name] = flavour
    return flavour(cls.__name__, evalue, "", dict(engine_info or {}))


#: ErrorContent.content and ReplyStatus.ERROR, imported on first use (the wire imports
#: this module)
_error_content_of: tuple[Callable[..., dict[str, Any]], str] | None = None


def _error_content_builder() -> tuple[Callable[..., dict[str, Any]], str]:
    global _error_content_of
    from zpar.wire.messages import ErrorContent, ReplyStatus

    _error_content_of = ErrorContent.content, ReplyStatus.ERROR
    return _error_content_of


def error_content(
    error: BaseException | type[BaseException],
    evalue: str | None = None,
    *,
    status: str | None = None,
    traceback: list[str] | None = None,
    engine_info: dict[str, Any] | None = None,
    zpar_error: bool = False,
    **fields: Any,
) -> dict[str, Any]:
    """The content of an error reply: the one place every process builds one.

    ``error``: the exception, or its class when nothing was raised (``ename`` is always
    the class's name, never a string typed twice); ``evalue`` defaults to ``str(error)``.
    ``traceback`` and ``engine_info`` are added when given (execution replies carry them,
    the hub's query replies do not); ``zpar_error`` marks an error zpar itself decided
    (the client rebuilds it as its class, the task scheduler does not retry it);
    ``fields``: the other fields of zpar.wire.messages.ErrorContent (``unknown``,
    ``execution_count``, ``elements``…); a name it does not define is a TypeError.
    ``status`` defaults to ReplyStatus.ERROR (imported here: the wire imports this module).
    """
    build, error_status = _error_content_of or _error_content_builder()
    cls = error if isinstance(error, type) else type(error)
    if evalue is None:
        evalue = "" if isinstance(error, type) else str(error)
    return build(
        error_status if status is None else status,
        cls.__name__,
        evalue,
        traceback,
        engine_info,
        zpar_error,
        **fields,
    )


class InProcessUnsupported(ZparError, NotImplementedError):
    """Asked of zpar.testing's in-process cluster something only engine processes do
    (time limits, signals, restarts): run that test on a real cluster."""
