"""mypy over the public API (issue 12, "Shape"): zpar's exports, zpar.client, the error
tree and the message definitions, with the configuration in pyproject.toml ([tool.mypy]).

The repository's folders are not laid out as the package (hub/ is zpar.hub…, see
pyproject.toml's package-dir) and an editable install maps them with an import hook mypy
cannot follow, so the test checks a tree of symlinks shaped like the installed package.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
#: package -> folder outside zpar/ (pyproject.toml's package-dir)
SUBPACKAGES = {
    "hub": "hub",
    "engine": "engine",
    "client": "client",
    "schedulers": "schedulers",
    "comm": "communicator",
    "typed": "typed",
    "darray": "darray",
}
#: what users import: zpar's top level and every module its exports come from
PUBLIC_MODULES = [
    "zpar",
    "zpar.errors",
    "zpar.error",
    "zpar.wire.msgtypes",
    "zpar.constants",
    "zpar.dependency",
    "zpar.serialize",
    "zpar.util",
    "zpar.typed.registry",
]
#: packages checked whole, every module of them reported
PUBLIC_PACKAGES = ["zpar.client", "zpar.wire.messages"]


def package_tree(where: Path) -> Path:
    """``where/zpar``: symlinks to zpar/'s files and to each mapped folder."""
    pkg = where / "zpar"
    pkg.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p for p in (ROOT / "zpar").iterdir() if p.name != "__pycache__"}
    wanted.update({name: ROOT / folder for name, folder in SUBPACKAGES.items()})
    for name, target in wanted.items():
        link = pkg / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target)
    for link in pkg.iterdir():  # links of a kept tree whose module moved since (the floor plan)
        if link.is_symlink() and link.name not in wanted:
            link.unlink()
    return where


@pytest.mark.timeout(900)  # a cold run reads numpy's and pyzmq's stubs: minutes on a busy host
def test_public_api_type_checks():
    # kept between runs (per checkout) so mypy's cache makes the next run incremental
    tag = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    where = package_tree(Path(tempfile.gettempdir()) / f"zpar-mypy-{tag}")
    args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")]
    args += ["--cache-dir", str(where / ".mypy_cache"), "--python-executable", sys.executable]
    for m in PUBLIC_MODULES:
        args += ["-m", m]
    for p in PUBLIC_PACKAGES:
        args += ["-p", p]
    # run where only the tree is importable: not the repository root, whose hub/ and
    # client/ folders would be taken for top-level packages
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MYPYPATH")}
    done = subprocess.run(args, cwd=where, env=env, capture_output=True, text=True, timeout=850)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout
