"""A gateway to AMUSE's sockets channel, both ways.

::

    AMUSE script (PythonCodeInterface, channel_type="sockets")        zpar amuse-worker
      listens on a TCP port, starts `<worker> <port> <host> false` ──► connects back,
      sends [44-byte header, type arrays] ─────────────────────────► serve_amuse: runs the
      ◄──────────────────────────────────────────── reply, same form  function from REGISTRY

    zpar.typed.AmuseWorker(cmd)                                        an AMUSE worker
      listens on 127.0.0.1, starts `cmd <port> 127.0.0.1 false` ─────► (C, Fortran, Python)
      the typed call API, one message per chunk ◄──────────────────►  connects back

Function id 0 stops a worker, as in AMUSE. Unlike AMUSE's own worker (which dies on an
unknown function id), serve_amuse answers an unknown id with an error and keeps serving.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import psutil

from zpar.errors import EngineError, RemoteProtocolError

from .client import MAX_CALLS_PER_MESSAGE, chunks_of, columns_of, next_call_id, request_arrays
from .codec import (
    AMUSE_HEADER_SIZE,
    TYPES,
    AmuseHeader,
    CodecError,
    amuse_array,
    amuse_body,
    amuse_body_sizes,
    amuse_counts,
    decode_strings,
    pack_amuse_header,
    unpack_amuse_header,
    unpack_columns,
)
from .invoke import BadRequest, CallFailed, run_calls
from .registry import REGISTRY, Registry
from .result import RemoteCallError, empty_outputs, join_chunks
from .signature import STOP_FUNCTION_ID, TypedSignature

log = logging.getLogger(__name__)

#: env var naming modules (comma-separated) a `zpar amuse-worker` imports: AMUSE starts the
#: worker with its port arguments only, so what it serves comes from its environment
MODULES_ENV = "ZPAR_TYPED_MODULES"

#: seconds AmuseWorker waits for the worker to connect back (AMUSE waits 60)
CONNECT_TIMEOUT = 60.0


# -- one AMUSE message on a TCP socket -------------------------------------------------------


#: Bytes read into one preallocated buffer: larger reads grow as data arrives, so a header
#: claiming 2**31 values allocates only what the peer actually sends.
_EAGER_READ = 1 << 20


def _recv_exact(sock: socket.socket, n: int) -> bytes | bytearray:
    if n <= _EAGER_READ:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = sock.recv_into(view[got:], n - got)
            if k == 0:
                raise ConnectionError(f"the peer closed the connection ({got} of {n} bytes read)")
            got += k
        return bytes(buf)
    grown = bytearray()
    while len(grown) < n:
        chunk = sock.recv(min(n - len(grown), _EAGER_READ))
        if not chunk:
            raise ConnectionError(
                f"the peer closed the connection ({len(grown)} of {n} bytes read)"
            )
        grown += chunk
    return grown


class BadBody(Exception):
    """A message read whole whose content does not decode: it can be answered."""

    def __init__(self, header: AmuseHeader, reason: str) -> None:
        super().__init__(reason)
        self.header = header


def recv_amuse(sock: socket.socket) -> tuple[AmuseHeader, dict[str, Any], np.ndarray]:
    """One message: its header, its arrays by type, its units (float64, maybe empty).

    CodecError: the stream cannot be followed any further (a bad header or lengths);
    BadBody: the message was read whole but a string is not UTF-8.
    """
    h = unpack_amuse_header(_recv_exact(sock, AMUSE_HEADER_SIZE))
    arrays: dict[str, Any] = {}
    units = np.empty(0)
    lengths = None
    for what, size in amuse_body_sizes(h):
        if what == "string_lengths":
            lengths = np.frombuffer(_recv_exact(sock, size), dtype=np.int32)
            if (lengths < 0).any():
                raise CodecError(f"negative string length in {lengths.tolist()[:10]}")
        elif what == "string_chars":
            assert lengths is not None
            total = int(lengths.astype(np.int64).sum()) + len(lengths)
            data = _recv_exact(sock, total)
            try:
                arrays["string"] = decode_strings(lengths, data)
            except CodecError as e:
                if h.units:  # the units come after the strings: read them, to keep in step
                    _recv_exact(sock, 8 * h.units)
                raise BadBody(h, str(e)) from None
        elif what == "units":
            units = amuse_array(what, _recv_exact(sock, size))
        else:
            arrays[what] = amuse_array(what, _recv_exact(sock, size))
    return h, arrays, units


def send_amuse(sock: socket.socket, h: AmuseHeader, arrays: dict[str, Any]) -> None:
    sock.sendall(b"".join([pack_amuse_header(h), *amuse_body(arrays)]))


# -- zpar as an AMUSE worker -----------------------------------------------------------------


def handle_amuse(
    h: AmuseHeader, arrays: dict[str, Any], registry: Registry
) -> tuple[AmuseHeader, dict[str, Any]]:
    """The reply to one request (sans-IO): the function's outputs, or the error flag and
    the message as the one string, as AMUSE's worker answers."""
    entry = registry.get(h.function_id)
    try:
        if entry is None:
            raise BadRequest(f"unknown function id {h.function_id}")
        sig, func = entry
        out = run_calls(sig, func, arrays, h.call_count)
    except (BadRequest, CallFailed) as e:
        where = f" (call {e.index})" if isinstance(e, CallFailed) and e.index >= 0 else ""
        text = (
            f"{type(e.cause).__name__}: {e.cause}{where}" if isinstance(e, CallFailed) else str(e)
        )
        log.info("amuse worker: function id %d failed: %s", h.function_id, text)
        err = {"string": [text]}
        return AmuseHeader(
            h.call_id, h.function_id, h.call_count, amuse_counts(err), error=True
        ), err
    return AmuseHeader(h.call_id, h.function_id, h.call_count, amuse_counts(out)), out


