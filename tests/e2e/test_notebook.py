"""An ipyparallel-style notebook runs end to end on zpar in a real Jupyter kernel."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from tests.clusters import notebook_text as _text
from tests.clusters import run_notebook

pytestmark = pytest.mark.cluster

NOTEBOOK = Path(__file__).parent / "notebooks" / "ipyparallel_style.ipynb"


@pytest.mark.timeout(180)
def test_ipyparallel_notebook_runs_on_zpar(zpar_dir, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(zpar_dir))
    cells = run_notebook(NOTEBOOK, zpar_dir, timeout=120)
    assert _text(cells[0]) == "[0, 1]"
    assert _text(cells[1]) == "[6, 6]"
    assert _text(cells[2]) == "[0, 1, 4, 9, 16, 25, 36, 49, 64, 81]"
    assert "45" in _text(cells[3])
    assert "[stdout:0] \nengine True\n" in _text(cells[4])
    assert _text(cells[5]) == "([1, 1], True)"


IPYTHON_NOTEBOOK = Path(__file__).parent / "notebooks" / "ipython_engines.ipynb"


@pytest.mark.timeout(180)
def test_px_plots_from_the_engines_show_under_the_cell(zpar_dir, monkeypatch):
    """%px %matplotlib inline, then a plot in %%px: the cell's outputs hold each engine's
    PNG (as ipyparallel shows them), and magics, ! and Out[N:K] work in %px."""
    pytest.importorskip("matplotlib", reason="matplotlib is a test extra")
    monkeypatch.setenv("ZPAR_DIR", str(zpar_dir))
    cells = run_notebook(IPYTHON_NOTEBOOK, zpar_dir, timeout=120)
    assert _text(cells[0]) == "[0, 1]"
    images = [o for o in cells[2]["outputs"] if "image/png" in o.get("data", {})]
    assert len(images) == 2, cells[2]["outputs"]
    assert {o["metadata"]["engine"] for o in images} == {0, 1}
    assert all(base64.b64decode(o["data"]["image/png"])[:4] == b"\x89PNG" for o in images)
    assert "[output:0]" in _text(cells[2]) and "[output:1]" in _text(cells[2])
    assert "[stdout:0] \nfrom the engine shell\r\n" in _text(cells[3])  # a terminal's line
    assert re.search(r"Out\[0:\d+\]: (\x1b\[0m)?10", _text(cells[4])), _text(cells[4])
    assert _text(cells[5]) == "[1, 1]"
