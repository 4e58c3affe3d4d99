"""docs/README.md names files that exist: its reading order and its "to change X, edit Y"
table go stale the day a module moves, and nothing else would say so."""

from __future__ import annotations

import glob
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "docs" / "README.md"
#: a path in backquotes: a folder or a file of the repository
CODE_PATH = re.compile(r"`((?:[\w.-]+/)+(?:[\w.-]+\.(?:py|md|toml|json))?)`")
#: a test file or folder, with its folder or short (then in the last folder named before it)
TEST_PATH = re.compile(r"(?:(tests/(?:[\w*.-]+/)*)([\w*.-]+\.py)?|\b(test_[\w*]+\.py))")


def _missing_code_paths(text: str) -> list[str]:
    return [p for p in CODE_PATH.findall(text) if not glob.glob(str(ROOT / p))]


def _missing_test_paths(text: str) -> list[str]:
    missing = []
    for line in text.splitlines():
        folder = "tests/"
        for m in TEST_PATH.finditer(line):
            if m.group(1) is not None:
                folder = m.group(1)
                path = folder + (m.group(2) or "")
            else:
                path = folder + m.group(3)
            if not glob.glob(str(ROOT / path)):
                missing.append(path)
    return missing


def test_every_code_path_in_the_reading_guide_exists():
    assert _missing_code_paths(README.read_text()) == []


def test_every_test_path_in_the_reading_guide_exists():
    assert _missing_test_paths(README.read_text()) == []


def test_the_checks_see_a_stale_row():
    row = "| x | `client/gone.py`, `hub/hub.py` | tests/client/test_gone.py, test_request.py |"
    assert _missing_code_paths(row) == ["client/gone.py"]
    assert _missing_test_paths(row) == ["tests/client/test_gone.py"]
    assert _missing_test_paths("| y | z | tests/hub/, test_nothing_here.py |") == [
        "tests/hub/test_nothing_here.py"
    ]
