"""IPython magics: %px, %%px, %autopx, %pxresult, %pxconfig over a DirectView.

Registered by ``view.activate()`` or ``register_magics(shell, view)``. Output of each engine
is shown under an ``[stdout:N]`` / ``[stderr:N]`` header, as in ipyparallel.
"""

from __future__ import annotations

import argparse
import ast
import logging
import shlex
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from zpar.errors import AlreadyDisplayedError, CompositeError

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
    """'all', '3', '-1', '0,2', '[0, 2]', '1:3', '::2' -> a target spec the client
    understands (ipyparallel evaluates anything else as a Python literal)."""
    if spec is None or spec.strip() == "all":
        return "all"
    spec = spec.strip()
    if ":" in spec:
        parts = [int(x) if x.strip() else None for x in spec.split(":")]
        return slice(*parts)
    try:
        value = ast.literal_eval(spec)
    except (ValueError, SyntaxError):
        raise ValueError(
            f"bad targets {spec!r}: an int, a list of ints, a slice or 'all'"
        ) from None
    if isinstance(value, tuple):
        value = list(value)
    return value


class ParallelMagics:
    """The state behind the magics of one shell: the view (whose ``targets`` and ``block``
    are the magics' defaults, as in ipyparallel), flags, the last result."""

    def __init__(self, shell: Any, view: Any, suffix: str = "") -> None:
        self.shell = shell
        self.view = view
        self.suffix = suffix
        self.verbose = False
        #: stream engines' output as it is printed (%pxconfig --stream); zpar's default
        #: shows it grouped once the run is done
        self.stream = False
        #: seconds before a blocking run shows a progress bar (-1: never), as ipyparallel
        self.progress_after = 2.0
        #: what a Ctrl-C in a blocking run sends to the engines (None: re-raise it)
        self.signal_on_interrupt: str | int | None = "SIGINT"
        self.last_result: AsyncResult | None = None
        self._autopx = False
        self._transformer: Callable[[list[str]], list[str]] | None = None

    @property
    def block(self) -> bool:
        """The view's block flag, the magics' default (%pxconfig --block sets it)."""
        return bool(self.view.block)

    # -- the magics -----------------------------------------------------------------------

    def pxconfig(self, line: str) -> None:
        args = self._parse("pxconfig", line)
        if args.targets is not None:  # the view itself changes, as ipyparallel's
            self.view.targets = self._eval_targets(args.targets)
        if args.block is not None:
            self.view.block = args.block
        if args.verbose is not None:
            self.verbose = args.verbose
        if args.stream is not None:
            self.stream = args.stream
        if args.progress_after is not None:
            self.progress_after = args.progress_after
        if args.signal_on_interrupt is not None:
            self.signal_on_interrupt = _eval_signal(args.signal_on_interrupt)

    def px_line(self, line: str) -> Any:
        """%px CODE: the line is code for the engines (not var-expanded here)."""
        return self.px(line)

    def px(self, line: str, cell: str | None = None) -> Any:
        if cell is None:  # %px: the whole line is code
            args, code = _parser("px").parse_args([]), line
        else:
            args, code = self._parse("px", line), cell
        saved_targets = self.view.targets
        if args.targets is not None:  # this run only (%%px -t), as ipyparallel
            self.view.targets = self._eval_targets(args.targets)
        block = self.block if args.block is None else args.block
        try:
            ar = self._execute(code, False if args.local else block, args)
        finally:
            self.view.targets = saved_targets
        if args.local:  # run here after submitting there, then block (ipyparallel's order)
            self.shell.run_cell(code)
            if block:
                ar.get()
                ar.display_outputs(args.group_outputs or "type")
        # a cell %autopx sends shows nothing of its own (ipyparallel's pxrun_nodes): no
        # Out[n] of a pending result under each non-blocking cell
        return None if block or self._autopx else ar

    def _execute(self, code: str, block: bool, args: argparse.Namespace) -> Any:
        """ipyparallel's parallel_execute: run ``code`` on the view's targets; when
        ``block``, wait (a progress bar after a while), show outputs and raise errors."""
        view = self.view
        stream_output = self.stream if args.stream is None else args.stream
        groupby = args.group_outputs or "type"
        if self.verbose if args.verbose is None else args.verbose:
            kind = "Parallel" if block else "Async parallel"
            print(f"{kind} execution on engine(s): {_str_targets(view.targets)}")
        if stream_output and block:
            ensure_iopub(view)
        ar = view.execute(code, silent=False, block=False)
        ar._fname = "%px"  # as ipyparallel: its repr and progress bar say so
        self.last_result = ar
        if args.save_name:
            self.shell.user_ns[args.save_name] = ar
        if not block:
            return ar
        stream = ar.stream_outputs() if stream_output else None
        sig = self.signal_on_interrupt
        if args.signal_on_interrupt is not None:
            sig = _eval_signal(args.signal_on_interrupt)
        try:
            self._wait(ar, args.progress_after)
            if stream is not None:
                stream.finish()  # the engines' last lines, which can follow the reply
            ar.get()
        except CompositeError as e:
            if stream is not None:  # streamed: each engine's traceback shown, then a summary
                for err in e.errors:
                    render = getattr(err, "render_traceback", None)
                    print("\n".join(render()) if render else str(err), file=sys.stderr)
                raise AlreadyDisplayedError(e) from None
            raise
        except KeyboardInterrupt:
            if sig is None:
                raise
            print(
                f"Received Keyboard Interrupt. Sending signal {sig} to engines...", file=sys.stderr
            )
            if sig not in (0, "0"):  # signal 0 delivers nothing (ipyparallel sends it anyway)
                view.client.send_signal(sig, targets=view.targets)
        finally:
            # outputs shown on success and on error, as ipyparallel (after an interrupt,
            # if the engines stopped within a second)
            if ar.wait(1):  # streamed: the values only (the streams were shown)
                ar.display_outputs(groupby=groupby, result_only=stream is not None)
        return ar

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
        self.last_result.get()
        self.last_result.display_outputs(groupby=args.group_outputs or "type")

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

    def _eval_targets(self, spec: str) -> Any:
        """ipyparallel's: 'a:b:c' slices the client's ids, 'all' is 'all', anything else
        is a Python expression ('1', '[0, 2]'), negative ints counted from the end."""
        targets = parse_targets(spec)
        if isinstance(targets, slice):
            return self.view.client.ids[targets]
        if isinstance(targets, int) and not isinstance(targets, bool) and targets < 0:
            return self.view.client.ids[targets]
        return targets


# %px's line is code: IPython must not expand {x} or $x in it (the engine's x is meant)
ParallelMagics.px_line._ipython_magic_no_var_expand = True  # type: ignore[attr-defined]


def _eval_signal(sig: str | int) -> str | int:
    return int(sig) if str(sig).isdigit() else sig


def _str_targets(targets: Any) -> str:
    if isinstance(targets, list) and len(targets) > 10:
        return str(targets[:4])[:-1] + ", ..., " + str(targets[-4:])[1:]
    return str(targets)


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
    # %px's line is code (not expanded); %%px's line is options ({name} expanded, as IPython
    # does for ipyparallel's cell_px)
    shell.register_magic_function(state.px_line, "line", f"px{suffix}")
    shell.register_magic_function(state.px, "cell", f"px{suffix}")
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
    view = client.direct_view("all")
    view.block = True  # as ipyparallel's Client, which calls self.activate() in IPython
    state = register_magics(shell, view)
    shell._zpar_magics = state
    return state
