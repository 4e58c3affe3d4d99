"""ipyparallel/client/magics.py's options on zpar's %px magics, in a real IPython shell."""

from __future__ import annotations

import re

import pytest

import zpar as ipp
from tests.clusters import under_headers
from tests.shells import fresh_shell

pytest.importorskip("IPython")


@pytest.fixture
def shell(rc):
    with fresh_shell() as sh:
        view = rc.activate()  # as ipyparallel: a blocking DirectView on all engines
        sh._zpar_magics.progress_after = -1  # no progress bar among the lines read
        yield sh, view


def test_out_saves_the_async_result(shell):
    sh, _ = shell
    sh.run_cell_magic("px", "-o saved", "v = 3")
    assert isinstance(sh.user_ns["saved"], ipp.AsyncResult)
    assert repr(sh.user_ns["saved"]) == "<AsyncResult(%px): finished>"  # as ipyparallel's
    sh.run_cell_magic("px", "--noblock", "v * 2")
    sh.run_line_magic("pxresult", "-o later")
    later = sh.user_ns["later"].get(timeout=30)  # ExecuteReply per engine, as ipyparallel
    assert [r.execute_result["data"]["text/plain"] for r in later] == ["6", "6"]


def test_group_outputs_flags(shell, capsys):
    sh, _ = shell
    sh.run_cell_magic("px", "-e", "import sys\nprint('out')\nprint('err', file=sys.stderr)")
    captured = capsys.readouterr()
    assert captured.out == "[stdout:0] \nout\n[stdout:1] \nout\n"
    assert captured.err == "[stderr:0] \nerr\n[stderr:1] \nerr\n"
    sh.run_cell_magic("px", "--group-outputs type", "print('typed')")
    assert capsys.readouterr().out == "[stdout:0] \ntyped\n[stdout:1] \ntyped\n"


def test_pxconfig_stream_verbose_and_progress(shell, capsys):
    sh, view = shell
    sh.run_line_magic("pxconfig", "--stream --verbose --progress-after -1")
    sh.run_cell_magic("px", "", "print('live')")
    out = capsys.readouterr().out
    assert "Parallel execution on engine(s)" in out
    assert under_headers(out) == {"[stdout:0]": "live\n", "[stdout:1]": "live\n"}
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
    assert capsys.readouterr().out == "[stdout:0] \neven\n"


def generate_output():
    """ipyparallel's tests/clienttest.py generate_output: two outputs of each kind."""
    import sys

    from IPython.display import HTML, Math, display

    print("stdout")
    print("stderr", file=sys.stderr)
    display(HTML("<b>HTML</b>"))
    print("stdout2")
    print("stderr2", file=sys.stderr)
    display(Math(r"\alpha=\beta"))
    return Math("42")


def _expect_lines(text, expected):
    """ipyparallel's test_cellpx_groupby_*: no blank line, each line matches in turn."""
    assert "\n\n" not in text, text
    lines = text.splitlines()
    assert len(lines) == len(expected), text
    for line, expect in zip(lines, expected, strict=True):
        for ex in [expect] if isinstance(expect, str) else expect:
            assert re.search(ex, line), f"expected {ex!r} in {line!r}:\n{text}"


def _grouped(sh, view, capsys, groupby):
    view["generate_output"] = generate_output
    capsys.readouterr()
    # no progress bar in the output, however long a loaded machine takes (ipyparallel's
    # tests count on a run shorter than its 2 s)
    options = f"--group-outputs={groupby} --no-stream --progress-after -1"
    sh.run_cell_magic("px", options, "generate_output()")
    out, err = capsys.readouterr()
    # stderr is grouped by type whatever groupby says: its header, then its two lines
    _expect_lines(err, [r"^\[stderr:\d+\] $", "^stderr$", "^stderr2$"] * len(view))
    return out


@pytest.mark.cluster  # display() on in-process engines reaches this shell
def test_cellpx_groupby_engine(shell, capsys):
    """ipyparallel's test_cellpx_groupby_engine: each header on a line of its own."""
    sh, view = shell
    out = _grouped(sh, view, capsys, "engine")
    expected = [
        r"^\[stdout:\d+\] $",
        "^stdout$",
        "^stdout2$",
        r"^\[output:\d+\]$",
        r"IPython\.core\.display\.HTML",
        r"IPython\.core\.display\.Math",
        r"Out\[\d+:\d+\]:.*IPython\.core\.display\.Math",
    ] * len(view)
    _expect_lines(out, expected)


