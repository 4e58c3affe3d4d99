"""Engines that speak IPython, on a real cluster: %px cells with magics, ``!``, ``?``,
``%matplotlib inline`` figures reaching ``ar.outputs`` and ``display_outputs``, execute values
as ipyparallel's ExecuteReply (its test_view's execute tests), and an engine without IPython.
"""

from __future__ import annotations

import base64
import re

import pytest

import zpar
from tests.clusters import module_cluster, under_headers
from tests.shells import px_shell

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

#: the controller's default heartbeat (2 s of silence), not the suite's fast one (0.4 s):
#: an engine's first execute imports IPython, a burst that a loaded machine can stretch
#: past 0.4 s of scheduling; these tests are about IPython, not about death detection
DEFAULT_HB: list[str] = []


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from module_cluster(
        tmp_path_factory, "zpar-ipython", 2, controller_args=DEFAULT_HB, timeout=60
    )


@pytest.fixture
def shell(rc):
    with px_shell(rc[:]) as (sh, state):
        yield sh, state


def test_px_runs_magics_shell_escapes_and_help(shell, capsys):
    sh, _ = shell
    sh.run_cell_magic("px", "", "%time s = sum(range(10))")
    out = capsys.readouterr().out
    shown = under_headers(out)
    assert shown.keys() == {"[stdout:0]", "[stdout:1]"}
    assert all(t.startswith("CPU times") and "Wall time" in t for t in shown.values()), out
    sh.run_line_magic("px", "!echo engine says hi")
    out = capsys.readouterr().out
    # a shell escape's output comes through a terminal: its lines end in \r\n
    assert out == "[stdout:0] \nengine says hi\r\n[stdout:1] \nengine says hi\r\n"
    sh.run_line_magic("px", "s?")
    out = capsys.readouterr().out
    assert under_headers(out)["[stdout:0]"].startswith("Type:") and "int" in out
    sh.run_line_magic("px", "%who")
    assert re.match(r"s\b", under_headers(capsys.readouterr().out)["[stdout:0]"])


def test_px_shows_the_last_expression_as_out_engine_count(shell, capsys):
    sh, _ = shell
    sh.run_cell_magic("px", "", "a = 5\na * 2")
    out = capsys.readouterr().out
    assert re.search(r"Out\[0:\d+\]: (\x1b\[0m)?10", out), out
    assert re.search(r"Out\[1:\d+\]: (\x1b\[0m)?10", out), out


def test_execute_values_are_execute_replies(rc):
    """ipyparallel's test_execute_reply / _rich / _stdout / _result / _silent."""
    e0 = rc[0]
    er = e0.execute("5", silent=False, block=True).get()
    assert str(er) == f"<ExecuteReply[{er.execution_count}]: 5>"
    assert er.execute_result["data"]["text/plain"] == "5"
    e0.execute("from IPython.display import Image, HTML", block=True)
    er = e0.execute("Image(data=b'garbage', format='png', width=10)", silent=False).get()
    data, metadata = er._repr_png_()
    assert data.strip() == base64.b64encode(b"garbage").decode("ascii")
    assert metadata == {"width": 10}
    assert e0.execute("HTML('<b>bold</b>')", silent=False).get()._repr_html_() == "<b>bold</b>"
    assert e0.execute("print (5)", silent=False).get().stdout.strip() == "5"
    ar = rc[:].execute("5", silent=False, block=True)
    assert [out["data"] for out in ar.execute_result] == [{"text/plain": "5"}] * 2
    assert rc[:].execute("5", block=True).execute_result == [None, None]  # silent


def test_display_outputs_of_execute_and_apply(rc):
    """ipyparallel's test_execute_displaypub and test_apply_displaypub."""
    view = rc[:]
    view.execute("from IPython.display import *", block=True)
    ar = view.execute("[ display(i) for i in range(5) ]", block=True)
    expected = [{"text/plain": str(j)} for j in range(5)]
    assert [[out["data"] for out in outputs] for outputs in ar.outputs] == [expected] * 2

    def publish():
        [display(i) for i in range(5)]  # noqa: F821 - the engines' IPython builtin

    ar = view.apply_async(publish)
    ar.get(30)
    assert [[out["data"] for out in outputs] for outputs in ar.outputs] == [expected] * 2


