"""What an AsyncResult shows: engines' output (captured, streamed), progress bars, HTML.

Functions of the calls' metadata and of callables the result hands over (its wait, its
progress), and the OutputStream of a result's IOPub output: AsyncResult's display methods
call them, so the result handle's own module stays about waiting and values.
"""

from __future__ import annotations

import contextlib
import html
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from typing import Any

from zpar.util import progress as progress_bar
from zpar.wire import Message

from .futurewait import when_all_done

#: how display_outputs may group what it shows
GROUPBY = ("engine", "order", "type")


def check_groupby(groupby: str) -> None:
    """ValueError naming the choices unless ``groupby`` is one of GROUPBY."""
    if groupby not in GROUPBY:
        raise ValueError(f"groupby must be 'engine', 'order' or 'type', got {groupby!r}")


def display_outputs(
    mds: Sequence[dict[str, Any]],
    *,
    single: bool,
    groupby: str = "type",
    result_only: bool = False,
    file: Any = None,
) -> None:
    """Show each call's captured stdout/stderr under ``[stdout:N]`` headers (each on a line
    of its own) and, inside IPython, its rich outputs (figures, HTML: ``[output:N]``) and
    the value of its last expression (``Out[N:K]``), as ipyparallel's display_outputs, from
    the calls' metadata ``mds``; a ``single`` call's result without the headers.

    groupby: 'type' (all stdout, then all stderr, then outputs: ipyparallel's default),
    'engine' (each engine's streams and outputs together) or 'order' (as 'type', the n-th
    outputs of every engine together). result_only: only the ``Out`` values (the outputs
    were streamed already)."""
    check_groupby(groupby)
    ip = _ipython()
    printer = StreamPrinter(file)
    if single and len(mds) == 1:
        _show_single(mds[0], printer, result_only, ip)
        return
    if groupby == "engine":
        mds = sorted(mds, key=lambda md: (md.get("engine_id") is None, md.get("engine_id")))
        for md in mds:
            _show_stream(md, "stdout", printer, result_only)
            _show_stream(md, "stderr", printer, result_only)
            if ip is not None:
                _show_rich(md, result_only, with_result=True)
        return
    for stream in ("stdout", "stderr"):
        for md in mds:
            _show_stream(md, stream, printer, result_only)
    if ip is None:  # display outputs mean nothing outside IPython (ipyparallel)
        return
    if groupby == "order" and not result_only:
        for i in range(max((len(md.get("outputs") or []) for md in mds), default=0)):
            for md in mds:
                outputs = md.get("outputs") or []
                if i < len(outputs):
                    _republish(outputs[i], md.get("engine_id"), header=True)
    else:
        for md in mds:
            _show_rich(md, result_only, with_result=False)
    for md in mds:
        _show_result(md)


def wait_with_progress(
    wait: Callable[[float], Any],
    progress: Callable[[], int],
    met: Callable[[], bool],
    *,
    total: int,
    desc: str,
    interval: float = 0.1,
    timeout: float | None = None,
    widget: bool | None = None,
    file: Any = None,
) -> bool:
    """Call ``wait(seconds)`` until ``met()`` or ``timeout`` seconds (None: no limit),
    showing ``progress()`` of ``total`` in a bar (a widget in Jupyter when ipywidgets is
    installed, a text bar otherwise); whether ``met()`` became true."""
    deadline = None if timeout is None else time.monotonic() + timeout
    kwargs: dict[str, Any] = {"total": total, "unit": "tasks", "desc": desc}
    if file is not None:
        kwargs["file"] = file
    bar = progress_bar(widget=widget, **kwargs)
    try:
        while True:
            bar.update(progress() - bar.n)
            if met():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            step = interval if deadline is None else min(interval, deadline - time.monotonic())
            wait(max(0.0, step))
    finally:
        bar.update(progress() - bar.n)
        bar.close()


