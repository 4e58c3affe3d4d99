"""A stranger for tests/e2e/test_zmq_strangers.py: opens raw tcp connections to each port
given, half of them left in the middle of a ZMTP greeting, until ``total`` are open or
connecting fails everywhere; prints how many it holds, then holds them until its stdin
closes. A process of its own so its descriptors are not the test's."""

from __future__ import annotations

import resource
import socket
import sys

#: the first 11 bytes of a ZMTP 3 greeting (signature and major version): a handshake
#: started and never finished
PARTIAL_GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03"


def main() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    host, total, ports = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3:]]
    held: list[socket.socket] = []
    dead: set[int] = set()
    i = 0
    while len(held) < total and len(dead) < len(ports):
        port = ports[i % len(ports)]
        i += 1
        if port in dead:
            continue
        try:
            s = socket.create_connection((host, port), timeout=2)
            if len(held) % 2:
                s.sendall(PARTIAL_GREETING)
        except OSError:
            dead.add(port)  # its backlog is full: the controller stopped accepting
            continue
        held.append(s)
    print(len(held), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main()