def test_matplotlib_inline_figures_reach_outputs_and_display_outputs(shell):
    pytest.importorskip("matplotlib", reason="matplotlib is a test extra")
    from IPython.utils.capture import capture_output

    sh, state = shell
    view = state.view
    view.execute("%matplotlib inline", block=True)
    ar = view.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);", block=True)
    for outputs in ar.outputs:
        (figure,) = outputs
        assert base64.b64decode(figure["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    with capture_output() as io:
        ar.display_outputs()
    images = [o for o in io.outputs if "image/png" in o.data]
    assert len(images) == 2 and {o.metadata["engine"] for o in images} == {0, 1}
    assert "[output:0]" in "".join(o.data.get("text/plain", "") for o in io.outputs)
    with capture_output() as io:  # the same under %%px, as a notebook cell shows it
        sh.run_cell_magic("px", "", "plt.plot([2, 1, 3]);")
    assert sum("image/png" in o.data for o in io.outputs) == 2
    with capture_output() as io:  # streamed as they come, each figure once
        sh.run_cell_magic("px", "--stream", "plt.plot([2, 1, 3]);")
    assert sum("image/png" in o.data for o in io.outputs) == 2


def test_errors_of_ipython_code_are_remote_errors(rc):
    with pytest.raises(zpar.RemoteError) as info:
        rc[0].execute("%no_such_magic", block=True).get()
    assert info.value.ename == "UsageError" and "no_such_magic" in str(info.value)
    with pytest.raises(zpar.RemoteError) as info:
        rc[0].execute("def f():\n    1 / 0\nf()", block=True).get()
    assert info.value.ename == "ZeroDivisionError" and "1 / 0" in info.value.traceback


def test_apply_never_loads_ipython_on_the_engine(make_cluster):
    import sys

    def loaded():
        return "IPython" in sys.modules

    rc = make_cluster(n=1, controller_args=DEFAULT_HB).client
    rc.wait_for_engines(1, timeout=30)
    assert rc[0].apply_sync(loaded) is False
    rc[0].execute("%who", block=True)
    assert rc[0].apply_sync(loaded) is True


def test_an_engine_without_ipython_runs_python_and_names_the_fix(
    make_cluster, tmp_path, monkeypatch
):
    shadow = tmp_path / "no-ipython" / "IPython"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'IPython'\", name='IPython')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(shadow.parent))
    rc = make_cluster(n=1, controller_args=DEFAULT_HB).client
    rc.wait_for_engines(1, timeout=30)
    er = rc[0].execute("a = 20\na + 1", silent=False, block=True).get()
    assert er.execute_result["data"] == {"text/plain": "21"}
    with pytest.raises(zpar.RemoteError) as info:
        rc[0].execute("%matplotlib inline", block=True).get()
    assert info.value.ename == "SyntaxError"
    assert "pip install 'zpar[ipython]'" in str(info.value)
    assert rc[0]["a"] == 20


def test_bind_kernel_lets_a_jupyter_client_attach_to_an_engine(rc, tmp_path):
    """ipyparallel's %px bind_kernel idiom: a frontend attaches to the engine's namespace."""
    from jupyter_client import BlockingKernelClient

    rc[0].push({"pushed": 21}, block=True)
    out = rc[0].execute(
        f"import zpar\nzpar.bind_kernel(connection_file={str(tmp_path / 'k.json')!r})",
        silent=False,
        block=True,
    )
    path = eval(out.get().execute_result["data"]["text/plain"])
    assert path == str(tmp_path / "k.json") and (tmp_path / "k.json").stat().st_mode & 0o077 == 0
    assert rc[0].apply_sync(zpar.bind_kernel) == path  # bound once
    kc = BlockingKernelClient(connection_file=path)
    kc.load_connection_file()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=30)
        assert kc.kernel_info(reply=True, timeout=30)["content"]["status"] == "ok"
        seen = []
        reply = kc.execute_interactive(
            "print('from the console')\nmade_here = pushed * 2\nmade_here",
            timeout=30,
            output_hook=seen.append,
        )
        assert reply["content"]["status"] == "ok"
        kinds = {m["header"]["msg_type"]: m["content"] for m in seen}
        assert kinds["stream"]["text"] == "from the console\n"
        assert kinds["execute_result"]["data"]["text/plain"] == "42"
        assert rc[0]["made_here"] == 42  # the engine's own namespace
        done = kc.complete("made_h", reply=True, timeout=30)["content"]
        assert "made_here" in done["matches"]
        error = kc.execute_interactive("1 / 0", timeout=30, output_hook=lambda m: None)
        assert error["content"]["ename"] == "ZeroDivisionError"
        assert rc[0].apply_sync(lambda: "tasks still run") == "tasks still run"
    finally:
        kc.stop_channels()
