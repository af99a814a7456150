"""StableHLO text parsed by the MLIR that ships with jaxlib: an exact parser and verifier, in place of lexing.

``parse_mlir`` gives the parsed ``ir.Module`` with the context that owns it (kept alive beside it); a
malformed module is one ``P2Error`` naming ``where:line:col``. Positions in messages come from each op's
location: ``"-":L:C`` is line L of the text; a module printed with debug information carries the source
positions of the program that built it instead, and those are shown as they are.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from p2smt.errors import P2Error

NEEDS = "reading StableHLO needs jax/jaxlib >= 0.7: pip install 'p2smt[jax]'"
_MIN_VERSION = (0, 7)


@cache
def bindings() -> tuple[Any, Any]:
    """jaxlib's MLIR ``ir`` module and JAX's context maker, or one P2Error telling how to install them."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # absl/XLA logging to stderr: none for a reader
    try:
        import jaxlib
        from jax.interpreters import mlir as jmlir
        from jaxlib.mlir import ir
    except ImportError:
        raise P2Error(NEEDS) from None
    version = tuple(int(p) for p in jaxlib.__version__.split(".")[:2] if p.isdigit())
    if version < _MIN_VERSION:
        raise P2Error(f"{NEEDS} (jaxlib {jaxlib.__version__} is installed)")
    return ir, jmlir.make_ir_context


@dataclass(frozen=True)
class MlirModule:
    """A parsed module and the MLIR context it lives in (the module is valid only while the context is);
    ``lines``: the text line of each op whose location is a debug one (``text_lines``)."""

    context: Any
    module: Any
    where: str
    lines: dict[Any, int] = field(default_factory=dict, compare=False, repr=False)

    def line(self, op: Any) -> int:
        """The op's line in the text (0: not known)."""
        return line_of(op.location) or self.lines.get(op, 0)

    def at(self, op: Any) -> str:
        """``where:line`` of an op (``where (from file:line:col)`` where its line in the text is not known)."""
        line = self.line(op)
        return f"{self.where}:{line}" if line else position(self.where, op.location)


def ops_of(block: Any) -> list[Any]:
    """A block's ops (as ``ir.Operation``)."""
    return [op.operation for op in block.operations]


def region_ops(op: Any) -> list[Any]:
    """The ops of every block of an op's regions, in order."""
    return [o for region in op.regions for block in region.blocks for o in ops_of(block)]


def nested(ops: list[Any]) -> Iterator[Any]:
    """Every op of ``ops`` and of their regions, at any depth, in the order of the text."""
    for op in ops:
        yield op
        yield from nested(region_ops(op))


def text_lines(ir: Any, context: Any, module: Any, text: str) -> dict[Any, int]:
    """The text line of each op of a module printed with debug information (its locations name the program
    that built it): the module printed again without them is parsed, its ops' lines shifted by the lines
    before ``module`` in the text (location aliases), and kept only where the text's line names the op."""
    ours = list(nested(ops_of(module.body)))
    if all(line_of(op.location) or str(op.location) == "loc(unknown)" for op in ours):
        return {}
    twin = ir.Module.parse(module.operation.get_asm(enable_debug_info=False), context=context)
    source = text.splitlines()
    offset = next((i for i, ln in enumerate(source) if ln.lstrip().startswith("module")), 0)
    out = {}
    for op, copy in zip(ours, nested(ops_of(twin.body)), strict=False):
        line = line_of(copy.location) + offset
        if op.name == copy.name and 0 < line <= len(source) and op.name.rsplit(".", 1)[-1] in source[line - 1]:
            out[op] = line
    return out


def line_of(location: Any) -> int:
    """The text line of a location (``loc("-":12:5)``); 0 when it names a position elsewhere (debug info)."""
    text = str(location)
    at = text.find('"-":')
    if at < 0:
        return 0
    digits = text[at + 4:].split(":", 1)[0]
    return int(digits) if digits.isdigit() else 0


def position(where: str, location: Any) -> str:
    """``where:line`` for a location in the text, else ``where (from file:line:col)``, the first source position
    a debug location names, or ``where`` alone."""
    line = line_of(location)
    if line:
        return f"{where}:{line}"
    text = str(location)
    at = text.find('":')
    while at >= 0 and not text[at + 2:at + 3].isdigit():
        at = text.find('":', at + 2)
    if at < 0:
        return where
    spot = text[at + 2:]
    spot = spot[:next((i for i, ch in enumerate(spot) if not (ch.isdigit() or ch == ":")), len(spot))]
    return f"{where} (from {text[text.rfind(chr(34), 0, at) + 1:at]}:{spot.rstrip(':')})"


def _cut_short(text: str, spot: str) -> str:
    """A hint when the parser stopped on the text's last line: the file more likely ends too early (a copy cut
    short) than holds a wrong token there."""
    line = spot.split(":", 1)[0]
    lines = text.rstrip().count("\n") + 1
    return f" (at the last line of {lines}: is the module cut short?)" if line.isdigit() and int(line) >= lines else ""


def parse_mlir(text: str, where: str = "<stablehlo>") -> MlirModule:
    """Parse (and verify) a StableHLO module with jaxlib's MLIR; a malformed one is one P2Error
    ``where:line:col: message``."""
    ir, make_context = bindings()
    context = make_context()
    try:
        module = ir.Module.parse(text, context=context)
    except ir.MLIRError as err:
        diagnostics = list(getattr(err, "error_diagnostics", ()) or ())
        if not diagnostics:
            raise P2Error(f"{where}: {' '.join(str(err).split())}") from None
        first = diagnostics[0]
        text_at = str(first.location)
        at = text_at.find('"-":')
        spot = text_at[at + 4:].rstrip(")") if at >= 0 else ""
        head = f"{where}:{spot}" if spot else position(where, first.location)  # "-":L:C is the text's
        raise P2Error(f"{head}: {' '.join(first.message.split())}{_cut_short(text, spot)}") from None
    return MlirModule(context, module, where, text_lines(ir, context, module, text))
