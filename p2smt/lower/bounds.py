"""Up-front bounds of ``p2smt run``: the worker's peak memory and least wall time estimated from the size
(backend, devices, length, steps), so that a run past ``--memory`` or ``--run-timeout`` is refused in one line
before any worker starts, instead of being killed by the OS or the timeout after minutes.

The figures are fitted to peaks measured on a 2-core, 24 GiB machine (docs/usage.md, "How large a run
fits"): the memory estimate is an upper end (the measured peaks lie below it), the time estimate a lower end
(a run is refused for time only when even that exceeds the timeout).
"""

from __future__ import annotations

from dataclasses import dataclass

from p2smt.errors import P2Error
from p2smt.smt.memory import GIB, MIB, MemoryCap, gib, machine_bytes

KIB = 1 << 10
BASE_BYTES = {"jax": GIB // 4, "torch": GIB // 4}
"""The worker with its backend imported and nothing run: Python, jaxlib or torch (measured 0.2 GB both)."""
JAX_DEVICE_BYTES = 256 * KIB
"""Each JAX host device's own share (measured: 0.22 GB at 16 devices, 0.43 GB at 1,024, little data)."""
JAX_ELEMENT_BYTES = 100
"""Per element of all devices' data (devices × length): the inputs, the sharded state, each step's buffers
and the results, int64 (measured 64-85 B, 1 to 4 steps: 1.33 GB at 16 devices and length 2^20, 1.65 GB with 4
steps, 5.1 GB at 1,024 and 65,536)."""
TORCH_RANK_BYTES = 5 * MIB
"""Each gloo rank's own pages after the fork (measured 5.8 MB a rank at 64 ranks)."""
TORCH_PAIR_BYTES = 24 * KIB
"""Per rank and peer: each rank's cost grows with the ranks it talks to (9.8 MB a rank at 256 ranks, past
13.8 MB at 512, where the measurement was stopped at 7 GB)."""
TORCH_STEP_BYTES = 1 * MIB
"""Per rank and step: the step's communicators (measured 10.8 MB a rank at 256 ranks with 4 steps)."""
TORCH_ELEMENT_BYTES = 48
"""Per element of a rank's data and per step and one more: its input, buffers, result and expected values,
int64 (measured 26 B with 1 step, 80 with 2, 95 with 4 at 16 ranks and length 2^20; 200 with 4 at 64 and 16,384)."""
TORCH_PAIR_SECONDS = 6e-4
"""Least seconds per device² of a torch run, the group setup of every rank with every other, for one step;
each further step adds half of it (measured 0.79 × 1e-3 at 256 ranks with 1 step, 3.3 × 1e-3 with 4 steps,
0.78 at 128 and 1 step; the fit is below all)."""
AVAILABLE_SHARE = 0.8
"""By default a run may use at most this share of the memory available now (``MemAvailable``), and at most
``--memory``'s default (half the machine's RAM)."""
MOST_CHUNK = 256
"""Elements per chunk of the default length (``--length`` defaults to chunks × this, or less: below)."""
DEFAULT_ELEMENTS = 1 << 24
"""The default length keeps all devices' data (devices × length) at most this (or one element a chunk): a
check of the sums needs no more, and the 1,024-device superpod runs with 16 elements a chunk in about 2 GB."""


@dataclass(frozen=True)
class RunSize:
    """What a run's cost depends on: the backend, the devices, the chunks of a device's data (the reduction
    group's size; a length is a multiple of it) and the plan's steps."""

    backend: str
    devices: int
    chunks: int
    steps: int = 1

    def bytes(self, length: int) -> int:
        """Peak bytes of the run's worker processes at ``length`` elements a device (an upper end)."""
        n = self.devices
        if self.backend == "jax":
            return BASE_BYTES["jax"] + JAX_DEVICE_BYTES * n + JAX_ELEMENT_BYTES * n * length
        per_rank = (TORCH_RANK_BYTES + TORCH_PAIR_BYTES * n + TORCH_STEP_BYTES * self.steps
                    + TORCH_ELEMENT_BYTES * (1 + self.steps) * length)
        return BASE_BYTES["torch"] + n * per_rank

    def least_seconds(self) -> float:
        """A lower end of the run's wall time (torch: its ranks' setup; JAX's time follows its memory: 0)."""
        if self.backend != "torch":
            return 0.0
        return TORCH_PAIR_SECONDS * self.devices * self.devices * (1 + self.steps) / 2


def available_bytes() -> int:
    """The memory available now (``MemAvailable`` of /proc/meminfo), or the machine's RAM when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * KIB
    except (OSError, ValueError, IndexError):
        pass
    return machine_bytes()


@dataclass(frozen=True)
class RunBudget:
    """What one run may use: ``nbytes`` of memory (``source`` says where the figure comes from) and ``seconds``;
    ``planned``: the fixed figure the default length is chosen from (``--memory`` or its default), so that the
    default does not depend on the machine's load at the time (only the refusal does)."""

    nbytes: int
    source: str
    seconds: float
    planned: int = 0

    @classmethod
    def of(cls, memory_gib: float | None, seconds: float) -> RunBudget:
        """``--memory`` GiB as given (checked as synth's is), else the lesser of its default and
        ``AVAILABLE_SHARE`` of the memory available now."""
        if memory_gib is not None:
            given = MemoryCap(memory_gib).bytes
            return cls(given, f"--memory {memory_gib:g} GiB", seconds, given)
        half = MemoryCap.default().bytes
        now = int(available_bytes() * AVAILABLE_SHARE)
        if now < half:
            return cls(now, f"{gib(now)}, {AVAILABLE_SHARE:.0%} of the memory available now (--memory sets it)",
                       seconds, half)
        return cls(half, f"{gib(half)}, half the machine's RAM (--memory sets it)", seconds, half)

    def longest(self, size: RunSize, nbytes: int | None = None) -> int:
        """The longest length (a multiple of the chunks) whose estimate fits ``nbytes`` (default the budget), 0
        if none does."""
        nbytes = self.nbytes if nbytes is None else nbytes
        lo, hi = 0, (1 << 40) // max(1, size.chunks)  # chunk sizes: lo fits (or is 0), hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if size.bytes(mid * size.chunks) <= nbytes else (lo, mid)
        return lo * size.chunks

    def default_length(self, size: RunSize) -> int:
        """``--length``'s default: ``MOST_CHUNK`` elements a chunk, fewer past ``DEFAULT_ELEMENTS`` or the planned
        figure (at least 1): the same on a loaded machine as on an idle one."""
        k = size.chunks
        most = DEFAULT_ELEMENTS // size.devices // k * k
        return max(k, min(k * MOST_CHUNK, most, self.longest(size, self.planned or self.nbytes)))

    def check(self, size: RunSize, length: int) -> None:
        """Refuses (P2Error, one line) a run whose estimate exceeds the memory or whose least time exceeds the
        timeout, naming both figures and what fits instead."""
        k = size.chunks
        said = f"{size.backend} on {size.devices:,} devices, length {length:,}"
        need = size.bytes(length)
        if need > self.nbytes:
            fits = self.longest(size)
            if fits:
                instead = f"a --length of at most {fits:,}, fewer devices"
            else:
                shortest = "" if length == k else f" (even --length {k:,}, one element a chunk, needs " \
                                                  f"{gib(size.bytes(k))})"
                instead = f"fewer devices{shortest}"
            raise P2Error(f"{said}: the run needs about {gib(need)} by its estimate, more than {self.source}; "
                          f"use {instead} or a larger --memory if the machine has it")
        least = size.least_seconds()
        if least > self.seconds:
            raise P2Error(f"{said}: the run takes at least about {least:,.3g} s by its estimate, more than "
                          f"--run-timeout {self.seconds:g} s; use fewer devices or a larger --run-timeout")
