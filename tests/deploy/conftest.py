"""Fixtures of the deploy tests: a real sshd on 127.0.0.1 with throwaway keys."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from sshd import ensure_openssh, ssh_ok, start_sshd  # noqa: E402


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    ensure_openssh()
    server = start_sshd(tmp_path_factory.mktemp("sshd"))
    try:
        assert ssh_ok(server), server.log.read_text()
        yield server
    finally:
        server.stop()
