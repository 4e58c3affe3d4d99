"""The AMUSE gateway against itself: AmuseWorker drives a `zpar amuse-worker` over AMUSE's
sockets protocol (real processes on 127.0.0.1, no AMUSE needed). The same two ends meet
AMUSE's own client and a worker AMUSE generates in test_typed_amuse.py."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.typed.add_and_twice import declare_add_and_twice
from zpar.errors import EngineError
from zpar.typed import AmuseWorker, function_id_for
from zpar.typed.amuse import MODULES_ENV, handle_amuse, recv_amuse
from zpar.typed.codec import AmuseHeader, amuse_counts, pack_amuse_header
from zpar.typed.registry import Registry
from zpar.typed.result import RemoteCallError
from zpar.typed.signature import TypedSignature

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

HERE = Path(__file__).resolve().parent
WORKER = Path(sys.executable).parent / "zpar-amuse-worker"


def worker_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
    env[MODULES_ENV] = "typed_gateway_module"
    return env


def declare(w):
    declare_add_and_twice(w)
    w.declare("shout", args=[("s", "string"), ("b", "bool")], returns="string")


def test_zpar_drives_a_zpar_amuse_worker():
    with AmuseWorker([str(WORKER)], env=worker_env()) as w:
        declare(w)
        rc, z = w.add(np.arange(5.0), 10.0)
        assert rc.tolist() == [0] * 5 and z.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
        rc, n, k = w.twice([1, 2**40, 3], ["ab", "é", ""], max_calls_per_message=2)
        assert n.tolist() == [2, 2**41, 6] and k.tolist() == [2, 1, 0] and rc.tolist() == [7] * 3
        assert w.shout(["", "é", "日本"], [True, False, True]).tolist() == ["!", "É", "日本!"]
        with pytest.raises(RemoteCallError, match=r"ValueError: boom asked \(call 1\)"):
            w.twice([1, 2], ["x", "boom"])
        w.declare("missing", args=[("x", "float64")], returns="int32")
        with pytest.raises(RemoteCallError, match="unknown function id"):
            w.missing(1.0)
        assert w.add(1.0, 2.0)[1].tolist() == [3.0]  # still serving
    assert w.process.returncode == 0  # function id 0 stopped it


def test_a_worker_lost_during_a_call_is_an_engine_error():
    with AmuseWorker([str(WORKER)], env=worker_env()) as w:
        w.declare("exit_now", args=[("code", "int32")], returns="int32")
        with pytest.raises(EngineError, match="lost during exit_now .* exit code: 3"):
            w.exit_now(3)
        with pytest.raises(RuntimeError, match="stopped"):
            w.exit_now(3)
    assert w.process.returncode == 3


def test_bad_input_is_answered_or_ends_the_worker_cleanly():
    with AmuseWorker([str(WORKER)], env=worker_env()) as w:
        declare(w)
        fid = function_id_for("shout")
        # a string that is not UTF-8: read whole, answered with the error flag
        w.sock.sendall(
            pack_amuse_header(AmuseHeader(5, fid, 1, (0, 0, 0, 0, 1, 1)))
            + b"\x01"
            + struct.pack("<i", 2)
            + b"\xff\xfe\x00"
        )
        h, out, _ = recv_amuse(w.sock)
        assert h.error and h.call_id == 5 and "not UTF-8" in out["string"][0]
        assert w.shout("a", True).tolist() == ["A!"]  # still in step, still serving
        # a header in the other byte order: the stream cannot be followed, the worker ends
        w.sock.sendall(b"\x01" + pack_amuse_header(AmuseHeader(6, fid, 1))[1:])
        assert w.process.wait(30) == 1
        w.sock.close()
        w.sock = None


def test_zpar_cli_runs_the_same_worker():
    env = worker_env()
    env.pop(MODULES_ENV)
    cmd = [
        str(Path(sys.executable).parent / "zpar"),
        "amuse-worker",
        "--module",
        "typed_gateway_module",
    ]
    with AmuseWorker(cmd, env=env) as w:
        declare(w)
        assert w.call("shout", "a", True).tolist() == ["A!"]
    assert w.process.returncode == 0


def test_a_worker_that_exits_before_connecting_is_reported():
    env = worker_env()
    env[MODULES_ENV] = "no_such_module_here"
    with pytest.raises(RuntimeError, match="exited with code 1 before connecting"):
        AmuseWorker([str(WORKER)], env=env)


def test_handle_amuse_in_memory():
    reg = Registry()
    sig = reg.add(TypedSignature.build("neg", [("x", "int32")], returns="int32"), lambda x: -x)
    arrays = {"int32": np.array([1, 2], dtype=np.int32)}
    h, out = handle_amuse(AmuseHeader(5, sig.function_id, 2, amuse_counts(arrays)), arrays, reg)
    assert (h.call_id, h.function_id, h.call_count, h.error) == (5, sig.function_id, 2, False)
    assert out["int32"].tolist() == [-1, -2]
    h, out = handle_amuse(AmuseHeader(6, 99, 1, (0,) * 6), {}, reg)
    assert h.error and out == {"string": ["unknown function id 99"]}
    assert h.counts == (0, 0, 0, 0, 0, 1)
