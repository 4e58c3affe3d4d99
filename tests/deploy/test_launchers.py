"""Local, MPI, Slurm and PBS engine launchers; --keep, the launcher's death notice to the hub,
the start timeout's report."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

import zpar
from tests.clusters import wait_until
from zpar.cluster.launchers import LaunchContext, LaunchError, engine_set_class
from zpar.cluster.launchers.hubquery import HubLine, ids_by_rank
from zpar.cluster.launchers.restart import RestartPolicy
from zpar.cluster.settings import Settings

REPO = Path(__file__).resolve().parents[2]
SLOW_HB = ["--hb-period", "5", "--hb-misses", "4"]  # the heartbeat would take 20 s


# -- the launcher's death notice and --keep -------------------------------------------------------


def test_launcher_tells_the_hub_at_once_when_an_engine_dies(zpar_dir):
    with zpar.Cluster(n=2, controller_args=SLOW_HB, timeout=60) as rc:
        c_pid = rc[1].apply_sync(os.getpid)
        task = rc[1].apply_async(time.sleep, 30)
        t0 = time.monotonic()
        os.kill(c_pid, signal.SIGKILL)
        with pytest.raises(zpar.EngineError):
            task.get(timeout=15)  # far inside the 20 s heartbeat budget
        wait_until(lambda: rc.ids == [0], "engine 1 unregistered", 15)
        assert time.monotonic() - t0 < 15


def test_engine_exited_query_unregisters_by_host_and_pid():
    """The hub's handler, without sockets: engines named by (hostname, pid)."""
    from types import SimpleNamespace

    from zpar.hub import launcherqueries
    from zpar.hub.hub import EngineRecord

    gone = []
    hub = SimpleNamespace(
        engines={0: EngineRecord(0, "u0", "h", 10), 1: EngineRecord(1, "u1", "h", 11, rank=3)},
        pending={b"u2": EngineRecord(2, "u2", "h", 12)},
        unregister=lambda uuid, reason: gone.append((uuid, reason)),
    )
    msg = SimpleNamespace(content={"hostname": "h", "pid": 11, "exit_code": -9})
    assert launcherqueries.engine_exited(hub, msg) == {"status": "ok", "ids": [1]}
    assert gone == [(b"u1", "its launcher saw the process exit (exit code -9)")]
    msg = SimpleNamespace(content={"hostname": "h", "pid": 12, "exit_code": 1})
    assert launcherqueries.engine_exited(hub, msg)["ids"] == [] and not hub.pending
    bad = SimpleNamespace(content={"hostname": "h", "pid": "x"})
    assert launcherqueries.engine_exited(hub, bad)["status"] == "error"
    info = launcherqueries.engine_info(hub, SimpleNamespace(content={}))
    assert info["engines"][1] == {"hostname": "h", "pid": 11, "rank": 3}


def test_keep_replaces_a_dead_engine(zpar_dir):
    with zpar.Cluster(n=2, keep=True, timeout=60) as rc:
        pids = set(rc[:].apply_sync(os.getpid))
        victim = rc[0].apply_sync(os.getpid)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: 0 not in rc.ids, "engine 0 unregistered")
        wait_until(lambda: len(rc.ids) == 2, "a replacement registered", 60)
        new = set(rc[:].apply_sync(os.getpid))
        assert victim not in new and len(new - pids) == 1


def test_crash_loop_backs_off_and_resets():
    p = RestartPolicy(crash_window=10, first_delay=0.5, max_delay=4)
    assert [p.next_delay("s", 0.1) for _ in range(5)] == [0.5, 1, 2, 4, 4]
    assert p.crash_count("s") == 5
    assert p.next_delay("s", 60) == 0 and p.crash_count("s") == 0
    assert p.next_delay("other", 1) == 0.5  # slots are counted apart


