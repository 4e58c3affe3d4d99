"""%px and friends in a real IPython shell, against the module's cluster."""

from __future__ import annotations

import re

import pytest

from tests.shells import fresh_shell, px_shell
from zpar.client.magics import parse_targets


@pytest.fixture
def shell(rc):
    with px_shell(rc[:]) as (sh, state):
        yield sh, state


def test_px_line_and_cell(shell, capsys):
    sh, state = shell
    sh.run_line_magic("px", "a = 5")
    sh.run_cell_magic("px", "", "print('hello', a)\na * 2")
    out = capsys.readouterr().out
    assert out.startswith("[stdout:0] \nhello 5\n[stdout:1] \nhello 5\n"), out
    # ipyparallel's Out[engine:execution_count] (coloured in a coloured shell)
    assert re.search(r"Out\[0:\d+\]: (\x1b\[0m)?10", out), out
    assert re.search(r"Out\[1:\d+\]: (\x1b\[0m)?10", out), out


def test_px_targets_noblock_and_pxresult(shell, capsys):
    sh, state = shell
    ar = sh.run_cell_magic("px", "--targets 1 --noblock", "print('only one')")
    ar.wait(10)
    sh.run_line_magic("pxresult", "")
    out = capsys.readouterr().out
    assert out == "only one\n"  # one engine named by an int: a single result, no prefix


def test_px_local_runs_here_too(shell):
    sh, state = shell
    sh.run_cell_magic("px", "--local", "zz = 41 + 1")
    assert sh.user_ns["zz"] == 42
    assert state.view.pull("zz", block=True) == [42, 42]


def test_px_remote_error_is_shown_and_raised(shell, capsys):
    import zpar

    sh, state = shell
    with pytest.raises(zpar.CompositeError) as info:
        sh.run_cell_magic("px", "", "1/0")
    # raised for IPython to render (not also printed: ipyparallel's test_cellpx_error_no_stream)
    assert "ZeroDivisionError" in "\n".join(info.value.render_traceback())
    assert capsys.readouterr().err == ""


def test_autopx_sends_every_cell(shell, capsys):
    sh, state = shell
    sh.run_line_magic("autopx", "")
    here = __import__("os").getpid()
    sh.run_cell(f"import os\nprint('remote', os.getpid() != {here})")
    sh.run_cell("%autopx")
    out = capsys.readouterr().out
    assert "[stdout:0] \nremote True\n" in out and "%autopx disabled" in out


def test_pxconfig_and_bad_arguments(shell):
    sh, state = shell
    sh.run_line_magic("pxconfig", "--noblock --targets ::2")
    assert state.block is False and state.view.targets == [0]
    assert state.view.block is False  # %pxconfig changes the view, as ipyparallel's
    sh.run_line_magic("pxconfig", "-t -1")
    assert state.view.targets == state.view.client.ids[-1]
    with pytest.raises(ValueError, match="bad arguments"):
        sh.run_line_magic("pxconfig", "--frobnicate")


def test_parse_targets():
    assert parse_targets(None) == "all" and parse_targets("3") == 3
    assert parse_targets("0,2") == [0, 2] and parse_targets("1:3") == slice(1, 3)


def test_ctrl_c_in_blocking_px_interrupts_the_engines(shell, tmp_path, capsys):
    """A SIGINT to this process while %%px waits (what Ctrl-C does) reaches the engines."""
    import os
    import signal
    import threading

    import zpar
    from tests.e2e.conftest import wait_for_files

    sh, state = shell
    markers = [str(tmp_path / f"started{i}") for i in (0, 1)]
    state.view.scatter("marker", markers, block=True)
    code = (
        "import pathlib, time\n"
        "pathlib.Path(marker[0]).write_text('x')\n"
        "end = time.time() + 60\n"
        "while time.time() < end:\n"
        "    pass\n"
    )

    def press_ctrl_c():
        try:
            wait_for_files(*markers)
        finally:  # also when they never appear: the %%px must not wait 60 s
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    # ipyparallel's %%px catches the interrupt, says so and signals the engines
    sh.run_cell_magic("px", "", code)
    assert "Sending signal SIGINT to engines" in capsys.readouterr().err
    ar = state.last_result
    with pytest.raises(zpar.CompositeError, match="KeyboardInterrupt"):
        ar.get(timeout=20)  # the engines stopped their 60 s loops
    assert state.view.apply_sync(lambda: "alive") == ["alive", "alive"]


def test_auto_register_in_a_shell_and_not_in_a_script(rc):
    import subprocess
    import sys

    from zpar.client.magics import auto_register

    with fresh_shell() as sh:
        state = auto_register(rc)
        assert state is not None and sh._zpar_magics is state
        assert "px" in sh.magics_manager.magics["line"]
        assert auto_register(rc) is state  # once per shell
    # a plain script never imports IPython for it (0.4 s of a cluster's start)
    code = (
        "import sys, zpar\n"
        "from zpar.client.magics import auto_register\n"
        "assert auto_register(object()) is None\n"
        "print('IPython' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
