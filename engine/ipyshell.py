"""An engine's IPython shell: execute_request runs as an IPython kernel runs it.

ipyparallel's engines are IPython kernels, so ``%px`` cells hold magics, ``!`` escapes,
``x?`` and ``%matplotlib inline``. This module gives a zpar engine the same: an
InteractiveShell over the engine's namespace whose display hook (the value of the last
expression) and display publisher (``display()``, figures) hand Jupyter's mime bundles to an
``Outputs`` sink. The sink keeps them for the reply's metadata (``outputs``,
``execute_result``: a result never depends on IOPub timing, as stdout does not) and publishes
``execute_input``, ``execute_result``, ``display_data`` and ``error`` on IOPub.

Imported on the first execute_request only (importing IPython and building the shell costs
about half a second); apply_request never loads it (engine/kernel.py).
"""

from __future__ import annotations

import atexit
import base64
import dataclasses
import logging
import shutil
import sys
from collections.abc import Callable
from typing import Any

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets import Type
from traitlets.config import Config

from zpar.constants import MAX_DISPLAY_OUTPUT
from zpar.wire.messages import (
    ClearOutput,
    DisplayData,
    ErrorMessage,
    ExecuteInput,
    ExecuteResult,
    MsgType,
    UpdateDisplayData,
)

log = logging.getLogger(__name__)

#: (msg_type, content, parent header) -> None (engine.capture.Publish)
Publish = Callable[[MsgType, dict[str, Any], dict[str, Any]], None]

#: mime types whose data a formatter may return as bytes: sent base64-encoded, as
#: ipykernel's encode_images does (a notebook stores them so)
_BINARY = ("image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf")

TRUNCATED_NOTE = "[display output left out of the reply: over {limit} characters this task]"


def clean(obj: Any) -> Any:
    """``obj`` as msgpack (and JSON) can carry it: bytes of binary mime types base64, other
    bytes decoded, tuples/sets as lists, unknown objects as their repr."""
    if isinstance(obj, str | int | float | bool) or obj is None:
        return obj
    if isinstance(obj, bytes):
        return obj.decode("utf-8", "replace")
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple | set | frozenset):
        return [clean(v) for v in obj]
    return repr(obj)


def mime_bundle(data: dict[str, Any]) -> dict[str, Any]:
    """A formatter's mime bundle as Jupyter sends it (binary data base64-encoded)."""
    out = {}
    for mime, value in data.items():
        if isinstance(value, bytes) and (mime in _BINARY or mime.startswith("image/")):
            value = base64.b64encode(value).decode("ascii")
        out[str(mime)] = clean(value)
    return out


def _size(data: dict[str, Any]) -> int:
    return sum(len(v) if isinstance(v, str) else len(repr(v)) for v in data.values())


class Outputs:
    """The display outputs of one request: kept for its reply, published on IOPub."""

    def __init__(self, publish: Publish | None, limit: int = MAX_DISPLAY_OUTPUT) -> None:
        self.publish = publish
        self.limit = limit
        self.parent: dict[str, Any] = {}
        self.outputs: list[dict[str, Any]] = []
        self.execute_result: dict[str, Any] | None = None
        self._size = 0
        self._truncated = False

    def begin(self, parent: dict[str, Any]) -> None:
        """Start collecting for the request whose header is ``parent``."""
        self.parent = parent
        if self.outputs or self.execute_result is not None or self._size:
            self.outputs = []
            self.execute_result = None
            self._size = 0
            self._truncated = False

    def take(self) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """(outputs, execute_result) of the request, forgotten here."""
        out, result = self.outputs, self.execute_result
        self.outputs, self.execute_result, self._size = [], None, 0
        self._truncated = False
        return out, result

    def send(self, msg_type: MsgType, content: dict[str, Any]) -> None:
        """Publish on IOPub, after what the request printed so far (the order a reader sees)."""
        if self.publish is None:
            return
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        self.publish(msg_type, content, self.parent)

    def _keep(self, data: dict[str, Any]) -> bool:
        size = _size(data)
        if self._size + size > self.limit:
            if not self._truncated:
                self._truncated = True
                note = TRUNCATED_NOTE.format(limit=self.limit)
                self.outputs.append(DisplayData({"text/plain": note}).as_dict())
            return False
        self._size += size
        return True

    def display(
        self,
        data: dict[str, Any],
        metadata: dict[str, Any] | None = None,
        transient: dict[str, Any] | None = None,
        update: bool = False,
    ) -> None:
        shown = (mime_bundle(data), clean(metadata or {}), clean(transient) if transient else {})
        if update:
            content = UpdateDisplayData(*shown).as_dict()
        else:
            content = DisplayData(*shown).as_dict()
        if not update and self._keep(content["data"]):
            self.outputs.append(content)
        self.send(MsgType.UPDATE_DISPLAY_DATA if update else MsgType.DISPLAY_DATA, content)

    def result(self, content: dict[str, Any]) -> None:
        self.execute_result = content
        self.send(MsgType.EXECUTE_RESULT, content)

    def clear(self, wait: bool) -> None:
        self.send(MsgType.CLEAR_OUTPUT, ClearOutput(bool(wait)).as_dict())


