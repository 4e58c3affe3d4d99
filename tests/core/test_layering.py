"""The house rules the code's shape follows, checked on its source (issue 12, "Shape"):
one error tree in zpar/errors.py, error replies named by their classes, no import circles.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
from pathlib import Path

import pytest

from zpar.errors import (
    ClusterBusy,
    ControllerError,
    ExposureRefused,
    HubRefused,
    LaunchError,
    NotReadyError,
    RegistrationRefused,
    StoreError,
    TaskAborted,
    ZparError,
    error_content,
)
from zpar.wire.messages import ReplyStatus

ROOT = Path(__file__).resolve().parents[2]
#: import name -> source folder, as pyproject.toml's package-dir maps them
PACKAGES = {
    "zpar": ROOT / "zpar",
    "zpar.hub": ROOT / "hub",
    "zpar.engine": ROOT / "engine",
    "zpar.client": ROOT / "client",
    "zpar.schedulers": ROOT / "schedulers",
    "zpar.comm": ROOT / "communicator",
    "zpar.typed": ROOT / "typed",
    "zpar.darray": ROOT / "darray",
    "zpar.dashboard": ROOT / "dashboard",
}
#: the core's rooms: their errors live in zpar/errors.py. Capabilities (comm, typed, darray)
#: keep theirs, deriving from ZparError (docs/decisions.md, "Shape").
CORE = ("zpar", "zpar.hub", "zpar.engine", "zpar.client", "zpar.schedulers")
#: exceptions that are control flow inside one module, never seen outside it
PRIVATE = {"zpar.engine.engine": {"Stop"}}


def modules() -> dict[str, Path]:
    found = {}
    for pkg, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if pkg == "zpar" and (folder / parts[0]).is_dir() and f"zpar.{parts[0]}" in PACKAGES:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([pkg, *parts])] = path
    return found


MODULES = modules()


@functools.cache
def parsed(path: Path) -> ast.Module:
    """Each module's syntax tree, parsed once for every rule below."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def _imports(module: str, path: Path) -> frozenset[str]:
    """Every zpar module ``module`` imports, wherever the import sits (a function-level
    import is still a dependency), TYPE_CHECKING blocks included."""
    tree = parsed(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]
            out.update(subs)
            if len(subs) < len(node.names):
                out.add(target)
    return frozenset(m for m in out if m in MODULES and m != module)


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for m in graph:
        if m not in index:
            visit(m)
    return circles


def test_the_module_map_sees_the_packages():
    # guards the checks below against passing on an empty map
    for name in ("zpar.errors", "zpar.hub.hub", "zpar.hub.stores", "zpar.hub.stores.sqlite"):
        assert name in MODULES
    assert "zpar.hub.queries" in _imports("zpar.hub.hub", MODULES["zpar.hub.hub"])


def test_no_import_circles():
    """A circle, even through a function-level or TYPE_CHECKING import, means two modules
    know each other's insides: cut it by moving what both need to a third module or by
    typing against a Protocol (hub.queryapi.HubState)."""
    assert import_circles({m: _imports(m, p) for m, p in MODULES.items()}) == []


def test_the_detector_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_circles(graph) == [["a", "b", "c"]]
    assert import_circles({"a": {"b"}, "b": set()}) == []


def _exception_classes(module: str, path: Path) -> list[str]:
    tree = parsed(path)
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.bases:
            cls = getattr(importlib.import_module(module), node.name, None)
            if inspect.isclass(cls) and issubclass(cls, BaseException):
                names.append(node.name)
    return names


def test_every_core_error_class_is_in_zpar_errors():
    stray = {}
    for module, path in MODULES.items():
        if module == "zpar.errors" or module.split(".")[0:2] != module.split(".")[0:2]:
            continue
        if not any(module == c or module.startswith(c + ".") for c in CORE) or module.startswith(
            ("zpar.comm", "zpar.typed", "zpar.darray")
        ):
            continue
        names = [n for n in _exception_classes(module, path) if n not in PRIVATE.get(module, ())]
        if names:
            stray[module] = names
    assert stray == {}


@pytest.mark.parametrize(
    "cls",
    [
        LaunchError,
        ControllerError,
        StoreError,
        RegistrationRefused,
        ClusterBusy,
        ExposureRefused,
        NotReadyError,
    ],
)
def test_moved_errors_are_zpar_errors(cls):
    assert cls.__module__ == "zpar.errors" and issubclass(cls, ZparError)


def test_old_import_paths_still_work():
    from zpar.client.asyncresult import NotReadyError as a
    from zpar.cluster.launcher import LaunchError as launcher_error
    from zpar.cluster.launchers import LaunchError as launchers_error
    from zpar.cluster.ownership import ClusterBusy as b
    from zpar.engine.registration import RegistrationRefused as r
    from zpar.hub.controller import ControllerError as c
    from zpar.hub.stores import StoreError as s
    from zpar.wire.privacy import ExposureRefused as e

    assert (a, r, c, s, b, e) == (
        NotReadyError,
        RegistrationRefused,
        ControllerError,
        StoreError,
        ClusterBusy,
        ExposureRefused,
    )
    assert launcher_error is launchers_error is LaunchError
    assert issubclass(ExposureRefused, ValueError)  # callers catch it as one
    assert issubclass(NotReadyError, (RuntimeError, ValueError))


def test_error_content_names_the_class():
    c = error_content(
        TaskAborted, "task x was aborted", status=ReplyStatus.ABORTED, zpar_error=True
    )
    assert c == {
        "status": "aborted",
        "ename": "TaskAborted",
        "evalue": "task x was aborted",
        "zpar_error": True,
    }
    try:
        raise KeyError("k")
    except KeyError as e:
        c = error_content(e, traceback=["tb"], engine_info={"engine_id": 3})
    assert c == {
        "status": "error",
        "ename": "KeyError",
        "evalue": "'k'",
        "traceback": ["tb"],
        "engine_info": {"engine_id": 3},
    }
    assert error_content(HubRefused, "no", unknown=["a"])["unknown"] == ["a"]


