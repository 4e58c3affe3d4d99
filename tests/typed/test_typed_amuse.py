"""Interop with AMUSE itself (amuse-framework 2024.6.0, built by scripts/amuse_env.sh into a
throwaway virtualenv, as scripts/pg_test_server.sh provides PostgreSQL):

- AMUSE's SocketMessage writes the bytes zpar's codec writes (and fails on non-ASCII);
  its legacy_function ids are zpar's default ids;
- (a) AMUSE's PythonCodeInterface(channel_type="sockets") starts `zpar-amuse-worker` as its
  worker and calls zpar-registered functions unchanged;
- (b) zpar's AmuseWorker drives a community-code worker AMUSE generates (amusifier --type=c)
  and g++ compiles without MPI, and AMUSE's own Python worker (PythonImplementation's
  sockets loop, with a stand-in for the mpi4py it imports but does not use there), which
  dies on an unknown function id.

Skipped only when the AMUSE install itself fails, with its error as the reason.
Set ZPAR_AMUSE_ENV_DIR to keep the build between runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.typed.add_and_twice import declare_add_and_twice
from zpar.errors import EngineError
from zpar.typed import AmuseWorker, function_id_for
from zpar.typed.amuse import MODULES_ENV
from zpar.typed.codec import AmuseHeader, amuse_body, amuse_counts, pack_amuse_header
from zpar.typed.result import RemoteCallError

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(900),
]  # the first test builds AMUSE (~1 min, more under load)

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
WORKER = Path(sys.executable).parent / "zpar-amuse-worker"

#: AMUSE's declarations of add and twice (methods of a CodeInterface): the three AMUSE
#: scripts below name them by a line ``ADD_AND_TWICE`` that `amuse_script` replaces.
ADD_AND_TWICE = """\
@legacy_function
def add():
    f = LegacyFunctionSpecification()
    f.addParameter("x", dtype="float64", direction=f.IN)
    f.addParameter("y", dtype="float64", direction=f.IN)
    f.addParameter("z", dtype="float64", direction=f.OUT)
    f.result_type = "int32"
    f.can_handle_array = True
    return f

@legacy_function
def twice():
    f = LegacyFunctionSpecification()
    f.addParameter("n", dtype="int64", direction=f.INOUT)
    f.addParameter("s", dtype="string", direction=f.IN)
    f.addParameter("k", dtype="int32", direction=f.OUT)
    f.result_type = "int32"
    f.can_handle_array = True
    return f
