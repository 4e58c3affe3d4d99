"""zpar/privatefile.py: private tmpfs files for the communicator and distributed arrays."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from zpar import privatefile
from zpar.privatefile import attach_mapped, create_mapped, mapped_until_return


def test_made_private_and_reserved_then_unlinked_by_the_peer_that_attaches(tmp_path):
    path, mine = create_mapped("zpar-test-", 4096, str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith(f"zpar-test-{os.getpid()}-")
    st = os.stat(path)
    assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 4096
    assert st.st_blocks * 512 >= 4096  # reserved, not a sparse file
    theirs = attach_mapped(path, "zpar-test-", 4096, str(tmp_path))
    assert not os.path.exists(path)  # both hold the mapping: nothing left behind
    mine[:5] = b"hello"
    assert theirs[:5] == b"hello"
    mine.close()
    theirs.close()


def test_a_failed_reservation_leaves_no_file(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match="No space"):
        create_mapped("zpar-test-", 4096, str(tmp_path))
    assert list(tmp_path.iterdir()) == []
    with mapped_until_return("zpar-test-", 4096, str(tmp_path)) as made:
        assert made is None  # the caller takes its other path
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "name",
    ["../zpar-test-x", "other-prefix", "zpar-test-x/y", ""],
)
def test_attach_refuses_paths_it_could_not_have_made(tmp_path, name):
    with pytest.raises(ValueError, match="refusing shared memory path"):
        attach_mapped(f"{tmp_path}/{name}", "zpar-test-", 4096, str(tmp_path))


def test_attach_refuses_another_size(tmp_path):
    path, mine = create_mapped("zpar-test-", 4096, str(tmp_path))
    with pytest.raises(ValueError, match="is not 8192 bytes"):
        attach_mapped(path, "zpar-test-", 8192, str(tmp_path))
    mine.close()
    privatefile.unlink_quietly(path)
    privatefile.unlink_quietly(path)  # twice: the peer may have been first


def test_mapped_until_return_unlinks_and_keeps_the_mapping(tmp_path):
    with mapped_until_return("zpar-test-", 8192, str(tmp_path)) as made:
        assert made is not None
        path, mapping = made
        assert os.path.exists(path)
    assert not os.path.exists(path)
    mapping[:3] = b"abc"  # still mapped after the file is gone
    assert mapping[:3] == b"abc"
    mapping.close()
    with mapped_until_return("zpar-test-", 8192, str(tmp_path / "missing")) as made:
        assert made is None


def test_a_size_of_zero_is_refused(tmp_path):
    with pytest.raises(ValueError, match="size > 0"):
        create_mapped("zpar-test-", 0, str(tmp_path))


def _dead_pid() -> int:
    """A pid no process has: above the kernel's largest."""
    with open("/proc/sys/kernel/pid_max") as f:
        return int(f.read()) + 1


def _aged(path, seconds: float = 3600) -> str:
    path.write_bytes(b"x")
    old = os.stat(path).st_mtime - seconds
    os.utime(path, (old, old))
    return str(path)


def test_a_dead_creators_old_files_are_swept_and_nothing_else(tmp_path):
    dead = _dead_pid()
    orphan = _aged(tmp_path / f"zpar-sweep-{dead}-aaaa")
    young = str(tmp_path / f"zpar-sweep-{dead}-bbbb")
    open(young, "wb").close()  # a peer may still be mapping it
    alive = _aged(tmp_path / f"zpar-sweep-{os.getpid()}-cccc")
    other = _aged(tmp_path / f"zpar-other-{dead}-dddd")
    odd = _aged(tmp_path / "zpar-sweep-notapid")
    assert privatefile.sweep_orphans("zpar-sweep-", str(tmp_path)) == [orphan]
    assert {p.name for p in tmp_path.iterdir()} == {
        os.path.basename(p) for p in (young, alive, other, odd)
    }


def test_the_first_creation_of_a_kind_sweeps_its_orphans(tmp_path):
    orphan = _aged(tmp_path / f"zpar-first-{_dead_pid()}-aaaa")
    path, mine = create_mapped("zpar-first-", 4096, str(tmp_path))
    try:
        assert not os.path.exists(orphan) and os.path.exists(path)
    finally:
        mine.close()
        os.unlink(path)
