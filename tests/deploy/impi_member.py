"""One IMPI client for test_impi_netns: ``impi_member.py HOST:PORT RANK [hold]``. Prints
``joined`` once the server gave the size (all have joined), then ``done`` after the DONE
round, or ``closed`` when the server drops it (the job failed). ``hold``: wait for a line
on stdin before DONE (a member that is still working when it is killed)."""

from __future__ import annotations

import socket
import sys

from zpar.comm import impi_wire as w


def recv(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def main() -> int:
    host, port = sys.argv[1].rsplit(":", 1)
    rank = int(sys.argv[2])
    try:
        with socket.create_connection((host, int(port)), timeout=120) as s:
            s.sendall(w.encode_auth(0x1))
            recv(s, 8)
            s.sendall(w.encode_impi(rank))
            recv(s, 12)
            print("joined", flush=True)
            if sys.argv[3:] == ["hold"]:
                sys.stdin.readline()
            s.sendall(w.encode_done())
            recv(s, 8)
            s.sendall(w.encode_fini())
            print("done", flush=True)
    except (ConnectionError, OSError) as e:
        print(f"closed {e}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
