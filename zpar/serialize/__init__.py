"""Turning Python objects into frames and back: pickle protocol 5 with out-of-band buffers.

``serialize_object(obj)`` returns ``[pickle_stream, buffer, ...]``: every contiguous buffer of
at least OOB_THRESHOLD bytes (numpy arrays, bytes, memoryviews…) is left out of the stream and
returned as a memoryview on the original memory, so the sender hands it to zmq without a
copy; ``deserialize_object`` rebuilds the objects as views on the received frames, so the
receiver does not copy either. Functions and lambdas go through cloudpickle.
"""

from __future__ import annotations

import io
import pickle
import sys
import types
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import cloudpickle

from zpar import namespace
from zpar.constants import OOB_THRESHOLD
from zpar.errors import SerializationError
from zpar.wire import frame_view

PROTOCOL = 5

#: How the client pickles calls: cloudpickle (the default), or the standard pickle
#: (``use_pickle``: data by reference, but functions that cannot be imported on the engines,
#: from ``__main__`` or defined inside other functions, still by value), or dill.
_dumps: Any = cloudpickle.dumps


def _importable(f: types.FunctionType) -> bool:
    """True if the standard pickle can send ``f`` by reference: its module imports and
    names it by its qualified name."""
    by_reference = getattr(cloudpickle.cloudpickle, "_should_pickle_by_reference", None)
    if by_reference is not None:  # knows register_pickle_by_value too
        try:
            return bool(by_reference(f))
        except Exception:  # an odd function: decide below
            pass
    module = sys.modules.get(f.__module__ or "")
    if module is None or f.__module__ == "__main__" or "<locals>" in f.__qualname__:
        return False
    obj: Any = module
    for part in f.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is f


class _StdlibPickler(pickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is types.FunctionType and not _importable(obj):
            return (load_function, (cloudpickle.dumps(obj, protocol=PROTOCOL),))
        return NotImplemented


def _stdlib_dumps(obj: Any, protocol: int = PROTOCOL, buffer_callback: Any = None) -> bytes:
    out = io.BytesIO()
    _StdlibPickler(out, protocol=protocol, buffer_callback=buffer_callback).dump(obj)
    return out.getvalue()


def set_pickler(name: str) -> None:
    """'cloudpickle' (default), 'pickle' (functions still by value when they must be) or
    'dill' (an optional package)."""
    global _dumps
    if name == "cloudpickle":
        _dumps = cloudpickle.dumps
    elif name == "pickle":
        _dumps = _stdlib_dumps
    elif name == "dill":
        try:
            import dill
        except ImportError:
            raise ImportError(
                "use_dill() needs the dill package, which zpar does not depend on: pip install dill"
            ) from None
        _dumps = dill.dumps
    else:
        raise ValueError(f"pickler must be 'cloudpickle', 'pickle' or 'dill', not {name!r}")


#: Types the standard pickle writes exactly as cloudpickle would (by value, no code).
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes, bytearray, range})


def _plain(obj: Any, depth: int = 0) -> bool:
    """True when the standard pickle is enough for ``obj``: builtin values, small containers
    of them, and numpy arrays without Python objects inside. cloudpickle costs ~3 us more
    per call even for ``None`` (its Pickler, and a by-reference check of every function
    the stream names): a tenth of a small task's client cost."""
    t = type(obj)
    if t in _PLAIN:
        return True
    if depth > 2:
        return False
    if t is tuple or t is list:
        return len(obj) <= 32 and all(_plain(x, depth + 1) for x in obj)
    if t is dict:
        return len(obj) <= 32 and all(
            type(k) is str and _plain(v, depth + 1) for k, v in obj.items()
        )
    if t is _PickledFunction or t is _PickledOnce:
        return True
    if t.__name__ == "ndarray" and t.__module__ == "numpy":
        return not obj.dtype.hasobject
    return False


