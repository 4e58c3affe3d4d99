"""Our exports against the protocol's published examples (enthought/distributed-array-protocol,
examples.rst): ``arange(45).reshape(5, 9)`` (and ``arange(135).reshape(5, 9, 3)``) under each
example distribution. The buffers and ``dim_data`` below are copied from that page.

Two examples there print ``'padding': [0, 0]`` (a list) in every block dimension; the protocol
text and its validator want a tuple and the other examples leave the key out when it is
``(0, 0)``; we leave it out, so those two are compared with that key removed.
"""

from __future__ import annotations

import numpy as np
import pytest

from zpar.darray import LocalArray, validate
from zpar.darray.layout import check_grid, dim_data_for_all, parse_dist
from zpar.darray.maps import Distribution, owned_piece

FULL = np.arange(45.0).reshape(5, 9)


def B(rank, size, grid, start, stop):
    return {
        "dist_type": "b",
        "proc_grid_rank": rank,
        "proc_grid_size": grid,
        "size": size,
        "start": start,
        "stop": stop,
    }


def C(rank, size, grid, start, block_size=None):
    d = {
        "dist_type": "c",
        "proc_grid_rank": rank,
        "proc_grid_size": grid,
        "size": size,
        "start": start,
    }
    if block_size is not None:
        d["block_size"] = block_size
    return d


def U(rank, size, grid, indices):
    return {
        "dist_type": "u",
        "proc_grid_rank": rank,
        "proc_grid_size": grid,
        "size": size,
        "indices": np.array(indices),
    }


