"""Profiles and settings: precedence flag > ZPAR_<NAME> > config.toml > default, config show,
profile create, bad values named with their file, log rotation."""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
import tomllib

import pytest

from zpar.cluster import settings as S
from zpar.cluster.launchers.base import rotate_log


def run(args, env=None, timeout=60):
    return subprocess.run(
        [sys.executable, "-m", "zpar", *args],
        capture_output=True, text=True, timeout=timeout, env=env,
    )  # fmt: skip


def write_config(zpar_dir, profile, text):
    d = S.create_profile(profile)
    (d / "config.toml").write_text(text)
    return d / "config.toml"


def test_precedence_flag_environment_profile_default(zpar_dir):
    path = write_config(zpar_dir, "p", "[controller]\nhwm = 2\nscheme = 'lru'\nhb_period = 0.2\n"
                                       "[ssh]\nhosts = {n1 = 2, 'me@n2:22' = 1}\n")  # fmt: skip
    env = {"ZPAR_HWM": "3", "ZPAR_SCHEME": "twobin"}
    s = S.load("p", {"hwm": "4"}, env)
    assert (s.hwm, s.source("hwm")) == (4, "flag")
    assert (s.scheme, s.source("scheme")) == ("twobin", "environment ZPAR_SCHEME")
    assert (s.hb_period, s.source("hb_period")) == (0.2, f"profile {path}")
    assert (s.hb_misses, s.source("hb_misses")) == (4, "default")
    assert s.ssh_hosts == {"n1": 2, "me@n2:22": 1}
    assert S.load("p", {}, {"ZPAR_SSH_HOSTS": "a=3,b"}).ssh_hosts == {"a": 3, "b": 1}
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.hwm = 9  # type: ignore[misc]


@pytest.mark.parametrize(
    "text, named",
    [
        ("[controller]\nhwm = -1\n", "setting hwm = -1 in {path}"),
        ("[controller]\nhb_period = 'fast'\n", "setting hb_period = 'fast' in {path}: expected a number"),
        ("[controller]\nscheme = 'fastest'\n", "expected one of leastload"),
        ("[controller]\nhwmm = 1\n", "unknown setting 'hwmm' in table [controller] of {path}"),
        ("[engine]\nn = 1\n", "unknown table [engine] in {path}"),
        ("[engines]\nengines = 'k8s'\n", "setting engines = 'k8s' in {path}"),
        ("[controller\n", "cannot read {path}"),
    ],
)  # fmt: skip
def test_bad_profile_values_name_key_and_file(zpar_dir, text, named):
    path = write_config(zpar_dir, "bad", text)
    with pytest.raises(ValueError) as err:
        S.load("bad", {}, {})
    assert named.format(path=path) in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_environment_value_names_the_variable(zpar_dir):
    with pytest.raises(ValueError, match="setting hwm = 'many' in environment variable ZPAR_HWM"):
        S.load("default", {}, {"ZPAR_HWM": "many"})


def test_profile_create_has_every_setting_commented(zpar_dir):
    r = run(["profile", "create", "lab"])
    assert r.returncode == 0, r.stderr
    d = zpar_dir / "profile_lab"
    text = (d / "config.toml").read_text()
    # valid TOML: the tables, every value commented out
    assert tomllib.loads(text) == {t: {} for t in ("controller", "engines", "mpi", "ssh", "batch")}
    for name, spec in S.SPECS.items():
        key = name if spec.table in ("controller", "engines") else name[len(spec.table) + 1 :]
        assert f"# {key} = " in text, name
        assert f"ZPAR_{name.upper()}" in text
    # uncommenting a line gives a file zpar reads back to the default value
    uncommented = "\n".join(
        line[2:] if line.startswith("# ") and " = " in line and "env ZPAR" not in line else line
        for line in text.splitlines()
    )
    (d / "config.toml").write_text(uncommented)
    assert dataclasses.replace(S.load("lab", {}, {}), sources={}) == S.Settings(profile="lab")
    assert stat.S_IMODE((d / "security").stat().st_mode) == 0o700
    assert (d / "log").is_dir() and (d / "pid").is_dir()


