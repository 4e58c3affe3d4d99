"""Contents of the messages that run code: apply / execute requests and replies, their
scheduling flags, IOPub output, typed batched calls (zpar.typed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from zpar.wire.messages.base import Content, optional
from zpar.wire.messages.enums import MsgType


@dataclass(frozen=True, slots=True)
class ApplyRequest(Content):
    """buffers: pickle of (f, args, kwargs) then its out-of-band buffers.

    Scheduling flags travel in the metadata (see SchedulingFlags).
    """

    msg_type = MsgType.APPLY_REQUEST


@dataclass(frozen=True, slots=True)
class SchedulingFlags:
    """Metadata of a request (all optional; absent means default): the views build it
    with as_metadata(), the task scheduler reads it (label and time_limit also go with
    direct requests; the engine enforces time_limit).

    after / follow: {"ids", "all", "success", "failure"} (zpar.dependency.Dependency);
    outcomes: {msg_id: [succeeded, engine_uuid]} of dependencies the client saw finish;
    timeout: seconds the task may wait for its dependencies and a free engine;
    retries: times an error or a dead engine sends it to another engine.
    """

    targets: list | None = None
    after: dict | None = None
    follow: dict | None = None
    outcomes: dict | None = None
    timeout: float | None = None
    retries: int = 0
    label: str | None = None  # the view's label for the call, kept in the task's record
    time_limit: float | None = None  # seconds the call may run (zpar.tasklimits)
    broadcast: list | None = None  # engine ids of a BroadcastView call (one request for all)

    def as_metadata(self) -> dict[str, Any]:
        """The request metadata: only the flags that are set (absent means default)."""
        return {
            f.name: value
            for f in dataclasses.fields(self)
            if (value := getattr(self, f.name)) is not None and value != 0
        }


@dataclass(frozen=True, slots=True)
class TaskOutcomes(Content):
    """{msg_id: [succeeded, engine_uuid]} of direct tasks that load-balanced ones wait on."""

    msg_type = MsgType.TASK_OUTCOMES
    outcomes: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ApplyReply(Content):
    """ok: buffers hold the pickled result; error: ename/evalue/traceback/engine_info."""

    msg_type = MsgType.APPLY_REPLY
    status: str
    ename: str = optional("")
    evalue: str = optional("")
    traceback: list = optional([])
    engine_info: dict = optional({})
    # a part of an element request's answer (zpar.elements): the positions [a, b) whose
    # values it carries, the errors of those that raised by position, the placement's last
    elements: list | None = optional(None)
    errors: dict = optional({})
    final: bool = optional(False)


@dataclass(frozen=True, slots=True)
class ExecuteRequest(Content):
    msg_type = MsgType.EXECUTE_REQUEST
    code: str
    silent: bool = False
    #: a failed (non-silent) run aborts the executes queued behind it (Jupyter's field)
    stop_on_error: bool = optional(True)


@dataclass(frozen=True, slots=True)
class ExecuteReplyContent(Content):
    """execute_result: repr of the last expression, if the code ended with one."""

    msg_type = MsgType.EXECUTE_REPLY
    status: str
    execution_count: int = 0
    execute_result: str | None = None
    ename: str = optional("")
    evalue: str = optional("")
    traceback: list = optional([])
    engine_info: dict = optional({})


@dataclass(frozen=True, slots=True)
class Stream(Content):
    """IOPub: output of a task as it happens; parent_header is the request's header."""

    msg_type = MsgType.STREAM
    name: str  # 'stdout' or 'stderr'
    text: str


@dataclass(frozen=True, slots=True)
class DataMessage(Content):
    """IOPub: a task's publish_data (zpar.datapub); ``data`` is the dict, pickled."""

    msg_type = MsgType.DATA_MESSAGE
    keys: list
    data: bytes


@dataclass(frozen=True, slots=True)
class StatusMessage(Content):
    msg_type = MsgType.STATUS
    execution_state: str  # 'busy' or 'idle'


@dataclass(frozen=True, slots=True)
class ExecuteInput(Content):
    """IOPub: the code an execute_request runs, before it runs (Jupyter's message)."""

    msg_type = MsgType.EXECUTE_INPUT
    code: str
    execution_count: int


@dataclass(frozen=True, slots=True)
class ExecuteResult(Content):
    """IOPub: the value of an execute_request's last expression, as a mime bundle (``data``
    maps mime types to str, binary types base64-encoded, as Jupyter's)."""

    msg_type = MsgType.EXECUTE_RESULT
    execution_count: int
    data: dict
    metadata: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DisplayData(Content):
    """IOPub: one ``display()`` (a figure, HTML...); the reply's metadata ``outputs`` keeps
    the same maps. ``transient``: {display_id} of an updatable display."""

    msg_type = MsgType.DISPLAY_DATA
    data: dict
    metadata: dict = field(default_factory=dict)
    transient: dict = optional({})


@dataclass(frozen=True, slots=True)
class UpdateDisplayData(Content):
    """IOPub: new data for the display ``transient["display_id"]`` shown earlier."""

    msg_type = MsgType.UPDATE_DISPLAY_DATA
    data: dict
    metadata: dict = field(default_factory=dict)
    transient: dict = optional({})


@dataclass(frozen=True, slots=True)
class ClearOutput(Content):
    """IOPub: ``IPython.display.clear_output(wait)``."""

    msg_type = MsgType.CLEAR_OUTPUT
    wait: bool = False


@dataclass(frozen=True, slots=True)
class ErrorMessage(Content):
    """IOPub: the error an execute_request raised (the reply carries it too)."""

    msg_type = MsgType.ERROR
    ename: str
    evalue: str
    traceback: list = field(default_factory=list)


# -- typed batched calls (zpar.typed) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypedRequest(Content):
    """n calls of one registered function; buffers: one frame per type whose count is not 0,
    in the order of ``counts`` (int32, int64, float32, float64, bool, string: AMUSE's).

    counts: values of each type in the whole message (per-call count x call_count).
    """

    msg_type = MsgType.TYPED_REQUEST
    call_id: int
    function_id: int
    call_count: int
    counts: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TypedReply(Content):
    """ok: buffers hold the out values as a request holds its in values; error: the
    error fields and ``call_index``, the call that raised (-1 when not known)."""

    msg_type = MsgType.TYPED_REPLY
    status: str
    call_id: int = 0
    function_id: int = 0
    call_count: int = 0
    counts: list = field(default_factory=list)
    ename: str = optional("")
    evalue: str = optional("")
    traceback: list = optional([])
    engine_info: dict = optional({})
    call_index: int = optional(-1)