def test_crash_loop_is_reported(zpar_dir, tmp_path):
    """Engines that die at once are restarted with growing delays, and the user is told."""
    events = []
    crash = tmp_path / "crash.py"
    crash.write_text("import sys; sys.exit(3)\n")
    c = zpar.Cluster(n=1, keep=True, timeout=5, python=str(_fake_python(tmp_path, crash)))
    c.launcher.on_event = events.append
    with pytest.raises(zpar.TimeoutError):
        c.start()
    assert any("crash(es) in a row: restarting it in" in e for e in events), events
    assert any("exited with code 3" in e for e in events)


def _fake_python(tmp_path: Path, script: Path) -> Path:
    """An executable standing in for python: runs ``script`` whatever the arguments."""
    exe = tmp_path / f"python-{script.stem}"
    exe.write_text(f"#!/bin/sh\nexec {sys.executable} {script}\n")
    exe.chmod(0o755)
    return exe


#: seconds of the start timeout test's wait for engines that never register
START_TIMEOUT = 15


def test_start_timeout_names_each_engine_state_and_log(zpar_dir, tmp_path):
    stuck = tmp_path / "stuck.py"
    stuck.write_text("import time\nprint('engine stuck before registering', flush=True)\n"
                     "time.sleep(600)\n")  # fmt: skip
    # the engines never register: the timeout is what the test waits out, long enough that
    # the controller itself has started within it on a loaded machine (the report is about
    # the engines, not a controller still starting)
    c = zpar.Cluster(n=2, timeout=START_TIMEOUT, python=str(_fake_python(tmp_path, stuck)))
    with pytest.raises(zpar.TimeoutError) as err:
        c.start()
    text = str(err.value)
    assert f"0 of 2 engines registered within {START_TIMEOUT}" in text
    assert text.count("local engine pid") == 2
    assert text.count("engine stuck before registering") == 2
    assert "sleeping" in text or "running" in text
    assert "controller pid" in text


# -- MPI ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mpiexec():
    if shutil.which("mpiexec") is None:
        r = subprocess.run(
            [str(REPO / "scripts" / "ensure_system_packages.sh"), "mpi"],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if r.returncode != 0 or shutil.which("mpiexec") is None:
            pytest.fail(
                f"could not install an MPI (scripts/ensure_system_packages.sh mpi): {r.stderr.strip()[-300:]}"
            )
    return shutil.which("mpiexec")


def _mpi_args() -> list[str]:
    out = subprocess.run(["mpiexec", "--version"], capture_output=True, text=True).stdout
    return ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in out else []


def test_mpi_engines_know_their_rank(zpar_dir, mpiexec):
    with zpar.Cluster(n=3, engines="mpi", mpi_args=_mpi_args(), timeout=90) as rc:
        line = HubLine(rc.url_file)
        info = line.engine_info()
        line.close()
        assert sorted(e["rank"] for e in info.values()) == [0, 1, 2]
        by_rank = ids_by_rank(rc.url_file)
        assert [info[i]["rank"] for i in by_rank] == [0, 1, 2]
        env = rc[by_rank].apply_sync(lambda: __import__("os").environ.get("PMI_RANK", "?"))
        assert env == ["0", "1", "2"] or env == ["?"] * 3  # MPICH sets it; Open MPI not
    assert not [
        p for p in psutil.process_iter(["cmdline"]) if "zpar.engine" in " ".join(
            p.info["cmdline"] or []) and str(zpar_dir) in " ".join(p.info["cmdline"] or [])
    ]  # fmt: skip


def test_mpi_engine_ids_are_their_ranks(zpar_dir, mpiexec):
    """As ipyparallel's engines under MPI: engine id = MPI_COMM_WORLD rank."""
    with zpar.Cluster(n=3, engines="mpi", mpi_args=_mpi_args(), timeout=90) as rc:
        rc.wait_for_engines(3, timeout=60)
        assert rc.ids == [0, 1, 2]
        ranks = rc[:].apply_sync(
            lambda: __import__("zpar.cluster.launchers.mpirank", fromlist=["mpi_rank"]).mpi_rank()
        )
        assert ranks == [0, 1, 2]
        line = HubLine(rc.url_file)
        info = line.engine_info()
        line.close()
        assert {i: info[i]["rank"] for i in info} == {0: 0, 1: 1, 2: 2}


def test_missing_mpiexec_is_one_clear_error(zpar_dir):
    c = zpar.Cluster(n=2, engines="mpi", mpi_mpiexec="no-such-mpiexec", timeout=30)
    with pytest.raises(LaunchError, match="'no-such-mpiexec' not found on PATH.*apt-get install"):
        c.start()


# -- batch systems -------------------------------------------------------------------------------


def _ctx(tmp_path: Path, **settings) -> LaunchContext:
    return LaunchContext(
        cluster_id="c1",
        profile="default",
        engine_file=tmp_path / "zpar-engine.json",
        client_file=tmp_path / "zpar-client.json",
        log_dir=tmp_path / "log",
        settings=Settings(**settings),
    )


def test_slurm_script(tmp_path):
    es = engine_set_class("slurm")(
        _ctx(tmp_path, batch_queue="short", batch_account="proj1", batch_walltime="01:00:00",
             python="/opt/py/bin/python"), 8)  # fmt: skip
    text = es.render()
    lines = text.splitlines()
    assert lines[0] == "#!/bin/sh"
    for want in ("#SBATCH --ntasks=8", "#SBATCH --job-name=zpar-engines-c1",
                 "#SBATCH --partition=short", "#SBATCH --account=proj1",
                 "#SBATCH --time=01:00:00"):  # fmt: skip
        assert want in lines
    assert lines[-1] == (
        f"srun /opt/py/bin/python -P -m zpar.engine --file {tmp_path}/zpar-engine.json "
        "--log-level WARNING"
    )
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)  # valid shell


