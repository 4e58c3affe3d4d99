"""The process's IPython shell for a test: new when the test starts, gone when it ends.

``InteractiveShell.instance()`` is a process-wide singleton, and pytest runs every test
folder in one process: a shell a test leaves behind (or an engine's, which an embedded
engine makes the singleton: engine.ipyshell.make_shell) would be the next test's, with its
magics, namespace and display hook. Tests that drive ``%px`` in a shell take it from here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def clear_shell() -> None:
    """Forget the process's InteractiveShell singleton, whatever its class (clearing it
    through ``InteractiveShell`` alone leaves a subclass' reference to it in place)."""
    from IPython.core.interactiveshell import InteractiveShell

    from zpar.engine.ipyshell import forget_at_exit

    if InteractiveShell.initialized():
        shell = InteractiveShell.instance()
        shell._zpar_magics = None  # zpar.client.magics' state: its view, its last result
        type(shell).clear_instance()
        # IPython keeps every shell it made for an exit-time reset (a full garbage
        # collection each): a test's shell ends with its test
        forget_at_exit(shell)
        shell.history_manager.end_session()


@contextmanager
def fresh_shell() -> Iterator[Any]:
    """A new ``InteractiveShell.instance()``, cleared again on the way out."""
    from IPython.core.interactiveshell import InteractiveShell

    clear_shell()
    try:
        yield InteractiveShell.instance()
    finally:
        clear_shell()


@contextmanager
def px_shell(view: Any) -> Iterator[tuple[Any, Any]]:
    """(shell, magics state): a fresh shell whose ``%px`` drives ``view`` blocking (the
    magics follow their view's block flag, as ipyparallel's), no progress bar among the
    lines however loaded the host, ``%autopx`` off again on the way out."""
    from zpar.client.magics import register_magics

    with fresh_shell() as sh:
        view.block = True
        state = register_magics(sh, view)
        state.progress_after = -1
        try:
            yield sh, state
        finally:
            if state._autopx:
                state.autopx()
