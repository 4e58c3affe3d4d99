"""Every message type of the zpar protocol and its content fields, defined once.

The dataclasses here are what the hub, the engines and the views build and read
(``Content.as_dict()`` is the map that travels); docs/protocol.md describes the same list.
A field made with ``optional(default)`` is left out of the map while it holds its default
(an ``evalue`` only errors carry, the error fields of an ok reply), so each dataclass packs
to the same map the processes sent before they used it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar


class MsgType(StrEnum):
    # hub: registration and connection (seed 002)
    REGISTRATION_REQUEST = "registration_request"
    REGISTRATION_REPLY = "registration_reply"
    CONNECTION_REQUEST = "connection_request"
    CONNECTION_REPLY = "connection_reply"
    # hub: notifications (PUB)
    REGISTRATION_NOTIFICATION = "registration_notification"
    UNREGISTRATION_NOTIFICATION = "unregistration_notification"
    # hub: client queries
    QUEUE_REQUEST = "queue_request"
    QUEUE_REPLY = "queue_reply"
    RESULT_REQUEST = "result_request"
    RESULT_REPLY = "result_reply"
    PURGE_REQUEST = "purge_request"
    PURGE_REPLY = "purge_reply"
    DB_REQUEST = "db_request"
    DB_REPLY = "db_reply"
    HUB_HISTORY_REQUEST = "hub_history_request"
    HUB_HISTORY_REPLY = "hub_history_reply"
    SHUTDOWN_HUB_REQUEST = "shutdown_hub_request"
    SHUTDOWN_HUB_REPLY = "shutdown_hub_reply"
    # client -> hub -> each engine's signal thread (the engine's main thread may be busy)
    SIGNAL_REQUEST = "signal_request"
    SIGNAL_REPLY = "signal_reply"
    # scheduler <-> hub
    SCHEDULER_READY = "scheduler_ready"
    TASK_DESTINATION = "task_destination"
    ENGINE_EVENT = "engine_event"
    # client -> task scheduler: direct tasks a load-balanced task waits on have finished
    TASK_OUTCOMES = "task_outcomes"
    # execution (MUX and task)
    APPLY_REQUEST = "apply_request"
    APPLY_REPLY = "apply_reply"
    EXECUTE_REQUEST = "execute_request"
    EXECUTE_REPLY = "execute_reply"
    # control
    CLEAR_REQUEST = "clear_request"
    CLEAR_REPLY = "clear_reply"
    ABORT_REQUEST = "abort_request"
    ABORT_REPLY = "abort_reply"
    SHUTDOWN_REQUEST = "shutdown_request"
    SHUTDOWN_REPLY = "shutdown_reply"
    # iopub
    STREAM = "stream"
    STATUS = "status"
    # typed batched calls (zpar.typed, seed 000): n calls of one registered function in one
    # message, arguments as one raw frame per type array, no pickle
    TYPED_REQUEST = "typed_request"
    TYPED_REPLY = "typed_reply"
    # rendezvous (issue 16): a communicator's members <-> the hub's rendezvous service,
    # on the registration ROUTER; the IMPI commands of seed 003 one for one (comm.hubservice)
    RENDEZVOUS_AUTH_REQUEST = "rendezvous_auth_request"
    RENDEZVOUS_AUTH_REPLY = "rendezvous_auth_reply"
    RENDEZVOUS_KEY = "rendezvous_key"
    RENDEZVOUS_IMPI_REQUEST = "rendezvous_impi_request"
    RENDEZVOUS_IMPI_REPLY = "rendezvous_impi_reply"
    RENDEZVOUS_COLL_REQUEST = "rendezvous_coll_request"
    RENDEZVOUS_COLL_REPLY = "rendezvous_coll_reply"
    RENDEZVOUS_DONE_REQUEST = "rendezvous_done_request"
    RENDEZVOUS_DONE_REPLY = "rendezvous_done_reply"
    RENDEZVOUS_FINI = "rendezvous_fini"
    RENDEZVOUS_ERROR = "rendezvous_error"
    # launchers (issue 18, deploy): a launcher tells the hub an engine it started has exited
    # (it waits on the process, so this comes in milliseconds, long before the heartbeat
    # misses); anyone asks where each engine runs and its MPI rank
    ENGINE_EXITED_REQUEST = "engine_exited_request"
    ENGINE_EXITED_REPLY = "engine_exited_reply"
    ENGINE_INFO_REQUEST = "engine_info_request"
    ENGINE_INFO_REPLY = "engine_info_reply"
    # faults (issue 13): the controller restarted its task scheduler (hub notification PUB)
    SCHEDULER_RESTARTED = "scheduler_restarted"
    # faults (issue 13): every process's refused messages, gathered by the hub (a report
    # from the scheduler on its monitor, from an engine's signal thread on the registration
    # ROUTER; never answered) and the controller's status (zpar.refusals, hub/status.py)
    REFUSED_REPORT = "refused_report"
    CONTROLLER_STATUS_REQUEST = "controller_status_request"
    CONTROLLER_STATUS_REPLY = "controller_status_reply"
    # prefetch (issue 12, sched): the task scheduler asks an engine's signal thread for
    # tasks it was given but has not started (engine/revoke.py), to place them elsewhere
    REVOKE_REQUEST = "revoke_request"
    REVOKE_REPLY = "revoke_reply"


class Status(StrEnum):
    OK = "ok"
    ERROR = "error"
    ABORTED = "aborted"
    #: a load-balanced task whose client disconnected before it ran (issue 13: backpressure)
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class Content:
    """Base of message contents: typed, validated, msgpack-able through as_dict()."""

    msg_type: ClassVar[MsgType]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            expected = _CHECKS.get(f.name)
            if expected is not None and value is not None and not isinstance(value, expected):
                raise TypeError(
                    f"{type(self).__name__}.{f.name} must be {expected}, got {type(value).__name__}"
                )

    def as_dict(self) -> dict[str, Any]:
        """The content map that travels: every field, but optional ones at their default."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("optional") and value == _default_of(f):
                continue
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Content:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def optional(default: Any = "") -> Any:
    """A field left out of the content map while it holds ``default`` (a factory is used
    for a list or dict default, as dataclasses require)."""
    if isinstance(default, list | dict):
        factory = type(default)
        return field(default_factory=factory, metadata={"optional": True})
    return field(default=default, metadata={"optional": True})