def test_pbs_script(tmp_path):
    es = engine_set_class("pbs")(_ctx(tmp_path, batch_queue="batch", batch_walltime="2:00:00"), 4)
    lines = es.render().splitlines()
    for want in ("#PBS -l select=4:ncpus=1", "#PBS -q batch", "#PBS -l walltime=2:00:00",
                 "#PBS -N zpar-engines-c1"):  # fmt: skip
        assert want in lines
    assert lines[-1].startswith("pbsdsh -- ") and "-m zpar.engine --file" in lines[-1]


def test_template_from_the_profile(tmp_path, zpar_dir):
    t = tmp_path / "my.sbatch"
    t.write_text("#!/bin/bash\n#SBATCH -n {n}\nmodule load python\nsrun {engine_command}\n")
    es = engine_set_class("slurm")(_ctx(tmp_path, batch_template=str(t)), 3)
    assert "module load python" in es.render() and "#SBATCH -n 3" in es.render()
    t.write_text("{nodes}\n")
    with pytest.raises(LaunchError, match=r"bad field 'nodes'.*\{engine_command\}"):
        es.render()


def _fake_batch(bindir: Path, kind: str) -> Path:
    """sbatch/qsub that run the script in the background (as the job) and print a job id,
    srun/pbsdsh that start the command once per task, scancel/qdel that end the job."""
    bindir.mkdir(exist_ok=True)
    submit, cancel, spread = {
        "slurm": ("sbatch", "scancel", "srun"), "pbs": ("qsub", "qdel", "pbsdsh"),
    }[kind]  # fmt: skip
    calls = bindir / "calls"
    (bindir / submit).write_text(
        f'#!/bin/sh\necho "{submit} $*" >> {calls}\nscript=$(eval echo \\${{$#}})\n'
        f'n=$(grep -oE "(ntasks=|select=)[0-9]+" "$script" | grep -oE "[0-9]+")\n'
        f'ZPAR_TASKS=$n setsid sh "$script" > /dev/null 2>&1 < /dev/null &\n'
        'echo "$!"\n'
    )
    (bindir / spread).write_text(
        '#!/bin/sh\n[ "$1" = "--" ] && shift\n'
        'i=0; while [ $i -lt $ZPAR_TASKS ]; do "$@" & i=$((i+1)); done; wait\n'
    )
    (bindir / cancel).write_text(f'#!/bin/sh\necho "{cancel} $*" >> {calls}\nkill -TERM -- -$1\n')
    for f in (submit, cancel, spread):
        (bindir / f).chmod(0o755)
    return calls


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_batch_job_submitted_runs_and_is_cancelled(zpar_dir, tmp_path, monkeypatch, kind):
    calls = _fake_batch(tmp_path / "bin", kind)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    c = zpar.Cluster(n=2, engines=kind, cluster_id=f"b{kind}", timeout=90)
    with c as rc:
        assert len(rc[:].apply_sync(os.getpid)) == 2
        record = c.launcher.engine_sets[0].record()
        assert record["kind"] == kind and record["job_id"].isdigit()
        script = Path(record["script"])
        assert script.parent == zpar_dir / "profile_default" / "batch"
        engines = [psutil.Process(p) for p in rc[:].apply_sync(os.getpid)]
    submit, cancel = calls.read_text().splitlines()
    assert submit.endswith(str(script)) and cancel.endswith(record["job_id"])
    assert not psutil.wait_procs(engines, 20)[1]