def serialize_object(
    obj: Any, threshold: int = OOB_THRESHOLD, plain: bool | None = None
) -> list[Any]:
    """Pickle ``obj``; large buffers become separate zero-copy frames. plain: whether the
    standard pickle is enough (None: decide with _plain)."""
    buffers: list[memoryview] = []

    def keep_out_of_band(pb: pickle.PickleBuffer) -> bool:
        try:
            raw = pb.raw()
        except BufferError:  # not contiguous: let pickle copy it in-band
            return True
        if raw.nbytes < threshold:
            return True
        buffers.append(raw)
        return False

    dumps = pickle.dumps if (_plain(obj) if plain is None else plain) else _dumps
    stream = dumps(obj, protocol=PROTOCOL, buffer_callback=keep_out_of_band)
    return [stream, *buffers]


def deserialize_object(frames: Sequence[Any]) -> Any:
    """Inverse of serialize_object; arrays come back as views on the frames."""
    if not frames:
        raise SerializationError("nothing to deserialize: no frames")
    return pickle.loads(frame_view(frames[0]), buffers=[frame_view(f) for f in frames[1:]])


def _describe(obj: Any) -> str:
    text = repr(obj)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{type(obj).__module__}.{type(obj).__qualname__} {text}"


def _check_each(f: Any, args: Sequence[Any], kwargs: dict[str, Any], cause: Exception) -> None:
    """Find the first object that cannot be pickled and raise an error that names it."""
    candidates = [("the function", f)]
    candidates += [(f"argument {i}", a) for i, a in enumerate(args)]
    candidates += [(f"keyword argument {k!r}", v) for k, v in kwargs.items()]
    for where, obj in candidates:
        try:
            cloudpickle.dumps(obj, protocol=PROTOCOL, buffer_callback=lambda pb: False)
        except Exception as e:
            raise SerializationError(
                f"cannot send {where}: {_describe(obj)} is not serializable ({type(e).__name__}: "
                f"{e}). Nothing was sent."
            ) from e
    raise SerializationError(f"cannot serialize the call: {cause}. Nothing was sent.") from cause


# -- function pickles, cached ------------------------------------------------------------
#
# A function defined in a notebook or script travels by value, and cloudpickle takes ~60 us
# to pickle even a trivial one: the dominant client cost of a small task. A function is
# pickled again only when something its pickle depends on may have changed; it is cached
# only when everything it references is immutable (numbers, strings, tuples of them) or
# referenced by identity (modules, classes, builtins), so a cached pickle is always the
# pickle a fresh call would make.

_IMMUTABLE = (int, float, complex, str, bytes, bool, type(None), range)
_BY_IDENTITY = (types.ModuleType, type, types.BuiltinFunctionType)
_fn_cache: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], bytes]] = (
    weakref.WeakKeyDictionary()
)


def _stable(v: Any, depth: int = 0) -> bool:
    if isinstance(v, _IMMUTABLE + _BY_IDENTITY):
        return True
    if type(v) is tuple or type(v) is frozenset:
        return depth < 3 and all(_stable(x, depth + 1) for x in v)
    if type(v) is types.FunctionType:
        return depth < 3 and _fingerprint(v, depth + 1) is not None
    return False


