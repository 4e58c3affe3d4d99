"""zpar imported from a source checkout finds its process folders as its subpackages.

Run from the repository's root, ``python`` imports the source ``zpar/`` folder (the working
directory comes first on sys.path) even where zpar is installed; ``zpar.client`` is then
``client/``, mapped by pyproject.toml's package-dir (design.md, Layout), which only an
install applies. This finder applies the same map, read from the checkout's
pyproject.toml, as the last resort of the import system: an installed or editable zpar
never reaches it. Processes zpar starts run with ``python -P`` and import the install.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType


class CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``zpar.<name>`` in the folder pyproject.toml's package-dir maps it to."""

    def __init__(self, folders: dict[str, Path]) -> None:
        self.folders = folders

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        folder = self.folders.get(fullname)
        if folder is None or not (folder / "__init__.py").is_file():
            return None
        return importlib.util.spec_from_file_location(
            fullname, folder / "__init__.py", submodule_search_locations=[str(folder)]
        )


def install(package_init: str) -> bool:
    """Add the finder if ``package_init`` (zpar/__init__.py) sits in a zpar checkout."""
    root = Path(package_init).resolve().parent.parent
    try:
        data = tomllib.loads((root / "pyproject.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError, UnicodeDecodeError):
        return False  # an install: site-packages has no pyproject.toml
    if data.get("project", {}).get("name") != "zpar":
        return False
    dirs = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    folders = {name: root / d for name, d in dirs.items() if name.startswith("zpar.")}
    if not folders or any(isinstance(f, CheckoutFinder) for f in sys.meta_path):
        return False
    sys.meta_path.append(CheckoutFinder(folders))
    return True