def _default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING  # a required field: never equal to a value


_CHECKS: dict[str, type | tuple[type, ...]] = {
    "uuid": str,
    "id": int,
    "status": str,
    "msg_ids": (list, str),
    "targets": list,
    "verbose": bool,
    "statusonly": bool,
    "code": str,
    "name": str,
    "text": str,
}


@dataclass(frozen=True, slots=True)
class RegistrationRequest(Content):
    msg_type = MsgType.REGISTRATION_REQUEST
    uuid: str  # zmq identity the engine uses on mux, control, task and heartbeat
    hostname: str = ""
    pid: int = 0
    id: int = -1  # the id it asks for: an engine restarting itself asks for its old one
    rank: int = -1  # its MPI rank when started by mpiexec (zpar.launchers.mpi), else -1


@dataclass(frozen=True, slots=True)
class RegistrationReply(Content):
    """Addresses are engine-side; 'heartbeat' is [ping (PUB), pong (ROUTER)]."""

    msg_type = MsgType.REGISTRATION_REPLY
    status: str
    id: int = -1
    mux: str = ""
    control: str = ""
    task: str = ""
    iopub: str = ""
    heartbeat: list = field(default_factory=list)
    hb_period: float = 0.0
    evalue: str = optional("")
    local: dict = field(default_factory=dict)  # ipc twins of the addresses, and "host"


@dataclass(frozen=True, slots=True)
class ConnectionRequest(Content):
    msg_type = MsgType.CONNECTION_REQUEST


