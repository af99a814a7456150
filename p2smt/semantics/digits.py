"""Device ids as digits of a hierarchy's levels, and translations of sets of devices digit by digit.

The vectorized check keeps each device's contributions in its own frame (translated by minus its position);
these are the translations, on k-bit sets of devices (``translate``) and on arrays of ids (``offsets``).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from p2smt.errors import P2Error

__all__ = ["Digits"]


class Digits:
    """Device ids as digits of the hierarchy's levels, and the translation of a set of devices by a digit
    vector (each digit modulo its level's size); a digit vector is coded as the id it moves 0 to."""

    def __init__(self, k: int, sizes: Sequence[int]):
        sizes = tuple(s for s in sizes if s > 1)
        if prod(sizes) != k:
            raise P2Error(f"level sizes {list(sizes)} do not multiply to the {k} devices")
        self.k, self.full = k, (1 << k) - 1
        self.sizes = sizes
        self.strides = tuple(prod(sizes[i + 1 :]) for i in range(len(sizes)))
        self._masks: dict[tuple[int, int], int] = {}
        self._moves: dict[int, tuple[tuple[int, int, int], ...]] = {}

    def offsets(self, members: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each member's digit-wise offset from the first member of its row, per level (levels × rows ×
        members, each digit times its level's stride, in 32 bits), and the inverse offsets."""
        up = np.zeros((len(self.sizes), *members.shape), dtype=np.int32)
        down = np.zeros_like(up)
        for level, (s, w) in enumerate(zip(self.sizes, self.strides)):
            digit = (members // w) % s
            up[level] = ((digit - digit[:, :1]) % s) * w
            down[level] = ((digit[:, :1] - digit) % s) * w
        return up, down

    def inverse(self, code: int) -> int:
        return sum(((-(code // w)) % s) * w for s, w in zip(self.sizes, self.strides))

    def translate(self, bits: int, code: int) -> int:
        if not code or not bits:
            return bits
        moves = self._moves.get(code)
        if moves is None:
            moves = self._moves[code] = tuple(
                (self._mask(level, t), t * w, (s - t) * w)
                for level, (s, w) in enumerate(zip(self.sizes, self.strides))
                if (t := (code // w) % s)
            )
        for low, up, down in moves:
            bits = ((bits & low) << up) | ((bits & ~low) >> down)
        return bits

    def kept(self, sets) -> int:
        """The levels (a bit set) whose translations map every one of ``sets`` to itself."""
        out = (1 << len(self.sizes)) - 1
        for bits in sets:
            for level, w in enumerate(self.strides):
                if out >> level & 1 and self.translate(bits, w) != bits:
                    out &= ~(1 << level)
        return out

    def _mask(self, level: int, t: int) -> int:
        """The devices whose digit at ``level`` is below its size minus ``t`` (those that move up by t)."""
        found = self._masks.get((level, t))
        if found is None:
            s, w = self.sizes[level], self.strides[level]
            below = (np.arange(self.k) // w) % s < s - t
            found = self._masks[level, t] = int.from_bytes(np.packbits(below, bitorder="little").tobytes(), "little")
        return found
