"""A connection file's controller judged dead only where its pid means that process: the
same pid namespace (issue 27: a stale file refused at once; a container sharing the
profile's volume never judges another container's controller)."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from zpar.cluster.connection import (
    ConnectionInfo,
    check_controller_alive,
    pid_namespace,
    write_connection_file,
)
from zpar.cluster.registry import remove_dead_connection_files
from zpar.errors import ConnectionFileError


def unused_pid() -> int:
    top = int(Path("/proc/sys/kernel/pid_max").read_text()) - 1
    return next(p for p in range(top, 1, -1) if not psutil.pid_exists(p))


ME = ConnectionInfo(
    registration="tcp://127.0.0.1:1",
    key="k" * 32,
    controller_pid=os.getpid(),
    controller_pidns=pid_namespace(),
    controller_started=psutil.Process().create_time(),
)


def test_a_live_controller_passes():
    assert pid_namespace()
    check_controller_alive("f.json", ME)


def test_a_dead_pid_is_named_with_the_file():
    dead = replace(ME, controller_pid=unused_pid())
    with pytest.raises(
        ConnectionFileError, match=rf"f\.json names controller pid {dead.controller_pid}"
    ):
        check_controller_alive("f.json", dead)


def test_a_reused_pid_is_not_taken_for_the_controller():
    with pytest.raises(ConnectionFileError, match="no longer running"):
        check_controller_alive("f.json", replace(ME, controller_started=ME.controller_started - 60))


def test_another_namespace_or_an_old_file_is_not_judged():
    check_controller_alive(
        "f.json", replace(ME, controller_pid=unused_pid(), controller_pidns="x/1")
    )
    check_controller_alive("f.json", replace(ME, controller_pid=unused_pid(), controller_pidns=""))


def test_only_this_namespaces_dead_controllers_lose_their_files(tmp_path):
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    dead = unused_pid()
    write_connection_file(
        theirs / "zpar-client.json", replace(ME, controller_pid=dead, controller_pidns="x/1")
    )
    write_connection_file(ours / "zpar-client.json", replace(ME, controller_pid=dead))
    remove_dead_connection_files(theirs)
    remove_dead_connection_files(ours)
    assert (theirs / "zpar-client.json").exists()
    assert not (ours / "zpar-client.json").exists()