def test_config_show_says_where_each_value_came_from(zpar_dir):
    path = write_config(zpar_dir, "show", "[controller]\nhwm = 2\n[engines]\nn = 8\n")
    env = dict(os.environ, ZPAR_N="5", ZPAR_SCHEME="lru")
    r = run(["config", "show", "--profile", "show"], env=env)
    assert r.returncode == 0, r.stderr
    rows = {line.split("=")[0].strip(): line for line in r.stdout.splitlines()[1:]}
    assert rows["hwm"].rstrip().endswith(f"# profile {path}") and "= 2 " in rows["hwm"]
    assert rows["n"].rstrip().endswith("# environment ZPAR_N") and "= 5 " in rows["n"]
    assert rows["scheme"].rstrip().endswith("# environment ZPAR_SCHEME")
    assert rows["hb_period"].rstrip().endswith("# default")
    assert set(rows) == set(S.SPECS)


def test_config_show_bad_file_is_one_line(zpar_dir):
    path = write_config(zpar_dir, "broken", "[controller]\nhwm = 'x'\n")
    r = run(["config", "show", "--profile", "broken"])
    assert r.returncode == 1
    assert r.stderr.strip() == f"zpar config: setting hwm = 'x' in {path}: expected an integer"


def test_controller_takes_its_settings_from_profile_and_environment(zpar_dir):
    """`zpar controller` with a bad profile value stops before binding anything."""
    write_config(zpar_dir, "ctl", "[controller]\nhb_period = 0\n")
    r = run(["controller", "--profile", "ctl"])
    assert r.returncode == 2
    assert "setting hb_period = 0.0" in r.stderr and "config.toml" in r.stderr
    env = dict(os.environ, ZPAR_HB_MISSES="0")
    r = run(["controller", "--profile", "default"], env=env)
    assert r.returncode == 2 and "ZPAR_HB_MISSES" in r.stderr


def test_cluster_start_passes_settings_to_the_controller(zpar_dir):
    import zpar

    write_config(zpar_dir, "cfg", "[controller]\nscheme = 'lru'\nhwm = 3\n")
    c = zpar.Cluster(n=0, profile="cfg", timeout=60)
    cmd = c.launcher.controller_command()
    assert cmd[cmd.index("--scheme") + 1] == "lru" and cmd[cmd.index("--hwm") + 1] == "3"
    c = zpar.Cluster(n=0, profile="cfg", timeout=60, hwm=5)  # a keyword beats the file
    cmd = c.launcher.controller_command()
    assert cmd[cmd.index("--hwm") + 1] == "5"


def test_logs_rotate(tmp_path):
    log = tmp_path / "c-engine-0.log"
    for i in range(5):
        rotate_log(log, backups=3)
        log.write_text(f"run {i}\n")
    assert log.read_text() == "run 4\n"
    assert [(tmp_path / f"c-engine-0.log.{i}").read_text() for i in (1, 2, 3)] == [
        "run 3\n", "run 2\n", "run 1\n",
    ]  # fmt: skip
    assert not (tmp_path / "c-engine-0.log.4").exists()


def test_cluster_flags_and_set_are_flag_sources(zpar_dir):
    from zpar.cli import build_parser
    from zpar.cluster.commands import settings_from

    write_config(zpar_dir, "f", "[engines]\nn = 8\nengines = 'mpi'\n")
    args = build_parser().parse_args(
        ["cluster", "start", "--profile", "f", "-n", "3", "--set", "batch_queue=short",
         "--set", "hb-period=0.25"]
    )  # fmt: skip
    s = settings_from(args)
    assert (s.n, s.source("n")) == (3, "flag")
    assert (s.engines, s.source("engines")) == ("mpi", f"profile {zpar_dir}/profile_f/config.toml")
    assert (s.batch_queue, s.hb_period) == ("short", 0.25)
    bad = build_parser().parse_args(["cluster", "start", "--set", "hwm"])
    with pytest.raises(ValueError, match="--set 'hwm': use NAME=VALUE"):
        settings_from(bad)
    bad = build_parser().parse_args(["cluster", "start", "--set", "colour=red"])
    with pytest.raises(ValueError, match="unknown setting 'colour'"):
        settings_from(bad)
