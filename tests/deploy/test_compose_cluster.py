"""The repository's docker-compose.yml brought up for real: a controller, 4 engine
containers and a client running `zpar smoke --job full`, while this test kills one engine
container mid-task from outside (`docker kill`).

A container engine comes from scripts/container_engine.sh (docker.io and a compose, the
plugin or the standalone, whichever the distribution packages); its daemon is started when
none answers and stopped again by this test. The image is built from the repository's
Dockerfile on the official Python image, or, where the public registry cannot be reached,
on a base image made from the distribution's packages (kept by tag between runs).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "container_engine.sh"
COMPOSE = REPO / "docker-compose.yml"
#: The Dockerfile's default base image.
OFFICIAL_BASE = "python:3.11-slim"
#: The base image made from the distribution's packages, by suite (a cache between runs).
LOCAL_BASE = "zpar-base:{suite}-python3"


def run(cmd: list[str], timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def script(*args: str, timeout: float = 900) -> str:
    r = run([str(SCRIPT), *args], timeout=timeout)
    if r.returncode != 0:
        pytest.fail(f"scripts/container_engine.sh {' '.join(args)}: {r.stderr.strip()[-600:]}")
    return r.stdout.strip()


@pytest.fixture(scope="module")
def docker(tmp_path_factory):
    """A container engine that answers; the daemon stopped after, if this started it."""
    script("install")
    state = tmp_path_factory.mktemp("dockerd")
    said = script("start", str(state))
    try:
        yield said
    finally:
        script("stop", str(state), timeout=120)


def compose_command() -> list[str]:
    if run(["docker", "compose", "version"], timeout=60).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"]


def base_image() -> str:
    """The official base if it is here or can be pulled, else one made with debootstrap."""
    if run(["docker", "image", "inspect", OFFICIAL_BASE]).returncode == 0:
        return OFFICIAL_BASE
    if run(["docker", "pull", OFFICIAL_BASE], timeout=300).returncode == 0:
        return OFFICIAL_BASE
    suite = "bookworm"
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("VERSION_CODENAME=") and line.split("=", 1)[1]:
            suite = line.split("=", 1)[1].strip('"')
    tag = LOCAL_BASE.format(suite=suite)
    script("base-image", tag, timeout=1200)
    return tag


def wait_for_line(container: str, pattern: str, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while True:
        logs = run(["docker", "logs", container], timeout=60)
        m = re.search(pattern, logs.stdout + logs.stderr)
        if m:
            return m
        state = run(["docker", "inspect", "-f", "{{.State.Status}}", container]).stdout.strip()
        if state not in ("created", "running") or time.monotonic() > deadline:
            pytest.fail(f"client never said {pattern!r} (state {state}):\n{logs.stderr[-3000:]}")
        time.sleep(0.2)


def test_compose_cluster_runs_a_job_and_survives_a_killed_engine(docker):
    compose = [*compose_command(), "-p", f"zpartest{secrets.token_hex(3)}", "-f", str(COMPOSE)]
    env = {**os.environ, "ZPAR_BASE": base_image()}
    compose_text = COMPOSE.read_text()
    try:
        # one build: the three services share the image (`image: zpar`), so `up` builds none
        r = run([*compose, "build", "controller"], timeout=1800, env=env)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        # the image runs the installed package from any folder: nothing shadows it
        r = run(["docker", "run", "--rm", "--entrypoint", "python3", "zpar", "-c",
                 "import os, zpar.client, zpar.schedulers; print(zpar.client.__file__, os.getcwd())"],
                timeout=120)  # fmt: skip
        assert r.returncode == 0 and r.stdout.startswith("/opt/zpar/"), r.stderr
        r = run([*compose, "up", "-d", "--scale", "engine=4"], timeout=600, env=env)
        assert r.returncode == 0, r.stderr[-3000:]
        client = run([*compose, "ps", "-q", "client"], env=env).stdout.strip()
        assert client, "no client container"
        m = wait_for_line(client, r"holding a task on each of 4 engines .*\(hosts ([^)]*)\)", 300)
        victim = m.group(1).split()[1]  # a container's host name is its id's first 12 digits
        r = run(["docker", "kill", victim])
        assert r.returncode == 0, r.stderr
        r = run(["docker", "wait", client], timeout=600)
        logs = run(["docker", "logs", client], timeout=60)
        out = logs.stdout + logs.stderr
        assert r.stdout.strip() == "0", out + run([*compose, "logs"], env=env).stdout[-5000:]
        lost = re.findall(
            r"^zpar: smoke: engine \d+ on (\w+) .* lost mid-task: EngineError", out, re.M
        )
        assert lost == [victim], out
        for step in ("load-balanced map of 12 tasks on 3 engines: right",
                     "scatter/gather of 10000 floats over 3 engines: right",
                     "communicator allreduce over 3 ranks: right",
                     "fetched back from the store by another client: right",
                     "job done on 3 of 4 engines"):  # fmt: skip
            assert step in out, out
        hosts = {run(["docker", "inspect", "-f", "{{.Config.Hostname}}", c]).stdout.strip()
                 for c in run([*compose, "ps", "-q", "engine"], env=env).stdout.split()}  # fmt: skip
        assert len(hosts) == 4 and victim in hosts  # the kill hit an engine container
    finally:
        down = run([*compose, "down", "--volumes", "--remove-orphans"], timeout=300, env=env)
        assert COMPOSE.read_text() == compose_text  # the repository's file, as it is
    assert down.returncode == 0, down.stderr
    left = run(
        ["docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={compose[-3]}"]
    )
    assert left.stdout.strip() == ""
