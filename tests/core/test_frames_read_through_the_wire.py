"""Only zpar/wire/ knows where a part of a message sits (issue 25, "one request path").

The scan reads the product's code: outside zpar/wire/, a subscript of anything named
``frames`` (or ``*_frames``: ``msg.frames[2]``, ``msg_frames[3:]``) is a module reading the
frame layout itself, which zpar.wire's public functions exist for (``envelope_frame``,
``envelope_and_buffers``, ``head_frames``, ``message_buffers``, zpar.wire.monitor's
``packed_body`` and ``split_task_result``). The places below index frames of formats that
are not zpar.wire messages, each with what they are. The scan's own tests show it catches
a hand-indexed message and leaves a wire call alone.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: the product's folders (pyproject.toml's package-dir)
FOLDERS = ("zpar", "hub", "engine", "client", "schedulers", "communicator", "typed", "darray")
FOLDERS += ("dashboard",)
#: the package that owns the frame layout
WIRE = "zpar/wire/"
NAME = re.compile(r"(^|_)frames$")

#: (module, function) -> what its frames are: formats of their own, not zpar.wire messages
NOT_MESSAGES = {
    ("zpar/serialize/__init__.py", "deserialize_object"): (
        "a serialized object: its pickle stream, then its out-of-band buffers"
    ),
    ("hub/heartmonitor.py", "handle_pong"): (
        "a heartbeat pong [engine identity, echoed ping] from the ROUTER: unsigned bytes"
    ),
    ("client/ioloop.py", "_on_notification"): (
        "the notification XPUB's welcome, one unsigned frame (zpar.constants.WELCOME)"
    ),
    ("communicator/peerwire.py", "unpack"): "a communicator packet (peerwire is its codec)",
    ("communicator/links.py", "_send_frames"): "a communicator packet [head, payload]",
    ("communicator/links.py", "_accept"): "a communicator packet [head, payload]",
    ("communicator/links.py", "_drain_for_fins"): "[peer identity, communicator packet]",
    ("communicator/linkpoll.py", "_drain"): "[peer identity, communicator packet]",
}


def indexed_frames(source: str) -> list[tuple[str, int, str]]:
    """(function, line, expression) of each subscript of a ``frames`` name in ``source``."""
    found: list[tuple[str, int, str]] = []
    stack: list[str] = []

    class Visitor(ast.NodeVisitor):
        def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
            stack.append(node.name)
            self.generic_visit(node)
            stack.pop()

        visit_AsyncFunctionDef = visit_FunctionDef

        def visit_Subscript(self, node: ast.Subscript) -> None:
            v = node.value
            name = v.id if isinstance(v, ast.Name) else getattr(v, "attr", None)
            if name is not None and NAME.search(name):
                found.append((stack[-1] if stack else "<module>", node.lineno, ast.unparse(node)))
            self.generic_visit(node)

    Visitor().visit(ast.parse(source))
    return found


def _product() -> dict[str, str]:
    out = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(WIRE):
                out[rel] = path.read_text()
    return out


def test_no_module_outside_the_wire_indexes_message_frames():
    found = [
        f"{rel}:{line} {fn}: {expr}"
        for rel, source in _product().items()
        for fn, line, expr in indexed_frames(source)
        if (rel, fn) not in NOT_MESSAGES
    ]
    assert not found, "frames indexed outside zpar/wire (use its public functions):\n" + "\n".join(
        found
    )


def test_the_exceptions_still_exist():
    """An exception whose place is gone (moved, renamed) goes from the list too."""
    product = _product()
    stale = [
        key
        for key in NOT_MESSAGES
        if key[0] not in product
        or not any(fn == key[1] for fn, *_ in indexed_frames(product[key[0]]))
    ]
    assert not stale, f"exceptions that index no frames any more: {stale}"


def test_no_module_outside_the_wire_imports_the_layout_constant():
    """HEAD_FRAMES is where the buffers start: the layout itself."""
    users = [
        rel
        for rel, source in _product().items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom | ast.Import)
        and any(a.name == "HEAD_FRAMES" for a in node.names)
    ]
    assert not users, f"HEAD_FRAMES imported outside zpar/wire: {users}"


def test_the_scan_catches_a_hand_indexed_message():
    src = textwrap.dedent(
        """
        def keep(msg, frames, msg_frames):
            a = pack_request([msg.frames[2], *msg.buffers])
            b = frames[3:]
            return msg_frames[1]
        """
    )
    assert indexed_frames(src) == [
        ("keep", 3, "msg.frames[2]"),
        ("keep", 4, "frames[3:]"),
        ("keep", 5, "msg_frames[1]"),
    ]


def test_the_scan_leaves_wire_calls_and_other_names_alone():
    src = textwrap.dedent(
        """
        def keep(msg, parts, frame):
            a = pack_request(envelope_and_buffers(msg.frames))
            b = head_frames(msg.frames) + parts[1:]
            return frame[0], len(msg.frames)
        """
    )
    assert indexed_frames(src) == []


def test_the_wire_functions_name_the_parts():
    from zpar.wire import Session, envelope_and_buffers, envelope_frame, head_frames
    from zpar.wire.monitor import packed_body, split_task_result

    _, frames = Session(b"k" * 32).serialize("apply_request", {"a": 1}, buffers=[b"x", b"y"])
    assert envelope_frame(frames) == frames[2]
    assert envelope_and_buffers(frames) == [frames[2], b"x", b"y"]
    assert head_frames(frames) == frames[:3]
    assert packed_body([b"packed"]) == b"packed"
    assert split_task_result([b"m1", b"r1", b"r2"]) == ("m1", [b"r1", b"r2"])


def test_the_wire_functions_refuse_what_is_not_a_message():
    import pytest

    from zpar.wire import envelope_and_buffers, envelope_frame
    from zpar.wire.monitor import packed_body, split_task_result

    for bad in ([], [b"<ZPAR|MSG>", b"sig"]):
        with pytest.raises(ValueError, match="no envelope"):
            envelope_frame(bad)
        with pytest.raises(ValueError, match="no envelope"):
            envelope_and_buffers(bad)
    with pytest.raises(ValueError, match="one frame"):
        packed_body([b"a", b"b"])
    with pytest.raises(ValueError, match="msg_id"):
        split_task_result([])


def _wire_private_methods() -> set[str]:
    """Names of the private methods zpar/wire's classes define (``_verify``, ``_tags``...)."""
    names = set()
    for path in (ROOT / WIRE).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                names.update(
                    b.name
                    for b in node.body
                    if isinstance(b, ast.FunctionDef | ast.AsyncFunctionDef)
                    and b.name.startswith("_")
                    and not b.name.startswith("__")
                )
    return names