"""


def amuse_script(code: str) -> str:
    """code dedented, each ``ADD_AND_TWICE`` line replaced by those declarations at its indent."""
    lines = []
    for line in textwrap.dedent(code).splitlines(keepends=True):
        if line.strip() == "ADD_AND_TWICE":
            line = textwrap.indent(ADD_AND_TWICE, line[: len(line) - len(line.lstrip())])
        lines.append(line)
    return "".join(lines)


@pytest.fixture(scope="session")
def amuse_python(tmp_path_factory):
    where = os.environ.get("ZPAR_AMUSE_ENV_DIR") or str(tmp_path_factory.mktemp("amuse"))
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "amuse_env.sh"), where],
        capture_output=True,
        text=True,
        timeout=840,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"amuse-framework could not be installed (exit {proc.returncode}): {proc.stderr[-2000:]}"
        )
    return proc.stdout.strip().splitlines()[-1]


def run_amuse(python, code, tmp_path, args=(), env=None, timeout=120):
    """Run an AMUSE script (see `amuse_script`) with args; the JSON line it printed."""
    script = tmp_path / "amuse_script.py"
    script.write_text(amuse_script(code))
    proc = subprocess.run(
        [python, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, (
        f"AMUSE script failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("{")))


def test_amuse_writes_the_bytes_zpar_writes(amuse_python, tmp_path):
    got = run_amuse(
        amuse_python,
        """
        import json, socket
        import numpy
        from amuse.rfi.channel import SocketMessage
        from amuse.rfi.core import legacy_function, LegacyFunctionSpecification

        def sent(message):
            a, b = socket.socketpair()
            message.send(a)
            a.close()
            data = b""
            while chunk := b.recv(65536):
                data += chunk
            return data.hex()

        out = {}
        args = {"int32": [[1, 2], [3, 4]], "float64": [[0.5, 1.5]], "bool": [[True, False]],
                "string": [["ab", ""]], "int64": [[2**40, -1]]}
        out["message"] = sent(SocketMessage(7, 123, 2, args))
        error = SocketMessage(8, 9, 1)
        error.set_error("it broke")
        out["error"] = sent(error)
        try:
            sent(SocketMessage(1, 2, 1, {"string": [["é"]]}))
            out["non_ascii"] = "sent"
        except Exception as e:
            out["non_ascii"] = str(e)

        class Codes:
            @legacy_function
            def add():
                return LegacyFunctionSpecification()
            @legacy_function
            def evolve_model():
                return LegacyFunctionSpecification()
        out["ids"] = {"add": Codes.add.specification.id, "evolve_model": Codes.evolve_model.specification.id}
        print(json.dumps(out))
        """,
        tmp_path,
    )
    arrays = {
        "int32": np.array([1, 2, 3, 4], dtype=np.int32),
        "int64": np.array([2**40, -1]),
        "float64": np.array([0.5, 1.5]),
        "bool": np.array([True, False]),
        "string": ["ab", ""],
    }
    ours = pack_amuse_header(AmuseHeader(7, 123, 2, amuse_counts(arrays))) + b"".join(
        amuse_body(arrays)
    )
    assert bytes.fromhex(got["message"]) == ours
    err = {"string": ["it broke"]}
    ours = pack_amuse_header(AmuseHeader(8, 9, 1, amuse_counts(err), error=True)) + b"".join(
        amuse_body(err)
    )
    assert bytes.fromhex(got["error"]) == ours
    assert "send_strings size mismatch" in got["non_ascii"]  # AMUSE counts characters
    assert got["ids"] == {
        "add": function_id_for("add"),
        "evolve_model": function_id_for("evolve_model"),
    }


AMUSE_CLIENT = """
    import json, sys
    from amuse.rfi.core import PythonCodeInterface, legacy_function, LegacyFunctionSpecification

    class Z(PythonCodeInterface):
        def __init__(self, worker, **options):
            PythonCodeInterface.__init__(self, name_of_the_worker=worker, **options)

        ADD_AND_TWICE

        @legacy_function
        def missing():
            f = LegacyFunctionSpecification()
            f.addParameter("x", dtype="float64", direction=f.IN)
            f.result_type = "int32"
            return f

    # the worker is started as `<zpar-amuse-worker> <port> <host> false`
    z = Z(sys.argv[1], channel_type="sockets", redirection="none", use_python_interpreter=False)
    out = {}
    r = z.add([1.0, 2.0, 3.0], 10.0)
    out["add"] = [list(map(float, r["z"])), list(map(int, r["__result"]))]
    r = z.twice([1, 2**40], ["ab", "xyz"])
    out["twice"] = [list(map(int, r["n"])), list(map(int, r["k"])), list(map(int, r["__result"]))]
    for name, call in (("missing", lambda: z.missing(1.0)), ("boom", lambda: z.twice(1, "boom"))):
        try:
            call()
            out[name] = None
        except Exception as e:
            out[name] = str(e)
    out["after"] = list(map(float, z.add([5.0], 1.0)["z"]))
    z.stop()  # function id 0
    print(json.dumps(out))
