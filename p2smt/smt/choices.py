"""Per-step instruction choices for unrolled encodings: one-hot Booleans or a bit-vector index.

A step picks one of ``n`` candidates, or STOP when ``stop`` is set (STOP is then only followed by
STOP, so a program of length L is its first L steps and STOP padding after them). One-hot uses a
native pseudo-Boolean ``PbEq(..., 1)``; the index form a bit-vector ``x_t`` ranging over 0..n-1 (n is
STOP) with ``x_t == j`` as the selector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import z3

ChoiceMode = Literal["onehot", "index"]


class StepChoices:
    """The choice variables of ``steps`` steps over ``n`` candidates (plus STOP if ``stop``)."""

    def __init__(self, ctx: z3.Context, steps: int, n: int, mode: ChoiceMode, stop: bool, prefix: str = ""):
        if mode not in ("onehot", "index"):
            raise ValueError(f"unknown choice mode {mode!r}")
        self.ctx, self.steps, self.n, self.mode, self.has_stop = ctx, steps, n, mode, stop
        self.options = n + (1 if stop else 0)  # STOP is option n
        if mode == "onehot":
            self.x = [[z3.Bool(f"{prefix}x_{t}_{j}", ctx) for j in range(self.options)] for t in range(steps)]
        else:
            width = max(1, (self.options - 1).bit_length())
            self.index = [z3.BitVec(f"{prefix}i_{t}", width, ctx) for t in range(steps)]
            self.sel = [
                [self.index[t] == z3.BitVecVal(j, width, ctx) for j in range(self.options)]
                for t in range(steps)
            ]

    def select(self, t: int, j: int) -> z3.BoolRef:
        """Step ``t`` picks candidate ``j`` (``j == n``: STOP)."""
        return self.x[t][j] if self.mode == "onehot" else self.sel[t][j]

    def stop(self, t: int) -> z3.BoolRef:
        if not self.has_stop:
            raise ValueError("these choices have no STOP")
        return self.select(t, self.n)

    def constraints(self) -> list[z3.BoolRef]:
        """Exactly one option per step; STOP only followed by STOP."""
        out: list[z3.BoolRef] = []
        for t in range(self.steps):
            if self.mode == "onehot":
                out.append(z3.PbEq([(v, 1) for v in self.x[t]], 1))
            elif self.options < 2 ** self.index[t].size():
                out.append(z3.ULE(self.index[t], self.options - 1))
            if self.has_stop and t + 1 < self.steps:
                out.append(z3.Implies(self.stop(t), self.stop(t + 1)))
        return out

    def length_assumptions(self, length: int) -> list[z3.BoolRef]:
        """With STOP: literals restricting programs to exactly ``length`` steps."""
        out: list[z3.BoolRef] = []
        if length >= 1:
            out.append(z3.Not(self.stop(length - 1)))
        if length < self.steps:
            out.append(self.stop(length))
        return out

    def chosen(self, model: z3.ModelRef, t: int) -> int:
        """The option step ``t`` takes in ``model`` (``n`` is STOP)."""
        if self.mode == "index":
            return model.eval(self.index[t], model_completion=True).as_long()
        for j, v in enumerate(self.x[t]):
            if z3.is_true(model.eval(v, model_completion=True)):
                return j
        raise ValueError(f"model picks no option at step {t}")

    def decode(self, model: z3.ModelRef) -> tuple[int, ...]:
        """The candidate indices up to the first STOP (or all ``steps``)."""
        out = []
        for t in range(self.steps):
            j = self.chosen(model, t)
            if j >= self.n:
                break
            out.append(j)
        return tuple(out)

    def blocking_clause(self, program: Sequence[int]) -> z3.BoolRef:
        """Excludes exactly ``program`` (its steps, then STOP if it is shorter than ``steps``)."""
        lits = [z3.Not(self.select(t, j)) for t, j in enumerate(program)]
        if self.has_stop and len(program) < self.steps:
            lits.append(z3.Not(self.stop(len(program))))
        return z3.Or(lits) if lits else z3.BoolVal(False, self.ctx)
