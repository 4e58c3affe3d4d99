"""Byte layouts of typed calls, pinned byte for byte (zpar.typed.codec).

Golden vectors come from the seed (seeds/000: header table, content arrays,
``value = array[n * len + m]``) and from AMUSE 2024.6.0's sockets channel
(amuse/rfi/channel.py SocketMessage.send: 4 flag bytes [big endian, error, has units,
unused], then int32 [call_id, function_id, call_count, ints, longs, floats, doubles,
booleans, strings, units] counting TOTAL values; strings as int32 lengths then the
characters each followed by NUL; booleans one byte each).
"""

from __future__ import annotations

import struct
import sys

import numpy as np
import pytest

from zpar.typed.codec import (
    TYPES,
    AmuseHeader,
    CodecError,
    amuse_body,
    amuse_body_sizes,
    decode_strings,
    encode_strings,
    pack_amuse_header,
    pack_columns,
    pack_v02_header,
    type_arrays,
    type_frames,
    unpack_amuse_header,
    unpack_columns,
    unpack_v02_header,
    v02_content_arrays,
)
from zpar.typed.signature import TypedSignature

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(sys.byteorder != "little", reason="golden bytes are little-endian"),
]

#: AMUSE header of call 7 of function 1993550816 over 3 calls carrying 6 int32, 3 float64,
#: 3 bool and 2 strings in all (little-endian host: flag byte 0 is 0)
AMUSE_GOLDEN = bytes.fromhex(
    "00000000"  # flags: little endian, no error, no units, unused
    "07000000"  # call_id 7
    "e02bd376"  # function_id 1993550816
    "03000000"  # call_count 3
    "06000000"  # int32 values in all
    "00000000"  # int64
    "00000000"  # float32
    "03000000"  # float64
    "03000000"  # bool
    "02000000"  # string
    "00000000"  # units
)


def test_amuse_header_golden_bytes():
    h = AmuseHeader(7, 1993550816, 3, (6, 0, 0, 3, 3, 2), units=0)
    assert pack_amuse_header(h) == AMUSE_GOLDEN
    assert len(AMUSE_GOLDEN) == 44
    assert unpack_amuse_header(AMUSE_GOLDEN) == h


def test_amuse_error_flag_is_the_second_byte():
    data = pack_amuse_header(AmuseHeader(1, 2, 1, (0, 0, 0, 0, 0, 1), error=True))
    assert data[:4] == b"\x00\x01\x00\x00"
    assert unpack_amuse_header(data).error is True


def test_amuse_units_count_sets_the_third_flag():
    data = pack_amuse_header(AmuseHeader(1, 2, 1, (0,) * 6, units=9))
    assert data[:4] == b"\x00\x00\x01\x00"
    assert struct.unpack("<i", data[40:44]) == (9,)


def test_amuse_header_refuses_the_other_byte_order_and_bad_sizes():
    other = b"\x01" + AMUSE_GOLDEN[1:]
    with pytest.raises(CodecError, match="endianness"):
        unpack_amuse_header(other)
    with pytest.raises(CodecError, match="44 bytes"):
        unpack_amuse_header(AMUSE_GOLDEN[:40])
    negative = AMUSE_GOLDEN[:16] + struct.pack("<i", -1) + AMUSE_GOLDEN[20:]
    with pytest.raises(CodecError, match="negative"):
        unpack_amuse_header(negative)


def test_amuse_body_order_and_encodings():
    arrays = {
        "string": ["ab", ""],
        "bool": np.array([True, False, True]),
        "float64": np.array([1.5]),
        "int32": np.array([1, -2], dtype=np.int32),
    }
    body = amuse_body(arrays)
    assert body == [
        struct.pack("<2i", 1, -2),  # int32 first
        struct.pack("<d", 1.5),  # then float64 (no int64, float32)
        b"\x01\x00\x01",  # bool: one byte each
        struct.pack("<2i", 2, 0),  # string lengths
        b"ab\x00\x00",  # characters, each string NUL-terminated
    ]
    h = AmuseHeader(1, 2, 1, (2, 0, 0, 1, 3, 2))
    assert amuse_body_sizes(h) == [
        ("int32", 8),
        ("float64", 8),
        ("bool", 3),
        ("string_lengths", 8),
        ("string_chars", -1),
    ]


def test_strings_count_utf8_bytes_not_characters():
    # AMUSE's send_strings takes len(s) of the str: "é" would be announced as 1 byte and
    # fail its own size check; zpar counts the UTF-8 bytes
    lengths, data = encode_strings(["", "é", "日本", "a"])
    assert lengths.tolist() == [0, 2, 6, 1]
    assert data == b"\x00" + "é".encode() + b"\x00" + "日本".encode() + b"\x00a\x00"
    assert decode_strings(lengths, data) == ["", "é", "日本", "a"]


