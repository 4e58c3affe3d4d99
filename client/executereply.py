"""ExecuteReply: the value of an execute (``%px``, ``dv.execute``) on one engine.

As ipyparallel's (client.py ``ExecuteReply``): it shows as ``Out[engine:count]: value``, its
rich representations (``_repr_png_``, ``_repr_html_``…) are the engine's mime bundle of the
code's last expression, and its metadata (stdout, outputs, engine_id…) read as attributes.
"""

from __future__ import annotations

from typing import Any

#: ipyparallel's Out[...] prompt colour in a coloured IPython (its _TermColors.Red/Normal)
_RED = "\033[0;31m"
_NORMAL = "\033[0m"


class ExecuteReply:
    """One engine's finished execute: ``execution_count``, ``metadata``, rich output."""

    def __init__(self, msg_id: str, content: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.msg_id = msg_id
        self._content = content
        self.execution_count = content.get("execution_count", 0)
        self.metadata = metadata

    def __eq__(self, other: object) -> bool:
        """The same execute's reply, however it was read (its own future, or fetched back
        from the hub's store by get_result): same msg_id, execution count and result."""
        if not isinstance(other, ExecuteReply):
            return NotImplemented
        return (
            self.msg_id == other.msg_id
            and self.execution_count == other.execution_count
            and self._result == other._result
        )

    def __hash__(self) -> int:
        return hash(self.msg_id)

    # -- the last expression's mime bundle ------------------------------------------------

    @property
    def _result(self) -> dict[str, Any]:
        return self.metadata.get("execute_result") or {}

    @property
    def source(self) -> str | None:
        return self._result.get("source", "") if self._result else None

    @property
    def data(self) -> dict[str, Any]:
        return self._result.get("data", {}) if self._result else {}

    @property
    def _metadata(self) -> dict[str, Any]:
        return self._result.get("metadata", {}) if self._result else {}

    def display(self) -> None:
        from IPython.display import publish_display_data

        publish_display_data(self.data, self.metadata)

    def _repr_mime_(self, mime: str) -> Any:
        if mime not in self.data:
            return None
        data = self.data[mime]
        if mime in self._metadata:
            return data, self._metadata[mime]
        return data

    def _repr_mimebundle_(self, *args: Any, **kwargs: Any) -> tuple[dict, dict]:
        data, md = self.data, self.metadata
        if "text/plain" in data:
            data = dict(data, **{"text/plain": self._plaintext()})
        return data, md

    # the representations IPython.utils.capture.RichOutput offers
    def _repr_html_(self) -> Any:
        return self._repr_mime_("text/html")

    def _repr_latex_(self) -> Any:
        return self._repr_mime_("text/latex")

    def _repr_json_(self) -> Any:
        return self._repr_mime_("application/json")

    def _repr_javascript_(self) -> Any:
        return self._repr_mime_("application/javascript")

    def _repr_png_(self) -> Any:
        return self._repr_mime_("image/png")

    def _repr_jpeg_(self) -> Any:
        return self._repr_mime_("image/jpeg")

    def _repr_svg_(self) -> Any:
        return self._repr_mime_("image/svg+xml")

    def _repr_markdown_(self) -> Any:
        return self._repr_mime_("text/markdown")

    # -- metadata as items and attributes -------------------------------------------------

    def __getitem__(self, key: str) -> Any:
        return self.metadata[key]

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") or key in ("metadata", "_content"):
            raise AttributeError(key)
        if key not in self.metadata:
            raise AttributeError(key)
        return self.metadata[key]

    def __repr__(self) -> str:
        text = (self.metadata.get("execute_result") or {"data": {}})["data"].get("text/plain", "")
        if len(text) > 32:
            text = text[:29] + "..."
        return f"<ExecuteReply[{self.execution_count}]: {text}>"

    def _plaintext(self) -> str:
        text = (self.metadata.get("execute_result") or {"data": {}})["data"].get("text/plain", "")
        if not text:
            return ""
        out = normal = ""
        ip = _ipython()
        if ip is not None and str(getattr(ip, "colors", "nocolor")).lower() != "nocolor":
            out, normal = _RED, _NORMAL
        if "\n" in text and not text.startswith("\n"):
            text = "\n" + text  # a multi-line repr starts under the prompt
        return f"{out}Out[{self.metadata.get('engine_id')}:{self.execution_count}]: {normal}{text}"

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self._plaintext())


def _ipython() -> Any:
    """The running IPython shell, if IPython is imported and one runs (never imports it)."""
    import sys

    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None
