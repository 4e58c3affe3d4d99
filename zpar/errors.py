"""The one error tree of zpar: every exception a user or a process can see."""

from __future__ import annotations

import builtins
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
        super().__init__(f"{reason}: {detail}" if detail else reason)


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


class TaskAborted(ZparError):
    """A task was aborted before it ran."""


class TaskTimeout(TimeoutError):
    """A task's dependencies were not met within its timeout, or it ran past its time_limit."""


class ImpossibleDependency(ZparError):
    """A task depends on something that can never happen."""


class UnmetDependency(ZparError):
    """Raised on an engine where a task's depend/require does not hold: the scheduler
    moves the task to another engine (never seen by users unless none qualifies)."""


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

    @classmethod
    def from_content(cls, content: dict[str, Any]) -> ZparError:
        """Build the right error from an error reply's content."""
        ename = content.get("ename", "RemoteError")
        evalue = content.get("evalue", "")
        special = _BY_NAME.get(ename)
        if special is not None and content.get("zpar_error"):
            err = special(evalue)
            err.engine_info = content.get("engine_info", {})  # type: ignore[attr-defined]
            return err
        return cls(ename, evalue, content.get("traceback", ""), content.get("engine_info"))


class CompositeError(RemoteError):
    """Several engines raised; one RemoteError per failing engine, in submission order."""

    def __init__(self, message: str, errors: list[BaseException]) -> None:
        self.errors = errors
        super().__init__("CompositeError", message)

    def __str__(self) -> str:
        lines = [f"{len(self.errors)} engine(s) raised an exception:"]
        for err in self.errors:
            first = str(err).splitlines()[0] if str(err) else repr(err)
            lines.append(f"  {first}")
        lines.append("raise_exception(i) re-raises one of them with its remote traceback.")
        return "\n".join(lines)

    def __reduce__(self):
        return (type(self), (self.evalue, self.errors))

    def raise_exception(self, index: int = 0) -> None:
        raise self.errors[index]


# -- faults (issue 13) ---------------------------------------------------------------------


class SchedulerLost(EngineError):
    """The task scheduler died holding this load-balanced task, which carried no retries
    (the controller started a new scheduler: resubmit it, or give tasks ``retries``)."""


class ControllerLost(ZparError):
    """The controller this client was connected to is gone: every pending request fails
    with this error naming it, and later ones at once."""


_BY_NAME: dict[str, type[ZparError]] = {
    "EngineError": EngineError,
    "TaskAborted": TaskAborted,
    "TaskTimeout": TaskTimeout,
    "ImpossibleDependency": ImpossibleDependency,
}
