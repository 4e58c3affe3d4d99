"""stdout/stderr of a task: kept for the reply's metadata and streamed live on IOPub.

The reply carries its own output (capped), so a result never depends on IOPub timing; the
IOPub stream is for watching a long task. A map's element run (engine.elements) has each
element's own text read back per part (``track``, ``take``), as ipyparallel's one task per
element has its own stdout. Publishing touches a zmq socket, which only the
main thread may use: writes from other threads only accumulate, and are published by the
next main-thread flush (at the latest when the task ends).
"""

from __future__ import annotations

import io
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from zpar.constants import MAX_CAPTURED_OUTPUT
from zpar.wire.messages import MsgType, Stream

#: (msg_type, content, parent header) -> None: the engine sends it on IOPub.
Publish = Callable[[MsgType, dict[str, Any], dict[str, Any]], None]

#: Seconds between two live publications of one stream: a task printing in a tight loop
#: sends a few messages a second per stream, not one per line.
FLUSH_INTERVAL = 0.05

TRUNCATED_NOTE = "\n[output truncated]\n"


class CapturedStream(io.TextIOBase):
    """A text stream that keeps what is written (up to ``limit`` chars) and publishes it."""

    def __init__(
        self,
        name: str,
        publish: Callable[[str, str], None] | None,
        *,
        limit: int = MAX_CAPTURED_OUTPUT,
        interval: float = FLUSH_INTERVAL,
    ) -> None:
        super().__init__()
        self._name = name
        self._publish = publish
        self._limit = limit
        self._interval = interval
        self._main = threading.main_thread().ident
        self._lock = threading.Lock()
        self._kept: list[str] = []
        self._size = 0
        self._truncated = False
        self._pending: list[str] = []
        self._last = 0.0
        #: while an element run tracks its writes: the position of the element running
        self._position: Callable[[], int] | None = None
        #: (position, offset in the kept text) where each tracked element's text starts
        self._marks: list[tuple[int, int]] = []

    @property
    def name(self) -> str:  # type: ignore[override]
        return self._name

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def reset(self) -> None:
        """Forget everything: called at the start of each task (a no-op if nothing was
        written since the last one: most tasks print nothing)."""
        self._last = time.monotonic()
        self._position = None
        if not (self._size or self._truncated or self._pending or self._marks):
            return
        with self._lock:
            self._kept.clear()
            self._size = 0
            self._truncated = False
            self._pending.clear()
            self._marks.clear()

    def track(self, position: Callable[[], int] | None) -> None:
        """Note at each write the element it belongs to, ``position()`` (None: stop
        noting); read back with ``take``. Costs nothing per element, only per write."""
        self._position = position

    def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        if not s:
            return 0
        with self._lock:
            if self._position is not None:
                pos = self._position()
                marks = self._marks
                if not marks or marks[-1][0] != pos:
                    marks.append((pos, self._size))
            room = self._limit - self._size
            if room > 0:
                kept = s if len(s) <= room else s[:room]
                self._kept.append(kept)
                self._size += len(kept)
            if len(s) > room:
                self._truncated = True
            if self._publish is not None:
                self._pending.append(s)
        if (
            "\n" in s
            and self._publish is not None
            and time.monotonic() - self._last >= self._interval
            and threading.get_ident() == self._main
        ):
            self.flush()
        return len(s)

    def flush(self) -> None:
        """Publish pending text (main thread only; other threads' flushes are deferred)."""
        if not self._pending or self._publish is None or threading.get_ident() != self._main:
            return
        with self._lock:
            if not self._pending:
                return
            text = "".join(self._pending)
            self._pending.clear()
        self._last = time.monotonic()
        self._publish(self._name, text)

    def take(self, before: int | None) -> tuple[str, dict[str, str]]:
        """The text kept so far, up to where element ``before``'s starts (None: all of it),
        and each tracked element's own part of it by position (str, as msgpack keys go),
        forgotten here: the next ``take`` starts after it, and the cap counts from there.
        Text lost to the cap ends with a note."""
        if not (self._size or self._truncated):
            return "", {}
        with self._lock:
            text = "".join(self._kept)
            end, marks = len(text), self._marks
            if before is not None:
                for pos, at in marks:
                    if pos >= before:
                        end = at
                        break
            taken = [(p, a) for p, a in marks if a < end]
            self._marks = [(p, a - end) for p, a in marks[len(taken) :]]
            rest = text[end:]
            self._kept[:] = [rest] if rest else []
            self._size = len(rest)
            # the cap cut the newest writer's text: this take's, unless later text is kept
            truncated = self._truncated and not rest
            self._truncated = self._truncated and bool(rest)
        own: dict[str, str] = {}
        for k, (pos, at) in enumerate(taken):
            stop = taken[k + 1][1] if k + 1 < len(taken) else end
            own[str(pos)] = own.get(str(pos), "") + text[at:stop]
        text = text[:end]
        if truncated:
            text += TRUNCATED_NOTE
            if taken:
                own[str(taken[-1][0])] += TRUNCATED_NOTE
        return text, own

    def getvalue(self) -> str:
        if not (self._size or self._truncated):
            return ""
        with self._lock:
            text = "".join(self._kept)
            return text + TRUNCATED_NOTE if self._truncated else text


class Capture:
    """Replaces sys.stdout/sys.stderr for the duration of one task."""

    def __init__(self, publish: Publish | None = None, *, limit: int = MAX_CAPTURED_OUTPUT):
        self._parent: dict[str, Any] = {}
        pub = None
        if publish is not None:

            def pub(name: str, text: str) -> None:
                publish(MsgType.STREAM, Stream.content(name, text), self._parent)

        self.stdout = CapturedStream("stdout", pub, limit=limit)
        self.stderr = CapturedStream("stderr", pub, limit=limit)
        self._saved: tuple[Any, Any] | None = None

    def start(self, parent: dict[str, Any]) -> None:
        self._parent = parent
        self.stdout.reset()
        self.stderr.reset()
        self._saved = (sys.stdout, sys.stderr)
        sys.stdout, sys.stderr = self.stdout, self.stderr

    def stop(self) -> tuple[str, str]:
        """Restore the real streams, publish what is left; returns (stdout, stderr)."""
        if self._saved is not None:
            sys.stdout, sys.stderr = self._saved
            self._saved = None
        self.stdout.track(None)
        self.stderr.track(None)
        self.stdout.flush()
        self.stderr.flush()
        return self.stdout.getvalue(), self.stderr.getvalue()