def _code_names(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.extend(_code_names(c))
    return names


def _fingerprint(f: types.FunctionType, depth: int = 0) -> tuple[Any, ...] | None:
    """What f's pickle depends on, or None if some of it could change in place."""
    g = f.__globals__
    refs: list[Any] = []
    for name in _code_names(f.__code__):
        if name in g:
            v = g[name]
            if not _stable(v, depth):
                return None
            refs.append((name, v))
    cells = tuple(c.cell_contents for c in f.__closure__ or ())
    extras = (f.__defaults__ or (), tuple(sorted((f.__kwdefaults__ or {}).items())), cells)
    if not all(_stable(x, depth) for x in extras) or f.__dict__:
        return None
    return (f.__code__, f.__name__, f.__qualname__, f.__module__, tuple(refs), *extras)


def _same(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a comparison that raises: treat as changed
        return False


class _PickledFunction:
    """Stands in a call's pickle for a function pickled (and cached) beforehand."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (load_function, (self.data,))


def _by_reference(f: types.FunctionType) -> bool:
    """True when cloudpickle would pickle ``f`` by reference, as the standard pickle does:
    a top-level function of a module other than ``__main__`` that the module still names
    (what _importable checks, here in ~0.3 us for the common case: checked on every call,
    so a function rebound or a module registered for pickling by value is seen at once)."""
    name, qualname = f.__module__, f.__qualname__
    if not name or name == "__main__" or "." in qualname:
        return False if not name or name == "__main__" else _importable(f)
    module = sys.modules.get(name)
    if module is None or getattr(module, qualname, None) is not f:
        return False
    return not _registered_by_value() or _importable(f)


def _registered_by_value() -> bool:
    """Whether any module is registered for pickling by value (cloudpickle's registry,
    read in place: list_registry_pickle_by_value() copies it on every call)."""
    registry = getattr(cloudpickle.cloudpickle, "_PICKLE_BY_VALUE_MODULES", None)
    if registry is None:  # another cloudpickle: its public (copying) accessor
        registry = cloudpickle.list_registry_pickle_by_value()
    return bool(registry)


def _function_pickle(f: Any) -> Any:
    """``f`` itself, or a _PickledFunction holding its (cached) cloudpickle."""
    return _function_part(f)[0]


def _function_part(f: Any) -> tuple[Any, bool]:
    """(what stands for ``f`` in a call's pickle, whether the standard pickle can write it):
    ``f`` itself when it travels by reference (module and name: the standard pickle writes
    what cloudpickle would, ~10x faster), a _PickledFunction holding its (cached)
    cloudpickle when it travels by value, or ``f`` for the configured pickler to decide."""
    if type(f) is not types.FunctionType or _dumps is not cloudpickle.dumps:
        return f, False
    try:
        if _by_reference(f):
            return f, True
        fp = _fingerprint(f)
    except Exception:  # an odd global or default: no cache, the plain path decides
        return f, False
    if fp is None:
        return f, False
    cached = _fn_cache.get(f)
    if cached is not None and _same(cached[0], fp):
        return _PickledFunction(cached[1]), True
    data = cloudpickle.dumps(f, protocol=PROTOCOL)
    _fn_cache[f] = (fp, data)
    return _PickledFunction(data), True


class _PickledOnce:
    """Stands in a call's pickle for any callable pickled once beforehand (by the pickler
    set now); each call unpickles a fresh copy on the engine, as if sent by value."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        return (pickle.loads, (self.data,))


def pickle_once(f: Any) -> Any:
    """``f`` ready to go in many calls (a map's chunks) without pickling it again: its
    cached function pickle, or its pickle now; ``f`` itself when it carries buffers large
    enough to travel out of band (they stay zero-copy). SerializationError names it if it
    cannot be pickled at all."""
    pf, plain = _function_part(f)
    if pf is not f:
        return pf
    large: list[pickle.PickleBuffer] = []
    # a function sent by reference: the standard pickle writes what cloudpickle would,
    # ~1 us against ~15 (once per map)
    dumps = pickle.dumps if plain else _dumps
    try:
        data = dumps(f, protocol=PROTOCOL, buffer_callback=large.append)
    except Exception as e:
        raise SerializationError(
            f"cannot send the function: {_describe(f)} is not serializable "
            f"({type(e).__name__}: {e}). Nothing was sent."
        ) from e
    return f if large else _PickledOnce(data)


#: Engine side: functions rebuilt from identical pickles are reused. Only functions without
#: closures: a closure cell is state a call could change.
_loaded: OrderedDict[bytes, Any] = OrderedDict()
_LOADED_MAX = 256


def load_function(data: bytes) -> Any:
    f = _loaded.get(data)
    if f is not None:
        _loaded.move_to_end(data)
        return f
    f = pickle.loads(data)
    if getattr(f, "__closure__", None) is None:
        _loaded[data] = f
        if len(_loaded) > _LOADED_MAX:
            _loaded.popitem(last=False)
    return f


def pack_apply(f: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
    """Frames of an apply_request: one pickle of (f, args, kwargs) and its buffers."""
    kwargs = kwargs or {}
    if not callable(f) and not isinstance(f, Reference):  # a Reference names one there
        raise SerializationError(f"cannot apply {_describe(f)}: it is not callable")
    try:
        fn, plain = _function_part(f)
        args = tuple(args)
        # the call's tuple holds the function, its arguments and keyword arguments: the
        # standard pickle is enough when each part is (_plain's depths: the tuple is 0)
        plain = plain and (not args or _plain(args, 1)) and (not kwargs or _plain(kwargs, 1))
        return serialize_object((fn, args, kwargs), plain=plain)
    except SerializationError:
        raise
    except Exception as e:
        _check_each(f, args, kwargs, e)
        raise  # unreachable: _check_each always raises


def unpack_apply(frames: Sequence[Any]) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    call = deserialize_object(frames)
    if not (isinstance(call, tuple) and len(call) == 3):
        raise SerializationError("apply_request buffers do not hold (f, args, kwargs)")
    return call


# -- ipyparallel's serialize names ---------------------------------------------------------


def use_default() -> None:
    """zpar's default: cloudpickle, and functions shipped by value run over the engine's
    namespace, filled in with the names they captured (what ``use_pickle`` and
    ``use_cloudpickle`` change; run it on engines with ``view.apply_sync(use_default)``)."""
    set_pickler("cloudpickle")
    namespace.set_globals_rule(namespace.GLOBALS_MERGED)


def use_pickle() -> None:
    """Data by the standard pickle; functions defined in ``__main__`` or inside other
    functions still travel by value (as in ipyparallel, whose use_pickle keeps canning
    functions) and, on an engine, run over its namespace alone (ipyparallel's canning)."""
    set_pickler("pickle")
    namespace.set_globals_rule(namespace.GLOBALS_NAMESPACE)


def use_cloudpickle() -> None:
    """Everything through cloudpickle (the default); on an engine, functions shipped by
    value then use the globals they captured, the client's values (as ipyparallel with
    cloudpickle)."""
    set_pickler("cloudpickle")
    namespace.set_globals_rule(namespace.GLOBALS_CAPTURED)


def use_dill() -> None:
    """Everything through dill (if installed: it is not a zpar dependency)."""
    set_pickler("dill")


def pack_apply_message(
    f: Any,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    buffer_threshold: int = OOB_THRESHOLD,
    item_threshold: int | None = None,
) -> list[Any]:
    """ipyparallel's name for pack_apply: the frames of ``f(*args, **kwargs)``.
    The thresholds are accepted; zpar decides out-of-band buffers by OOB_THRESHOLD."""
    return pack_apply(f, args, kwargs)


def unpack_apply_message(
    bufs: Sequence[Any], g: dict[str, Any] | None = None, copy: bool = True
) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """(f, args, kwargs) from pack_apply_message's frames; f bound to the globals ``g``."""
    f, args, kwargs = unpack_apply(bufs)
    if g is not None:
        from zpar.namespace import bind

        f = bind(f, g)
    return f, args, kwargs


from zpar.serialize.canning import (  # noqa: E402 - canning imports nothing from here; names re-exported
    PrePickled,
    Reference,
    can,
    can_map,
    uncan,
    uncan_map,
)

__all__ = [
    "PrePickled",
    "Reference",
    "can",
    "can_map",
    "deserialize_object",
    "pack_apply_message",
    "serialize_object",
    "uncan",
    "uncan_map",
    "unpack_apply_message",
    "use_cloudpickle",
    "use_dill",
    "use_pickle",
]