@dataclass(frozen=True, slots=True)
class ConnectionReply(Content):
    """Client-side addresses and the engines registered now ({id: uuid})."""

    msg_type = MsgType.CONNECTION_REPLY
    status: str
    mux: str = ""
    control: str = ""
    task: str = ""
    task_scheme: str = ""
    iopub: str = ""
    notification: str = ""
    engines: dict = field(default_factory=dict)
    local: dict = field(default_factory=dict)  # ipc twins of the addresses, and "host"


@dataclass(frozen=True, slots=True)
class RegistrationNotification(Content):
    msg_type = MsgType.REGISTRATION_NOTIFICATION
    id: int
    uuid: str


@dataclass(frozen=True, slots=True)
class UnregistrationNotification(Content):
    msg_type = MsgType.UNREGISTRATION_NOTIFICATION
    id: int
    uuid: str
    reason: str = ""


# -- faults (issue 13) ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulerRestarted(Content):
    """The task scheduler died and a new one listens at the same addresses: each client
    resubmits its load-balanced requests that carry retries and fails the others."""

    msg_type = MsgType.SCHEDULER_RESTARTED
    reason: str  # e.g. "the task scheduler died (exit code -9)"


@dataclass(frozen=True, slots=True)
class RefusedReport(Content):
    """A process's refused messages so far, by reason (sent when they change, at most every
    REFUSAL_REPORT_INTERVAL). The hub names the sender itself (scheduler, engine N)."""

    msg_type = MsgType.REFUSED_REPORT
    refused: dict = field(default_factory=dict)  # {reason: count}


@dataclass(frozen=True, slots=True)
class ControllerStatusRequest(Content):
    msg_type = MsgType.CONTROLLER_STATUS_REQUEST


@dataclass(frozen=True, slots=True)
class ControllerStatusReply(Content):
    """``refused``: {process or part of the controller: {reason: count}} (docs/security.md
    names each); ``engines``: the ids registered now; ``pid``: the controller's."""

    msg_type = MsgType.CONTROLLER_STATUS_REPLY
    status: str
    pid: int = 0
    engines: list = field(default_factory=list)
    refused: dict = field(default_factory=dict)
    total_refused: int = 0


@dataclass(frozen=True, slots=True)
class QueueRequest(Content):
    msg_type = MsgType.QUEUE_REQUEST
    targets: list | None = None
    verbose: bool = False


@dataclass(frozen=True, slots=True)
class QueueReply(Content):
    """queues: {str(engine_id): {'queue': n|ids, 'completed': n|ids, 'tasks': n|ids}}."""

    msg_type = MsgType.QUEUE_REPLY
    status: str
    queues: dict = field(default_factory=dict)
    unassigned: Any = 0
    store: dict = field(default_factory=dict)  # url, ok, error, saved, unsaved, dropped
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class ResultRequest(Content):
    msg_type = MsgType.RESULT_REQUEST
    msg_ids: list = field(default_factory=list)
    statusonly: bool = False


@dataclass(frozen=True, slots=True)
class ResultReply(Content):
    msg_type = MsgType.RESULT_REPLY
    status: str
    pending: list = field(default_factory=list)
    completed: list = field(default_factory=list)
    results: dict = optional({})  # absent for statusonly (readers default it to {})
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class PurgeRequest(Content):
    msg_type = MsgType.PURGE_REQUEST
    msg_ids: list | str = field(default_factory=list)
    engine_ids: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class PurgeReply(Content):
    msg_type = MsgType.PURGE_REPLY
    status: str
    purged: int = 0
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class DbRequest(Content):
    """query: {record_key: value | {"$lt"|"$gt"|"$lte"|"$gte"|"$eq"|"$ne"|"$in"|"$nin": v}}."""

    msg_type = MsgType.DB_REQUEST
    query: dict = field(default_factory=dict)
    keys: list | None = None


