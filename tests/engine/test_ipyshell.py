"""execute_request through the engine's IPython shell, in memory: a Message in, a Reply out.

What ipyparallel's engines (IPython kernels) do with a ``%px`` cell: magics, ``!``, ``x?``,
``%matplotlib inline`` figures as display data, the last expression as an execute_result.
"""

from __future__ import annotations

import sys

import pytest

from zpar import namespace
from zpar.engine.kernel import Kernel
from zpar.wire import Message, Session
from zpar.wire.messages import MsgType, ReplyStatus

pytestmark = pytest.mark.timeout(60)

SESSION = Session(b"test-key")


def request(msg_type, content=None, buffers=()):
    return Message([b"client"], SESSION.make_header(msg_type), {}, {}, content or {}, list(buffers))


@pytest.fixture
def published():
    return []


@pytest.fixture
def kernel(published):
    k = Kernel(2, "uuid-2", publish=lambda t, c, p: published.append((t, dict(c), p)))
    yield k
    k.close()
    namespace.set_current(None)


def run(kernel, code, silent=False):
    return kernel.handle(request(MsgType.EXECUTE_REQUEST, {"code": code, "silent": silent}))


def ok(reply):
    assert reply.content["status"] == ReplyStatus.OK, reply.content
    return reply


def test_magics_run_and_print(kernel):
    ok(run(kernel, "a = 5"))
    who = ok(run(kernel, "%who"))
    assert who.metadata["stdout"].split() == ["a"]
    timed = ok(run(kernel, "%time sum(range(10))"))
    assert "Wall time" in timed.metadata["stdout"]
    assert timed.metadata["execute_result"]["data"] == {"text/plain": "45"}


@pytest.mark.cluster  # ! starts a shell process
def test_shell_escape_output_is_stdout(kernel, published):
    reply = ok(run(kernel, "!echo hello from the shell"))
    assert "hello from the shell" in reply.metadata["stdout"]
    streams = [c["text"] for t, c, _ in published if t == MsgType.STREAM]
    assert "hello from the shell" in "".join(streams)
    ok(run(kernel, "files = !echo one; echo two"))
    assert list(kernel.ns["files"]) == ["one", "two"]


def test_help_goes_to_stdout(kernel):
    ok(run(kernel, "x = 5"))
    reply = ok(run(kernel, "x?"))
    assert "Type:" in reply.metadata["stdout"] and "int" in reply.metadata["stdout"]


def test_last_expression_is_an_execute_result(kernel, published):
    reply = ok(run(kernel, "y = 21\ny * 2"))
    result = reply.metadata["execute_result"]
    assert result == {
        "execution_count": reply.content["execution_count"],
        "data": {"text/plain": "42"},
        "metadata": {},
    }
    assert reply.content["execute_result"] == "42"
    kinds = [t for t, _, p in published if p["msg_id"] == reply_id(published, reply)]
    assert kinds.index(MsgType.EXECUTE_INPUT) < kinds.index(MsgType.EXECUTE_RESULT)
    silent = ok(run(kernel, "y * 3", silent=True))
    assert "execute_result" not in silent.metadata and silent.content["execute_result"] is None
    assert silent.content["execution_count"] == reply.content["execution_count"]


def reply_id(published, reply):
    return next(p["msg_id"] for t, c, p in published if t == MsgType.EXECUTE_INPUT)


def test_display_reaches_the_reply_and_iopub(kernel, published):
    reply = ok(run(kernel, "from IPython.display import HTML, display\ndisplay(HTML('<b>hi</b>'))"))
    (output,) = reply.metadata["outputs"]
    assert output["data"]["text/html"] == "<b>hi</b>"
    shown = [c for t, c, _ in published if t == MsgType.DISPLAY_DATA]
    assert shown == [output]


def test_display_in_apply_once_the_shell_exists(kernel):
    """As ipyparallel's test_apply_displaypub: display() inside an applied function."""
    from zpar.serialize import pack_apply

    ok(run(kernel, "from IPython.display import display"))

    def publish():
        from IPython.display import display

        for i in range(3):
            display(i)

    reply = ok(kernel.handle(request(MsgType.APPLY_REQUEST, {}, pack_apply(publish, (), {}))))
    assert [o["data"] for o in reply.metadata["outputs"]] == [
        {"text/plain": str(i)} for i in range(3)
    ]


