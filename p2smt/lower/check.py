"""The numeric check of a run: distinct integer inputs and the exact sums every device must end with.

Device d's input element p is ``d * L + p + 1`` (int64, exact): distinct across devices and
positions, so a missing, doubled or misplaced contribution changes the value.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_REPORTED = 8


def inputs(num_devices: int, length: int) -> np.ndarray:
    """(num_devices, length) int64: row d is device d's data."""
    return np.arange(num_devices, dtype=np.int64)[:, None] * length + np.arange(1, length + 1, dtype=np.int64)


def expected_row(group: Sequence[int], length: int) -> np.ndarray:
    """The exact sum over ``group`` of the input rows."""
    return int(sum(group)) * length + len(group) * np.arange(1, length + 1, dtype=np.int64)


def compare(
    device: int, got: np.ndarray, group: Sequence[int], num_chunks: int, length: int
) -> list[tuple[int, int, int, int]]:
    """Mismatching chunks of one device as (device, chunk, expected, got) at the chunk's first bad element.

    A result of the wrong length is one mismatch with chunk -1 and the lengths as the values.
    """
    got = np.asarray(got).reshape(-1)
    want = expected_row(group, length)
    if got.shape != want.shape:
        return [(device, -1, int(length), int(got.shape[0]))]
    out = []
    for r, (g, w) in enumerate(zip(np.split(got, num_chunks), np.split(want, num_chunks))):
        bad = np.nonzero(g != w)[0]
        if bad.size:
            out.append((device, r, int(w[bad[0]]), int(g[bad[0]])))
    return out
