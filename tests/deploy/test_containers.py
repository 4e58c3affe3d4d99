"""The Dockerfile and docker-compose.yml, checked without a container engine: the compose
file validated by `docker-compose config` (Debian's), every command in it parsed by zpar's
own parsers and run as plain processes on 127.0.0.1, the image's install rebuilt in a
throwaway venv."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"


@pytest.fixture(scope="module")
def docker_compose():
    if shutil.which("docker-compose") is None:
        r = subprocess.run(
            [str(REPO / "scripts" / "ensure_system_packages.sh"), "compose"],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if r.returncode != 0 or shutil.which("docker-compose") is None:
            pytest.fail(
                f"could not install docker-compose (scripts/ensure_system_packages.sh compose): {r.stderr.strip()[-300:]}"
            )
    return shutil.which("docker-compose")


def compose_config(docker_compose, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [docker_compose, "-f", str(path), "config"], capture_output=True, text=True, timeout=60
    )


def compose_services(docker_compose) -> dict:
    """The compose file as docker-compose resolves it, as JSON (Debian's docker-compose
    brings python3-yaml to its own python; our venv needs no YAML library)."""
    r = compose_config(docker_compose, COMPOSE)
    assert r.returncode == 0, r.stderr
    to_json = "import sys, json, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)"
    out = subprocess.run(
        ["/usr/bin/python3", "-c", to_json], input=r.stdout, capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)["services"]


def test_compose_file_is_valid(docker_compose):
    services = compose_services(docker_compose)
    assert set(services) == {"controller", "engine", "client"}
    assert "controller" in services["engine"]["depends_on"]
    vols = {s: services[s]["volumes"][0].split(":")[:2] for s in services}
    assert all(v == ["zpar", "/zpar"] for v in vols.values())  # one shared volume


def test_compose_validation_catches_mistakes(docker_compose, tmp_path):
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(COMPOSE.read_text().replace("    command:", "    comand:", 1))
    r = compose_config(docker_compose, bad)
    assert r.returncode != 0 and "comand" in r.stderr


def _parse(argv: list[str]) -> None:
    """Parse a container's command (after the image's `zpar` entrypoint) as zpar would."""
    from zpar.cli import build_parser

    if argv[0] == "controller":
        from zpar.hub.__main__ import build_parser as controller_parser

        controller_parser().parse_args(argv[1:])
    elif argv[0] == "engine":
        from zpar.engine.__main__ import build_parser as engine_parser

        engine_parser().parse_args(argv[1:])
    else:
        build_parser().parse_args(argv)


def test_every_compose_command_is_a_valid_zpar_command(docker_compose):
    services = compose_services(docker_compose)
    for service in services.values():
        _parse(service["command"])  # exits (SystemExit) with a message if not
    with pytest.raises(SystemExit):
        _parse(["smoke", "--engines", "-1"])  # the check has teeth
    entry = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("ENTRYPOINT")]
    assert entry == ['ENTRYPOINT ["zpar"]']


def test_compose_commands_run_a_smoke_job(docker_compose, tmp_path):
    """The services' own commands as processes: /zpar -> a temp dir, 'controller' and the
    wildcard -> 127.0.0.1 (tests never bind other addresses), as many engines as the
    client waits for, and its hold shortened to a second (nothing is killed here:
    tests/deploy/test_compose_cluster.py does that to containers)."""
    services = compose_services(docker_compose)
    vol = tmp_path / "zpar"
    client_cmd = services["client"]["command"]
    engines = int(client_cmd[client_cmd.index("--engines") + 1])
    assert client_cmd[:3] == ["smoke", "--job", "full"]

    def argv(service: str) -> list[str]:
        out = []
        for a in services[service]["command"]:
            address = out and out[-1] in ("--ip", "--location")
            hold = out and out[-1] == "--hold"
            out.append("127.0.0.1" if address else "1" if hold else a.replace("/zpar/", f"{vol}/"))
        return [sys.executable, "-m", "zpar", *out]

    env = dict(os.environ, ZPAR_DIR=str(vol))
    logs = open(tmp_path / "services.log", "wb")
    procs = [subprocess.Popen(argv(s), env=env, stdout=logs, stderr=logs)
             for s in (*["engine"] * engines, "controller")]  # fmt: skip
    try:
        client = subprocess.run(argv("client"), env=env, capture_output=True, text=True,
                                timeout=200)  # fmt: skip
        assert client.returncode == 0, client.stderr + (tmp_path / "services.log").read_text()
        assert f"job done on {engines} of {engines} engines (no engine lost)" in client.stderr
        assert "communicator allreduce" in client.stderr and "fetched back" in client.stderr
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        logs.close()


def _dockerfile_steps() -> tuple[list[str], str]:
    """(paths the build stage's COPY lines bring in, the command of the RUN line)."""
    copies, run = [], ""
    for line in DOCKERFILE.read_text().splitlines():
        words = shlex.split(line) if line and not line.startswith("#") else []
        if words[:1] == ["COPY"] and not words[1].startswith("--from"):
            copies += words[1:-1]
        elif words[:1] == ["RUN"]:
            run = " ".join(words[1:])
    return copies, run


def test_image_install_in_a_throwaway_venv(tmp_path):
    """The Dockerfile's COPY set is enough for `pip install .`, and what it installs has
    every module (a package missing from pyproject.toml shows up here, not in production)."""
    copies, run = _dockerfile_steps()
    assert run == "python3 -m venv /opt/zpar && /opt/zpar/bin/pip install --no-cache-dir ."
    src = tmp_path / "src"
    src.mkdir()
    for rel in copies:
        p = REPO / rel
        if p.is_dir():
            shutil.copytree(p, src / rel, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(p, src / rel)
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    r = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(src)],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if r.returncode != 0 and ("Could not find" in r.stderr or "connection" in r.stderr.lower()):
        pytest.fail(
            f"the image's install could not reach the package index: {r.stderr.strip()[-300:]}"
        )
    assert r.returncode == 0, r.stderr
    modules = sorted(
        ".".join(("zpar" if f.parts[0] == "zpar" else f"zpar.{f.parts[0]}",
                  *f.with_suffix("").parts[1:])).removesuffix(".__init__").removesuffix(".__main__")
        for top in ("zpar", "hub", "engine", "client", "schedulers")
        for f in (p.relative_to(REPO) for p in (REPO / top).rglob("*.py"))
    )  # fmt: skip
    # a module may need an optional dependency (joblib, IPython); a missing zpar module fails
    check = (
        "import importlib, sys\n"
        "for m in sys.argv[1:]:\n"
        "    try:\n"
        "        importlib.import_module(m)\n"
        "    except ModuleNotFoundError as e:\n"
        "        if e.name.split('.')[0] == 'zpar':\n"
        "            raise\n"
    )
    r = subprocess.run([str(py), "-c", check, *modules], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(env_dir / "bin" / "zpar"), "--version"], capture_output=True,
                       text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0 and r.stdout.startswith("zpar ")


def test_the_image_keeps_no_source_tree_where_it_runs():
    """The running stage takes only the built venv: a `zpar/` folder in its working
    directory would hide the installed package from `python -m` (issue 27)."""
    stages: list[list[list[str]]] = []
    for line in DOCKERFILE.read_text().splitlines():
        words = shlex.split(line) if line and not line.startswith("#") else []
        if words[:1] == ["FROM"]:
            stages.append([])
        elif words and stages:
            stages[-1].append(words)
    assert len(stages) == 2 and DOCKERFILE.read_text().startswith("# ")
    last = stages[-1]
    copies = [w for w in last if w[0] == "COPY"]
    assert copies == [["COPY", "--from=build", "/opt/zpar", "/opt/zpar"]]
    workdir = [w[1] for w in last if w[0] == "WORKDIR"]
    assert workdir and not workdir[-1].startswith("/opt/zpar")
    base = [line for line in DOCKERFILE.read_text().splitlines() if line.startswith("ARG BASE=")]
    assert base == ["ARG BASE=python:3.11-slim"]  # the official image unless told otherwise