def serve_amuse(port: int, host: str = "127.0.0.1", registry: Registry = REGISTRY) -> int:
    """Connect to an AMUSE client at host:port and serve it until function id 0 (returns
    0) or the connection ends (returns 1)."""
    with socket.create_connection((host, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        log.info(
            "amuse worker: connected to %s:%d, serving %d function(s)", host, port, len(registry)
        )
        while True:
            try:
                h, arrays, _units = recv_amuse(sock)
            except ConnectionError as e:
                log.warning("amuse worker: %s; exiting", e)
                return 1
            except CodecError as e:
                log.error(
                    "amuse worker: unreadable message (%s): cannot follow the stream; exiting", e
                )
                return 1
            except BadBody as e:
                h = e.header
                err = {"string": [f"bad request: {e}"]}
                send_amuse(
                    sock,
                    AmuseHeader(
                        h.call_id, h.function_id, h.call_count, amuse_counts(err), error=True
                    ),
                    err,
                )
                continue
            if h.function_id == STOP_FUNCTION_ID:
                send_amuse(sock, AmuseHeader(h.call_id, h.function_id, h.call_count), {})
                log.info("amuse worker: stop requested")
                return 0
            reply, out = handle_amuse(h, arrays, registry)
            send_amuse(sock, reply, out)


def worker_main(argv: Sequence[str] | None = None) -> int:
    """`zpar amuse-worker [--module M]... PORT HOST [MPI]`: what AMUSE starts as a worker."""
    p = argparse.ArgumentParser(
        prog="zpar amuse-worker",
        description="serve zpar typed functions to an AMUSE script over its sockets channel",
    )
    p.add_argument(
        "--module", action="append", default=[], help=f"module to import (also ${MODULES_ENV})"
    )
    p.add_argument("port", type=int)
    p.add_argument("host")
    p.add_argument(
        "mpi", nargs="?", default="false", help="AMUSE's MPI flag: only 'false' is served"
    )
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=os.environ.get("ZPAR_LOG_LEVEL", "WARNING"), stream=sys.stderr)
    if args.mpi.lower() == "true":
        print(
            "zpar amuse-worker: MPI workers are not served (start AMUSE without MPI)",
            file=sys.stderr,
        )
        return 2
    modules = [*args.module, *filter(None, os.environ.get(MODULES_ENV, "").split(","))]
    for m in modules:
        try:
            importlib.import_module(m.strip())
        except Exception as e:
            print(f"zpar amuse-worker: cannot import {m!r}: {e!r}", file=sys.stderr)
            return 1
    return serve_amuse(args.port, args.host)


# -- zpar driving an AMUSE worker ------------------------------------------------------------


def _from_process(addr: tuple[str, int], pid: int) -> bool:
    """Whether the peer at ``addr`` (as accept() gives it) is a socket of process ``pid``
    or of one of its children (a worker script may start the real worker)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return False
    for p in procs:
        try:  # net_connections: psutil >= 6; connections before
            conns = getattr(p, "net_connections", None) or p.connections
            conns = conns(kind="tcp")
        except psutil.Error:
            continue
        if any(c.laddr and (c.laddr.ip, c.laddr.port) == tuple(addr[:2]) for c in conns):
            return True
    return False


class AmuseWorker:
    """Start an AMUSE-protocol worker executable and call its functions with zpar's typed
    call API: ``w.declare("f", args=[...], returns=...)`` then ``w.f(columns)``."""

    def __init__(
        self,
        cmd: str | Sequence[str],
        timeout: float = CONNECT_TIMEOUT,
        env: dict[str, str] | None = None,
    ) -> None:
        argv = [cmd] if isinstance(cmd, str) else list(cmd)
        self._signatures: dict[str | int, TypedSignature] = {}
        self.max_calls_per_message = MAX_CALLS_PER_MESSAGE
        self.sock: socket.socket | None = None
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            port = server.getsockname()[1]
            self.process = subprocess.Popen([*argv, str(port), "127.0.0.1", "false"], env=env)
            deadline = time.monotonic() + timeout
            server.settimeout(0.5)
            while self.sock is None:
                try:
                    sock, addr = server.accept()
                    if _from_process(addr, self.process.pid):
                        self.sock = sock
                    else:  # anyone on this host may connect to the port: not them
                        log.warning(
                            "AMUSE worker %s: a connection from %s:%s that is not the worker "
                            "(pid %d) closed",
                            argv[0],
                            addr[0],
                            addr[1],
                            self.process.pid,
                        )
                        sock.close()
                except TimeoutError:
                    if self.process.poll() is not None:
                        raise RuntimeError(
                            f"AMUSE worker {argv[0]} exited with code {self.process.returncode} before connecting"
                        ) from None
                    if time.monotonic() > deadline:
                        self.process.kill()
                        self.process.wait()
                        raise TimeoutError(
                            f"AMUSE worker {argv[0]} did not connect within {timeout} s"
                        ) from None
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def declare(
        self,
        name: str,
        args: Sequence[Any] = (),
        returns: str | None = None,
        function_id: int | None = None,
    ) -> TypedSignature:
        """Say what a function of the worker takes (its AMUSE specification, in zpar's form)."""
        sig = TypedSignature.build(name, args, returns, function_id)
        self._signatures[sig.name] = self._signatures[sig.function_id] = sig
        return sig

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in self._signatures:
            raise AttributeError(f"{name!r}: declare it first (AmuseWorker.declare)")
        return lambda *args, **kwargs: self.call(name, *args, **kwargs)

    def call(self, name_or_id: str | int, *args: Any, **kwargs: Any) -> Any:
        sig = self._signatures.get(name_or_id)
        if sig is None:
            raise KeyError(f"no function {name_or_id!r} declared for this worker")
        limit = kwargs.pop("max_calls_per_message", None) or self.max_calls_per_message
        ncalls, cols = columns_of(sig, args, kwargs)
        chunks = [self._exchange(sig, cols, a, b) for a, b in chunks_of(0, ncalls, limit)]
        return join_chunks(sig, chunks) if chunks else empty_outputs(sig)

    def _exchange(self, sig: TypedSignature, cols: list[Any], a: int, b: int) -> list[Any]:
        if self.sock is None:
            raise RuntimeError("this AmuseWorker is stopped")
        n = b - a
        arrays = request_arrays(sig, cols, a, b)
        call_id = next_call_id() % 1000  # AMUSE's call ids stay small
        try:
            send_amuse(
                self.sock, AmuseHeader(call_id, sig.function_id, n, amuse_counts(arrays)), arrays
            )
            h, out, _units = recv_amuse(self.sock)
        except (ConnectionError, OSError) as e:
            self.sock.close()
            self.sock = None
            try:
                code = self.process.wait(5)
            except subprocess.TimeoutExpired:
                code = None
            raise EngineError(
                f"the AMUSE worker {self.process.args[0]} was lost during {sig.name} ({e}); "
                f"its exit code: {code}"
            ) from None
        if h.call_id != call_id or h.function_id != sig.function_id:
            raise RemoteProtocolError(
                "AMUSE reply mismatch",
                f"expected call_id {call_id} of function id {sig.function_id}, got {h.call_id} of {h.function_id}",
            )
        if h.error:
            text = out.get("string", ["no error message"])[0]
            raise RemoteCallError("CodeError", f"{sig.name}: {text}")
        expected = [c * n for c in sig.out_counts]
        if list(h.counts) != expected:
            raise RemoteProtocolError(
                "AMUSE reply mismatch",
                f"{sig.name}: counts {expected} expected, got {list(h.counts)}",
            )
        by_type = {
            t: unpack_columns(out[t], c, n) for t, c in zip(TYPES, sig.out_counts, strict=True) if c
        }
        return [by_type[p.type][p.output_index] for p in sig.outputs]

    def stop(self, timeout: float = 10.0) -> int | None:
        """Function id 0, then wait for the process (killed if it lingers). Its exit code."""
        if self.sock is not None:
            try:
                call_id = next_call_id() % 1000
                send_amuse(self.sock, AmuseHeader(call_id, STOP_FUNCTION_ID, 1), {})
                recv_amuse(self.sock)
            except (OSError, ConnectionError) as e:
                log.info("AMUSE worker stop: %s", e)
            finally:
                self.sock.close()
                self.sock = None
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()

    def __enter__(self) -> AmuseWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