def wire_internals_used(source: str, private: set[str]) -> list[tuple[int, str]]:
    """(line, expression) of each reach into zpar.wire's insides in ``source``: a private
    name imported from it, or one of its classes' private methods called on another object
    (``session._refuse(...)``); ``self._x`` and ``cls._x`` are the object's own."""
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and "wire" in (node.module or "").split("."):
            found += [
                (node.lineno, f"import {a.name}") for a in node.names if a.name.startswith("_")
            ]
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in private
            and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
        ):
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_no_module_outside_the_wire_reaches_into_its_insides():
    """zpar.wire is used through its public functions (issue 25: ``Session._refuse`` was
    called from 27 places outside it)."""
    private = _wire_private_methods()
    assert "_verify" in private  # the scan sees the wire's private methods
    found = [
        f"{rel}:{line} {expr}"
        for rel, source in _product().items()
        for line, expr in wire_internals_used(source, private)
    ]
    assert not found, "zpar.wire's insides used outside it:\n" + "\n".join(found)


def test_the_insides_scan_catches_a_reach_and_leaves_the_objects_own_alone():
    src = textwrap.dedent(
        """
        from zpar.wire.session import _sign, Session
        from ..wire.frames import nbytes as _nbytes

        class Mine:
            def _verify(self):
                return self._verify()

        def f(session):
            return session._verify(b"x"), session.verify(b"x")
        """
    )
    assert wire_internals_used(src, {"_verify", "_tags"}) == [
        (2, "import _sign"),
        (10, "session._verify"),
    ]