@pytest.mark.cluster  # display() on in-process engines reaches this shell
def test_cellpx_groupby_order(shell, capsys):
    """ipyparallel's test_cellpx_groupby_order: the n-th outputs of every engine together,
    each under its engine's [output:N]."""
    sh, view = shell
    out = _grouped(sh, view, capsys, "order")
    n = len(view)
    expected = [r"^\[stdout:\d+\] $", "^stdout$", "^stdout2$"] * n
    expected += [r"^\[output:\d+\]$", r"IPython\..+\.HTML"] * n
    expected += [r"^\[output:\d+\]$", r"IPython\..+\.Math"] * n
    expected += [r"Out\[\d+:\d+\]:.*IPython\..+\.Math"] * n
    _expect_lines(out, expected)


@pytest.mark.cluster  # display() on in-process engines reaches this shell
def test_cellpx_groupby_type(shell, capsys):
    """ipyparallel's test_cellpx_groupby_type: all stdout, then each engine's outputs."""
    sh, view = shell
    out = _grouped(sh, view, capsys, "type")
    n = len(view)
    expected = [r"^\[stdout:\d+\] $", "^stdout$", "^stdout2$"] * n
    expected += [
        r"^\[output:\d+\]$",
        r"IPython\.core\.display\.HTML",
        r"IPython\.core\.display\.Math",
    ] * n
    expected += [(r"Out\[\d+:\d+\]", r"IPython\.core\.display\.Math")] * n
    _expect_lines(out, expected)


@pytest.mark.cluster  # the engines' IPython shells (on in-process engines: this one)
def test_autopx_blocking(shell, rc, capsys):
    """ipyparallel's test_autopx_blocking: every cell runs on the engine, its output and
    Out[n:k] shown, an error shown and the later cells still run."""
    sh, _ = shell
    v = rc[-1]
    v.activate()
    v.block = True
    capsys.readouterr()
    sh.run_line_magic("autopx", "")
    sh.run_cell("a=5\nb=12345\nc=0")
    sh.run_cell("b*=2")
    sh.run_cell("print (b)")
    sh.run_cell("b")
    sh.run_cell("b/c")
    sh.run_line_magic("autopx", "")
    output = capsys.readouterr().out
    assert output.startswith("%autopx enabled"), output
    assert output.rstrip().endswith("%autopx disabled"), output
    assert "ZeroDivisionError" in output
    assert re.search(r"Out\[\d+:\d+\]: (\x1b\[0m)?24690", output), output  # coloured or not
    with pytest.raises(ipp.RemoteError, match="ZeroDivisionError"):
        v.get_result(-1).get(timeout=30)
    assert v["a"] == 5 and v["b"] == 24690


@pytest.mark.cluster
def test_autopx_nonblocking_aborts_the_cells_queued_behind_an_error(shell, rc, capsys, tmp_path):
    """ipyparallel's test_autopx_nonblocking: the cells go out without waiting, nothing is
    shown of them, one history entry each; the failed cell aborts the executes queued
    behind it on the engine (ipykernel's stop_on_error), so ``b *= 2`` never runs."""
    sh, _ = shell
    v = rc[-1]
    v.activate()
    v.block = False
    gate = tmp_path / "go"
    before = len(v.history)
    capsys.readouterr()
    sh.run_line_magic("autopx", "")
    sh.run_cell("a=5\nb=10\nc=0")
    sh.run_cell("print (b)")
    # the engine waits here until every cell is sent (ipyparallel's test sleeps 0.1 s)
    sh.run_cell(f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)")
    sh.run_cell("b/c")
    sh.run_cell("b*=2")
    sh.run_line_magic("autopx", "")
    output = capsys.readouterr().out.rstrip()
    assert output == "%autopx enabled\n%autopx disabled"  # no Out[n] of pending results
    assert len(v.history) - before == 5
    sh._zpar_magics.last_result.wait_for_send(30)  # b*=2's, the last cell's
    gate.touch()
    with pytest.raises(ipp.RemoteError, match="ZeroDivisionError"):
        v.get_result(-2, owner=False).get(timeout=30)
    with pytest.raises(ipp.TaskAborted):
        v.get_result(-1, owner=False).get(timeout=30)
    assert v["a"] == 5
    assert v["b"] == 10  # b*=2 was aborted
