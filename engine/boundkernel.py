"""``bind_kernel()``: an engine answers Jupyter frontends too (``jupyter console --existing``).

As ipyparallel's ``IPEngine.bind_kernel``, the engine itself becomes the kernel: the
frontend's code runs in the engine's IPython shell, in its namespace (names pushed to the
engine are there), on its main thread between tasks, so a task and a frontend's cell never
run at once. Jupyter's messaging protocol (jupyter_client's Session, JSON, its own key) on
sockets bound here, described by a kernel connection file (mode 0600) in Jupyter's runtime
directory::

    frontend DEALER ──► shell   ROUTER   execute, complete, inspect, is_complete, kernel_info
    frontend DEALER ──► control ROUTER   kernel_info, shutdown (unbinds; the engine runs on)
    frontend SUB    ◄── iopub   PUB      status, execute_input, stream, execute_result,
                                         display_data, error of the frontend's requests
    frontend DEALER ──► stdin   ROUTER   bound, never asked: input() is not offered
    frontend REQ    ──► hb      ROUTER   echoed by a zmq proxy thread (no GIL needed)

shell and control are served by the engine's loop (engine.watched).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import platform
import threading
import uuid
from typing import Any

import zmq
from jupyter_client.connect import write_connection_file
from jupyter_client.session import Session
from jupyter_core.paths import jupyter_runtime_dir

from zpar.wire.listenguard import ListenerGuard
from zpar.wire.messages import MsgType

log = logging.getLogger(__name__)

#: Jupyter messaging protocol version the replies follow
PROTOCOL_VERSION = "5.3"


class BoundKernel:
    """One engine's Jupyter kernel face: its sockets, connection file and handlers."""

    def __init__(self, engine: Any, ip: str = "127.0.0.1", connection_file: str | None = None):
        self.engine = engine
        self.kernel = engine.kernel
        self.ip = ip
        self.session = Session(key=uuid.uuid4().hex.encode("ascii"), username="zpar-engine")
        self.ctx = zmq.Context()  # its own: the heartbeat proxy never lets a context end
        self.shell = self.ctx.socket(zmq.ROUTER)
        self.control = self.ctx.socket(zmq.ROUTER)
        self.iopub = self.ctx.socket(zmq.PUB)
        self.stdin = self.ctx.socket(zmq.ROUTER)
        self.hb = self.ctx.socket(zmq.ROUTER)
        # strangers on these tcp ports: a handshake deadline, a limit per peer address,
        # descriptor exhaustion survived (zpar.wire.listenguard), counted with the engine's
        self.guard = ListenerGuard(
            getattr(engine, "connections_refused", None), what=f"engine {engine.id}'s kernel"
        )
        for name, sock in (
            ("shell", self.shell),
            ("control", self.control),
            ("iopub", self.iopub),
            ("stdin", self.stdin),
            ("hb", self.hb),
        ):
            self.guard.watch(sock, f"kernel {name}")
        ports = {
            name: sock.bind_to_random_port(f"tcp://{ip}")
            for name, sock in (
                ("shell_port", self.shell),
                ("control_port", self.control),
                ("iopub_port", self.iopub),
                ("stdin_port", self.stdin),
                ("hb_port", self.hb),
            )
        }
        self.guard.start(self.ctx)
        self.heart = threading.Thread(
            target=self._echo, name=f"zpar-bound-kernel-hb-{engine.id}", daemon=True
        )
        self.heart.start()
        if connection_file is None:
            runtime = jupyter_runtime_dir()
            os.makedirs(runtime, mode=0o700, exist_ok=True)
            connection_file = os.path.join(runtime, f"kernel-{os.getpid()}.json")
        self.connection_file, _ = write_connection_file(
            connection_file,
            ip=ip,
            key=self.session.key,
            transport="tcp",
            signature_scheme="hmac-sha256",
            kernel_name="python3",
            **ports,
        )
        atexit.register(self._remove_file)
        engine.watch(self.shell, self._serve)
        engine.watch(self.control, self._serve)
        log.info(
            "engine %d: bound as a Jupyter kernel: jupyter console --existing %s",
            engine.id,
            self.connection_file,
        )

    def _echo(self) -> None:
        with contextlib.suppress(zmq.ZMQError):
            zmq.proxy(self.hb, self.hb)  # until the context ends (close)
        self.hb.close(linger=0)

    def _remove_file(self) -> None:
        with contextlib.suppress(OSError):
            os.remove(self.connection_file)

    # -- requests ---------------------------------------------------------------------------

    def _serve(self, sock: zmq.Socket) -> None:
        """Answer every request ready on ``sock`` (the engine's loop calls this)."""
        while sock.get(zmq.EVENTS) & zmq.POLLIN:
            try:
                idents, msg = self.session.recv(sock, zmq.NOBLOCK)
            except ValueError as e:  # a bad signature: not from our frontend
                log.warning("engine %d: bound kernel dropped a message: %s", self.engine.id, e)
                continue
            if msg is None:
                return
            self._handle(sock, idents, msg)

    def _handle(self, sock: zmq.Socket, idents: list[bytes], msg: dict[str, Any]) -> None:
        msg_type = msg["header"]["msg_type"]
        handler = getattr(self, "_" + msg_type, None)
        if handler is None or not msg_type.endswith("_request"):
            log.info("engine %d: bound kernel ignores %s", self.engine.id, msg_type)
            return
        self._status("busy", msg)
        try:
            content = handler(msg)
        except Exception as e:  # a frontend's odd request must not stop the engine
            log.exception("engine %d: bound kernel failed on %s", self.engine.id, msg_type)
            content = {"status": "error", "ename": type(e).__name__, "evalue": str(e)}
        reply_type = msg_type.replace("_request", "_reply")
        self.session.send(sock, reply_type, content, parent=msg, ident=idents)
        self._status("idle", msg)
        if msg_type == "shutdown_request":
            self.close()

    def _status(self, state: str, parent: dict[str, Any]) -> None:
        self.session.send(self.iopub, "status", {"execution_state": state}, parent=parent)

    def _publish(self, msg_type: MsgType, content: dict[str, Any], parent: dict[str, Any]) -> None:
        self.session.send(self.iopub, str(msg_type), content, parent=parent)

    def _kernel_info_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        from importlib.metadata import version

        import IPython

        return {
            "status": "ok",
            "protocol_version": PROTOCOL_VERSION,
            "implementation": "zpar",
            "implementation_version": version("zpar"),
            "language_info": {
                "name": "python",
                "version": platform.python_version(),
                "mimetype": "text/x-python",
                "file_extension": ".py",
                "pygments_lexer": "ipython3",
                "codemirror_mode": {"name": "ipython", "version": 3},
                "nbconvert_exporter": "python",
            },
            "banner": f"zpar engine {self.engine.id} (IPython {IPython.__version__}): "
            "its namespace, its main thread between tasks\n",
            "help_links": [],
        }

    def _execute_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        c = msg["content"]
        return self.kernel.frontend_execute(
            msg["header"], c.get("code", ""), bool(c.get("silent", False)), self._publish
        )

    def _complete_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        code, pos = msg["content"]["code"], msg["content"].get("cursor_pos")
        pos = len(code) if pos is None else pos
        from IPython.core.completer import provisionalcompleter, rectify_completions

        with provisionalcompleter():  # ipykernel's completions, jedi's and IPython's
            found = list(rectify_completions(code, self._shell().Completer.completions(code, pos)))
        return {
            "status": "ok",
            "matches": [c.text for c in found],
            "cursor_start": found[0].start if found else pos,
            "cursor_end": found[0].end if found else pos,
            "metadata": {},
        }

    def _inspect_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        from IPython.utils.tokenutil import token_at_cursor

        c = msg["content"]
        name = token_at_cursor(c["code"], c.get("cursor_pos", len(c["code"])))
        try:
            data = self._shell().object_inspect_mime(name, detail_level=c.get("detail_level", 0))
        except KeyError:
            return {"status": "ok", "found": False, "data": {}, "metadata": {}}
        return {"status": "ok", "found": True, "data": data, "metadata": {}}

    def _is_complete_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        status, indent = self._shell().input_transformer_manager.check_complete(
            msg["content"]["code"]
        )
        content: dict[str, Any] = {"status": status}
        if status == "incomplete":
            content["indent"] = " " * (indent or 0)
        return content

    def _history_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "history": []}  # the engine keeps no input history

    def _comm_info_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok", "comms": {}}

    def _interrupt_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"status": "ok"}  # served between tasks: nothing of the frontend's runs now

    def _shutdown_request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The frontend is done with the engine: unbind; the engine serves its cluster on."""
        return {"status": "ok", "restart": bool(msg["content"].get("restart", False))}

    def _shell(self) -> Any:
        shell = self.kernel._shell({})
        if shell is None:
            raise RuntimeError("a bound kernel needs IPython on the engine")
        return shell

    def close(self) -> None:
        """Stop answering frontends (the engine keeps its cluster's work)."""
        for sock in (self.shell, self.control):
            self.engine.unwatch(sock)
        self.guard.stop()  # before the sockets close (a monitor nobody reads blocks libzmq)
        for sock in (self.shell, self.control, self.iopub, self.stdin):
            sock.close(linger=1000)  # the shutdown_reply still goes out
        self.ctx.term()  # ends the heartbeat's proxy, which closes its socket
        self._remove_file()
        log.info("engine %d: unbound its Jupyter kernel", self.engine.id)


#: the bound kernel of this process's engine, once bind_kernel ran
_bound: BoundKernel | None = None


def bind_kernel(ip: str = "127.0.0.1", connection_file: str | None = None) -> str:
    """Make this engine a Jupyter kernel as well; returns its connection file. Call it on
    an engine (``%px zpar.bind_kernel()``, ``rc[:].apply_sync(zpar.bind_kernel)``); a second
    call returns the same file."""
    global _bound
    from .engine import this_engine

    engine = this_engine()
    if engine is None or engine.kernel is None:
        raise RuntimeError(
            "bind_kernel must be called on an engine: %px zpar.bind_kernel(), or "
            "rc[:].apply_sync(zpar.bind_kernel)"
        )
    if engine.kernel._shell({}) is None:
        raise RuntimeError(
            "bind_kernel needs IPython and ipykernel on the engine: pip install 'zpar[ipython]'"
        )
    if _bound is None or _bound.engine is not engine:
        _bound = BoundKernel(engine, ip=ip, connection_file=connection_file)
    return _bound.connection_file
