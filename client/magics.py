"""IPython magics: %px, %%px, %autopx, %pxresult, %pxconfig over a DirectView.

Registered by ``view.activate()`` or ``register_magics(shell, view)``. Output of each engine
is shown under an ``[stdout:N]`` / ``[stderr:N]`` header, as in ipyparallel.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from zpar.errors import AlreadyDisplayedError, CompositeError, RemoteError

from .asyncresult import AsyncResult

log = logging.getLogger(__name__)

#: Clients whose IOPub subscription is known to be live (see ensure_iopub).
_IOPUB_LIVE: weakref.WeakSet[Any] = weakref.WeakSet()


def _parser(name: str) -> argparse.ArgumentParser:
    """ipyparallel's %px / %%px / %pxconfig / %pxresult options."""
    p = argparse.ArgumentParser(prog=name, add_help=False, exit_on_error=False)
    p.add_argument("--targets", "-t", default=None)
    group = p.add_mutually_exclusive_group()
    group.add_argument("--block", "-b", dest="block", action="store_const", const=True)
    group.add_argument("--noblock", "-a", dest="block", action="store_const", const=False)
    stream = p.add_mutually_exclusive_group()
    stream.add_argument("--stream", dest="stream", action="store_const", const=True)
    stream.add_argument("--no-stream", dest="stream", action="store_const", const=False)
    p.add_argument("--local", action="store_true", default=False)
    p.add_argument("--group-outputs", choices=["engine", "order", "type"], default=None)
    p.add_argument("-r", dest="group_outputs", action="store_const", const="order")
    p.add_argument("-e", dest="group_outputs", action="store_const", const="engine")
    p.add_argument("--out", "-o", dest="save_name", default=None)
    verbose = p.add_mutually_exclusive_group()
    verbose.add_argument("--verbose", "-v", dest="verbose", action="store_const", const=True)
    verbose.add_argument("--no-verbose", dest="verbose", action="store_const", const=False)
    p.add_argument("--progress-after", dest="progress_after", type=float, default=None)
    p.add_argument("--signal-on-interrupt", dest="signal_on_interrupt", default=None)
    return p


def parse_targets(spec: str | None) -> Any:
    """'all', '3', '0,2', '1:3', '::2' -> a target spec the client understands."""
    if spec is None or spec == "all":
        return "all"
    spec = spec.strip()
    if ":" in spec:
        parts = [int(x) if x else None for x in spec.split(":")]
        return slice(*parts)
    if "," in spec:
        return [int(x) for x in spec.split(",") if x]
    return int(spec)


class ParallelMagics:
    """The state behind the magics of one shell: the view, flags, the last result."""

    def __init__(self, shell: Any, view: Any, suffix: str = "") -> None:
        self.shell = shell
        self.view = view
        self.suffix = suffix
        self.block = True
        self.verbose = False
        #: stream engines' output as it is printed (%pxconfig --stream); zpar's default
        #: shows it grouped once the run is done
        self.stream = False
        #: seconds before a blocking run shows a progress bar (-1: never), as ipyparallel
        self.progress_after = 2.0
        #: what a Ctrl-C in a blocking run sends to the engines ("0": nothing)
        self.signal_on_interrupt: str | None = "SIGINT"
        self.last_result: AsyncResult | None = None
        self._autopx = False
        self._transformer: Callable[[list[str]], list[str]] | None = None

    # -- the magics -----------------------------------------------------------------------

    def pxconfig(self, line: str) -> None:
        args = self._parse("pxconfig", line)
        if args.targets is not None:
            self.view = self._view_for(args.targets)
        if args.block is not None:
            self.block = args.block
        if args.verbose is not None:
            self.verbose = args.verbose
        if args.stream is not None:
            self.stream = args.stream
        if args.progress_after is not None:
            self.progress_after = args.progress_after
        if args.signal_on_interrupt is not None:
            self.signal_on_interrupt = args.signal_on_interrupt

    def px(self, line: str, cell: str | None = None) -> Any:
        if cell is None:  # %px: the whole line is code
            args, code = _parser("px").parse_args([]), line
        else:
            args, code = self._parse("px", line), cell
        view = self._view_for(args.targets) if args.targets is not None else self.view
        block = self.block if args.block is None else args.block
        stream_output = self.stream if args.stream is None else args.stream
        groupby = args.group_outputs or "type"
        if args.local:
            self.shell.run_cell(code)
        if self.verbose if args.verbose is None else args.verbose:
            kind = "Parallel" if block else "Async parallel"
            print(f"{kind} execution on engine(s): {view.targets}")
        if stream_output and block:
            ensure_iopub(view)
        ar = view.execute(code, silent=False, block=False)
        self.last_result = ar
        if args.save_name:
            self.shell.user_ns[args.save_name] = ar
        if not block:
            return ar
        stream = ar.stream_outputs() if stream_output else None
        try:
            self._wait(ar, args.progress_after)
        except KeyboardInterrupt:
            self._interrupt(view, args.signal_on_interrupt)
            raise
        if stream is not None:
            stream.finish()  # the engines' last lines, which can follow the reply
        try:
            self._show(ar, groupby, show_output=stream is None)
        except CompositeError as e:
            if stream is not None:
                raise AlreadyDisplayedError(e) from None  # shown as they happened
            raise
        return None

    def _wait(self, ar: AsyncResult, progress_after: float | None) -> None:
        """Wait for a blocking run; a progress bar after ``progress_after`` seconds."""
        after = self.progress_after if progress_after is None else progress_after
        if after < 0 or ar.wait(after):
            ar.wait()
            return
        ar.wait_interactive()

    def pxresult(self, line: str = "") -> None:
        """Show the last %px run's outputs and results (-o NAME: store its AsyncResult)."""
        if self.last_result is None:
            raise RuntimeError("no %px result yet: run %px or %%px first")
        args = self._parse("pxresult", line)
        if args.save_name:
            self.shell.user_ns[args.save_name] = self.last_result
            return
        self._show(self.last_result, args.group_outputs or "type")

    def autopx(self, line: str = "") -> None:
        if self._autopx:
            self.shell.input_transformers_cleanup.remove(self._transformer)
            self._autopx = False
            print("%autopx disabled")
            return
        name = f"autopx{self.suffix}"

        def to_px(lines: list[str]) -> list[str]:
            text = "".join(lines).strip()
            if text in (f"%{name}", f"%autopx{self.suffix}") or not text:
                return lines
            return [f"%%px{self.suffix}\n", *lines]

        self._transformer = to_px
        self.shell.input_transformers_cleanup.append(to_px)
        self._autopx = True
        print("%autopx enabled")

    # -- helpers --------------------------------------------------------------------------

    def _parse(self, name: str, line: str) -> argparse.Namespace:
        try:
            return _parser(name).parse_args(shlex.split(line))
        except (argparse.ArgumentError, SystemExit) as e:
            raise ValueError(f"%{name}: bad arguments {line!r}: {e}") from None

    def _view_for(self, spec: str) -> Any:
        targets = parse_targets(spec)
        client = self.view.client
        return client[targets] if not isinstance(targets, str) else client[:]

    def _interrupt(self, view: Any, sig: str | None = None) -> None:
        """Ctrl-C in a blocking %%px: interrupt the engines' code too, not just the wait
        (with --signal-on-interrupt's signal; "0" or "" sends none)."""
        sig = self.signal_on_interrupt if sig is None else sig
        if not sig or str(sig) == "0":
            return
        signum = int(sig) if str(sig).isdigit() else sig
        print(f"Received Keyboard Interrupt. Sending signal {sig} to engines...", file=sys.stderr)
        view.client.send_signal(signum, targets=view.targets)

    def _show(self, ar: AsyncResult, group_outputs: str, show_output: bool = True) -> None:
        """Streams, displays and ``Out[N:K]`` results (display_outputs), then errors."""
        ar.display_outputs(groupby=group_outputs, result_only=not show_output)
        try:
            ar.get()
        except CompositeError as e:
            for err in e.errors:
                _print_error(err)
            raise
        except RemoteError as e:
            _print_error(e)
            raise


