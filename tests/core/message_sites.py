"""Where product code builds the content of a message of a defined type, and how.

An AST scan of the processes' code (client, hub, schedulers, engine, communicator, typed,
darray, dashboard, zpar/ outside zpar/wire/messages/). A *send site* is a call that is given
a message type literally (``MsgType.X``, or a string naming one) and, right after it, the
message's content; the content is

- ``definition``: ``Cls(...).as_dict()`` or ``Cls.content(...)`` (``Cls`` a content class,
  or ``CONTENT[t]`` / any table of them), or a name bound only to such in the enclosing
  function or the module;
- ``hand``: a dict literal (``{}`` too), ``dict(...)``, or a name bound to one;
- ``extended``: a name bound to a definition's map that the function then writes keys into
  (fields the definition does not have);
- ``passed``: anything else (a parameter, a helper's result): built elsewhere, where the
  second scan looks.

A *content-shaped dict* is a dict literal (or a ``dict(key=...)`` call) anywhere in that code
whose keys are all fields of one content class and include every field of it without a default: a content built by hand
whichever way it then travels. ``python -m tests.core.message_sites [checkout]`` prints
both, per type.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import NamedTuple

from zpar.wire.messages import CONTENT, MsgType

ROOT = Path(__file__).resolve().parents[2]
#: the processes' code: every product package but the definitions themselves
PRODUCT = (
    "client",
    "communicator",
    "darray",
    "dashboard",
    "engine",
    "hub",
    "schedulers",
    "typed",
    "zpar",
)
DEFINITIONS = ROOT / "zpar" / "wire" / "messages"
#: modules that speak another protocol: the bound kernel answers Jupyter frontends through
#: jupyter_client's Session (its "status", "execute_reply"... are Jupyter's, not zpar's)
OTHER_PROTOCOLS = {ROOT / "engine" / "boundkernel.py"}

#: content class name -> its msg_type
CLASSES = {cls.__name__: t for t, cls in CONTENT.items()}
#: msg_type strings a literal may name (one word ones, "status", "error", "stream", are
#: too common as keys to be read as a type: those are found through MsgType.X)
TYPE_STRINGS = {t.value for t in MsgType if "_" in t.value}


class Site(NamedTuple):
    path: str  # relative to the repository
    line: int
    msg_type: str  # a MsgType value
    how: str  # definition | hand | extended | passed | shaped | built
    detail: str  # the class used, or the expression's source


def product_files(root: Path = ROOT) -> Iterator[Path]:
    for top in PRODUCT:
        for path in sorted((root / top).rglob("*.py")):
            if DEFINITIONS not in path.parents and path not in OTHER_PROTOCOLS:
                yield path


def _type_of(node: ast.expr) -> list[str]:
    """The message types ``node`` names literally (two for ``A if c else B``), else []."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "MsgType"
        and node.attr in MsgType.__members__
    ):
        return [MsgType[node.attr].value]
    if isinstance(node, ast.Constant) and node.value in TYPE_STRINGS:
        return [node.value]
    if isinstance(node, ast.IfExp):
        a, b = _type_of(node.body), _type_of(node.orelse)
        return a + b if a and b else []
    return []


def _definition_class(node: ast.expr, scopes: tuple[_Scope, ...] = ()) -> str | None:
    """``Cls(...).as_dict()`` (or ``x.as_dict()``, ``x = Cls(...)``) or ``Cls.content(...)``:
    the class's name ("CONTENT[]" for a class looked up in a table); else None."""
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    if node.func.attr == "as_dict":
        made = node.func.value
        if isinstance(made, ast.Name):
            bound = next((s.bound[made.id] for s in scopes if made.id in s.bound), [])
            made = bound[0] if len(bound) == 1 else made
        built = made.func if isinstance(made, ast.Call) else None
        if isinstance(built, ast.Name) and built.id in CLASSES:
            return built.id
        if isinstance(built, ast.Subscript):
            return f"{ast.unparse(built.value)}[]"
    if (
        node.func.attr == "content"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in CLASSES
    ):
        return node.func.value.id
    return None


def _is_hand(node: ast.expr) -> bool:
    if isinstance(node, ast.Dict | ast.DictComp):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict"