# (dist, grid_shape, [(buffer rows, dim_data) per process in grid-rank order])
EXAMPLES = {
    "block-block 3x1": (
        ("b", "b"),
        (3, 1),
        [
            (
                [[0, 1, 2, 3, 4, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14, 15, 16, 17]],
                (B(0, 5, 3, 0, 2), B(0, 9, 1, 0, 9)),
            ),
            (
                [[18, 19, 20, 21, 22, 23, 24, 25, 26], [27, 28, 29, 30, 31, 32, 33, 34, 35]],
                (B(1, 5, 3, 2, 4), B(0, 9, 1, 0, 9)),
            ),
            ([[36, 37, 38, 39, 40, 41, 42, 43, 44]], (B(2, 5, 3, 4, 5), B(0, 9, 1, 0, 9))),
        ],
    ),
    "block-block 1x3": (
        ("b", "b"),
        (1, 3),
        [
            (
                [[0, 1, 2], [9, 10, 11], [18, 19, 20], [27, 28, 29], [36, 37, 38]],
                (B(0, 5, 1, 0, 5), B(0, 9, 3, 0, 3)),
            ),
            (
                [[3, 4, 5], [12, 13, 14], [21, 22, 23], [30, 31, 32], [39, 40, 41]],
                (B(0, 5, 1, 0, 5), B(1, 9, 3, 3, 6)),
            ),
            (
                [[6, 7, 8], [15, 16, 17], [24, 25, 26], [33, 34, 35], [42, 43, 44]],
                (B(0, 5, 1, 0, 5), B(2, 9, 3, 6, 9)),
            ),
        ],
    ),
    "block-block 2x2": (
        ("b", "b"),
        (2, 2),
        [
            (
                [[0, 1, 2, 3, 4], [9, 10, 11, 12, 13], [18, 19, 20, 21, 22]],
                (B(0, 5, 2, 0, 3), B(0, 9, 2, 0, 5)),
            ),
            (
                [[5, 6, 7, 8], [14, 15, 16, 17], [23, 24, 25, 26]],
                (B(0, 5, 2, 0, 3), B(1, 9, 2, 5, 9)),
            ),
            ([[27, 28, 29, 30, 31], [36, 37, 38, 39, 40]], (B(1, 5, 2, 3, 5), B(0, 9, 2, 0, 5))),
            ([[32, 33, 34, 35], [41, 42, 43, 44]], (B(1, 5, 2, 3, 5), B(1, 9, 2, 5, 9))),
        ],
    ),
    "block-cyclic 2x2": (
        ("b", "c"),
        (2, 2),
        [
            (
                [[0, 2, 4, 6, 8], [9, 11, 13, 15, 17], [18, 20, 22, 24, 26]],
                (B(0, 5, 2, 0, 3), C(0, 9, 2, 0)),
            ),
            ([[1, 3, 5, 7], [10, 12, 14, 16], [19, 21, 23, 25]], (B(0, 5, 2, 0, 3), C(1, 9, 2, 1))),
            ([[27, 29, 31, 33, 35], [36, 38, 40, 42, 44]], (B(1, 5, 2, 3, 5), C(0, 9, 2, 0))),
            ([[28, 30, 32, 34], [37, 39, 41, 43]], (B(1, 5, 2, 3, 5), C(1, 9, 2, 1))),
        ],
    ),
    "cyclic-cyclic 2x2": (
        ("c", "c"),
        (2, 2),
        [
            (
                [[0, 2, 4, 6, 8], [18, 20, 22, 24, 26], [36, 38, 40, 42, 44]],
                (C(0, 5, 2, 0), C(0, 9, 2, 0)),
            ),
            ([[1, 3, 5, 7], [19, 21, 23, 25], [37, 39, 41, 43]], (C(0, 5, 2, 0), C(1, 9, 2, 1))),
            ([[9, 11, 13, 15, 17], [27, 29, 31, 33, 35]], (C(1, 5, 2, 1), C(0, 9, 2, 0))),
            ([[10, 12, 14, 16], [28, 30, 32, 34]], (C(1, 5, 2, 1), C(1, 9, 2, 1))),
        ],
    ),
    "irregular-block 2x2": (
        (("b", [0, 1, 5]), ("b", [0, 2, 9])),
        (2, 2),
        [
            ([[0, 1]], (B(0, 5, 2, 0, 1), B(0, 9, 2, 0, 2))),
            ([[2, 3, 4, 5, 6, 7, 8]], (B(0, 5, 2, 0, 1), B(1, 9, 2, 2, 9))),
            ([[9, 10], [18, 19], [27, 28], [36, 37]], (B(1, 5, 2, 1, 5), B(0, 9, 2, 0, 2))),
            (
                [
                    [11, 12, 13, 14, 15, 16, 17],
                    [20, 21, 22, 23, 24, 25, 26],
                    [29, 30, 31, 32, 33, 34, 35],
                    [38, 39, 40, 41, 42, 43, 44],
                ],
                (B(1, 5, 2, 1, 5), B(1, 9, 2, 2, 9)),
            ),
        ],
    ),
    "block-cyclic(2) 2x2": (
        (("c", 2), ("c", 2)),
        (2, 2),
        [
            (
                [[0, 1, 4, 5, 8], [9, 10, 13, 14, 17], [36, 37, 40, 41, 44]],
                (C(0, 5, 2, 0, 2), C(0, 9, 2, 0, 2)),
            ),
            (
                [[2, 3, 6, 7], [11, 12, 15, 16], [38, 39, 42, 43]],
                (C(0, 5, 2, 0, 2), C(1, 9, 2, 2, 2)),
            ),
            ([[18, 19, 22, 23, 26], [27, 28, 31, 32, 35]], (C(1, 5, 2, 2, 2), C(0, 9, 2, 0, 2))),
            ([[20, 21, 24, 25], [29, 30, 33, 34]], (C(1, 5, 2, 2, 2), C(1, 9, 2, 2, 2))),
        ],
    ),
    "unstructured 2x2": (
        (("u", [[3, 0], [4, 2, 1]]), ("u", [[2, 3, 7, 1], [6, 5, 8, 0, 4]])),
        (2, 2),
        [
            ([[29, 30, 34, 28], [2, 3, 7, 1]], (U(0, 5, 2, [3, 0]), U(0, 9, 2, [2, 3, 7, 1]))),
            (
                [[33, 32, 35, 27, 31], [6, 5, 8, 0, 4]],
                (U(0, 5, 2, [3, 0]), U(1, 9, 2, [6, 5, 8, 0, 4])),
            ),
            (
                [[38, 39, 43, 37], [20, 21, 25, 19], [11, 12, 16, 10]],
                (U(1, 5, 2, [4, 2, 1]), U(0, 9, 2, [2, 3, 7, 1])),
            ),
            (
                [[42, 41, 44, 36, 40], [24, 23, 26, 18, 22], [15, 14, 17, 9, 13]],
                (U(1, 5, 2, [4, 2, 1]), U(1, 9, 2, [6, 5, 8, 0, 4])),
            ),
        ],
    ),
}