def test_error_content_round_trips_to_the_class():
    from zpar.errors import RemoteError

    err = RemoteError.from_content(error_content(TaskAborted, "gone", zpar_error=True))
    # as ipyparallel raises it (a RemoteError naming it), and still the class (issue 24)
    assert isinstance(err, TaskAborted) and isinstance(err, RemoteError)
    assert err.ename == "TaskAborted" and err.evalue == "gone" and "gone" in str(err)
    err = RemoteError.from_content(error_content(ValueError("bad"), traceback=[]))
    assert type(err) is RemoteError and err.ename == "ValueError"


def _string_enames(path: Path) -> list[int]:
    """Lines of ``path`` that write an error name as a literal (``"ename": "X"``,
    ``ename="X"``) instead of taking it from a class."""
    lines = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(k, ast.Constant)
                    and k.value == "ename"
                    and isinstance(v, ast.Constant | ast.IfExp)
                ):
                    lines.append(node.lineno)
    return lines


def test_no_error_names_typed_as_strings():
    """Error replies come from zpar.errors.error_content, which names the class."""
    found = {m: lines for m, p in MODULES.items() if (lines := _string_enames(p))}
    assert found == {}


#: zpar/ modules that sit on top of every room: the public façade (lazy re-exports of the
#: client's names) and the command line, which hands a sub-command to a process's main and
#: waits for engines through a Client (docs/decisions.md, "Floor plan"), its smoke jobs
#: (`zpar smoke`, `zpar smoke --job full`: a client's job, with a communicator), the
#: in-process cluster for tests, which assembles every process's parts as threads
#: (zpar.testing), and ipyparallel's paths to client classes (``ipyparallel.cluster``'s
#: Cluster, ``ipyparallel.joblib``'s backend), each imported when first asked for
FACADE = {
    "zpar",
    "zpar.cli",
    "zpar.cluster",
    "zpar.joblib",
    "zpar.cluster.commands",
    "zpar.cluster.smoke",
    "zpar.cluster.smokejob",
    "zpar.testing",
}
ROOMS = tuple(p for p in PACKAGES if p != "zpar")


def test_no_arrow_from_the_core_up_into_a_process_or_capability_folder():
    up = {
        (module, target)
        for module, path in MODULES.items()
        if not module.startswith(tuple(r + "." for r in ROOMS))
        and module not in ROOMS
        and module not in FACADE
        for target in _imports(module, path)
        if target.startswith(tuple(r + "." for r in ROOMS)) or target in ROOMS
    }
    assert not up, f"zpar/ imports a folder above it: {sorted(up)}"


def test_no_class_is_defined_twice():
    """Nested classes count: two ``Reply`` classes are two names for a reader to tell apart."""
    seen: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.ClassDef):
                seen.setdefault(node.name, []).append(module)
    twice = {name: where for name, where in seen.items() if len(where) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"


def test_no_class_is_assembled_from_mixins():
    """One object per role (issue 25): a class that needs another's job owns an instance of
    it, built with explicit arguments, instead of inheriting its half of a host's state.
    Mixins a third-party base class asks for (joblib's AutoBatchingMixin) are theirs."""
    found = [
        f"{module}.{node.name}"
        for module, path in MODULES.items()
        for node in ast.walk(parsed(path))
        if isinstance(node, ast.ClassDef) and node.name.endswith("Mixin")
    ]
    assert not found, f"mixin classes: {found}"


_MUTATORS = frozenset(
    {"append", "appendleft", "extend", "add", "clear", "discard", "insert", "pop", "popleft"}
    | {"remove", "setdefault", "update"}
)


def _attribute_chain(node: ast.expr) -> list[str]:
    """``self.book.live[k]`` -> ["self", "book", "live"]."""
    names = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def writes_through(tree: ast.AST, owner: str) -> list[tuple[int, str]]:
    """(line, expression) of each write into ``owner``'s state: an assignment to, a del of,
    or a mutating call on something reached through an attribute or name ``owner``."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _MUTATORS
            and owner in _attribute_chain(node.func.value)
        ):
            found.append((node.lineno, ast.unparse(node.func)))
        found += [
            (node.lineno, ast.unparse(t)) for t in targets if owner in _attribute_chain(t)[:-1]
        ]
    return sorted(found)


def test_only_the_task_book_writes_its_state():
    """The task scheduler's loop feeds the TaskBook events and carries out the instructions
    it returns (``TaskBook.handle(*events) -> list[Instruction]``); what the loop learns (a
    quota refusal, a task no engine took) goes back as an event, never as a write."""
    found = [
        f"{module}:{line} {expr}"
        for module, path in MODULES.items()
        if not module.startswith("zpar.schedulers.book")
        for line, expr in writes_through(parsed(path), "book")
    ]
    assert not found, f"the task book's state written from outside it: {found}"


def test_the_write_scan_sees_writes_and_leaves_reads_alone():
    tree = ast.parse(
        "def loop(self, events):\n"
        "    self._todo.extend(self.book.handle(*events))\n"
        "    n = len(self.book.live)\n"
        "    self.book.out.append(1)\n"
        "    self.book.paused = set()\n"
        "    del self.book.live['m']\n"
    )
    assert writes_through(tree, "book") == [
        (4, "self.book.out.append"),
        (5, "self.book.paused"),
        (6, "self.book.live['m']"),
    ]
