"""A split reading of an XLA module (for the audit): every collective with its sizes, its chains, the
communication p2smt does not verify, the module's outputs and its Shardy mesh.

The verify reading (``HloProgram``) refuses a module that is not one reduction program; a split reading keeps
every module whose collectives it can trace, and records how they connect: a collective that reads values
computed from earlier collectives, combined from several, mixed with the module's input, or one branch of a
fork starts a chain of its own (``ReadChain.start`` is ``COMPUTED``). Refusals about *reading* (untraced
values, a combiner that is no sum, a collective in a loop or a branch, hidden ones) stay refusals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

from p2smt.errors import P2Error
from p2smt.frontend.hlo_program import Chain, Flow, HloCollective, HloProgram, ReadChain
from p2smt.model.replica_groups import DeviceSpace


def element_bits(element_type: str) -> int:
    """Bits one element of an HLO (``bf16``, ``pred``, ``c64``) or MLIR (``i32``, ``complex<f32>``) type
    takes in a buffer; a boolean takes a byte."""
    name = element_type.strip().lower()
    if name in ("pred", "i1"):
        return 8
    if name.startswith("complex<") and name.endswith(">"):
        return 2 * element_bits(name[len("complex<"):-1])
    if name in ("c64", "c128"):
        return int(name[1:])
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyz_")
    width = digits[:len(digits) - len(digits.lstrip("0123456789"))]
    if not width:
        raise ValueError(f"element type {element_type!r} has no width")
    return int(width)


def nbytes(shape: tuple[int, ...], element_type: str) -> int:
    """Bytes of a dense buffer of ``shape`` (sub-byte types packed)."""
    return -(-prod(shape) * element_bits(element_type) // 8)


@dataclass(frozen=True)
class ReadCollective(HloCollective):
    """A collective step on one buffer: as the verify reading has it, with the shape and element type of the
    operand it reads and the bytes per device of that operand and of its result."""

    shape: tuple[int, ...] = ()
    element_type: str = ""
    bytes: int = 0
    result_bytes: int = 0

    @classmethod
    def of(cls, found: HloCollective, operand: tuple[str, tuple[int, ...]] | None = None,
           result: tuple[str, tuple[int, ...]] | None = None, where: str = "") -> ReadCollective:
        """``found`` with its operand's and result's (element type, shape); none given: sizes unknown (0), as
        the verify reading has them."""
        if operand is None or result is None:
            return cls(found.line, found.op, found.collective, found.groups, found.mode, found.dimension)
        try:
            sizes = nbytes(operand[1], operand[0]), nbytes(result[1], result[0])
        except ValueError as err:
            raise P2Error(f"{where}:{found.line}: {found.op}: {err}") from None
        return cls(found.line, found.op, found.collective, found.groups, found.mode, found.dimension, operand[1],
                   operand[0], *sizes)


@dataclass(frozen=True)
class ModuleMesh:
    """A Shardy mesh the module declares: its axes (name, size) in order and the device at each mesh
    position (row-major; ``range(n)`` when the module lists none)."""

    name: str
    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...]


@dataclass(frozen=True)
class OpaqueCollective:
    """A communication op p2smt does not verify (collective_permute, all_to_all, send, recv, …), where it is and
    how often it runs per run of the module (``ReadChain.runs``)."""

    line: int
    op: str
    runs: int | None = 1


@dataclass(frozen=True)
class ModuleReading:
    """A module read split: ``collectives`` in program order (chain steps are indices into it), ``opaque``
    communication (indices in ``Flow.opaque``), ``outputs`` (one flow per output of the entry function),
    ``mesh`` (the module's one Shardy mesh, None if it declares none or several; ``meshes``: all of them)."""

    name: str
    dialect: str
    space: DeviceSpace
    mesh: ModuleMesh | None
    collectives: tuple[ReadCollective, ...]
    chains: tuple[ReadChain, ...]
    opaque: tuple[OpaqueCollective, ...]
    outputs: tuple[Flow, ...]
    meshes: tuple[ModuleMesh, ...] = ()
    _chain: Chain | None = field(default=None, repr=False, compare=False)
    _checked: tuple[Flow, ...] = field(default=(), repr=False, compare=False)  # the outputs the verify path checks

    @classmethod
    def of(cls, name: str, dialect: str, space: DeviceSpace, meshes: tuple[ModuleMesh, ...], chain: Chain,
           outputs: list[Flow], checked: list[Flow] | None = None) -> ModuleReading:
        """The reading of what ``chain`` holds, ``outputs`` one flow per output (``checked``: the flows the
        verify reading checks, if not those). Read to verify, its refusals are raised first, in its order."""
        checked = tuple(outputs if checked is None else checked)
        if not chain.split:
            chain.program(checked)
        one = meshes[0] if len({(m.axes, m.device_ids) for m in meshes}) == 1 else None
        return cls(name, dialect, space, one, tuple(chain.collectives), chain.read(outputs),
                   tuple(OpaqueCollective(line, op, runs) for (line, op), runs in zip(chain.opaque, chain.opaque_runs,
                                                                                        strict=True)),
                   tuple(outputs), meshes, chain,
                   checked)

    def program(self) -> HloProgram:
        """The verify reading: the one reduction program, or the refusal the verify path gives (a module read
        split through loops or branches is read again to verify: the split reading's chains are not its)."""
        if self._chain.reread is not None:
            return self._chain.reread()
        return HloProgram(self.name, self.dialect, self.space, self._chain.program(self._checked),
                          len(self._chain.chains))
