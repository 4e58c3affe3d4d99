"""An ipyparallel-style notebook runs end to end on zpar in a real Jupyter kernel."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clusters import notebook_text as _text
from tests.clusters import run_notebook

NOTEBOOK = Path(__file__).parent / "notebooks" / "ipyparallel_style.ipynb"


@pytest.mark.timeout(180)
def test_ipyparallel_notebook_runs_on_zpar(zpar_dir, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(zpar_dir))
    cells = run_notebook(NOTEBOOK, zpar_dir, timeout=120)
    assert _text(cells[0]) == "[0, 1]"
    assert _text(cells[1]) == "[6, 6]"
    assert _text(cells[2]) == "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]"
    assert "45" in _text(cells[3])
    assert "[stdout:0] engine True" in _text(cells[4])
    assert _text(cells[5]) == "([1, 1], True)"
