"""The engine's message handlers, without sockets: a decoded Message in, a KernelReply out.

The engine loop (engine.py) only receives, calls ``Kernel.handle`` and sends what it
returns, so every rule here (namespace, abort, errors, metadata) is tested in memory.
"""

from __future__ import annotations

import importlib
import logging
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zpar.mapchunk  # noqa: F401 - loaded before the first map's chunk (1.2 ms)
import zpar.serialize
from zpar import namespace
from zpar.errors import SerializationError, TaskAborted, error_content
from zpar.mapchunk import map_chunk
from zpar.serialize import serialize_object, unpack_apply
from zpar.wire import Message
from zpar.wire.messages import (
    AbortReply,
    ApplyReply,
    ClearReply,
    ExecuteReplyContent,
    MsgType,
    ReplyStatus,
    ShutdownReply,
    StatusMessage,
    abort_ids,
)
from zpar.wire.msgtypes import reply_type_of

from .capture import Capture, Publish
from .datapub import DataPublisher
from .handlers import find_handler

log = logging.getLogger(__name__)

#: Requests that run user code: they can be aborted, are captured and flagged busy/idle.
EXECUTION = frozenset({MsgType.APPLY_REQUEST, MsgType.EXECUTE_REQUEST})

#: Exceptions reported to the client as the task's error. Anything else (the engine's own
#: stop signal) propagates and ends the engine.
USER_ERRORS = (Exception, SystemExit, KeyboardInterrupt)

#: Leading traceback frames from these files are the kernel's, not the user's: dropped.
_OWN_FILES = frozenset({__file__, namespace.__file__, zpar.serialize.__file__})

_BUSY = StatusMessage("busy").as_dict()
_IDLE = StatusMessage("idle").as_dict()
_APPLY_OK = ApplyReply(ReplyStatus.OK).as_dict()

#: the ok reply of each control request the kernel answers itself
_OK_REPLIES: dict[str, type[ClearReply | AbortReply | ShutdownReply]] = {
    cls.msg_type: cls for cls in (ClearReply, AbortReply, ShutdownReply)
}


@dataclass(slots=True)
class KernelReply:
    """What to send back on the socket the request came on."""

    msg_type: str  # a MsgType, or a capability's reply type (zpar.wire.msgtypes.reply_type_of)
    content: dict[str, Any]
    metadata: dict[str, Any]
    buffers: list[Any] = field(default_factory=list)
    #: abort every mux/task message queued now (abort with msg_ids None, shutdown)
    drain: bool = False
    #: abort the execute_requests queued now (a non-silent execute failed: ipykernel's
    #: stop_on_error, which ipyparallel's engines follow; applies still run)
    abort_executes: bool = False
    #: leave the main loop once this reply is sent (shutdown)
    stop: bool = False
    #: then start afresh in a new process image (shutdown with restart)
    restart: bool = False


