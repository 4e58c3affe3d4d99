"""Connection files: private, atomic, and clear about what is wrong with them."""

from __future__ import annotations

import json
import stat

import pytest

from zpar.cluster.connection import (
    ConnectionInfo,
    default_url_file,
    profile_dir,
    read_connection_file,
    write_connection_file,
)
from zpar.errors import ConnectionFileError


def test_round_trip_and_mode_0600(tmp_path):
    info = ConnectionInfo("tcp://127.0.0.1:5555", "ab" * 32, cluster_id="c", controller_pid=7)
    path = write_connection_file(tmp_path / "x" / "zpar-client.json", info)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_connection_file(path) == info
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp")]


def test_missing_file_says_what_to_do(tmp_path):
    with pytest.raises(ConnectionFileError, match="does not exist.*zpar cluster start"):
        read_connection_file(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "cannot read"),
        ("[1, 2]", "not a zpar connection file"),
        ('{"registration": "tcp://x:1"}', "lacks 'registration' or 'key'"),
        (
            '{"registration": "tcp://x:1", "key": "k", "signature_scheme": "md5"}',
            "signature scheme 'md5'",
        ),
    ],
)
def test_bad_files_are_named(tmp_path, text, match):
    path = tmp_path / "f.json"
    path.write_text(text)
    with pytest.raises(ConnectionFileError, match=match):
        read_connection_file(path)


def test_unknown_fields_are_ignored(tmp_path):
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"registration": "tcp://h:1", "key": "k", "future": 1}))
    assert read_connection_file(path).registration == "tcp://h:1"


@pytest.mark.parametrize("bad", ["", "../x", "a/b", ".hidden"])
def test_invalid_profile_names_are_refused(bad):
    with pytest.raises(ValueError, match="invalid profile name"):
        profile_dir(bad)


def test_profile_layout_is_private(zpar_dir):
    d = profile_dir("p1")
    assert d == zpar_dir / "profile_p1"
    assert stat.S_IMODE((d / "security").stat().st_mode) == 0o700
    assert default_url_file("p1", "engine") == d / "security" / "zpar-engine.json"