"""


def test_amuse_client_uses_a_zpar_worker(amuse_python, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE)
    env[MODULES_ENV] = "typed_gateway_module"
    out = run_amuse(amuse_python, AMUSE_CLIENT, tmp_path, args=[str(WORKER)], env=env)
    assert out["add"] == [[11.0, 12.0, 13.0], [0, 0, 0]]
    assert out["twice"] == [[2, 2**41], [2, 3], [7, 7]]
    assert f"unknown function id {function_id_for('missing')}" in out["missing"]
    assert "ValueError: boom asked (call 0)" in out["boom"]
    assert out["after"] == [6.0]  # the zpar worker kept serving after both errors


@pytest.fixture(scope="session")
def c_worker(amuse_python, tmp_path_factory):
    """A community-code worker in C, its glue generated by AMUSE's amusifier."""
    d = tmp_path_factory.mktemp("cworker")
    (d / "addinterface.py").write_text(
        amuse_script(
            """
            from amuse.rfi.core import CodeInterface, legacy_function, LegacyFunctionSpecification

            class AddInterface(CodeInterface):
                include_headers = ["add.h"]

                ADD_AND_TWICE
            """
        )
    )
    (d / "add.h").write_text(
        "int add(double x, double y, double *z);\nint twice(long long int *n, char *s, int *k);\n"
    )
    (d / "add.c").write_text(
        "#include <string.h>\n"
        "int add(double x, double y, double *z) { *z = x + y; return 0; }\n"
        "int twice(long long int *n, char *s, int *k) { *n = 2 * *n; *k = (int)strlen(s); return 7; }\n"
    )
    amusifier = str(Path(amuse_python).parent / "amusifier")
    gen = subprocess.run(
        [amusifier, "--type=c", "--mode=mpi", "-o", "worker.cc", "addinterface.py", "AddInterface"],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(d)},
    )
    assert gen.returncode == 0, gen.stderr[-3000:]
    cc = subprocess.run(
        ["g++", "-O1", "-DNOMPI", "-I.", "-o", "add_worker", "worker.cc", "add.c"],
        cwd=d,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cc.returncode == 0, cc.stderr[-3000:]
    return str(d / "add_worker")


def test_zpar_drives_an_amuse_generated_c_worker(c_worker):
    with AmuseWorker(c_worker) as w:
        declare_add_and_twice(w)
        rc, z = w.add(np.arange(1000.0), 0.5, max_calls_per_message=300)
        assert rc.tolist() == [0] * 1000
        np.testing.assert_array_equal(z, np.arange(1000.0) + 0.5)
        rc, n, k = w.twice([1, 2**40], ["ab", "é"])
        assert rc.tolist() == [7, 7] and n.tolist() == [2, 2**41]
        assert k.tolist() == [2, 2]  # strlen counts UTF-8 bytes: zpar sends them all
        w.declare("not_in_the_worker", args=[("x", "int32")], returns="int32")
        with pytest.raises(RemoteCallError):
            w.not_in_the_worker(1)
    assert w.process.returncode == 0  # function id 0 stopped it


MPI_STUB = '''
"""Stand-in for mpi4py: amuse.rfi.python_code imports it at import time; its sockets path
(PythonImplementation.start_socket) never uses it, and the --no-deps install lacks it."""


class _NoMPI:
    def __getattr__(self, name):
        raise RuntimeError(f"MPI.{name}: MPI is not available in this test")


MPI = _NoMPI()
'''

AMUSE_PYTHON_WORKER = """
import sys
from amuse.rfi.core import PythonCodeInterface, legacy_function, LegacyFunctionSpecification
from amuse.rfi.python_code import PythonImplementation

class Impl:
    def add(self, x, y, z):
        z.value = x + y
        return 0

    def twice(self, n, s, k):
        n.value = 2 * n.value
        k.value = len(s)
        return 7

class Iface(PythonCodeInterface):
    ADD_AND_TWICE

if __name__ == "__main__":
    # what AMUSE's python_code_script.template runs for sockets without MPI
    PythonImplementation(Impl(), Iface).start_socket(int(sys.argv[1]), sys.argv[2])
"""


def test_zpar_drives_amuses_own_python_worker_which_dies_on_an_unknown_id(amuse_python, tmp_path):
    (tmp_path / "mpi4py").mkdir()
    (tmp_path / "mpi4py" / "__init__.py").write_text(MPI_STUB)
    (tmp_path / "pyworker.py").write_text(amuse_script(AMUSE_PYTHON_WORKER))
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    with AmuseWorker([amuse_python, str(tmp_path / "pyworker.py")], env=env) as w:
        declare_add_and_twice(w)
        rc, z = w.add(np.arange(3.0), 1.0)
        assert rc.tolist() == [0, 0, 0] and z.tolist() == [1.0, 2.0, 3.0]
        rc, n, k = w.twice([1, 2**40], ["ab", "é"])
        assert n.tolist() == [2, 2**41] and rc.tolist() == [7, 7]
        assert k.tolist() == [2, 1]  # AMUSE decodes zpar's byte lengths right: len("é") == 1
        w.declare("not_in_the_worker", args=[("x", "int32")], returns="int32")
        # AMUSE's worker builds its error text as "unknown function id " + numpy.int32: a
        # TypeError that kills it (zpar's worker answers and keeps serving)
        with pytest.raises(EngineError, match="exit code: 1"):
            w.not_in_the_worker(1)
    assert w.process.returncode == 1