def format_traceback(e: BaseException) -> list[str]:
    """Formatted lines of ``e``'s traceback, starting at the first frame of user code."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN_FILES:
        tb = tb.tb_next
    return traceback.format_exception(type(e), e, tb)


def _type_name(obj: Any) -> str:
    t = type(obj)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


class Kernel:
    """State of one engine's user session: namespace, aborted msg_ids, execution count."""

    def __init__(
        self,
        engine_id: int = -1,
        engine_uuid: str = "",
        publish: Publish | None = None,
        restartable: bool = False,
    ) -> None:
        self.engine_id = engine_id
        #: an engine that is its own process (``zpar engine``) can re-exec itself; one
        #: running inside another program cannot
        self.restartable = restartable
        self.engine_uuid = engine_uuid
        self.ns = namespace.new_namespace()
        namespace.set_current(self.ns)
        self.aborted: set[str] = set()
        self.execution_count = 0
        self._func = ""  # the name of the function the running apply_request calls
        self._publish = publish
        self._capture = Capture(publish)
        #: the IPython shell execute_request runs in (engine.ipyshell), made by the first
        #: execute_request; False when IPython is not importable here. apply never makes it.
        self._ipython: Any = None
        #: display outputs of the running request, once the shell exists (engine.ipyshell)
        self._outputs: Any = None
        self._datapub = DataPublisher(publish)
        self._handlers: dict[str, Callable[[Message], tuple[dict[str, Any], list[Any]]]] = {
            MsgType.APPLY_REQUEST: self._apply,
            MsgType.EXECUTE_REQUEST: self._execute,
        }
        #: message types already looked up among the installed handlers (engine.handlers)
        self._looked_up: set[str] = set()
        #: reply type of each request type (zpar.wire.msgtypes.reply_type_of), looked up once
        self._reply_types: dict[str, str | None] = {}
        self._control: dict[str, Callable[[Message], KernelReply]] = {
            MsgType.CLEAR_REQUEST: self._clear,
            MsgType.ABORT_REQUEST: self._abort,
            MsgType.SHUTDOWN_REQUEST: self._shutdown,
        }

    # -- dispatch ---------------------------------------------------------------------------

    def handle(self, msg: Message) -> KernelReply | None:
        """The reply to ``msg``; None for a message type an engine does not handle."""
        msg_type = msg.header["msg_type"]
        run = self._handlers.get(msg_type)
        if run is None and msg_type not in self._looked_up and msg_type not in self._control:
            run = self._add_handler(msg_type)
        if run is not None:
            if self.aborted and msg.header["msg_id"] in self.aborted:
                self.aborted.discard(msg.header["msg_id"])
                return self.aborted_reply(msg)
            return self._run(msg, msg_type, run)
        control = self._control.get(msg_type)
        return control(msg) if control is not None else None

    def runs(self, msg_type: str) -> bool:
        """Whether ``msg_type`` is work this kernel runs (apply, execute, a capability's
        request such as typed_request), the requests a time_limit applies to."""
        if msg_type in self._handlers:
            return True
        if msg_type in self._looked_up or msg_type in self._control:
            return False
        return self._add_handler(msg_type) is not None

    def _add_handler(self, msg_type: str) -> Any:
        """An installed capability's handler for msg_type (engine.handlers), kept for next time."""
        self._looked_up.add(msg_type)
        run = find_handler(msg_type, self)
        if run is not None:
            self._handlers[msg_type] = run
        return run

    def aborted_reply(self, msg: Message) -> KernelReply | None:
        """The reply telling a client its request was aborted before it ran."""
        msg_type = msg.header.get("msg_type")
        reply_type = reply_type_of(msg_type) if isinstance(msg_type, str) else None
        if reply_type is None:
            return None
        msg_id = msg.header.get("msg_id")
        content = error_content(
            TaskAborted,
            f"task {msg_id} was aborted before it ran",
            status=ReplyStatus.ABORTED,
            traceback=[],
            engine_info=self._engine_info(msg_type),
            zpar_error=True,
        )
        now = time.time()
        return KernelReply(reply_type, content, self._metadata(now, now, ReplyStatus.ABORTED))

    # -- execution --------------------------------------------------------------------------

    def _run(
        self,
        msg: Message,
        msg_type: str,
        run: Callable[[Message], tuple[dict[str, Any], list[Any]]],
    ) -> KernelReply:
        parent = msg.header
        publish = self._publish
        if publish is not None:
            publish(MsgType.STATUS, _BUSY, parent)
        capture = self._capture
        capture.start(parent)
        outputs = self._outputs
        if outputs is not None:  # display() reaches the shell's publisher, apply too
            outputs.begin(parent)
        self._func = ""
        self._datapub.start(parent)
        started = time.time()
        try:
            try:
                content, buffers = run(msg)
            except USER_ERRORS as e:
                content, buffers = self._error_content(e, msg_type), []
            completed = time.time()
        finally:
            stdout, stderr = capture.stop()
            data = self._datapub.stop()
        if publish is not None:
            publish(MsgType.STATUS, _IDLE, parent)
        md = self._metadata(started, completed, content["status"])
        md["stdout"] = stdout
        md["stderr"] = stderr
        outputs = self._outputs  # made by this request, if it was the first execute
        if outputs is not None:
            shown, result = outputs.take()
            if shown:
                md["outputs"] = shown
            if result is not None:
                md["execute_result"] = result
        if self._func:
            md["func"] = self._func
        if data is not None:  # publish_data's merge (zpar.datapub), pickled: ar.data
            md["data"] = data
        reply_type = self._reply_types.get(msg_type)
        if reply_type is None:
            reply_type = self._reply_types[msg_type] = reply_type_of(msg_type)
        assert reply_type is not None  # handlers exist only for requests (engine.handlers)
        reply = KernelReply(reply_type, content, md, buffers)
        if msg_type == MsgType.EXECUTE_REQUEST and content["status"] != ReplyStatus.OK:
            c = msg.content
            reply.abort_executes = not c.get("silent", False) and c.get("stop_on_error", True)
        return reply

    def _apply(self, msg: Message) -> tuple[dict[str, Any], list[Any]]:
        f, args, kwargs = unpack_apply(msg.buffers)
        # the function's name goes back in the reply's metadata ("func"): the hub keeps it
        # in the task's record, where the dashboard colours and searches by it
        named = args[0] if f is map_chunk and args else f  # a map's chunk: the mapped f
        self._func = getattr(named, "__name__", None) or type(named).__name__
        result = namespace.call(f, args, kwargs, self.ns)
        try:
            buffers = serialize_object(result)
        except Exception as e:
            raise SerializationError(
                f"cannot send the result back: {_type_name(result)} object is not "
                f"serializable ({type(e).__name__}: {e})"
            ) from None
        return dict(_APPLY_OK), buffers

    def _execute(self, msg: Message) -> tuple[dict[str, Any], list[Any]]:
        code = msg.content.get("code", "")
        silent = bool(msg.content.get("silent", False))
        shell = self._shell(msg.header)
        if shell is not None:
            return self._execute_ipython(shell, code, silent)
        if not silent:
            self.execution_count += 1
        n = self.execution_count
        result = namespace.execute(code, self.ns, f"<zpar-execute-{n}>")
        reply = ExecuteReplyContent(
            ReplyStatus.OK, execution_count=n, execute_result=None if silent else result
        )
        return reply.as_dict(), []

    def _shell(self, parent: dict[str, Any]) -> Any:
        """The IPython shell, made on the first call; None when IPython is not importable."""
        shell = self._ipython
        if shell is None:
            try:
                ipyshell = importlib.import_module("zpar.engine.ipyshell")  # imports IPython
            except ImportError as e:
                log.info(
                    "engine %d: IPython is not importable (%s): execute runs plain Python",
                    self.engine_id,
                    e,
                )
                self._ipython = False
                return None
            self._outputs = ipyshell.Outputs(self._publish)
            self._outputs.begin(parent)
            shell = ipyshell.make_shell(self.ns, self.execution_count + 1, self.restartable)
            shell.outputs = self._outputs
            self._ipython = shell
        return shell or None

    def close(self) -> None:
        """Let go of the IPython shell (engine.ipyshell.release_shell): a program that
        ran this kernel inside it gets its own shell back, not this kernel's."""
        shell, self._ipython = self._ipython, None
        if shell:
            importlib.import_module("zpar.engine.ipyshell").release_shell(shell)

    def _execute_ipython(
        self, shell: Any, code: str, silent: bool
    ) -> tuple[dict[str, Any], list[Any]]:
        count, error = shell.run(code, silent, self._outputs)
        self.execution_count = count
        if error is not None:
            return self._shell_error(shell, error, count), []
        result = self._outputs.execute_result
        text = result["data"].get("text/plain") if result is not None else None
        reply = ExecuteReplyContent(ReplyStatus.OK, execution_count=count, execute_result=text)
        return reply.as_dict(), []

    def _shell_error(self, shell: Any, error: BaseException, count: int) -> dict[str, Any]:
        """The error content of a cell the shell ran, with IPython's traceback."""
        if not isinstance(error, USER_ERRORS):  # the engine's own stop signal
            raise error
        _, evalue, tb = shell.last_error or (None, str(error), format_traceback(error))
        return error_content(
            error,
            evalue,
            traceback=tb,
            engine_info=self._engine_info(str(MsgType.EXECUTE_REQUEST)),
            execution_count=count,
        )

    def frontend_execute(
        self, header: dict[str, Any], code: str, silent: bool, publish: Publish
    ) -> dict[str, Any]:
        """An execute_request of a Jupyter frontend bound to this engine (engine.boundkernel):
        the engine's shell and namespace, its output published to that frontend alone.
        Called between tasks, on the main thread, as a task is."""
        shell = self._shell(header)
        if shell is None:
            raise RuntimeError("a bound kernel needs IPython on the engine")
        outputs = type(self._outputs)(publish)
        outputs.begin(header)
        capture = Capture(publish)
        capture.start(header)
        try:
            count, error = shell.run(code, silent, outputs)
        finally:
            capture.stop()
            shell.outputs = self._outputs
        self.execution_count = count
        if error is not None:
            return self._shell_error(shell, error, count)
        return {"status": "ok", "execution_count": count, "payload": [], "user_expressions": {}}

    def _error_content(self, e: BaseException, msg_type: str) -> dict[str, Any]:
        content = error_content(
            e, traceback=format_traceback(e), engine_info=self._engine_info(msg_type)
        )
        if msg_type == MsgType.EXECUTE_REQUEST:
            content["execution_count"] = self.execution_count
        return content

    # -- control ----------------------------------------------------------------------------

    def _clear(self, msg: Message) -> KernelReply:
        if self._ipython:  # as ipyparallel's clear_request: the shell's reset (Out, _, In)
            self._ipython.reset(new_session=False)
            for name, value in namespace.new_namespace().items():
                self.ns.setdefault(name, value)
        else:
            namespace.reset_namespace(self.ns)
        return self._ok(MsgType.CLEAR_REPLY)

    def _abort(self, msg: Message) -> KernelReply:
        try:
            msg_ids = abort_ids(msg.content)
        except ValueError as e:  # signed, yet malformed: answered with the reason, not fatal
            log.warning("engine %d: abort %s refused: %s", self.engine_id, msg.header["msg_id"], e)
            now = time.time()
            content = self._error_content(e, MsgType.ABORT_REQUEST)
            return KernelReply(
                MsgType.ABORT_REPLY, content, self._metadata(now, now, ReplyStatus.ERROR)
            )
        if msg_ids is None:
            reply = self._ok(MsgType.ABORT_REPLY)
            reply.drain = True
            return reply
        self.aborted.update(msg_ids)
        return self._ok(MsgType.ABORT_REPLY)

    def _shutdown(self, msg: Message) -> KernelReply:
        restart = bool(msg.content.get("restart", False))
        if restart and not self.restartable:
            now = time.time()
            refusal = ValueError(
                f"engine {self.engine_id} cannot restart: it runs inside another program, "
                "not as its own process (zpar engine); shut it down without restart"
            )
            content = self._error_content(refusal, MsgType.SHUTDOWN_REQUEST)
            return KernelReply(
                MsgType.SHUTDOWN_REPLY, content, self._metadata(now, now, ReplyStatus.ERROR)
            )
        reply = self._ok(MsgType.SHUTDOWN_REPLY)
        reply.drain = reply.stop = True
        reply.restart = restart
        return reply

    # -- helpers ----------------------------------------------------------------------------

    def _ok(self, reply_type: MsgType) -> KernelReply:
        now = time.time()
        content = _OK_REPLIES[reply_type](ReplyStatus.OK).as_dict()
        return KernelReply(reply_type, content, self._metadata(now, now, ReplyStatus.OK))

    def _engine_info(self, method: Any) -> dict[str, Any]:
        return {"engine_id": self.engine_id, "engine_uuid": self.engine_uuid, "method": method}

    def _metadata(self, started: float, completed: float, status: str) -> dict[str, Any]:
        return {
            "engine_id": self.engine_id,
            "engine_uuid": self.engine_uuid,
            "started": started,
            "completed": completed,
            "status": status,
            "stdout": "",
            "stderr": "",
        }