@dataclass(frozen=True, slots=True)
class DbReply(Content):
    msg_type = MsgType.DB_REPLY
    status: str
    records: list = field(default_factory=list)
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class HubHistoryRequest(Content):
    msg_type = MsgType.HUB_HISTORY_REQUEST


@dataclass(frozen=True, slots=True)
class HubHistoryReply(Content):
    msg_type = MsgType.HUB_HISTORY_REPLY
    status: str
    history: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ShutdownHubRequest(Content):
    msg_type = MsgType.SHUTDOWN_HUB_REQUEST


@dataclass(frozen=True, slots=True)
class ShutdownHubReply(Content):
    msg_type = MsgType.SHUTDOWN_HUB_REPLY
    status: str


@dataclass(frozen=True, slots=True)
class SignalRequest(Content):
    """Client -> hub (targets: engine ids, None for all); hub -> engine (no targets)."""

    msg_type = MsgType.SIGNAL_REQUEST
    signum: int
    targets: list | None = optional(None)


@dataclass(frozen=True, slots=True)
class SignalReply(Content):
    """engines: the ids the signal was relayed to."""

    msg_type = MsgType.SIGNAL_REPLY
    status: str
    engines: list = field(default_factory=list)
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class SchedulerReady(Content):
    """Scheduler -> hub at start: where it listens (client side, engine side, events)."""

    msg_type = MsgType.SCHEDULER_READY
    client: str
    engine: str
    events: str
    scheme: str = ""
    local_client: str = ""
    local_engine: str = ""


@dataclass(frozen=True, slots=True)
class TaskDestination(Content):
    msg_type = MsgType.TASK_DESTINATION
    msg_id: str
    engine_uuid: str


@dataclass(frozen=True, slots=True)
class EngineEvent(Content):
    """Hub -> scheduler: an engine joined ('registered') or died ('unregistered')."""

    msg_type = MsgType.ENGINE_EVENT
    event: str
    id: int
    uuid: str


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


@dataclass(frozen=True, slots=True)
class ExecuteRequest(Content):
    msg_type = MsgType.EXECUTE_REQUEST
    code: str
    silent: bool = False


@dataclass(frozen=True, slots=True)
class ExecuteReply(Content):
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
class ClearRequest(Content):
    msg_type = MsgType.CLEAR_REQUEST


@dataclass(frozen=True, slots=True)
class ClearReply(Content):
    msg_type = MsgType.CLEAR_REPLY
    status: str


@dataclass(frozen=True, slots=True)
class AbortRequest(Content):
    msg_type = MsgType.ABORT_REQUEST
    msg_ids: list | None = None  # None aborts everything queued


@dataclass(frozen=True, slots=True)
class AbortReply(Content):
    msg_type = MsgType.ABORT_REPLY
    status: str


@dataclass(frozen=True, slots=True)
class ShutdownRequest(Content):
    msg_type = MsgType.SHUTDOWN_REQUEST
    restart: bool = False


@dataclass(frozen=True, slots=True)
class ShutdownReply(Content):
    msg_type = MsgType.SHUTDOWN_REPLY
    status: str


@dataclass(frozen=True, slots=True)
class Stream(Content):
    """IOPub: output of a task as it happens; parent_header is the request's header."""

    msg_type = MsgType.STREAM
    name: str  # 'stdout' or 'stderr'
    text: str


@dataclass(frozen=True, slots=True)
class StatusMessage(Content):
    msg_type = MsgType.STATUS
    execution_state: str  # 'busy' or 'idle'


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
    ename: str = ""
    evalue: str = optional("")
    traceback: list = field(default_factory=list)
    engine_info: dict = field(default_factory=dict)
    call_index: int = -1


# -- rendezvous (issue 16) ---------------------------------------------------------------------
# A member (zpar.comm.member) -> the hub (zpar.comm.hubservice); every one names its
# communicator. Answers come when the rendezvous can give them (IMPI: once every rank is in;
# COLL: once every member sent the label or moved past it; DONE: after the last DONE), or a
# rendezvous_error at any time (refused, a member missing at the timeout or vanished).


