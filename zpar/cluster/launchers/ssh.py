"""Engines on other hosts over OpenSSH: ``[ssh] hosts = {node1 = 4, "me@node2:2222" = 2}``.

Per host, one ``ssh`` call creates ``<remote_dir>/<cluster_id>`` (mode 0700), writes the
engine connection file into it from our stdin with umask 077 (the key never sits in a
world-readable file, and never on a command line), and starts the engines with nohup,
printing their pids. Stopping is another ``ssh`` call that terminates those pids (only if
they are still zpar engines), waits, kills what is left and removes the directory.

With ``[ssh] tunnel = true`` engine hosts need not reach the controller: one ``ssh -N -R``
per host forwards each of the controller's ports from the host's loopback back to ours, so
the controller must listen on (and advertise) 127.0.0.1. The OpenSSH client does the work;
no Python ssh library.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from pathlib import Path
from typing import Any

import psutil

from zpar.cluster.connection import read_connection_file
from zpar.cluster.launchers.base import EngineSet, alive, ident, spawn, stop_processes
from zpar.errors import LaunchError

log = logging.getLogger(__name__)

#: Options of every ssh call: never prompt (a launcher has no terminal), fail fast.
SSH_OPTIONS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10")
#: Seconds a remote start or stop may take.
SSH_TIMEOUT = 60.0


def parse_host(spec: str, default_user: str = "") -> tuple[str, str, str]:
    """``user@host:port`` -> (user, host, port); user and port may be ''."""
    user, _, rest = spec.rpartition("@")
    host, _, port = rest.partition(":")
    if not host or (port and not port.isdigit()):
        raise LaunchError(f"invalid ssh host {spec!r}: use host, user@host or user@host:port")
    return user or default_user, host, port


def ssh_command(spec: str, settings: Any, *extra: str) -> list[str]:
    user, host, port = parse_host(spec, settings.ssh_user)
    cmd = ["ssh", *SSH_OPTIONS, *settings.ssh_args, *extra]
    if port:
        cmd += ["-p", port]
    if user:
        cmd += ["-l", user]
    return [*cmd, host]


def split_over_hosts(n: int, hosts: dict[str, int]) -> list[tuple[str, int]]:
    """Give each host (in order) up to its count until n engines are placed."""
    if not hosts:
        raise LaunchError("--engines ssh needs engine hosts: set [ssh] hosts in the profile")
    out, left = [], n
    for host, count in hosts.items():
        take = min(count, left)
        if take:
            out.append((host, take))
            left -= take
    if left:
        raise LaunchError(
            f"[ssh] hosts offer {sum(hosts.values())} engines, {n} asked: add hosts or counts"
        )
    return out


def listening_ports(pid: int) -> list[int]:
    """TCP ports the controller ``pid`` and its children (the task scheduler) listen on."""
    root = psutil.Process(pid)
    ports = set()
    for p in [root, *root.children(recursive=True)]:
        for c in p.net_connections(kind="tcp"):
            if c.status == psutil.CONN_LISTEN:
                ports.add(c.laddr.port)
    return sorted(ports)


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


class SSHEngines(EngineSet):
    kind = "ssh"

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        s = self.ctx.settings
        self.remote_dir = f"{s.ssh_remote_dir.rstrip('/')}/{self.ctx.cluster_id}"
        self.hosts: list[dict[str, Any]] = []  # {"host", "ssh", "pids", "dir"}
        self.tunnels: list[subprocess.Popen] = []

    def start_script(self, host: str, count: int) -> str:
        """The remote shell command: connection file from stdin, then ``count`` engines."""
        s = self.ctx.settings
        d = shlex.quote(self.remote_dir)
        engine_file = f"{self.remote_dir}/zpar-engine.json"
        args = " ".join(shlex.quote(a) for a in self.ctx.engine_args(engine_file))
        lines = [
            "umask 077",
            f"mkdir -p {d}/log && chmod 700 {d} && cat > {d}/zpar-engine.json",
        ]
        for i in range(count):
            logf = shlex.quote(f"{self.remote_dir}/log/{_safe(host)}-{self.index}-{i}.log")
            lines.append(
                f"nohup {shlex.quote(s.ssh_python)} {args} > {logf} 2>&1 < /dev/null & echo $!"
            )
        return " && ".join(lines[:2]) + "; " + "; ".join(lines[2:])

    def _engine_file_bytes(self) -> bytes:
        data = self.ctx.engine_file.read_bytes()
        if self.ctx.settings.ssh_tunnel:
            reg = read_connection_file(self.ctx.engine_file).registration
            if not reg.startswith(("tcp://127.0.0.1:", "tcp://localhost:")):
                raise LaunchError(
                    f"ssh tunnels forward the controller's loopback ports, but it listens at "
                    f"{reg}: start the cluster with ip 127.0.0.1 or turn [ssh] tunnel off"
                )
        return data

    def start(self) -> None:
        s = self.ctx.settings
        data = self._engine_file_bytes()
        if s.ssh_tunnel:
            self._start_tunnels([h for h, _ in split_over_hosts(self.n, s.ssh_hosts)])
        for host, count in split_over_hosts(self.n, s.ssh_hosts):
            cmd = [*ssh_command(host, s), self.start_script(host, count)]
            try:
                r = subprocess.run(cmd, input=data, capture_output=True, timeout=SSH_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise LaunchError(f"ssh {host}: no answer within {SSH_TIMEOUT:g} s") from None
            except FileNotFoundError:
                raise LaunchError("ssh not found on PATH: install the OpenSSH client") from None
            pids = [int(x) for x in r.stdout.split() if x.isdigit()]
            if r.returncode != 0 or len(pids) != count:
                err = r.stderr.decode(errors="replace").strip().splitlines()[-3:]
                raise LaunchError(
                    f"ssh {host}: starting {count} engines failed (exit {r.returncode}): "
                    + " / ".join(err)
                )
            self.hosts.append({"host": host, "ssh": cmd[:-1], "pids": pids, "dir": self.remote_dir})
            log.info("ssh %s: engines started, pids %s", host, pids)

    def _start_tunnels(self, hosts: list[str]) -> None:
        pid = read_connection_file(self.ctx.engine_file).controller_pid
        forwards = []
        for port in listening_ports(pid):
            forwards += ["-R", f"{port}:127.0.0.1:{port}"]
        for host in hosts:
            cmd = ssh_command(host, self.ctx.settings, "-N", "-o", "ExitOnForwardFailure=yes")
            cmd[-1:-1] = forwards
            path = self.log_path(f"ssh-tunnel-{_safe(host)}-{self.index}")
            self.tunnels.append(spawn(cmd, path, self.ctx.daemon))

    def local_processes(self) -> list[subprocess.Popen]:
        return list(self.tunnels)

    def record(self) -> dict[str, Any]:
        tunnels = []
        for p in self.tunnels:
            if p.poll() is None:
                try:
                    tunnels.append(ident(p.pid))
                except psutil.NoSuchProcess:
                    pass
        return {"kind": self.kind, "n": self.n, "hosts": self.hosts, "tunnels": tunnels}

    @classmethod
    def stop_record(cls, record: dict[str, Any], timeout: float = 5.0) -> int:
        stopped = 0
        for h in record.get("hosts", []):
            script = stop_script(h["pids"], h["dir"], timeout)
            try:
                r = subprocess.run(
                    [*h["ssh"], script],
                    capture_output=True,
                    text=True,
                    timeout=timeout + SSH_TIMEOUT,
                )
            except (subprocess.TimeoutExpired, FileNotFoundError) as e:
                log.warning("ssh %s: could not stop engines %s: %s", h["host"], h["pids"], e)
                continue
            stopped += sum(1 for x in r.stdout.split() if x == "stopped")
        tunnels = alive(record.get("tunnels", []))
        stop_processes(tunnels, timeout)
        return stopped

    def stop(self, timeout: float = 5.0) -> int:
        n = self.stop_record(self.record(), timeout)
        for p in self.tunnels:
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        return n

    def describe(self) -> str:
        out = []
        for h in self.hosts:
            script = f"tail -n 8 {shlex.quote(h['dir'])}/log/*-{self.index}-*.log"
            try:
                r = subprocess.run(
                    [*h["ssh"], script],
                    capture_output=True,
                    text=True,
                    timeout=SSH_TIMEOUT,
                )
                tail = r.stdout.strip()
            except (subprocess.TimeoutExpired, OSError) as e:
                tail = f"(cannot read the logs: {e})"
            out.append(f"\n- ssh engines on {h['host']} (pids {h['pids']}):\n    {tail}")
        return "".join(out) + super().describe()

    def _log_of(self, proc: subprocess.Popen) -> Path | None:
        return None


def stop_script(pids: list[int], remote_dir: str, timeout: float) -> str:
    """Terminate the engines still running as zpar engines, wait, kill, clean up."""
    ps = " ".join(str(int(p)) for p in pids)
    steps = int(max(timeout, 0.1) * 10)
    return (
        f"live=; for p in {ps}; do grep -qa zpar.engine /proc/$p/cmdline 2>/dev/null "
        f'&& live="$live $p" && echo stopped; done; '
        f'[ -n "$live" ] && kill $live 2>/dev/null; i=0; while [ $i -lt {steps} ]; do '
        f"left=; for p in $live; do kill -0 $p 2>/dev/null && left=1; done; "
        f'[ -z "$left" ] && break; sleep 0.1; i=$((i+1)); done; '
        f"for p in $live; do kill -9 $p 2>/dev/null; done; "
        f"rm -rf {shlex.quote(remote_dir)}; true"
    )


ENGINE_SET = SSHEngines
