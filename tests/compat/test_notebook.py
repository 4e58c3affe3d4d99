"""An ipyparallel notebook of the kind its documentation shows (%px, %%px --targets,
@dview.parallel, scatter/gather, a load-balanced map with a progress bar) runs end to end
in a real Jupyter kernel with only its import line changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.clusters import notebook_text as _text
from tests.clusters import run_notebook, under_headers

pytestmark = pytest.mark.cluster

NOTEBOOK = Path(__file__).parent.parent / "e2e" / "notebooks" / "ipyparallel_docs.ipynb"


@pytest.mark.timeout(240)
def test_ipyparallel_docs_notebook_runs_with_the_import_changed(zpar_dir, monkeypatch):
    monkeypatch.setenv("ZPAR_DIR", str(zpar_dir))
    c = run_notebook(NOTEBOOK, zpar_dir, timeout=180)
    assert "import zpar as ipp" in c[0].source
    assert _text(c[0]) == "[0, 1]"
    assert _text(c[1]) == "(2, 2)"
    # the first %px loads IPython on the engines (about 0.5 s; seconds on a loaded machine,
    # when %px shows its progress bar after 2 s, as ipyparallel's): the value ends the text
    assert _text(c[2]).splitlines()[-1] == "2"
    # one engine named by an int: a single result, printed without [stdout:N] (ipyparallel)
    assert _text(c[3]) == "only engine 0\n"
    assert _text(c[5]) == "engine one, not blocking\n"  # %%px -t 1: a single result
    assert _text(c[6]) == "True"
    assert _text(c[7]) == "True"
    progress = _text(c[8])
    assert "32/32" in progress and "10416" in progress  # a text bar: no ipywidgets here
    assert "IProgress" not in progress  # tqdm.auto's warning: zpar falls back instead
    assert _text(c[9]) == "40"
    assert _text(c[10]) == "([1, 1], True, 'datetime')"
    streamed = _text(c[11])
    # each engine's output once, under its id's header (lines may come in one chunk)
    shown = under_headers(streamed)
    assert shown["[stdout:0]"].startswith("streamed 0"), streamed
    assert shown["[stdout:1]"].startswith("streamed 0"), streamed
    assert [streamed.count(f"streamed {i}") for i in range(3)] == [2, 2, 2], streamed
