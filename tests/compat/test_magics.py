"""ipyparallel/client/magics.py's options on zpar's %px magics, in a real IPython shell."""

from __future__ import annotations

import pytest

import zpar as ipp

pytest.importorskip("IPython")


@pytest.fixture
def shell(rc):
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    view = rc.activate()  # as ipyparallel: a blocking DirectView on all engines
    yield sh, view
    sh._zpar_magics = None
    InteractiveShell.clear_instance()


def test_out_saves_the_async_result(shell):
    sh, _ = shell
    sh.run_cell_magic("px", "-o saved", "v = 3")
    assert isinstance(sh.user_ns["saved"], ipp.AsyncResult)
    sh.run_cell_magic("px", "--noblock", "v * 2")
    sh.run_line_magic("pxresult", "-o later")
    later = sh.user_ns["later"].get(timeout=30)  # ExecuteReply per engine, as ipyparallel
    assert [r.execute_result["data"]["text/plain"] for r in later] == ["6", "6"]


def test_group_outputs_flags(shell, capsys):
    sh, _ = shell
    sh.run_cell_magic("px", "-e", "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    captured = capsys.readouterr()
    assert "[stdout:0] out" in captured.out and "[stderr:1] err" in captured.err
    sh.run_cell_magic("px", "--group-outputs type", "print('typed')")
    out = capsys.readouterr().out
    assert out.index("[stdout:0] typed") < out.index("[stdout:1] typed")


def test_pxconfig_stream_verbose_and_progress(shell, capsys):
    sh, view = shell
    sh.run_line_magic("pxconfig", "--stream --verbose --progress-after -1")
    sh.run_cell_magic("px", "", "print('live')")
    out = capsys.readouterr().out
    assert "Parallel execution on engine(s)" in out
    assert "[stdout:0] live" in out and "[stdout:1] live" in out
    sh.run_line_magic("pxconfig", "--no-stream --no-verbose")
    sh.run_cell_magic("px", "--progress-after 0", "import time; time.sleep(0.3)")
    assert "Parallel execution" not in capsys.readouterr().out


def test_streamed_errors_raise_already_displayed(shell):
    sh, _ = shell
    with pytest.raises(ipp.AlreadyDisplayedError) as info:
        sh.run_cell_magic("px", "--stream", "1/0")
    assert info.value.render_traceback() == ["2 errors"]
    with pytest.raises(ipp.CompositeError):
        sh.run_cell_magic("px", "--no-stream", "1/0")


def test_targets_and_short_block_flags(shell, capsys):
    sh, _ = shell
    ar = sh.run_cell_magic("px", "-t 1 -a", "print('one')")
    ar.get(timeout=30)
    sh.run_line_magic("pxresult", "")
    out = capsys.readouterr().out
    # one engine named by an int: a single result, shown without [stdout:N] (ipyparallel)
    assert out == "one\n"
    sh.run_cell_magic("px", "-t ::2 -b --signal-on-interrupt 0", "print('even')")
    assert "[stdout:0] even" in capsys.readouterr().out
