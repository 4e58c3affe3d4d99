"""A real OpenSSH server for launcher tests: throwaway host and user keys, its own config,
listening only where the test says (127.0.0.1 or a test namespace's address)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SSHD = "/usr/sbin/sshd"


def ensure_openssh() -> None:
    """Install OpenSSH (server and client) through the project's script, or skip saying why."""
    if Path(SSHD).exists() and shutil.which("ssh") and shutil.which("ssh-keygen"):
        return
    r = subprocess.run(
        [str(REPO / "scripts" / "ensure_system_packages.sh"), "ssh"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if r.returncode != 0 or not Path(SSHD).exists():
        pytest.fail(
            f"could not install the OpenSSH server (scripts/ensure_system_packages.sh ssh): {r.stderr.strip()[-300:]}"
        )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class SSHServer:
    host: str
    port: int
    key: Path  # the client's private key
    proc: subprocess.Popen
    log: Path

    @property
    def spec(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def client_args(self) -> list[str]:
        return [
            "-i", str(self.key), "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
        ]  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def make_keys(d: Path) -> tuple[Path, Path]:
    """(host key, client key) made fresh in ``d``; the client key authorised for login."""
    d.mkdir(parents=True, exist_ok=True)
    host_key, user_key = d / "host_ed25519", d / "user_ed25519"
    for k in (host_key, user_key):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(k)], check=True, timeout=30
        )
    auth = d / "authorized_keys"
    auth.write_text(user_key.with_suffix(".pub").read_text())
    auth.chmod(0o600)
    return host_key, user_key


def start_sshd(
    d: Path, host: str = "127.0.0.1", port: int | None = None, netns: str | None = None
) -> SSHServer:
    """sshd -D on ``host:port`` (inside ``netns`` if given), keys and config under ``d``."""
    host_key, user_key = d / "host_ed25519", d / "user_ed25519"
    if not host_key.exists():
        make_keys(d)
    port = port or free_port(host)
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege-separation directory
    config = d / f"sshd_config-{host}-{port}"
    config.write_text(
        f"Port {port}\nListenAddress {host}\nHostKey {host_key}\n"
        f"AuthorizedKeysFile {d / 'authorized_keys'}\nPidFile {d / f'sshd-{port}.pid'}\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "PermitRootLogin prohibit-password\nStrictModes no\nAllowTcpForwarding yes\n"
        "GatewayPorts no\nPrintMotd no\nAcceptEnv none\n"
    )
    log = d / f"sshd-{host}-{port}.log"
    cmd = [SSHD, "-D", "-e", "-f", str(config)]
    if netns:
        cmd = ["ip", "netns", "exec", netns, *cmd]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    server = SSHServer(host, port, user_key, proc, log)
    deadline = time.monotonic() + 30
    while "Server listening" not in log.read_text(errors="replace"):
        if proc.poll() is not None or time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f"sshd did not start: {log.read_text(errors='replace')}")
        time.sleep(0.02)
    return server


def ssh_ok(server: SSHServer) -> bool:
    r = subprocess.run(
        ["ssh", *server.client_args, "-o", "BatchMode=yes", "-p", str(server.port), server.host,
         "true"],
        capture_output=True, timeout=30,
    )  # fmt: skip
    return r.returncode == 0


__all__ = ["SSHServer", "ensure_openssh", "free_port", "make_keys", "ssh_ok", "start_sshd"]
