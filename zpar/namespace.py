"""The engine's user namespace: where pushed names live and interactive code runs.

Functions shipped by value (defined in ``__main__``, or in a module registered with
``cloudpickle.register_pickle_by_value``) arrive with a private globals dict holding only
the names they captured. Run as is, they
would never see names pushed to the engine; so they are rebuilt over the engine namespace,
after filling in the captured names the namespace lacks (pushed values win).

``push`` and ``pull`` are module-level so the client can send them pickled by reference
(``zpar.namespace.push``); they act on the namespace the kernel made current.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import linecache
import re
import sys
import threading
import types
from collections.abc import Sequence
from typing import Any

#: The namespace push/pull act on; set by the kernel that owns it.
_current: dict[str, Any] | None = None
#: Engines running as threads of one process (zpar.testing) keep one namespace per thread
#: here instead; None in an engine process, which has one namespace (per_thread()).
_threads: threading.local | None = None


def _fresh() -> dict[str, Any]:
    return {
        "__name__": "__main__",
        "__doc__": None,
        "__package__": None,
        "__spec__": None,
        "__loader__": None,
        "__builtins__": builtins,
    }


def new_namespace() -> dict[str, Any]:
    """A module-like dict, as ``__main__`` of a fresh interpreter would have."""
    return _fresh()


def reset_namespace(ns: dict[str, Any]) -> None:
    """Empty ``ns`` in place (functions bound to it keep the same dict)."""
    ns.clear()
    ns.update(_fresh())


def per_thread(on: bool = True) -> None:
    """While on, each thread has its own current namespace: for engines that run as
    threads of one process (zpar.testing). An engine process never calls it."""
    global _threads
    if on and _threads is None:
        _threads = threading.local()
    elif not on:
        _threads = None


def set_current(ns: dict[str, Any] | None) -> None:
    global _current
    if _threads is not None:
        _threads.ns = ns
    else:
        _current = ns


def current_or_none() -> dict[str, Any] | None:
    """The current namespace, or None outside an engine."""
    if _threads is not None:
        return getattr(_threads, "ns", None)
    return _current


def current() -> dict[str, Any]:
    ns = current_or_none()
    if ns is None:
        raise RuntimeError("no engine namespace: push/pull run only inside a zpar engine")
    return ns


def push(ns_updates: dict[str, Any]) -> None:
    """Bind each name of ``ns_updates`` in the engine namespace; functions shipped by value
    get the namespace as their globals, as ipyparallel's pushed functions do (code that
    calls them later sees names defined there since). A key that is not a plain name is an
    assignment target, as in ipyparallel: ``dv['a.b'] = 0`` sets attribute b of a."""
    ns = current()
    for k, v in ns_updates.items():
        if k.isidentifier():
            ns[k] = bind(v, ns)
        else:
            _assign(ns, k, bind(v, ns))


def _assign(ns: dict[str, Any], target: str, value: Any) -> None:
    tmp = "_zpar_push_value"
    while tmp in ns:
        tmp += "_"
    ns[tmp] = value
    try:
        exec(compile(f"{target} = {tmp}", "<push>", "exec"), ns)
    finally:
        ns.pop(tmp, None)


def pull(names: str | Sequence[str]) -> Any:
    """The value of one name (str) or a list of values (sequence of names); a key that is
    not a plain name is evaluated there, as in ipyparallel (``dv['a.b']``)."""
    ns = current()

    def one(name: str) -> Any:
        try:
            return ns[name]
        except KeyError:
            if not name.isidentifier():
                return eval(compile(name, "<pull>", "eval"), ns)
            raise NameError(f"name {name!r} is not defined on this engine") from None

    if isinstance(names, str):
        return one(names)
    return [one(n) for n in names]


def shipped_by_value(f: types.FunctionType) -> bool:
    """True if cloudpickle rebuilt ``f`` from its code (its globals are not a module's).

    That is every function of ``__main__`` (a notebook, a script) and of modules registered
    with ``cloudpickle.register_pickle_by_value``; a function of an importable module
    arrives by reference and keeps its module's globals.
    """
    module = sys.modules.get(f.__module__ or "")
    return module is None or f.__globals__ is not getattr(module, "__dict__", None)


#: Where a function shipped by value (defined in ``__main__``, or inside another function)
#: finds its globals when it runs on an engine: this process's setting, which
#: zpar.serialize's use_pickle / use_cloudpickle / use_default change (a DirectView's run
#: them on its engines too, as ipyparallel's):
#: GLOBALS_MERGED (zpar's default): the engine's namespace, with the names the function
#: captured on the client filling in what the namespace lacks;
#: GLOBALS_CAPTURED (use_cloudpickle): the globals it captured, the client's values (what
#: cloudpickle gives ipyparallel);
#: GLOBALS_NAMESPACE (use_pickle): the engine's namespace only for ``__main__``'s functions,
#: their module's globals for the others (ipyparallel's canning).
GLOBALS_MERGED, GLOBALS_CAPTURED, GLOBALS_NAMESPACE = "merged", "captured", "namespace"
_globals_rule = GLOBALS_MERGED


def globals_rule() -> str:
    return _globals_rule


def set_globals_rule(rule: str) -> None:
    global _globals_rule
    if rule not in (GLOBALS_MERGED, GLOBALS_CAPTURED, GLOBALS_NAMESPACE):
        raise ValueError(f"unknown globals rule {rule!r}")
    _globals_rule = rule


def bind(f: Any, ns: dict[str, Any]) -> Any:
    """``f`` itself, or for a function shipped by value a copy whose globals are ``ns``
    (under the globals rule above: captured names fill in what ``ns`` lacks by
    default, ``ns`` alone after use_pickle, ``f``'s own globals after use_cloudpickle)."""
    if type(f) is not types.FunctionType:
        return f
    g = f.__globals__
    if g is ns or not shipped_by_value(f):
        return f
    rule = _globals_rule
    if rule == GLOBALS_CAPTURED:
        return f
    if rule == GLOBALS_NAMESPACE and f.__module__ not in (None, "__main__"):
        # ipyparallel's canning: a function of an importable module (a nested one, sent by
        # value) runs over that module's globals; only __main__'s use the namespace
        module = _importable_module(f.__module__)
        if module is None:
            return f
        ns = module.__dict__
    elif rule == GLOBALS_MERGED:
        for name, value in g.items():
            if name not in ns and not (name.startswith("__") and name.endswith("__")):
                ns[name] = value
    new = types.FunctionType(f.__code__, ns, f.__name__, f.__defaults__, f.__closure__)
    new.__kwdefaults__ = f.__kwdefaults__
    new.__qualname__ = f.__qualname__
    new.__module__ = f.__module__
    if f.__dict__:
        new.__dict__.update(f.__dict__)
    return new


def _importable_module(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except Exception:  # not importable here: the function keeps what it captured
        return None


def call(f: Any, args: Sequence[Any], kwargs: dict[str, Any], ns: dict[str, Any]) -> Any:
    """Call ``f(*args, **kwargs)`` with the namespace rule applied to ``f``."""
    return bind(f, ns)(*args, **kwargs)


def execute(code: str, ns: dict[str, Any], filename: str = "<zpar-execute>") -> str | None:
    """Run ``code`` in ``ns``; if it ends with an expression, return the repr of its value
    (None when the value is None, as a Python prompt would show nothing).

    The source is registered with linecache so tracebacks show the offending lines.
    """
    try:
        tree = ast.parse(code, filename, "exec")
    except SyntaxError as e:
        raise _ipython_hint(e, code) from None
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    if tree.body:
        exec(compile(tree, filename, "exec"), ns)
    if last is not None:
        value = eval(compile(last, filename, "eval"), ns)
        if value is not None:
            return repr(value)
    return None


#: a line only IPython reads: a magic (``%time``), a shell escape (``!ls``, ``x = !ls``),
#: help (``x?``, ``?x``)
_IPYTHON_LINE = re.compile(r"^\s*(%|!|\?|[\w.]+\s*=\s*[!%])|\?\s*$")

#: what to do about it, in the error an engine without IPython answers
IPYTHON_MISSING = (
    "{line!r} is IPython syntax (magics %, shell escapes !, help ?), and IPython is not "
    "installed on this engine: install it there with pip install 'zpar[ipython]', or "
    "write plain Python"
)


def _ipython_hint(e: SyntaxError, code: str) -> SyntaxError:
    """``e``, or for a line of IPython syntax the same error saying how to get IPython."""
    lines = code.splitlines()
    line = lines[e.lineno - 1] if e.lineno and 0 < e.lineno <= len(lines) else ""
    if not _IPYTHON_LINE.search(line):
        return e
    hinted = SyntaxError(
        IPYTHON_MISSING.format(line=line.strip()),
        (e.filename, e.lineno, e.offset, e.text, e.end_lineno, e.end_offset),
    )
    return hinted
