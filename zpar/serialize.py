"""Turning Python objects into frames and back: pickle protocol 5 with out-of-band buffers.

``serialize_object(obj)`` returns ``[pickle_stream, buffer, ...]``: every contiguous buffer of
at least OOB_THRESHOLD bytes (numpy arrays, bytes, memoryviews…) is left out of the stream and
returned as a memoryview on the original memory, so the sender hands it to zmq without a
copy; ``deserialize_object`` rebuilds the objects as views on the received frames, so the
receiver does not copy either. Functions and lambdas go through cloudpickle.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import cloudpickle
import zmq

from .constants import OOB_THRESHOLD
from .errors import SerializationError

PROTOCOL = 5


def _frame_view(f: Any) -> Any:
    return f.buffer if isinstance(f, zmq.Frame) else f


def serialize_object(obj: Any, threshold: int = OOB_THRESHOLD) -> list[Any]:
    """Pickle ``obj``; large buffers become separate zero-copy frames."""
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

    stream = cloudpickle.dumps(obj, protocol=PROTOCOL, buffer_callback=keep_out_of_band)
    return [stream, *buffers]


def deserialize_object(frames: Sequence[Any]) -> Any:
    """Inverse of serialize_object; arrays come back as views on the frames."""
    if not frames:
        raise SerializationError("nothing to deserialize: no frames")
    return pickle.loads(_frame_view(frames[0]), buffers=[_frame_view(f) for f in frames[1:]])


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


def pack_apply(f: Any, args: Sequence[Any] = (), kwargs: dict[str, Any] | None = None) -> list[Any]:
    """Frames of an apply_request: one pickle of (f, args, kwargs) and its buffers."""
    kwargs = kwargs or {}
    if not callable(f):
        raise SerializationError(f"cannot apply {_describe(f)}: it is not callable")
    try:
        return serialize_object((f, tuple(args), kwargs))
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
