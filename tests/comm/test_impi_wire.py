"""IMPI's start-up bytes: seed 004's examples and LAM/MPI 7.1.4 client.c's layout."""

from __future__ import annotations

import pytest

from zpar.comm import impi_wire as w


def h(s: str) -> bytes:
    return bytes.fromhex(s.replace(" ", ""))


def test_command_codes_are_their_ascii_names() -> None:
    # seed 003 2.3.2 and LAM's impi-defs.h: IMPI_CMD_AUTH 0x41555448 ... 'AUTH'
    for code, name in w.CMD_NAMES.items():
        assert code.to_bytes(4, "big") == name.encode()
    assert (w.CMD_AUTH, w.CMD_IMPI, w.CMD_COLL, w.CMD_DONE, w.CMD_FINI) == (
        0x41555448,
        0x494D5049,
        0x434F4C4C,
        0x444F4E45,
        0x46494E49,
    )


def test_labels_of_seed_004() -> None:
    assert (w.IMPI_C_VERSION, w.IMPI_C_NHOSTS, w.IMPI_C_NPROCS, w.IMPI_C_DATALEN) == (
        0x1000,
        0x1100,
        0x1200,
        0x1300,
    )
    assert (w.IMPI_C_TAGUB, w.IMPI_C_COLL_XSIZE, w.IMPI_C_COLL_MAXLINEAR) == (
        0x1400,
        0x1500,
        0x1600,
    )
    assert (w.IMPI_H_IPV6, w.IMPI_H_PORT, w.IMPI_H_NPROCS, w.IMPI_H_ACKMARK) == (
        0x2000,
        0x2100,
        0x2200,
        0x2300,
    )
    assert (w.IMPI_H_HIWATER, w.IMPI_P_IPV6, w.IMPI_P_PID) == (0x2400, 0x3000, 0x3100)


def test_auth_none_example() -> None:
    # Client sends IMPI_Cmd {AUTH, 4}, IMPI_Client_auth {0x0001}; server IMPI_Server_auth {0, 0}
    assert w.encode_auth(0x1) == h("41555448 00000004 00000001")
    assert w.encode_server_auth(0) == h("00000000 00000000")  # no command header


def test_auth_key_example() -> None:
    # Server IMPI_Server_auth {1, 0}; client IMPI_Auth_key {5678} as an IMPI_Uint8
    from zpar.comm.rendezvous import impi_key_value

    assert w.encode_auth(0x2) == h("41555448 00000004 00000002")
    assert w.encode_server_auth(1) == h("00000001 00000000")
    assert impi_key_value(b"5678") == h("00000000 0000162e")


def test_impi_example() -> None:
    assert w.encode_impi(2) == h("494d5049 00000004 00000002")  # client 2's rank
    assert w.encode_impi(3) == h("494d5049 00000004 00000003")  # the server's size


def test_coll_nhosts_example_mask_0x7_len_20() -> None:
    assert w.encode_coll(w.IMPI_C_NHOSTS, w.int4s(3)) == h("434f4c4c 00000008 00001100 00000003")
    reply = w.encode_coll_reply(w.IMPI_C_NHOSTS, 0x7, [w.int4s(3), w.int4s(2), w.int4s(2)])
    assert reply == h("434f4c4c 00000014 00001100 00000007 00000003 00000002 00000002")


def test_coll_missing_label_example_mask_0x5_len_16() -> None:
    reply = w.encode_coll_reply(w.IMPI_C_DATALEN, 0x5, [w.int4s(8000), w.int4s(4000)])
    assert reply == h("434f4c4c 00000010 00001300 00000005 00001f40 00000fa0")


def test_coll_h_port_example_len_36() -> None:
    ports = [w.int4s(5001, 5002, 5003), w.int4s(6001, 6002), w.int4s(7001, 7002)]
    assert w.encode_coll(w.IMPI_H_PORT, ports[1]) == h(
        "434f4c4c 0000000c 00002100 00001771 00001772"
    )
    reply = w.encode_coll_reply(w.IMPI_H_PORT, 0x7, ports)
    assert reply[:16] == h("434f4c4c 00000024 00002100 00000007")
    assert w.decode_coll_reply(reply[8:]) == (w.IMPI_H_PORT, 0x7, b"".join(ports))


def test_done_and_fini_have_no_payload() -> None:
    assert w.encode_done() == h("444f4e45 00000000")
    assert w.encode_fini() == h("46494e49 00000000")


def test_mask_with_bit_31_round_trips() -> None:
    reply = w.encode_coll_reply(1, 0x80000001, [b"a", b"b"])
    assert reply[12:16] == h("80000001")
    assert w.decode_coll_reply(reply[8:]) == (1, 0x80000001, b"ab")


def test_reader_cuts_commands_fed_in_pieces() -> None:
    # LAM writes the header and the payload with separate write()s: any split must work
    stream = w.encode_auth(2) + w.encode_impi(0) + w.encode_coll(0x1000, b"\0" * 8)
    r = w.StreamReader()
    items = []
    for i in range(len(stream)):
        items += r.feed(stream[i : i + 1])
    assert [x.name for x in items] == ["AUTH", "IMPI", "COLL"]
    assert w.decode_auth(items[0].payload) == 2
    assert w.decode_int(items[1].payload, "IMPI") == 0
    assert w.decode_coll(items[2].payload) == (0x1000, b"\0" * 8)


def test_reader_raw_blocks_between_commands() -> None:
    # after the server's AUTH reply the client's proof has no header
    r = w.StreamReader()
    r.expect_raw(8)
    assert r.feed(h("00000000 0000162e") + w.encode_done()) == [
        w.Raw(h("000000000000162e")),
        w.Command(w.CMD_DONE, b""),
    ]


def test_reader_server_auth_then_commands() -> None:
    r = w.StreamReader()
    r.expect_server_auth()
    items = r.feed(w.encode_server_auth(2, b"c" * 32) + w.encode_impi(3))
    assert items == [w.ServerAuth(2, b"c" * 32), w.Command(w.CMD_IMPI, w.int4s(3))]


@pytest.mark.parametrize("length", [-1, w.MAX_PAYLOAD + 1])
def test_reader_refuses_absurd_lengths(length: int) -> None:
    r = w.StreamReader()
    with pytest.raises(w.ImpiWireError, match="length"):
        r.feed(w.CMD_COLL.to_bytes(4, "big") + length.to_bytes(4, "big", signed=True))


@pytest.mark.parametrize(
    ("fn", "payload"),
    [
        (w.decode_auth, b"\0\0"),
        (lambda p: w.decode_int(p, "IMPI"), b"\0" * 8),
        (w.decode_coll, b"\0"),
        (w.decode_coll_reply, b"\0" * 4),
    ],
)
def test_malformed_payloads_name_what_is_wrong(fn, payload: bytes) -> None:
    with pytest.raises(w.ImpiWireError):
        fn(payload)