class EngineDisplayHook(DisplayHook):
    """The value of a cell's last expression becomes an ``execute_result``, not a print."""

    _content: ExecuteResult | None = None

    def start_displayhook(self) -> None:
        self._content = ExecuteResult(self.prompt_count, {})

    def write_output_prompt(self) -> None:
        if self._content is not None:
            self._content = dataclasses.replace(self._content, execution_count=self.prompt_count)

    def write_format_data(self, format_dict: dict, md_dict: dict | None = None) -> None:
        if self._content is not None:
            self._content = dataclasses.replace(
                self._content, data=mime_bundle(format_dict), metadata=clean(md_dict or {})
            )

    def finish_displayhook(self) -> None:
        content, self._content = self._content, None
        if content and content.data:
            self.shell.outputs.result(content.as_dict())


class EngineDisplayPublisher(DisplayPublisher):
    """``display()`` on the engine: a display_data for the client, kept for the reply."""

    def publish(  # type: ignore[override]
        self,
        data: dict,
        metadata: dict | None = None,
        source: Any = None,
        *,
        transient: dict | None = None,
        update: bool = False,
        **kwargs: Any,
    ) -> None:
        self.shell.outputs.display(data, metadata, transient, update)

    def clear_output(self, wait: bool = False) -> None:
        self.shell.outputs.clear(wait)


class EngineShell(InteractiveShell):
    """The engine's InteractiveShell; its namespace is the engine's (push/pull/apply see it)."""

    displayhook_class = Type(EngineDisplayHook)
    display_pub_class = Type(EngineDisplayPublisher)
    #: an engine that is its own process makes its namespace ``__main__`` (pickle and
    #: ``%run`` look there), as an IPython kernel does; one embedded in another program
    #: leaves that program's ``__main__`` alone
    owns_process = True

    def __init__(self, **kwargs: Any) -> None:
        #: where the running request's outputs go (swapped per request by ``run``)
        self.outputs = Outputs(None)
        #: (ename, evalue, traceback lines) of the last error the shell reported
        self.last_error: tuple[str, str, list[str]] | None = None
        super().__init__(**kwargs)
        # x? / %pinfo / %pdoc: the page goes to stdout, not to a pager nobody reads
        self.set_hook("show_in_pager", _page_to_stdout)

    def init_virtualenv(self) -> None:
        """The engine's interpreter is the one it was started with: no virtualenv games."""

    def init_sys_modules(self) -> None:
        if self.owns_process:
            super().init_sys_modules()

    def enable_gui(self, gui: str | None = None) -> None:
        """``%matplotlib inline`` needs no event loop; an engine runs none for a GUI."""
        if gui not in (None, "inline", "agg"):
            from IPython.core.error import UsageError

            raise UsageError(
                f"an engine has no GUI event loop for {gui!r}: show figures with "
                "%matplotlib inline (they reach the client as images)"
            )

    def show_usage_error(self, exc: BaseException) -> None:
        """A bad magic: the reply's error says it, without an IPython traceback."""
        self._showtraceback(type(exc), exc, [f"UsageError: {exc}"])

    def _showtraceback(self, etype: Any, evalue: Any, stb: Any) -> None:
        """Keep the formatted traceback for the reply and publish it, never print it."""
        lines = [stb] if isinstance(stb, str) else list(stb)
        lines = [s if s.endswith("\n") else s + "\n" for s in lines]
        name = getattr(etype, "__name__", str(etype))
        self.last_error = (name, str(evalue), lines)
        self.outputs.send(MsgType.ERROR, ErrorMessage(name, str(evalue), lines).as_dict())

    def run(self, code: str, silent: bool, outputs: Outputs) -> tuple[int, BaseException | None]:
        """Run a cell as ipykernel's do_execute does; returns (execution_count, error)."""
        self.outputs = outputs
        self.last_error = None
        if not silent:
            outputs.send(MsgType.EXECUTE_INPUT, ExecuteInput(code, self.execution_count).as_dict())
        result = self.run_cell(code, store_history=not silent, silent=silent)
        error = result.error_before_exec or result.error_in_exec
        return self.execution_count - 1, error


