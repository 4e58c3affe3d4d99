"""Replies the scheduler sends in an engine's stead, when a task ends without running."""

from __future__ import annotations

import time
from typing import Any

from zpar.errors import ZparError, error_content
from zpar.wire import Message, Session
from zpar.wire.messages import REPLY_TYPE, MsgType, ReplyStatus

from .schemes import EngineSlot


def error_reply(
    session: Session,
    header: dict[str, Any],
    engine: EngineSlot | None,
    error: type[ZparError],
    evalue: str,
    status: str = ReplyStatus.ERROR,
    elements: list[int] | None = None,
) -> Message:
    """A signed zpar error reply (EngineError, TaskAborted, …) to ``header``: its frames
    to send, its metadata and content for the hub."""
    engine_id = engine.id if engine is not None else -1
    uuid = engine.uuid.decode() if engine is not None else ""
    msg_type = header.get("msg_type")
    reply_type = REPLY_TYPE.get(msg_type, MsgType.APPLY_REPLY)  # type: ignore[call-overload]
    content = error_content(
        error,
        evalue,
        status=status,
        traceback=[],
        engine_info={"engine_id": engine_id, "engine_uuid": uuid, "method": msg_type},
        zpar_error=True,
        # the positions of an element request it answers, all of them
        elements=list(elements) if elements is not None else None,
        final=elements is not None,
    )
    metadata = {
        "engine_id": engine_id,
        "engine_uuid": uuid,
        "started": None,
        "completed": time.time(),
        "status": status,
    }
    reply_header, frames = session.serialize(reply_type, content, parent=header, metadata=metadata)
    return Message([], reply_header, header, metadata, content, frames=frames)