class _Scope:
    """What one function (or a module's top level) binds to each name, and which names it
    writes keys into."""

    def __init__(self, body: Iterable[ast.AST]) -> None:
        self.bound: dict[str, list[ast.expr]] = defaultdict(list)
        self.written: set[str] = set()
        for node in _walk_shallow(body):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        self.bound[target.id].append(node.value)
                    elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                        self.written.add(target.value.id)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if node.value is not None:
                    self.bound[node.target.id].append(node.value)
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "setdefault", "__setitem__")
                and isinstance(node.func.value, ast.Name)
            ):
                self.written.add(node.func.value.id)


def _walk_shallow(body: Iterable[ast.AST]) -> Iterator[ast.AST]:
    """Every node of ``body`` but those inside nested functions and classes."""
    stack = [n for n in body if not isinstance(n, _NESTED)]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, _NESTED):
                stack.append(child)


_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


def _classify(node: ast.expr, *scopes: _Scope) -> tuple[str, str]:
    """How ``node`` is built, looking its names up in ``scopes`` (innermost first)."""
    cls = _definition_class(node, scopes)
    if cls is not None:
        return "definition", cls
    if _is_hand(node):
        return "hand", ast.unparse(node)[:80]
    scope = next((s for s in scopes if isinstance(node, ast.Name) and node.id in s.bound), None)
    if scope is not None and isinstance(node, ast.Name):
        kinds = [_classify(v, *scopes) for v in scope.bound[node.id] if v is not node]
        if any(k == "hand" for k, _ in kinds):
            return "hand", f"{node.id} = " + next(d for k, d in kinds if k == "hand")
        if all(k == "definition" for k, _ in kinds):
            classes = ", ".join(sorted({d for _, d in kinds}))
            if node.id in scope.written:
                return "extended", f"{node.id}[...] = ... on {classes}"
            return "definition", classes
    return "passed", ast.unparse(node)[:80]


def _content_arg(call: ast.Call, i: int) -> ast.expr | None:
    """The content given with the type at positional ``i``: the next positional, or
    ``content=``."""
    if i + 1 < len(call.args) and not isinstance(call.args[i + 1], ast.Starred):
        return call.args[i + 1]
    for kw in call.keywords:
        if kw.arg == "content":
            return kw.value
    return None


def scan_source(source: str, path: str = "<string>") -> tuple[list[Site], list[Site], list[Site]]:
    """(send sites, content-shaped dicts, constructions of a content class) of one module's
    source. A dict is counted as shaped only when its keys fit one class alone (``{"status":
    s}`` fits every reply, and is how a client-side stand-in says ok too)."""
    tree = ast.parse(source, path)
    nodes = list(ast.walk(tree))
    shaped = [
        Site(path, node.lineno, types[0], "shaped", ast.unparse(node)[:80])
        for node in nodes
        if isinstance(node, ast.Dict | ast.Call) and len(types := _shaped_as(node)) == 1
    ]
    built = (
        [
            Site(path, node.lineno, CLASSES[node.func.id], "built", node.func.id)
            for node in nodes
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in CLASSES
        ]
        + [  # the map built without an instance (``Cls.content(...)``)
            Site(path, node.lineno, CLASSES[node.func.value.id], "built", node.func.value.id)
            for node in nodes
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "content"
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id in CLASSES
        ]
        + [  # a table of classes, called through it (``_OK_REPLIES[t](...)``)
            Site(path, elt.lineno, CLASSES[elt.id], "built", elt.id)
            for node in nodes
            if isinstance(node, ast.Tuple | ast.List | ast.Set)
            for elt in node.elts
            if isinstance(elt, ast.Name) and elt.id in CLASSES
        ]
    )
    typed = {
        id(node)
        for node in nodes
        if isinstance(node, ast.Call) and any(_type_of(arg) for arg in node.args)
    }
    return _send_sites(tree, nodes, typed, path) if typed else [], shaped, built