class EmbeddedEngineShell(EngineShell):
    """The shell of an engine running inside another program (its ``__main__`` stays)."""

    owns_process = False


def _page_to_stdout(shell: Any, data: Any, start: int = 0, screen_lines: int = 0) -> None:
    text = data.get("text/plain", "") if isinstance(data, dict) else str(data)
    lines = str(text).splitlines(True)
    print("".join(lines[start:]), end="" if str(text).endswith("\n") else "\n")


def make_shell(
    ns: dict[str, Any], execution_count: int = 1, owns_process: bool = True
) -> EngineShell:
    """An EngineShell over ``ns``. In an engine that is its own process, it is the
    process's InteractiveShell singleton (IPython's ``display()`` and matplotlib's inline
    backend find it there); an engine embedded in a program that has a shell of its own
    (a notebook, a test) gets a shell of its own and leaves the program's alone."""
    config = Config()
    config.HistoryManager.enabled = False  # no SQLite history shared by every engine
    config.InteractiveShell.colors = "nocolor"  # tracebacks travel as plain text
    config.InteractiveShell.autocall = 0
    config.InteractiveShell.xmode = "Context"
    cls = EngineShell if owns_process else EmbeddedEngineShell
    if InteractiveShell.initialized():
        shell = cls(config=config, user_ns=ns)
    else:
        cls.clear_instance()  # a stale one another kernel made, cleared as InteractiveShell
        shell = cls.instance(config=config, user_ns=ns)
    shell.execution_count = execution_count
    log.info("IPython %s shell ready for execute requests", _ipython_version())
    return shell


def release_shell(shell: EngineShell) -> None:
    """Let go of ``shell`` as the process's InteractiveShell singleton if it is that: a
    program that embedded the engine (a test, a notebook, the in-process cluster) gets a
    fresh shell from its next ``InteractiveShell.instance()``, not the stopped engine's
    (whose display hook keeps values for the engine's replies and whose namespace is the
    engine's). Cleared through the shell's own class: ``InteractiveShell.clear_instance()``
    alone leaves the subclasses' references to it in place.

    Its exit work goes too: IPython registers ``atexit_operations`` for every shell it
    makes, which keeps the shell (and the engine's namespace) alive until the program ends
    and then resets it, one full garbage collection each: a program that ran many embedded
    engines (the in-process cluster's tests) spent tens of seconds exiting. The engine's
    namespace is released with it; no history is kept (make_shell) and temporary files
    are removed here."""
    if InteractiveShell.initialized() and InteractiveShell.instance() is shell:
        type(shell).clear_instance()
    forget_at_exit(shell)
    for path in list(getattr(shell, "tempfiles", ())):
        path.unlink(missing_ok=True)
    for path in list(getattr(shell, "tempdirs", ())):
        shutil.rmtree(path, ignore_errors=True)


def forget_at_exit(shell: InteractiveShell) -> None:
    """Take back what IPython registered with atexit for ``shell`` (its
    ``atexit_operations`` and its script magics' ``kill_bg_processes``), which would keep
    it alive, and reset it at the program's exit."""
    atexit.unregister(shell.atexit_operations)
    script = shell.magics_manager.registry.get("ScriptMagics")
    if script is not None:
        atexit.unregister(script.kill_bg_processes)


def _ipython_version() -> str:
    import IPython

    return str(IPython.__version__)
