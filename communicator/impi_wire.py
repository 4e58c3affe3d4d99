"""IMPI's start-up wire format, byte for byte (seed 003 section 2.3, seed 004), sans-IO.

Every command is ``IMPI_Cmd {int32 cmd, int32 len}`` in network (big-endian) order, then
``len`` bytes of payload, in both directions, with one exception: the server answers AUTH
with a bare ``IMPI_Server_auth {int32 which, int32 len}`` followed by ``len`` bytes of
method-specific data, and the client's proof that follows has no header either (LAM/MPI
7.1.4's ``otb/sys/impid/client.c`` reads and writes exactly these).

The readers here turn bytes into events and the ``encode_*`` functions build bytes; the
sockets are the server's (comm.impi_server) and the conformance tester's (comm.conformance).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

# -- the spec's numbers ----------------------------------------------------------------------

#: Command codes: the ASCII of their names as a big-endian int32.
CMD_AUTH = 0x41555448  # 'AUTH'
CMD_IMPI = 0x494D5049  # 'IMPI'
CMD_COLL = 0x434F4C4C  # 'COLL'
CMD_DONE = 0x444F4E45  # 'DONE'
CMD_FINI = 0x46494E49  # 'FINI'
CMD_NAMES = {
    CMD_AUTH: "AUTH",
    CMD_IMPI: "IMPI",
    CMD_COLL: "COLL",
    CMD_DONE: "DONE",
    CMD_FINI: "FINI",
}

#: COLL labels of IMPI version 0.0 (seed 004; LAM calls 0x1300 IMPI_C_DATALEN).
IMPI_NO_LABEL = 0
IMPI_C_VERSION = 0x1000
IMPI_C_NHOSTS = 0x1100
IMPI_C_NPROCS = 0x1200
IMPI_C_DATALEN = 0x1300
IMPI_C_TAGUB = 0x1400
IMPI_C_COLL_XSIZE = 0x1500
IMPI_C_COLL_MAXLINEAR = 0x1600
IMPI_H_IPV6 = 0x2000
IMPI_H_PORT = 0x2100
IMPI_H_NPROCS = 0x2200
IMPI_H_ACKMARK = 0x2300
IMPI_H_HIWATER = 0x2400
IMPI_P_IPV6 = 0x3000
IMPI_P_PID = 0x3100

#: Defaults a client contributes -1 for (seed 003, IMPI_C_COLL_XSIZE / _MAXLINEAR).
IMPI_COLL_XSIZE_DEFAULT = 1024
IMPI_COLL_MAXLINEAR_DEFAULT = 4

_HDR = struct.Struct(">ii")  # IMPI_Cmd, IMPI_Server_auth and IMPI_Chdr share this shape
_INT = struct.Struct(">i")
_UINT = struct.Struct(">I")
HEADER_SIZE = _HDR.size

#: Largest payload accepted in one command: start-up data is small; a bigger length is
#: garbage or an attack, not a client.
MAX_PAYLOAD = 16 * 2**20


class ImpiWireError(ValueError):
    """Bytes that are not IMPI: the connection is dropped, naming what was wrong."""


# -- encoding ---------------------------------------------------------------------------------


def encode_cmd(cmd: int, payload: bytes = b"") -> bytes:
    return _HDR.pack(_signed(cmd), len(payload)) + payload


def encode_auth(mask: int) -> bytes:
    """Client: AUTH with its IMPI_Client_auth (uint32 mask of the methods it offers)."""
    return encode_cmd(CMD_AUTH, _UINT.pack(mask & 0xFFFFFFFF))


def encode_server_auth(which: int, data: bytes = b"") -> bytes:
    """Server: IMPI_Server_auth {which, len} and its follow-on data, no command header."""
    return _HDR.pack(which, len(data)) + data


def encode_impi(value: int) -> bytes:
    """IMPI_Impi: a client's rank, or the server's answer, the size."""
    return encode_cmd(CMD_IMPI, _INT.pack(value))


def encode_coll(label: int, data: bytes) -> bytes:
    """Client: COLL with its IMPI_Coll label and payload."""
    return encode_cmd(CMD_COLL, _INT.pack(label) + data)


def encode_coll_reply(label: int, mask: int, payloads: tuple[bytes, ...] | list[bytes]) -> bytes:
    """Server: COLL with IMPI_Chdr {label, client_mask} and the payloads concatenated."""
    body = b"".join(payloads)
    return _HDR.pack(_signed(CMD_COLL), 8 + len(body)) + _HDR.pack(label, _signed(mask)) + body


def encode_done() -> bytes:
    return encode_cmd(CMD_DONE)


def encode_fini() -> bytes:
    return encode_cmd(CMD_FINI)


def _signed(x: int) -> int:
    """An int32 field holding a 32-bit pattern (a mask with bit 31, a command code)."""
    x &= 0xFFFFFFFF
    return x - 2**32 if x >= 2**31 else x


# -- decoding: what a server reads ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Command:
    cmd: int
    payload: bytes

    @property
    def name(self) -> str:
        return CMD_NAMES.get(self.cmd, f"{self.cmd:#010x}")


@dataclass(frozen=True, slots=True)
class Raw:
    """Header-less bytes read on request (an AUTH proof, the server's AUTH reply data)."""

    data: bytes


class StreamReader:
    """Cuts a byte stream into commands, or into raw blocks of a size asked for.

    ``expect_raw(n)`` makes the next ``n`` bytes come out as one Raw; ``expect_raw_header()``
    makes the next 8 bytes a header-less IMPI_Server_auth whose ``len`` bytes follow.
    """

    def __init__(self, max_payload: int = MAX_PAYLOAD) -> None:
        self._buf = bytearray()
        self._raw: list[int] = []  # sizes of raw blocks to read before the next command
        self._server_auth = False
        self.max_payload = max_payload

    def expect_raw(self, n: int) -> None:
        self._raw.append(n)

    def expect_server_auth(self) -> None:
        self._server_auth = True

    def feed(self, data: bytes) -> list[Command | Raw | ServerAuth]:
        self._buf += data
        out: list[Command | Raw | ServerAuth] = []
        while True:
            item = self._next()
            if item is None:
                return out
            out.append(item)

    def _next(self) -> Command | Raw | ServerAuth | None:
        buf = self._buf
        if self._raw:
            n = self._raw[0]
            if len(buf) < n:
                return None
            self._raw.pop(0)
            data = bytes(buf[:n])
            del buf[:n]
            return Raw(data)
        if len(buf) < HEADER_SIZE:
            return None
        a, length = _HDR.unpack_from(buf)
        if length < 0 or length > self.max_payload:
            what = "IMPI_Server_auth" if self._server_auth else f"command {a & 0xFFFFFFFF:#010x}"
            raise ImpiWireError(f"{what} has length {length} (0..{self.max_payload} allowed)")
        if len(buf) < HEADER_SIZE + length:
            return None
        payload = bytes(buf[HEADER_SIZE : HEADER_SIZE + length])
        del buf[: HEADER_SIZE + length]
        if self._server_auth:
            self._server_auth = False
            return ServerAuth(a, payload)
        return Command(a & 0xFFFFFFFF, payload)

    @property
    def pending(self) -> int:
        return len(self._buf)


@dataclass(frozen=True, slots=True)
class ServerAuth:
    which: int
    data: bytes


def decode_auth(payload: bytes) -> int:
    """The first IMPI_Client_auth's mask (methods 0..31; further words are for methods the
    spec has not defined yet)."""
    if len(payload) < 4 or len(payload) % 4:
        raise ImpiWireError(f"AUTH payload of {len(payload)} bytes is not uint32 auth masks")
    return int(_UINT.unpack_from(payload)[0])


def decode_int(payload: bytes, what: str) -> int:
    if len(payload) != 4:
        raise ImpiWireError(f"{what} payload must be one int32, got {len(payload)} bytes")
    return int(_INT.unpack(payload)[0])


def decode_coll(payload: bytes) -> tuple[int, bytes]:
    """A client's COLL: (label, data)."""
    if len(payload) < 4:
        raise ImpiWireError(f"COLL payload of {len(payload)} bytes has no label")
    return int(_INT.unpack_from(payload)[0]), payload[4:]


def decode_coll_reply(payload: bytes) -> tuple[int, int, bytes]:
    """The server's COLL: (label, client_mask as unsigned, concatenated data)."""
    if len(payload) < 8:
        raise ImpiWireError(f"COLL reply of {len(payload)} bytes has no IMPI_Chdr")
    label, mask = _HDR.unpack_from(payload)
    return int(label), int(mask) & 0xFFFFFFFF, payload[8:]


def int4s(*values: int) -> bytes:
    """Big-endian int32s (the payload of most labels)."""
    return b"".join(_INT.pack(v) for v in values)
