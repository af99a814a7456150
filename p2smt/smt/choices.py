"""The per-step instruction choice of every unrolled encoding: one-hot Booleans or a bit-vector index.

A step picks one of ``n`` candidates, or STOP when ``stop`` is set (STOP is then only followed by
STOP, so a program of length L is its first L steps and STOP padding after them). One-hot uses a
native pseudo-Boolean ``PbEq(..., 1)`` over ``x[t]`` and the STOP literal, optionally channelled to a
bit-vector ``choice_t`` so that decoding reads one value per step (``decode_index``); the index form
is a bit-vector ``i_t`` ranging over 0..n-1 (n is STOP) with ``i_t == j`` as the selector.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import z3

ChoiceMode = Literal["onehot", "index"]


class StepChoices:
    """The choice variables of ``steps`` steps over ``n`` candidates (plus STOP if ``stop``)."""

    def __init__(
        self,
        ctx: z3.Context,
        steps: int,
        n: int,
        mode: ChoiceMode = "onehot",
        stop: bool = True,
        prefix: str = "",
        decode_index: bool = False,
    ):
        if mode not in ("onehot", "index"):
            raise ValueError(f"unknown choice mode {mode!r}")
        self.ctx, self.steps, self.n, self.mode, self.has_stop = ctx, steps, n, mode, stop
        self.options = n + (1 if stop else 0)  # STOP is option n
        self.index: list[z3.BitVecRef] = []
        if mode == "onehot":
            self.x = [[z3.Bool(f"{prefix}x_{t}_{j}", ctx) for j in range(n)] for t in range(steps)]
            self._stop = [z3.Bool(f"{prefix}stop_{t}", ctx) for t in range(steps)] if stop else []
            if decode_index:
                width = max(n, 1).bit_length() + 1
                self.index = [z3.BitVec(f"{prefix}choice_{t}", width, ctx) for t in range(steps)]
        else:
            width = max(1, (self.options - 1).bit_length())
            self.index = [z3.BitVec(f"{prefix}i_{t}", width, ctx) for t in range(steps)]
            self.sel = [
                [self.index[t] == z3.BitVecVal(j, width, ctx) for j in range(self.options)]
                for t in range(steps)
            ]

    def select(self, t: int, j: int) -> z3.BoolRef:
        """Step ``t`` picks candidate ``j`` (``j == n``: STOP)."""
        if self.mode == "index":
            return self.sel[t][j]
        return self.x[t][j] if j < self.n else self.stop(t)

    def stop(self, t: int) -> z3.BoolRef:
        if not self.has_stop:
            raise ValueError("these choices have no STOP")
        return self._stop[t] if self.mode == "onehot" else self.sel[t][self.n]

    def _row(self, t: int) -> list[z3.BoolRef]:
        return [self.select(t, j) for j in range(self.options)]

    def constraints(self) -> list[z3.BoolRef]:
        """Exactly one option per step; STOP only followed by STOP (and the decoding channel)."""
        out: list[z3.BoolRef] = []
        for t in range(self.steps):
            if self.mode == "onehot":
                out.append(z3.PbEq([(v, 1) for v in self._row(t)], 1))
            elif self.options < 2 ** self.index[t].size():
                out.append(z3.ULE(self.index[t], self.options - 1))
            if self.has_stop and t + 1 < self.steps:
                out.append(z3.Implies(self.stop(t), self.stop(t + 1)))
            if self.mode == "onehot" and self.index:
                out.extend(v == (self.index[t] == j) for j, v in enumerate(self._row(t)))
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
        if self.index:
            return model.eval(self.index[t], model_completion=True).as_long()
        for j, v in enumerate(self._row(t)):
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

    def prefix_literals(self, prefix: Sequence[int]) -> list[z3.BoolRef]:
        """The literals of ``prefix``'s steps (every program that starts with it satisfies them)."""
        return [self.select(t, j) for t, j in enumerate(prefix)]

    def program_literals(self, program: Sequence[int]) -> list[z3.BoolRef]:
        """The literals of exactly ``program``: its steps, then STOP if it is shorter than ``steps``."""
        lits = self.prefix_literals(program)
        if self.has_stop and len(program) < self.steps:
            lits.append(self.stop(len(program)))
        return lits

    def blocking_clause(self, program: Sequence[int]) -> z3.BoolRef:
        """Excludes exactly ``program``."""
        lits = [z3.Not(v) for v in self.program_literals(program)]
        return z3.Or(lits) if lits else z3.BoolVal(False, self.ctx)