def html_summary(
    type_name: str, fname: str, state: str, done: int, total: int, engine_ids: Any
) -> str:
    """An AsyncResult's ``_repr_html_``: its function, state, progress and engines."""
    engines = ""
    if engine_ids is not None:
        eids = engine_ids if isinstance(engine_ids, list) else [engine_ids]
        engines = f", engines {sorted({e for e in eids if e is not None})}"
    return (
        f"<code>{html.escape(type_name)}({html.escape(fname)})</code>: "
        f"<b>{state}</b> {done}/{total}{engines}"
    )


class StreamPrinter:
    """Prints engines' stdout/stderr as ipyparallel's ``_display_stream`` does: a
    ``[stdout:N]`` header on a line of its own, then the text as the engine printed it; the
    header left out while the same engine's same stream goes on; a newline put in before a
    header when the text before it did not end one (so no blank lines, and no line glued to
    a header). One printer per display or stream, whose headers it remembers."""

    __slots__ = ("file", "last_prefix", "trailing_newline")

    def __init__(self, file: Any = None) -> None:
        #: where both streams go (None: sys.stdout and sys.stderr)
        self.file = file
        self.last_prefix = ""
        self.trailing_newline = True

    def show(self, text: str, stream: str = "stdout", prefix: str = "") -> None:
        """Print ``text`` of ``stream`` under ``prefix`` (``'[stdout:0] '``, or '': none)."""
        if not text:
            return
        dest = self.file or (sys.stderr if stream == "stderr" else sys.stdout)
        if prefix:
            if prefix == self.last_prefix:
                prefix = ""  # same engine, same stream: no header again
            else:
                self.last_prefix = prefix
        pre = "\n" if prefix and not self.trailing_newline else ""
        sep = "\n" if prefix else ""
        self.trailing_newline = text.endswith("\n")
        print(f"{pre}{prefix}{sep}{text}", end="", file=dest)

    def engine_stream(self, eid: int | None, stream: str, text: str) -> None:
        """Engine ``eid``'s ``text`` of ``stream``, under its ``[stream:eid]`` header."""
        self.show(text, stream, f"[{stream}:{'?' if eid is None else eid}] ")


def _show_stream(
    md: dict[str, Any], stream: str, printer: StreamPrinter, result_only: bool
) -> None:
    """One call's captured stream under its ``[stdout:N]`` header."""
    if not result_only:
        printer.engine_stream(md.get("engine_id"), stream, md.get(stream) or "")


def _show_single(md: dict[str, Any], printer: StreamPrinter, result_only: bool, ip: Any) -> None:
    """One call's result (rc[i], a load-balanced apply): its streams as they are, no
    [stdout:N] / [output:N] headers (ipyparallel's _display_single_result)."""
    if not result_only:
        printer.show(md.get("stdout") or "", "stdout")
        printer.show(md.get("stderr") or "", "stderr")
    if ip is not None:
        for content in [] if result_only else md.get("outputs") or []:
            _republish(content, md.get("engine_id"))
        _show_result(md)


def _ipython() -> Any:
    """The running IPython shell, if IPython is imported and one runs (never imports it)."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _republish(content: dict[str, Any], eid: int | None, header: bool = False) -> None:
    """One engine display output, shown here (ipyparallel's _republish_displaypub)."""
    ip = _ipython()
    if ip is None:
        return
    if header:
        _raw_text(f"[output:{eid}]")
    md = dict(content.get("metadata") or {})
    md["engine"] = eid
    ip.display_pub.publish(data=content.get("data") or {}, metadata=md)


def _raw_text(text: str) -> None:
    from IPython.display import display_pretty

    display_pretty(text, raw=True)


def _show_rich(md: dict[str, Any], result_only: bool, *, with_result: bool) -> None:
    """An engine's ``[output:N]`` header, its display outputs and (with_result) its value."""
    outputs = [] if result_only else list(md.get("outputs") or [])
    if outputs or (with_result and md.get("execute_result")):
        _raw_text(f"[output:{md.get('engine_id')}]")
    for content in outputs:
        _republish(content, md.get("engine_id"))
    if with_result:
        _show_result(md)


def _show_result(md: dict[str, Any]) -> None:
    """The value of an execute's last expression, as ``Out[N:K]: value``."""
    result = md.get("execute_result")
    if not result:
        return
    from IPython.display import display

    from .executereply import ExecuteReply

    display(ExecuteReply(md.get("msg_id") or "", result, md))


class OutputStream:
    """The engines' output of some calls (``msg_ids``), shown as it arrives on IOPub
    through ``io`` (the client's sender); ``metadatas()`` gives the calls' metadata, whose
    captured output ``finish`` compares with what was shown."""

    def __init__(
        self,
        msg_ids: list[str],
        io: Any,
        metadatas: Callable[[], Sequence[dict[str, Any]]],
        callback: Callable[[int | None, str, str], Any] | None = None,
    ) -> None:
        self.msg_ids = list(msg_ids)
        self.metadatas = metadatas
        self.io = io
        self.show = callback or StreamPrinter().engine_stream
        self.shown: dict[tuple[str, str], str] = {}
        self.idle: set[str] = set()
        #: display outputs shown per msg_id (the rest is shown by finish)
        self.displayed: dict[str, int] = {}
        self.done = threading.Event()
        self._lock = threading.Lock()

    @classmethod
    def started(
        cls,
        msg_ids: list[str],
        io: Any,
        metadatas: Callable[[], Sequence[dict[str, Any]]],
        callback: Callable[[int | None, str, str], Any] | None,
        futures: Sequence[Future],
    ) -> OutputStream:
        """A stream of these calls' output, shown from now on, that stops by itself once
        their ``futures`` are all done."""
        stream = cls(msg_ids, io, metadatas, callback)
        stream.start()
        when_all_done(futures, stream.stop_later)
        return stream

    def start(self) -> None:
        self.io.watch_output(self.msg_ids, self._on_output)

    @contextlib.contextmanager
    def until(self, done: Callable[[], bool]) -> Iterator[None]:
        """Streams for the ``with`` block; ``finish`` at its end if the calls are then
        ``done()`` (``with ar.stream_output(): ar.wait()``)."""
        try:
            yield
        finally:
            if done():
                self.finish()

    def stop_later(self, *_: Any) -> None:
        """The calls are done: stop watching a bit later (a reply can overtake its last
        output, two paths), unless the engines' 'idle' status ended it already."""
        timer = threading.Timer(1.0, self._stop)
        timer.daemon = True
        timer.start()

    def _stop(self) -> None:
        self.io.unwatch_output(self.msg_ids)
        self.done.set()

    def _on_output(self, msg_id: str, msg: Message) -> None:
        if msg.msg_type == "status":
            if msg.content.get("execution_state") == "idle":  # the last word of a call
                self.io.unwatch_output([msg_id])
                with self._lock:
                    self.idle.add(msg_id)
                    if self.idle >= set(self.msg_ids):
                        self.done.set()
            return
        if msg.msg_type == "display_data":  # a figure as it is made (inside IPython)
            with self._lock:
                self.displayed[msg_id] = self.displayed.get(msg_id, 0) + 1
            _republish(msg.content, msg.metadata.get("engine_id"), header=True)
            return
        if msg.msg_type == "stream":
            name = msg.content.get("name", "stdout")
            text = msg.content.get("text", "")
            with self._lock:
                key = (msg_id, name)
                self.shown[key] = self.shown.get(key, "") + text
            self.show(msg.metadata.get("engine_id"), name, text)

    def finish(self, timeout: float = 2.0) -> None:
        """Wait (up to ``timeout``) for the engines' last output, then show whatever the
        stream did not: the end of each call's output, complete in its reply."""
        self.done.wait(timeout)
        self._stop()
        with self._lock:
            for md in self.metadatas():
                for name in ("stdout", "stderr"):
                    full = md.get(name) or ""
                    seen = self.shown.get((md["msg_id"], name), "")
                    if full.startswith(seen) and len(full) > len(seen):
                        self.show(md.get("engine_id"), name, full[len(seen) :])
                        self.shown[(md["msg_id"], name)] = full
                outputs = md.get("outputs") or []
                for content in outputs[self.displayed.get(md["msg_id"], 0) :]:
                    _republish(content, md.get("engine_id"), header=True)
                self.displayed[md["msg_id"]] = len(outputs)