@dataclass(frozen=True, slots=True)
class RendezvousAuthRequest(Content):
    """IMPI's AUTH: the methods the member offers (bit 1 << which, comm.rendezvous);
    ``timeout``: the rendezvous' deadline in seconds, taken from its first member."""

    msg_type = MsgType.RENDEZVOUS_AUTH_REQUEST
    comm_id: str
    auth_mask: int
    timeout: float = 0.0


@dataclass(frozen=True, slots=True)
class RendezvousAuthReply(Content):
    """The method chosen and its challenge (KEY: answer with rendezvous_key)."""

    msg_type = MsgType.RENDEZVOUS_AUTH_REPLY
    comm_id: str
    which: int
    challenge: bytes = b""
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousKey(Content):
    """The proof: HMAC-SHA256 of the challenge under the cluster key. No answer: a
    rendezvous_error if it is wrong."""

    msg_type = MsgType.RENDEZVOUS_KEY
    comm_id: str
    proof: bytes


@dataclass(frozen=True, slots=True)
class RendezvousImpiRequest(Content):
    """IMPI: the member's rank, the size it expects, and the engine it runs on (whose
    death the hub reports to the others)."""

    msg_type = MsgType.RENDEZVOUS_IMPI_REQUEST
    comm_id: str
    rank: int
    size: int
    engine_uuid: str = ""
    who: str = ""


@dataclass(frozen=True, slots=True)
class RendezvousImpiReply(Content):
    msg_type = MsgType.RENDEZVOUS_IMPI_REPLY
    comm_id: str
    size: int
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousCollRequest(Content):
    """COLL: one labelled payload (labels ascend; zpar's own are zpar.constants.ZPAR_LABEL_*)."""

    msg_type = MsgType.RENDEZVOUS_COLL_REQUEST
    comm_id: str
    label: int
    payload: bytes = b""


@dataclass(frozen=True, slots=True)
class RendezvousCollReply(Content):
    """Bit r of client_mask set when rank r sent ``label``; ``payloads`` theirs, ascending
    rank (IMPI concatenates them; here each keeps its length)."""

    msg_type = MsgType.RENDEZVOUS_COLL_REPLY
    comm_id: str
    label: int
    client_mask: int
    payloads: list = field(default_factory=list)
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousDoneRequest(Content):
    msg_type = MsgType.RENDEZVOUS_DONE_REQUEST
    comm_id: str


@dataclass(frozen=True, slots=True)
class RendezvousDoneReply(Content):
    msg_type = MsgType.RENDEZVOUS_DONE_REPLY
    comm_id: str
    status: str = "ok"


@dataclass(frozen=True, slots=True)
class RendezvousFini(Content):
    """The member is finished with the communicator. No answer."""

    msg_type = MsgType.RENDEZVOUS_FINI
    comm_id: str


@dataclass(frozen=True, slots=True)
class RendezvousError(Content):
    """To a member: its request was refused, or the rendezvous failed (``missing``: the
    ranks to blame). Also published on the notification socket for clients."""

    msg_type = MsgType.RENDEZVOUS_ERROR
    comm_id: str
    evalue: str
    missing: list = field(default_factory=list)
    status: str = "error"


# -- launchers (issue 18, deploy) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineExitedRequest(Content):
    """From the launcher that started it: the engine process ``pid`` on ``hostname`` exited."""

    msg_type = MsgType.ENGINE_EXITED_REQUEST
    hostname: str
    pid: int
    exit_code: int = 0  # Popen.returncode: negative for a signal


@dataclass(frozen=True, slots=True)
class EngineExitedReply(Content):
    msg_type = MsgType.ENGINE_EXITED_REPLY
    status: str
    ids: list = field(default_factory=list)  # engines unregistered because of it


@dataclass(frozen=True, slots=True)
class EngineInfoRequest(Content):
    msg_type = MsgType.ENGINE_INFO_REQUEST


