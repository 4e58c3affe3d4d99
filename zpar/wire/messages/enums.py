"""The names of the protocol: every message type (MsgType) and a reply's status (ReplyStatus).

A leaf module: the content dataclasses (zpar.wire.messages.*) and the wire import it.
"""

from __future__ import annotations

from enum import StrEnum


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
    RESUBMIT_REQUEST = "resubmit_request"
    RESUBMIT_REPLY = "resubmit_reply"
    # ipyparallel's become_dask / stop_dask: a dask.distributed scheduler in the controller
    BECOME_DASK_REQUEST = "become_dask_request"
    BECOME_DASK_REPLY = "become_dask_reply"
    STOP_DASK_REQUEST = "stop_dask_request"
    STOP_DASK_REPLY = "stop_dask_reply"
    SHUTDOWN_HUB_REQUEST = "shutdown_hub_request"
    SHUTDOWN_HUB_REPLY = "shutdown_hub_reply"
    # client -> hub -> each engine's signal thread (the engine's main thread may be busy)
    SIGNAL_REQUEST = "signal_request"
    SIGNAL_REPLY = "signal_reply"
    # scheduler <-> hub
    SCHEDULER_READY = "scheduler_ready"
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
    # iopub, from an engine's IPython shell (execute_request; engine/ipyshell.py): the
    # Jupyter messages of the same names, so the client shows them as ipyparallel does
    EXECUTE_INPUT = "execute_input"
    EXECUTE_RESULT = "execute_result"
    DISPLAY_DATA = "display_data"
    UPDATE_DISPLAY_DATA = "update_display_data"
    CLEAR_OUTPUT = "clear_output"
    ERROR = "error"
    # ipyparallel.datapub's publish_data on an engine (zpar.datapub), shown as ar.data
    DATA_MESSAGE = "data_message"
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
    # ROUTER; never answered) and the controller's status (zpar.wire.refusals, hub/status.py)
    REFUSED_REPORT = "refused_report"
    CONTROLLER_STATUS_REQUEST = "controller_status_request"
    CONTROLLER_STATUS_REPLY = "controller_status_reply"
    # prefetch (issue 12, sched): the task scheduler asks an engine's signal thread for
    # tasks it was given but has not started (engine/revoke.py), to place them elsewhere
    REVOKE_REQUEST = "revoke_request"
    REVOKE_REPLY = "revoke_reply"
    # dashboard (issue 29): an engine's CPU and memory, from its signal thread to the hub's
    # registration ROUTER every ENGINE_STATS_INTERVAL; never answered
    ENGINE_STATS = "engine_stats"


class ReplyStatus(StrEnum):
    OK = "ok"
    ERROR = "error"
    ABORTED = "aborted"
    #: a load-balanced task whose client disconnected before it ran (issue 13: backpressure)
    CANCELLED = "cancelled"