def _send_sites(tree: ast.Module, nodes: list[ast.AST], typed: set[int], path: str) -> list[Site]:
    """The send sites among the calls ``typed`` (those given a type literally), each
    content looked up in the function that holds the call, then the module."""
    sites: list[Site] = []
    module = _Scope(tree.body)
    owners: list[ast.AST] = [tree]
    owners += [n for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    for owner in owners:
        calls = [
            n
            for n in _walk_shallow(owner.body)  # type: ignore[attr-defined]
            if isinstance(n, ast.Call) and id(n) in typed
        ]
        if not calls:
            continue
        scopes = (module,) if owner is tree else (_Scope(owner.body), module)  # type: ignore[attr-defined]
        for node in calls:
            for i, arg in enumerate(node.args):
                types = _type_of(arg)
                content = _content_arg(node, i) if types else None
                if content is None:
                    continue
                how, detail = _classify(content, *scopes)
                for t in types:
                    named = {CLASSES[c] for c in detail.split(", ") if c in CLASSES}
                    if how == "definition" and named and t not in named:
                        how, detail = "hand", f"{detail} sent as {t}"
                    sites.append(Site(path, node.lineno, t, how, detail))
    return sites


def _fields(cls: type) -> tuple[set[str], set[str]]:
    every = {f.name for f in dataclasses.fields(cls)}
    required = {
        f.name
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return every, required


_SHAPES = {t: _fields(cls) for t, cls in CONTENT.items()}


def _literal_keys(node: ast.Dict | ast.Call) -> list[str]:
    """The keys a dict literal or a ``dict(key=...)`` call spells, or [] when one is not
    literal (``**``, a computed key, a positional argument: not a literal content)."""
    if isinstance(node, ast.Call):
        if not (isinstance(node.func, ast.Name) and node.func.id == "dict") or node.args:
            return []
        keys = [kw.arg for kw in node.keywords]
        return [] if None in keys else keys  # type: ignore[return-value]
    keys = []
    for k in node.keys:
        if not (isinstance(k, ast.Constant) and isinstance(k.value, str)):
            return []
        keys.append(k.value)
    return keys


def _shaped_as(node: ast.Dict | ast.Call) -> list[str]:
    """The types whose content ``node`` is, by its keys (all fields of the type, every
    required one among them, at least one)."""
    keys = _literal_keys(node)
    if not keys:
        return []
    got = set(keys)
    return sorted(t.value for t, (every, required) in _SHAPES.items() if required <= got <= every)


def scan(root: Path = ROOT) -> tuple[list[Site], list[Site], list[Site]]:
    """(send sites, shaped dicts, constructions) of the whole product code."""
    found: tuple[list[Site], list[Site], list[Site]] = ([], [], [])
    for path in product_files(root):
        for mine, theirs in zip(
            found, scan_source(path.read_text(), str(path.relative_to(root))), strict=True
        ):
            mine += theirs
    return found


def hand_built(sites: list[Site], shaped: list[Site]) -> list[Site]:
    """The sites that build a defined type's content by hand (what the test forbids)."""
    return sorted([s for s in sites if s.how in ("hand", "extended")] + shaped)


def table(sites: list[Site], shaped: list[Site], built: list[Site]) -> str:
    """Per defined type: where it is built from its definition, where by hand, and the
    send sites whose content is built elsewhere ("passed"); then each site not from a
    definition."""
    hand = hand_built(sites, shaped)
    rows = [f"{'msg_type':32} {'class':28} {'from definition':>15} {'by hand':>7} {'passed':>6}"]
    for t in sorted(CONTENT):
        n_def = sum(s.msg_type == t for s in built)
        n_hand = len({(s.path, s.line) for s in hand if s.msg_type == t})
        n_passed = sum(s.msg_type == t and s.how == "passed" for s in sites)
        rows.append(f"{t:32} {CONTENT[t].__name__:28} {n_def:15} {n_hand:7} {n_passed:6}")
    unused = sorted(CONTENT[t].__name__ for t in CONTENT if not any(s.msg_type == t for s in built))
    rows += ["", f"{len(unused)} of {len(CONTENT)} classes never built: {', '.join(unused)}", ""]
    rows += [f"{s.path}:{s.line}: {s.msg_type} {s.how}: {s.detail}" for s in hand]
    rows += [
        f"{s.path}:{s.line}: {s.msg_type} passed: {s.detail}" for s in sites if s.how == "passed"
    ]
    return "\n".join(rows)


if __name__ == "__main__":
    # another checkout's product code may be scanned against these definitions: argv[1]
    sys.stdout.write(table(*scan(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT)) + "\n")