@pytest.mark.cluster  # matplotlib may start fc-list to build its font cache
def test_matplotlib_inline_figure_is_display_data(kernel):
    pytest.importorskip("matplotlib", reason="matplotlib is a test extra")
    ok(run(kernel, "%matplotlib inline"))
    reply = ok(run(kernel, "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);"))
    (figure,) = reply.metadata["outputs"]
    assert figure["data"]["image/png"].startswith("iVBORw0KGgo")  # base64 of a PNG header
    assert "execute_result" not in reply.metadata  # the ';' hides the Line2D list


def test_errors_carry_the_ipython_traceback(kernel, published):
    reply = run(kernel, "def f():\n    return 1 / 0\nf()")
    assert reply.content["ename"] == "ZeroDivisionError"
    tb = "".join(reply.content["traceback"])
    assert "ZeroDivisionError" in tb and "return 1 / 0" in tb
    assert reply.content["engine_info"]["engine_id"] == 2
    assert [c["ename"] for t, c, _ in published if t == MsgType.ERROR] == ["ZeroDivisionError"]
    bad = run(kernel, "%no_such_magic")
    assert bad.content["ename"] == "UsageError" and "no_such_magic" in bad.content["evalue"]


def test_clear_resets_the_shell_namespace(kernel):
    ok(run(kernel, "gone = 1\ngone"))
    kernel.handle(request(MsgType.CLEAR_REQUEST))
    reply = run(kernel, "gone")
    assert reply.content["ename"] == "NameError"
    ok(run(kernel, "%who"))  # the shell still works on the cleared namespace


def test_apply_never_loads_ipython(kernel):
    from zpar.serialize import pack_apply

    ok(kernel.handle(request(MsgType.APPLY_REQUEST, {}, pack_apply(sum, ([1, 2],), {}))))
    assert kernel._ipython is None and kernel._outputs is None


def test_without_ipython_plain_python_runs_and_ipython_syntax_names_the_fix(kernel, monkeypatch):
    monkeypatch.setitem(sys.modules, "zpar.engine.ipyshell", None)  # import fails
    reply = ok(run(kernel, "a = 2\na + 1"))
    assert reply.content["execute_result"] == "3" and kernel._ipython is False
    for code in ("%matplotlib inline", "!pip list", "a?", "x = 1\nfiles = !ls"):
        err = run(kernel, code)
        assert err.content["ename"] == "SyntaxError", err.content
        assert "pip install 'zpar[ipython]'" in err.content["evalue"], err.content
    plain = run(kernel, "1 +")
    assert "zpar[ipython]" not in plain.content["evalue"]


def test_a_closed_kernel_gives_the_process_its_shell_back(kernel):
    """An embedded engine's shell is the process's InteractiveShell while it runs (display()
    and the inline backend find it there), and not after: a later InteractiveShell.instance()
    (a test's, a notebook's) is a plain shell, not the engine's with its display hook."""
    from IPython.core.interactiveshell import InteractiveShell

    from tests.shells import clear_shell
    from zpar.engine.ipyshell import EngineShell

    clear_shell()  # whatever the process had: this test is about the kernel's own
    ok(run(kernel, "v = 1"))
    assert isinstance(InteractiveShell.instance(), EngineShell)
    kernel.close()
    assert not InteractiveShell.initialized()
    mine = InteractiveShell.instance()
    try:
        assert type(mine) is InteractiveShell and "v" not in mine.user_ns
    finally:
        clear_shell()


def test_a_kernel_leaves_a_shell_the_program_has_alone(published):
    from tests.shells import fresh_shell

    with fresh_shell() as mine:
        k = Kernel(4, "uuid-4", publish=lambda t, c, p: published.append((t, dict(c), p)))
        try:
            ok(run(k, "w = 2"))
            assert k._ipython is not mine and "w" not in mine.user_ns
        finally:
            k.close()
            namespace.set_current(None)
        from IPython.core.interactiveshell import InteractiveShell

        assert InteractiveShell.instance() is mine
