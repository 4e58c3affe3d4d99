"""Every message type of the zpar protocol and its content fields, defined once.

The dataclasses are what the hub, the engines and the views build and read
(``Content.as_dict()`` is the map that travels; ``Cls.content(...)`` builds the same map
without an instance, for the hot paths); docs/protocol.md describes the same list. Every
process builds what it sends from them (tests/core/test_messages_built_from_definitions.py
fails on a content built by hand; ``python -m tests.core.message_sites`` lists the sites).
They live by family, and everything is imported from here (``from zpar.wire.messages import X``):

- enums: MsgType (every message type's name) and ReplyStatus
- base: Content (field checks, ``as_dict``), ``optional`` fields, and ErrorContent (the
  content of any reply with status error or aborted)
- hub: registration, connection, notifications, controller status, client queries,
  scheduler <-> hub, launchers
- execution: apply / execute, SchedulingFlags, IOPub, typed batched calls
- control: signal, clear, abort, shutdown, revoke (prefetch)
- rendezvous: a communicator's members <-> the hub (issue 16)

A new message type joins MsgType and its family's module (a capability outside the core
registers its own instead: zpar.wire.msgtypes).
"""

from __future__ import annotations

from zpar.wire.messages.base import (
    Content,
    ErrorContent,
    optional,
)
from zpar.wire.messages.control import (
    AbortReply,
    AbortRequest,
    ClearReply,
    ClearRequest,
    RevokeReply,
    RevokeRequest,
    ShutdownReply,
    ShutdownRequest,
    SignalReply,
    SignalRequest,
    abort_ids,
    abort_positions,
)
from zpar.wire.messages.enums import (
    MsgType,
    ReplyStatus,
)
from zpar.wire.messages.execution import (
    ApplyReply,
    ApplyRequest,
    ClearOutput,
    DataMessage,
    DisplayData,
    ErrorMessage,
    ExecuteInput,
    ExecuteReplyContent,
    ExecuteRequest,
    ExecuteResult,
    SchedulingFlags,
    StatusMessage,
    Stream,
    TaskOutcomes,
    TypedReply,
    TypedRequest,
    UpdateDisplayData,
)
from zpar.wire.messages.hub import (
    BecomeDaskReply,
    BecomeDaskRequest,
    ConnectionReply,
    ConnectionRequest,
    ControllerStatusReply,
    ControllerStatusRequest,
    DbReply,
    DbRequest,
    EngineEvent,
    EngineExitedReply,
    EngineExitedRequest,
    EngineInfoReply,
    EngineInfoRequest,
    EngineStats,
    HubHistoryReply,
    HubHistoryRequest,
    PurgeReply,
    PurgeRequest,
    QueueReply,
    QueueRequest,
    RefusedReport,
    RegistrationNotification,
    RegistrationReply,
    RegistrationRequest,
    ResubmitReply,
    ResubmitRequest,
    ResultReply,
    ResultRequest,
    SchedulerReady,
    SchedulerRestarted,
    ShutdownHubReply,
    ShutdownHubRequest,
    StopDaskReply,
    StopDaskRequest,
    UnregistrationNotification,
)
from zpar.wire.messages.rendezvous import (
    RendezvousAuthReply,
    RendezvousAuthRequest,
    RendezvousCollReply,
    RendezvousCollRequest,
    RendezvousDoneReply,
    RendezvousDoneRequest,
    RendezvousError,
    RendezvousFini,
    RendezvousImpiReply,
    RendezvousImpiRequest,
    RendezvousKey,
)

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

# -- w2 (direct calls): the engines' monitor copies in batches ----------------------------
#: [MON_COPY_BATCH, msgpack array of copies]: what an engine's copy thread sends at one
#: turn (engine.monitorcopies), each copy the frames of a MON_MUX_IN / MON_MUX_OUT message
#: as bin ([kind, ident, ident, <ZPAR|MSG>, signature, envelope, small buffers…]); the hub
#: checks each as if it had come alone. A copy with a large frame travels alone.
MON_COPY_BATCH = b"copy_batch"

__all__ = [
    "abort_ids",
    "abort_positions",
    "AbortReply",
    "AbortRequest",
    "ApplyReply",
    "ApplyRequest",
    "CONTENT",
    "ClearReply",
    "ClearRequest",
    "ConnectionReply",
    "ConnectionRequest",
    "Content",
    "ErrorContent",
    "ControllerStatusReply",
    "ControllerStatusRequest",
    "DbReply",
    "DbRequest",
    "EngineEvent",
    "EngineExitedReply",
    "EngineExitedRequest",
    "EngineInfoReply",
    "EngineInfoRequest",
    "ExecuteReplyContent",
    "ExecuteRequest",
    "HubHistoryReply",
    "HubHistoryRequest",
    "MON_CONTROL_IN",
    "MON_CONTROL_OUT",
    "MON_COPY_BATCH",
    "MON_MUX_IN",
    "MON_MUX_OUT",
    "MON_SCHEDULER",
    "MON_TASK_BATCH",
    "MON_TASK_RESULT",
    "MsgType",
    "PurgeReply",
    "PurgeRequest",
    "QueueReply",
    "QueueRequest",
    "REPLY_TYPE",
    "RefusedReport",
    "EngineStats",
    "RegistrationNotification",
    "RegistrationReply",
    "RegistrationRequest",
    "RendezvousAuthReply",
    "RendezvousAuthRequest",
    "RendezvousCollReply",
    "RendezvousCollRequest",
    "RendezvousDoneReply",
    "RendezvousDoneRequest",
    "RendezvousError",
    "RendezvousFini",
    "RendezvousImpiReply",
    "RendezvousImpiRequest",
    "RendezvousKey",
    "ResultReply",
    "ResultRequest",
    "ResubmitReply",
    "ResubmitRequest",
    "BecomeDaskReply",
    "BecomeDaskRequest",
    "StopDaskReply",
    "StopDaskRequest",
    "RevokeReply",
    "RevokeRequest",
    "SchedulerReady",
    "SchedulerRestarted",
    "SchedulingFlags",
    "ShutdownHubReply",
    "ShutdownHubRequest",
    "ShutdownReply",
    "ShutdownRequest",
    "SignalReply",
    "SignalRequest",
    "ReplyStatus",
    "DataMessage",
    "StatusMessage",
    "Stream",
    "ClearOutput",
    "DisplayData",
    "ErrorMessage",
    "ExecuteInput",
    "ExecuteResult",
    "UpdateDisplayData",
    "TASK_BATCH_INTERVAL",
    "TASK_BATCH_MAX",
    "TASK_DEST",
    "TASK_IN",
    "TASK_OUT",
    "TASK_REQUESTS",
    "TASK_RETRY",
    "TaskOutcomes",
    "TypedReply",
    "TypedRequest",
    "UnregistrationNotification",
    "optional",
]