@dataclass(frozen=True, slots=True)
class EngineInfoReply(Content):
    """``engines``: {id: {"hostname", "pid", "rank"}} of every registered engine."""

    msg_type = MsgType.ENGINE_INFO_REPLY
    status: str
    engines: dict = field(default_factory=dict)


# -- prefetch (issue 12, sched): revoking an engine's unstarted tasks ---------------------


@dataclass(frozen=True, slots=True)
class RevokeRequest(Content):
    """Task scheduler -> engine revoke socket: give these tasks back if not started."""

    msg_type = MsgType.REVOKE_REQUEST
    msg_ids: list


@dataclass(frozen=True, slots=True)
class RevokeReply(Content):
    """``revoked``: the ids never started, which the engine will now drop unrun."""

    msg_type = MsgType.REVOKE_REPLY
    status: str
    revoked: list = field(default_factory=list)


#: msg_type -> content class, for validation and docs.
CONTENT: dict[MsgType, type[Content]] = {cls.msg_type: cls for cls in Content.__subclasses__()}

#: Replies a control/MUX/task request expects.
REPLY_TYPE: dict[MsgType, MsgType] = {
    MsgType.APPLY_REQUEST: MsgType.APPLY_REPLY,
    MsgType.EXECUTE_REQUEST: MsgType.EXECUTE_REPLY,
    MsgType.CLEAR_REQUEST: MsgType.CLEAR_REPLY,
    MsgType.ABORT_REQUEST: MsgType.ABORT_REPLY,
    MsgType.SHUTDOWN_REQUEST: MsgType.SHUTDOWN_REPLY,
    MsgType.QUEUE_REQUEST: MsgType.QUEUE_REPLY,
    MsgType.RESULT_REQUEST: MsgType.RESULT_REPLY,
    MsgType.PURGE_REQUEST: MsgType.PURGE_REPLY,
    MsgType.REGISTRATION_REQUEST: MsgType.REGISTRATION_REPLY,
    MsgType.CONNECTION_REQUEST: MsgType.CONNECTION_REPLY,
    MsgType.SHUTDOWN_HUB_REQUEST: MsgType.SHUTDOWN_HUB_REPLY,
    MsgType.TYPED_REQUEST: MsgType.TYPED_REPLY,
}

#: Requests the task scheduler accepts as tasks (anything else it fails as not a task).
TASK_REQUESTS = frozenset({MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST, MsgType.TYPED_REQUEST})

#: Monitor frames' first element: what the hub is being told about a relayed message.
MON_MUX_IN = b"mux_in"
MON_MUX_OUT = b"mux_out"
MON_CONTROL_IN = b"ctl_in"
MON_CONTROL_OUT = b"ctl_out"
#: The task scheduler's events travel in batches: [MON_TASK_BATCH, msgpack list of events],
#: at most one message per TASK_BATCH_INTERVAL seconds (or TASK_BATCH_MAX events), so neither
#: process pays a zmq message, and the hub not a loop turn, per event. Each event is a list
#: starting with its kind:
#:   [TASK_IN, client_ident, header (map), metadata (msgpack bytes)]
#:   [TASK_DEST, msg_id, engine_uuid]
#:   [TASK_OUT, engine_uuid, client_ident, parent msg_id, metadata (msgpack bytes),
#:    content (msgpack bytes), result buffers (list of bytes, if small) or None]
#:   [TASK_RETRY, msg_id, engine_uuid it failed on or died on, why]
MON_TASK_BATCH = b"task_batch"
#: [MON_TASK_RESULT, msg_id, result buffers…]: a task result too big to travel inline in
#: its TASK_OUT event (STORE_INLINE_LIMIT), for the store; sent without copying.
MON_TASK_RESULT = b"task_result"
TASK_IN = "in"
TASK_DEST = "dest"
TASK_OUT = "out"
TASK_RETRY = "retry"
TASK_BATCH_MAX = 1000
TASK_BATCH_INTERVAL = 0.01
MON_SCHEDULER = b"sched"
