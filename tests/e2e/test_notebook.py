"""An ipyparallel-style notebook runs end to end on zpar in a real Jupyter kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).parent / "notebooks" / "ipyparallel_style.ipynb"


def _text(cell) -> str:
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out["text"])
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


@pytest.mark.timeout(180)
def test_ipyparallel_notebook_runs_on_zpar(zpar_dir, monkeypatch):
    nbformat = pytest.importorskip("nbformat", reason="nbformat is a test extra")
    from nbclient import NotebookClient

    monkeypatch.setenv("ZPAR_DIR", str(zpar_dir))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(zpar_dir.parent)}},
    ).execute()
    cells = nb.cells
    assert _text(cells[0]) == "[0, 1]"
    assert _text(cells[1]) == "[6, 6]"
    assert _text(cells[2]) == "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]"
    assert "45" in _text(cells[3])
    assert "[stdout:0] engine True" in _text(cells[4])
    assert _text(cells[5]) == "([1, 1], True)"