# Cyclic, Block, Cyclic: arange(135).reshape(5, 9, 3) on a 2x2x2 grid; buffers as printed.
CBC_BUFFERS = [
    [
        [[0, 2], [3, 5], [6, 8], [9, 11], [12, 14]],
        [[54, 56], [57, 59], [60, 62], [63, 65], [66, 68]],
        [[108, 110], [111, 113], [114, 116], [117, 119], [120, 122]],
    ],
    [
        [[1], [4], [7], [10], [13]],
        [[55], [58], [61], [64], [67]],
        [[109], [112], [115], [118], [121]],
    ],
    [
        [[15, 17], [18, 20], [21, 23], [24, 26]],
        [[69, 71], [72, 74], [75, 77], [78, 80]],
        [[123, 125], [126, 128], [129, 131], [132, 134]],
    ],
    [[[16], [19], [22], [25]], [[70], [73], [76], [79]], [[124], [127], [130], [133]]],
    [
        [[27, 29], [30, 32], [33, 35], [36, 38], [39, 41]],
        [[81, 83], [84, 86], [87, 89], [90, 92], [93, 95]],
    ],
    [[[28], [31], [34], [37], [40]], [[82], [85], [88], [91], [94]]],
    [[[42, 44], [45, 47], [48, 50], [51, 53]], [[96, 98], [99, 101], [102, 104], [105, 107]]],
    [[[43], [46], [49], [52]], [[97], [100], [103], [106]]],
]


def CBC_DIM_DATA(rank):
    i, j, k = np.unravel_index(rank, (2, 2, 2))
    return (C(int(i), 5, 2, int(i)), B(int(j), 9, 2, [0, 5][j], [5, 9][j]), C(int(k), 3, 2, int(k)))


def local_arrays(full, dist, grid):
    specs = parse_dist(dist, full.shape)
    grid = check_grid(grid, specs, int(np.prod(grid)))
    per_rank = dim_data_for_all(full.shape, specs, grid, None, None)
    dist_ = Distribution(per_rank)
    return [
        LocalArray(np.ascontiguousarray(owned_piece(full, dist_.local_maps[r])), per_rank[r])
        for r in range(len(per_rank))
    ]


def assert_dim_data_equal(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert set(g) == set(w)
        for key in w:
            if key == "indices":
                np.testing.assert_array_equal(g[key], w[key])
            else:
                assert g[key] == w[key] and type(g[key]) is type(w[key]), key


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_exports_equal_published_examples(name):
    dist, grid, expected = EXAMPLES[name]
    las = local_arrays(FULL, dist, grid)
    assert len(las) == len(expected)
    for la, (buf, dim_data) in zip(las, expected, strict=True):
        export = la.__distarray__()
        assert export["__version__"] == "0.10.0"
        assert set(export) == {"__version__", "buffer", "dim_data"}
        np.testing.assert_array_equal(export["buffer"], np.array(buf, dtype=float))
        assert_dim_data_equal(export["dim_data"], dim_data)
        assert validate(export) == (True, "")


def test_cyclic_block_cyclic_3d_example():
    full = np.arange(135.0).reshape(5, 9, 3)
    las = local_arrays(full, ("c", "b", "c"), (2, 2, 2))
    for rank, la in enumerate(las):
        export = la.__distarray__()
        np.testing.assert_array_equal(export["buffer"], np.array(CBC_BUFFERS[rank], dtype=float))
        assert_dim_data_equal(export["dim_data"], CBC_DIM_DATA(rank))
        assert validate(export) == (True, "")


def test_buffer_is_the_local_memory_not_a_copy():
    la = local_arrays(FULL, ("b", "b"), (2, 2))[0]
    export = la.__distarray__()
    view = memoryview(export["buffer"])
    la.ndarray[0, 0] = -1.0
    assert view[0, 0] == -1.0
    assert np.shares_memory(np.asarray(view), la.ndarray)


def test_zero_dimensional_export():
    la = LocalArray(np.array(3.5), ())
    export = la.__distarray__()
    assert export["dim_data"] == ()
    assert memoryview(export["buffer"]).ndim == 0
    assert validate(export) == (True, "")
