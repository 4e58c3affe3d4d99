"""Large arrays there and back through an engine land in reused memory at both ends
(zpar.wire.framememory, docs/decisions.md "W4 maps and W5 large arrays"): by default, or with
ZPAR_FRAME_REUSE=all, engines and a client started through zpar.Cluster; with
ZPAR_FRAME_REUSE=engines only engines. Page-fault counts of one round trip, not times: a
64 MB frame in fresh 4 KiB pages is 16,384 faults. The arrays go through the sockets
(ZPAR_SHM=0): on one host they would otherwise cross in shared memory, and no frame would
be received at all (tests/e2e/test_samehost_arrays.py pins that path)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc")

# In a fresh interpreter: the client's setting changes its process for good. gc.collect()
# after each call, so that the test does not depend on replies being freed without the
# cyclic GC (a Request <-> future cycle held them before the client's ea6fa4a).
ROUND_TRIPS = textwrap.dedent(
    """
    import gc, json, os, resource, sys
    import numpy as np
    import psutil
    import zpar

    def minflt(pid):
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[7])

    a = np.ones(64 * 2**20 // 8)
    with zpar.Cluster(n=1) as rc:
        engine = rc[0].apply_sync(os.getpid)
        faults = []
        for _ in range(4):
            c0, e0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, minflt(engine)
            back = rc[0].apply_sync(lambda x: x, a)
            assert back.shape == a.shape and back[-1] == 1.0
            del back
            gc.collect()
            faults.append([resource.getrusage(resource.RUSAGE_SELF).ru_minflt - c0,
                           minflt(engine) - e0])
    print(json.dumps(faults))
    """
)


def _faults(switch: str | None) -> list[list[int]]:
    drop = ("GLIBC_TUNABLES", "ZPAR_FRAME_REUSE")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["ZPAR_SHM"] = "0"  # the socket path, whose frames these counts are about
    if switch is not None:
        env["ZPAR_FRAME_REUSE"] = switch
    out = subprocess.run(
        [sys.executable, "-c", ROUND_TRIPS],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("switch", [None, "all"])
def test_both_ends_reuse_frame_memory_by_default(switch):
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    client, engine = _faults(switch)[-1]
    assert client < pages // 20, client
    assert engine < pages // 20, engine


def test_engines_alone_reuse_when_asked():
    pages = 64 * 2**20 // os.sysconf("SC_PAGE_SIZE")
    client, engine = _faults("engines")[-1]
    assert client > pages // 2, client  # the client's frames are fresh pages, as before
    assert engine < pages // 20, engine
