"""Every python block of docs/darray.md runs, in order, in one namespace (the page starts
and stops its own cluster of 4 engines)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "darray.md"


def test_every_code_block_of_the_page_runs():
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) >= 6
    ns = {"__name__": "darray_doc"}  # not importable: its functions travel by value
    try:
        for i, code in enumerate(blocks):
            exec(compile(code, f"{DOC}:block{i}", "exec"), ns)
    finally:
        if "cluster" in ns:
            ns["cluster"].stop()
