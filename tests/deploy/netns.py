"""Test "hosts" as Linux network namespaces joined by a bridge, with 192.0.2.0/24 addresses
(the documentation range) that exist only inside them: no route leads out, and nothing is
sent anywhere but between these namespaces. Torn down (processes killed, namespaces
deleted) also when a test fails."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field

import pytest

SUBNET = "192.0.2.{}/24"


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


@dataclass
class Network:
    prefix: str
    hosts: dict[str, str] = field(default_factory=dict)  # name -> address
    namespaces: list[str] = field(default_factory=list)

    @property
    def bridge_ns(self) -> str:
        return f"{self.prefix}br"

    def ns(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def add_host(self, name: str, last_octet: int) -> str:
        ns = self.ns(name)
        ip("netns", "add", ns)
        self.namespaces.append(ns)
        ip("-n", ns, "link", "set", "lo", "up")
        # one veth pair: "eth0" in the host's namespace, its peer on the bridge
        ip("link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", f"p-{name}",
           "netns", self.bridge_ns)  # fmt: skip
        ip("-n", self.bridge_ns, "link", "set", f"p-{name}", "master", "br0", "up")
        address = SUBNET.format(last_octet)
        ip("-n", ns, "addr", "add", address, "dev", "eth0")
        ip("-n", ns, "link", "set", "eth0", "up")
        self.hosts[name] = address.split("/")[0]
        return self.hosts[name]

    def link(self, name: str, up: bool) -> None:
        """Plug or unplug a host's cable (its port on the bridge)."""
        ip("-n", self.bridge_ns, "link", "set", f"p-{name}", "up" if up else "down")

    def exec(self, name: str, cmd: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.ns(name), *cmd]

    def pids(self) -> list[int]:
        out = []
        for ns in self.namespaces:
            r = ip("netns", "pids", ns, check=False)
            out += [int(p) for p in r.stdout.split()]
        return out

    def teardown(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for ns in reversed(self.namespaces):
            ip("netns", "del", ns, check=False)
        self.namespaces.clear()


def make_network(prefix: str) -> Network:
    """A bridge in a namespace of its own; skip (saying why) where the kernel refuses."""
    net = Network(prefix)
    r = ip("netns", "add", net.bridge_ns, check=False)
    if r.returncode != 0:
        pytest.skip(f"network namespaces unavailable here: {r.stderr.strip()}")
    net.namespaces.append(net.bridge_ns)
    try:
        ip("-n", net.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", net.bridge_ns, "link", "set", "br0", "up")
    except subprocess.CalledProcessError as e:
        net.teardown()
        pytest.skip(f"cannot make a bridge in a namespace here: {e.stderr.strip()}")
    return net
