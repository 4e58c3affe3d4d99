"""The engine side of typed calls: a ``typed_request`` in, a ``typed_reply`` out.

Declared as the engine handler of ``typed_request`` (entry point group
``zpar.engine_handlers``, see zpar.engine.handlers). The request's type arrays are numpy
views on its received frames; the reply's arrays go out as frames of their own. No pickle.
Every failure (unknown function id, arrays that do not match, an exception in the function)
is an error reply; the engine keeps serving.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from zpar.wire.messages import ReplyStatus, TypedReply

from .codec import CodecError, type_arrays, type_frames
from .invoke import BadRequest, CallFailed, run_calls
from .registry import REGISTRY, Registry

log = logging.getLogger(__name__)

_HEAD = ("call_id", "function_id", "call_count")


def serve(
    content: dict[str, Any],
    buffers: Sequence[Any],
    registry: Registry = REGISTRY,
    engine_info: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """The reply content and frames for one typed_request."""
    head = {k: content.get(k) for k in _HEAD}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in head.values()):
        return _error(
            head,
            "ProtocolError",
            f"typed_request needs int {', '.join(_HEAD)}, got {head}",
            engine_info,
        ), []
    fid, ncalls = head["function_id"], head["call_count"]
    entry = registry.get(fid)
    if entry is None:
        known = ", ".join(f"{s.name}={i}" for i, (s, _) in sorted(registry.by_id.items())) or "none"
        return _error(
            head,
            "UnknownFunction",
            f"no function with id {fid} is registered here (registered: {known})",
            engine_info,
        ), []
    sig, func = entry
    try:
        arrays = type_arrays(content.get("counts", []), buffers)
        out = run_calls(sig, func, arrays, ncalls)
    except (CodecError, BadRequest) as e:
        return _error(head, "ProtocolError", f"{sig.name}: {e}", engine_info), []
    except CallFailed as e:
        where = f" in call {e.index}" if e.index >= 0 else ""
        log.info(
            "engine %s: %s raised%s: %r",
            (engine_info or {}).get("engine_id"),
            sig.name,
            where,
            e.cause,
        )
        return _error(head, type(e.cause).__name__, str(e.cause), engine_info, e.cause, e.index), []
    counts, frames = type_frames(out)
    return TypedReply.content(ReplyStatus.OK, **head, counts=counts), frames


def _error(
    head: dict[str, Any],
    ename: str,
    evalue: str,
    engine_info: dict[str, Any] | None,
    cause: BaseException | None = None,
    index: int = -1,
) -> dict[str, Any]:
    tb = traceback.format_exception(type(cause), cause, cause.__traceback__) if cause else []
    return TypedReply(
        ReplyStatus.ERROR,
        **{k: v if isinstance(v, int) else 0 for k, v in head.items()},
        counts=[],
        ename=ename,
        evalue=evalue,
        traceback=tb,
        engine_info=engine_info or {},
        call_index=index,
    ).as_dict()


def make_handler(kernel: Any) -> Callable[[Any], tuple[dict[str, Any], list[Any]]]:
    """The kernel's handler of typed_request (the entry point's factory)."""
    info = {
        "engine_id": kernel.engine_id,
        "engine_uuid": kernel.engine_uuid,
        "method": "typed_request",
    }

    def handle(msg: Any) -> tuple[dict[str, Any], list[Any]]:
        return serve(msg.content, msg.buffers, REGISTRY, info)

    return handle