def test_strings_with_an_embedded_nul_still_decode_by_length():
    lengths, data = encode_strings(["a\0b", "c"])
    assert decode_strings(lengths, data) == ["a\0b", "c"]


def test_strings_of_the_wrong_size_or_not_utf8_are_refused():
    with pytest.raises(CodecError):
        decode_strings(np.array([3], dtype=np.int32), b"ab\x00")
    with pytest.raises(CodecError, match="not UTF-8"):
        decode_strings(np.array([2], dtype=np.int32), b"\xff\xfe\x00")


def test_v02_header_golden_bytes():
    # the seed's table: function-id, number of calls, then per-call counts of float64,
    # int32, float32, string (doubles first)
    data = pack_v02_header(42, 1000, {"int32": 2, "float64": 1, "string": 1})
    assert data == bytes.fromhex("2a000000e803000001000000020000000000000001000000")
    assert unpack_v02_header(data) == (
        42,
        1000,
        {"float64": 1, "int32": 2, "float32": 0, "string": 1},
    )
    with pytest.raises(CodecError, match="int64"):
        pack_v02_header(1, 1, {"int64": 1})


def test_seed_example_function_content_arrays():
    # int example_function(int id, double x, int type): int[id, type], double[x]
    sig = TypedSignature.build(
        "example_function", [("id", "int32"), ("x", "float64"), ("type", "int32")]
    )
    assert sig.in_counts == (2, 0, 0, 1, 0, 0)
    cols = {p.name: v for p, v in zip(sig.inputs, (5, 2.5, 9), strict=True)}
    ints = pack_columns([cols["id"], cols["type"]], "int32", 1)
    doubles = pack_columns([cols["x"]], "float64", 1)
    assert ints.tolist() == [5, 9] and doubles.tolist() == [2.5]
    # v0.2 sends the doubles first, then the integers
    assert v02_content_arrays({"int32": ints, "float64": doubles}) == [
        struct.pack("<d", 2.5),
        struct.pack("<2i", 5, 9),
    ]


def test_layout_of_a_three_argument_function_over_1000_calls():
    ncalls = 1000
    a = np.arange(ncalls, dtype=np.float64)
    b = a * 2
    c = a * 3
    arr = pack_columns([a, b, c], "float64", ncalls)
    for n, col in enumerate((a, b, c)):
        for m in (0, 1, 499, 999):
            assert arr[n * ncalls + m] == col[m]  # value = array[n * len + m]
    back = unpack_columns(arr, 3, ncalls)
    assert all(np.shares_memory(x, arr) for x in back)
    np.testing.assert_array_equal(back[2], c)
    # a lone column of the right dtype is the array itself (no copy); otherwise converted
    assert np.shares_memory(pack_columns([a], "float64", ncalls), a)
    assert pack_columns([a], "float32", ncalls).dtype == np.float32
    # one call degrades to array[n]
    assert pack_columns([1.0, 2.0, 3.0], "float64", 1).tolist() == [1.0, 2.0, 3.0]


def test_zpar_frames_one_per_nonempty_type_zero_copy_both_ways():
    i64 = np.array([2**40, -1], dtype=np.int64)
    arrays = {"int64": i64, "bool": np.array([True, False]), "string": ["", "é"]}
    counts, frames = type_frames(arrays)
    assert counts == [0, 2, 0, 0, 2, 2]
    assert len(frames) == 3
    assert isinstance(frames[0], memoryview) and np.shares_memory(
        np.frombuffer(frames[0], np.int64), i64
    )
    assert bytes(frames[1]) == b"\x01\x00"
    assert bytes(frames[2]) == struct.pack("<2i", 0, 2) + b"\x00" + "é".encode() + b"\x00"
    back = type_arrays(counts, [bytes(f) for f in frames])
    assert back["int64"].tolist() == [2**40, -1]
    assert back["bool"].dtype == np.bool_ and back["bool"].tolist() == [True, False]
    assert back["string"] == ["", "é"]
    raw = bytearray(bytes(frames[0]))
    assert np.shares_memory(
        type_arrays([0, 2, 0, 0, 0, 0], [raw])["int64"], np.frombuffer(raw, np.int64)
    )


@pytest.mark.parametrize(
    "counts, frames, match",
    [
        ([1, 0, 0, 0, 0], [b"\0" * 4], "6 ints"),
        ([1, 0, 0, 0, 0, 0], [], "1 type frames expected"),
        ([2, 0, 0, 0, 0, 0], [b"\0" * 4], "need 8 bytes"),
        ([0, 0, 0, 0, 0, 3], [b"\0" * 4], "cannot hold 3 lengths"),
    ],
)
def test_zpar_frames_that_do_not_match_their_counts_are_refused(counts, frames, match):
    with pytest.raises(CodecError, match=match):
        type_arrays(counts, frames)


def test_types_are_amuses_order():
    assert TYPES == ("int32", "int64", "float32", "float64", "bool", "string")
