"""The numeric check of a run: distinct integer inputs and the exact sums every device must end with.

Device d's input element p is ``d * L + p + 1`` (int64, exact): distinct across devices and
positions, so a missing, doubled or misplaced contribution changes the value. Under a sharded goal
(``goal``: the target's ``goal_json``) a device passes in, and must get back, only the goal's chunks
(docs/semantics.md §6): its shard of the sum (ReduceScatter, HSDP), or its own shard in and every
member's shard, in rank order, out (AllGather).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_REPORTED = 8


def input_span(device: int, length: int, start: int, stop: int) -> np.ndarray:
    """Elements ``start:stop`` of device ``device``'s data (built alone: a row of all devices' data costs devices
    × more), int64, distinct across devices and positions."""
    return device * length + np.arange(start + 1, stop + 1, dtype=np.int64)


def input_row(device: int, length: int) -> np.ndarray:
    """Device ``device``'s data, ``length`` int64."""
    return input_span(device, length, 0, length)


def expected_row(group: Sequence[int], length: int) -> np.ndarray:
    """The exact sum over ``group`` of the input rows."""
    return int(sum(group)) * length + len(group) * np.arange(1, length + 1, dtype=np.int64)


def _shard(goal: dict, device: int, num_chunks: int) -> range:
    b = num_chunks // goal["shards"]
    return range(goal["rank"][device] * b, (goal["rank"][device] + 1) * b)


def _chunks(row: np.ndarray, ids: Sequence[int], num_chunks: int) -> np.ndarray:
    c = row.shape[0] // num_chunks
    return np.concatenate([row[r * c:(r + 1) * c] for r in ids])


def device_input(device: int, num_devices: int, length: int, num_chunks: int, goal: dict | None) -> np.ndarray:
    """What ``device`` passes in: its row of the inputs, or under the all-gather goal only its shard of it."""
    row = input_row(device, length)
    if goal is not None and goal["kind"] == "all-gather":
        return _chunks(row, _shard(goal, device, num_chunks), num_chunks)
    return row


def expected(device: int, group: Sequence[int], num_devices: int, length: int, num_chunks: int,
             goal: dict | None) -> tuple[np.ndarray, tuple[int, ...]]:
    """What ``device`` must get back, and the chunk id at each of its chunk positions."""
    if goal is None:
        return expected_row(group, length), tuple(range(num_chunks))
    if goal["kind"] == "reduce-scatter":
        ids = tuple(_shard(goal, device, num_chunks))
        return _chunks(expected_row(group, length), ids, num_chunks), ids
    b = num_chunks // goal["shards"]
    owner = {goal["rank"][d]: d for d in group}
    c = length // num_chunks  # chunk r of its owner's row, built alone
    parts = [input_span(owner[r // b], length, r * c, (r + 1) * c) for r in range(num_chunks)]
    return np.concatenate(parts), tuple(range(num_chunks))


def compare(
    device: int, got: np.ndarray, group: Sequence[int], num_chunks: int, length: int,
    goal: dict | None = None, num_devices: int | None = None,
) -> list[tuple[int, int, int, int, int]]:
    """Mismatching chunks of one device as (device, chunk, expected, got, found) at the chunk's first bad element;
    ``found`` is the chunk whose expected value ``got`` is at that offset (a misplaced chunk), or -1.

    A result of the wrong length is one mismatch with chunk -1 and the lengths as the values.
    """
    got = np.asarray(got).reshape(-1)
    n = max(group) + 1 if num_devices is None else num_devices
    want, ids = expected(device, group, n, length, num_chunks, goal)
    if got.shape != want.shape:
        return [(device, -1, int(want.shape[0]), int(got.shape[0]), -1)]
    full = expected(group[0], group, n, length, num_chunks, None if goal is None or goal["kind"] == "reduce-scatter"
                    else goal)[0].reshape(num_chunks, -1)  # every chunk of the group's result
    out = []
    for r, g, w in zip(ids, np.split(got, len(ids)), np.split(want, len(ids))):
        bad = np.nonzero(g != w)[0]
        if bad.size:
            at = int(bad[0])
            found = np.nonzero(full[:, at] == g[at])[0]
            out.append((device, r, int(w[at]), int(g[at]), int(found[0]) if found.size else -1))
    return out
