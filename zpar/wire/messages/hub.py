"""Contents of the hub's messages: registration and connection, notifications, the
controller's status (issue 13), client queries, scheduler <-> hub, launchers (issue 18).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from zpar.wire.messages.base import Content, optional
from zpar.wire.messages.enums import MsgType


@dataclass(frozen=True, slots=True)
class RegistrationRequest(Content):
    msg_type = MsgType.REGISTRATION_REQUEST
    uuid: str  # zmq identity the engine uses on mux, control, task and heartbeat
    hostname: str = ""
    pid: int = 0
    id: int = -1  # the id it asks for: an engine restarting itself asks for its old one
    rank: int = -1  # its MPI rank when started by mpiexec (zpar.cluster.launchers.mpi), else -1


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
class EngineStats(Content):
    """An engine process's resources, for the dashboard (sent every ENGINE_STATS_INTERVAL
    by its signal thread; the hub names the sender from its identity, as for refusals)."""

    msg_type = MsgType.ENGINE_STATS
    cpu: float = 0.0  # percent of one core since the last report
    rss: int = 0  # resident bytes


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
    dashboard: str = ""  # the dashboard's link with its token ("" without one)


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
class ResubmitRequest(Content):
    """Run stored tasks again, under new msg_ids (ipyparallel's Client.resubmit)."""

    msg_type = MsgType.RESUBMIT_REQUEST
    msg_ids: list = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ResubmitReply(Content):
    msg_type = MsgType.RESUBMIT_REPLY
    status: str
    #: {old msg_id: new msg_id}
    resubmitted: dict = field(default_factory=dict)
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class BecomeDaskRequest(Content):
    """Start (once) a dask.distributed Scheduler in the controller (hub/daskhost.py)."""

    msg_type = MsgType.BECOME_DASK_REQUEST
    scheduler_args: dict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BecomeDaskReply(Content):
    msg_type = MsgType.BECOME_DASK_REPLY
    status: str
    address: str = ""
    ip: str = ""
    port: int = 0
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class StopDaskRequest(Content):
    msg_type = MsgType.STOP_DASK_REQUEST


@dataclass(frozen=True, slots=True)
class StopDaskReply(Content):
    msg_type = MsgType.STOP_DASK_REPLY
    status: str
    evalue: str = optional("")


@dataclass(frozen=True, slots=True)
class ShutdownHubRequest(Content):
    msg_type = MsgType.SHUTDOWN_HUB_REQUEST


@dataclass(frozen=True, slots=True)
class ShutdownHubReply(Content):
    msg_type = MsgType.SHUTDOWN_HUB_REPLY
    status: str


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
class EngineEvent(Content):
    """Hub -> scheduler: an engine joined ('registered') or died ('unregistered')."""

    msg_type = MsgType.ENGINE_EVENT
    event: str
    id: int
    uuid: str


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