def test_missing_batch_command_is_one_clear_line(zpar_dir, tmp_path):
    env = dict(os.environ, PATH=str(tmp_path), ZPAR_DIR=str(zpar_dir))
    r = subprocess.run(
        [sys.executable, "-m", "zpar", "cluster", "start", "-n", "2", "--engines", "slurm",
         "--timeout", "20"],
        env=env, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert r.returncode == 1
    assert "sbatch not found on PATH" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture
def real_slurm(tmp_path, monkeypatch):
    """A single-node Slurm of our own (scripts/slurm_single_node.sh), or a skip saying why."""
    if os.geteuid() != 0:
        pytest.skip("a throwaway slurmctld/slurmd needs root")
    if shutil.which("slurmctld") is None:
        r = subprocess.run([str(REPO / "scripts" / "ensure_system_packages.sh"), "slurm"],
                           capture_output=True, text=True, timeout=900)  # fmt: skip
        if r.returncode != 0 or shutil.which("slurmctld") is None:
            pytest.fail(
                f"could not install Slurm (scripts/ensure_system_packages.sh slurm): {r.stderr.strip()[-300:]}"
            )
    d = tmp_path / "slurm"
    script = str(REPO / "scripts" / "slurm_single_node.sh")
    r = subprocess.run([script, "start", str(d)], capture_output=True, text=True, timeout=120)
    try:
        if r.returncode != 0:
            pytest.skip(f"single-node Slurm did not start here: {r.stderr.strip()[-500:]}")
        monkeypatch.setenv("SLURM_CONF", str(d / "slurm.conf"))
        yield d
    finally:
        subprocess.run([script, "stop", str(d)], capture_output=True, timeout=60)


def test_real_slurm_job_runs_engines_and_is_cancelled(zpar_dir, real_slurm):
    def squeue() -> str:
        return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True,
                              text=True, timeout=30).stdout  # fmt: skip

    c = zpar.Cluster(n=2, engines="slurm", cluster_id="slurm", timeout=90)
    with c as rc:
        job = c.launcher.engine_sets[0].record()["job_id"]
        assert f"{job} zpar-engines-slurm RUNNING" in squeue()
        pids = rc[:].apply_sync(os.getpid)
        assert len(set(pids)) == 2
        assert all(psutil.Process(p).ppid() != os.getpid() for p in pids)  # slurmstepd's
    wait_until(lambda: job not in squeue(), "the job cancelled", 60)
    wait_until(lambda: not any(psutil.pid_exists(p) for p in pids), "engines gone", 60)
