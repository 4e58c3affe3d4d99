"""A non-editable install works from any folder, the checkout's root included (issue 27,
item 2): `pip install .` into a fresh venv, then a cluster started, used and stopped from
the root of the source tree, whose `zpar/` folder would otherwise hide the install."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

JOB = """
import zpar
rc = zpar.Client(timeout=60)
rc.wait_for_engines(1, timeout=60)
print(rc[:].apply_sync(lambda: __import__("zpar").__file__)[0])
print(rc.load_balanced_view().map_sync(lambda x: x * x, range(5)))
print(zpar.client.__file__)
"""


def checkout_copy(dest: Path) -> Path:
    """The files `pip install .` reads: pyproject.toml, README.md, the mapped folders."""
    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    tops = {d.split("/")[0] for d in data["tool"]["setuptools"]["package-dir"].values()}
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for top in tops:
        shutil.copytree(REPO / top, dest / top, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_non_editable_install_runs_a_cluster_from_the_checkout_root(tmp_path):
    src = checkout_copy(tmp_path / "checkout")
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py, zpar = env_dir / "bin" / "python", env_dir / "bin" / "zpar"
    r = subprocess.run([str(py), "-m", "pip", "install", "-q", "."], cwd=src,
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path).stdout.strip()  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZPAR_")}
    env["ZPAR_DIR"] = str(tmp_path / "zpar")
    env.pop("PYTHONPATH", None)

    def zp(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(zpar), *args], cwd=src, env=env, capture_output=True,
                              text=True, timeout=timeout)  # fmt: skip

    started = zp("cluster", "start", "-n", "1", "--daemon")
    try:
        assert started.returncode == 0, started.stderr
        smoke = zp("smoke")
        assert smoke.returncode == 0, smoke.stderr
        job = subprocess.run([str(py), "-c", JOB], cwd=src, env=env, capture_output=True,
                             text=True, timeout=120)  # fmt: skip
        assert job.returncode == 0, job.stderr
        engine_zpar, squares, client_file = job.stdout.split("\n")[:3]
        assert engine_zpar.startswith(site), engine_zpar  # the engine runs the install
        assert squares == "[0, 1, 4, 9, 16]"
        # `python` in the root imports the source tree; its process folders are found too
        assert client_file == str(src / "client" / "__init__.py")
    finally:
        stopped = zp("cluster", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped cluster 'default'" in stopped.stderr