def _print_error(err: BaseException) -> None:
    info = getattr(err, "engine_info", None) or {}
    eid = info.get("engine_id", "?")
    print(f"[{eid}:execute] {type(err).__name__}: {err}", file=sys.stderr)


def ensure_iopub(view: Any, timeout: float = 10.0) -> None:
    """Make sure the client's IOPub subscription is live before output is streamed.

    A zmq SUB socket receives nothing until its subscription has reached the publisher, so
    the first lines an engine prints right after a fresh client subscribes were lost
    (``ar.stdout`` had them: output also travels with the reply). Probe with an empty
    execute until its IOPub messages arrive; done once per client."""
    client = view.client
    if client in _IOPUB_LIVE:
        return
    io = client.sender
    heard = threading.Event()
    deadline = time.monotonic() + timeout
    eid = client.sender.resolve_targets(view.targets)[0]
    while not heard.is_set() and time.monotonic() < deadline:
        probe = client[eid].execute("", block=False)
        io.watch_output(probe.msg_ids, lambda msg_id, msg: heard.set())
        probe.wait(timeout)
        heard.wait(min(0.2, max(0.0, deadline - time.monotonic())))
        io.unwatch_output(probe.msg_ids)
    if heard.is_set():
        _IOPUB_LIVE.add(client)
    else:
        log.warning("IOPub of %s silent for %g s: streamed output may miss lines", eid, timeout)


def activate(view: Any, suffix: str = "") -> ParallelMagics | None:
    """Register the magics over ``view`` in the running IPython; outside IPython, warn
    (as ipyparallel does) and return None."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None:
        warnings.warn(
            "The IPython parallel magics (%px, etc.) only work within IPython.",
            UserWarning,
            stacklevel=3,
        )
        return None
    state = register_magics(shell, view, suffix)
    if not suffix:
        shell._zpar_magics = state
    return state


def register_magics(shell: Any, view: Any, suffix: str = "") -> ParallelMagics:
    """Register %px{suffix}, %%px{suffix}, %autopx{suffix}, %pxresult{suffix},
    %pxconfig{suffix} in ``shell`` (an IPython InteractiveShell)."""
    state = ParallelMagics(shell, view, suffix)
    shell.register_magic_function(state.px, "line_cell", f"px{suffix}")
    shell.register_magic_function(state.autopx, "line", f"autopx{suffix}")
    shell.register_magic_function(state.pxresult, "line", f"pxresult{suffix}")
    shell.register_magic_function(state.pxconfig, "line", f"pxconfig{suffix}")
    return state


def auto_register(client: Any) -> ParallelMagics | None:
    """Inside IPython, give the first connected Client the %px magics (on all engines)."""
    ipython = sys.modules.get("IPython")
    if ipython is None:  # not imported: no shell to register in (importing it costs 0.4 s)
        return None
    shell = ipython.get_ipython()
    if shell is None:
        return None
    existing = getattr(shell, "_zpar_magics", None)
    if existing is not None and not getattr(existing.view.client, "_closed", False):
        return existing
    state = register_magics(shell, client.direct_view("all"))
    shell._zpar_magics = state
    return state
