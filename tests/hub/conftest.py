"""Task stores for the store suite: memory, an SQLite file, and a throwaway PostgreSQL."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "pg_test_server.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server on loopback for this test session (installed if absent)."""
    base = tempfile.mkdtemp(prefix="zpar-pg-")
    os.chmod(base, 0o755)  # the server runs as the postgres user
    data = os.path.join(base, "pg")
    try:
        p = subprocess.run(
            [str(SCRIPT), "start", data, str(_free_port())],
            capture_output=True,
            text=True,
            timeout=600,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        pytest.skip(f"PostgreSQL could not be started: {e}")
    if p.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"PostgreSQL could not be installed or started: {p.stderr.strip()[-500:]}")
    url = p.stdout.strip().splitlines()[-1]
    yield url
    subprocess.run([str(SCRIPT), "stop", data], capture_output=True, timeout=60)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(
    params=[
        "memory",
        "sqlite",
        "sqlalchemy-sqlite",
        pytest.param("postgresql", marks=pytest.mark.cluster),
    ]
)
def store(request, tmp_path):
    from zpar.hub.stores import open_store

    if request.param == "memory":
        s = open_store("memory")
    elif request.param == "sqlite":  # the default: SQLiteStore
        s = open_store("", tmp_path / "tasks.db")
    elif request.param == "sqlalchemy-sqlite":  # SQLStore on SQLite
        s = open_store(f"sqlite+pysqlite:///{tmp_path / 'tasks.db'}")
    else:
        import sqlalchemy as sa

        base = request.getfixturevalue("pg_server")
        name = f"t_{uuid.uuid4().hex[:12]}"
        admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as c:
            c.execute(sa.text(f"CREATE DATABASE {name}"))
        admin.dispose()
        s = open_store(base.rsplit("/", 1)[0] + f"/{name}")
    yield s
    s.close()
