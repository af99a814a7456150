"""StableHLO text parsed by the MLIR that ships with jaxlib: an exact parser and verifier, in place of lexing.

``parse_mlir`` gives the parsed ``ir.Module`` with the context that owns it (kept alive beside it); a
malformed module is one ``P2Error`` naming ``where:line:col``. Positions in messages come from each op's
location: ``"-":L:C`` is line L of the text; a module printed with debug information carries the source
positions of the program that built it instead, and those are shown as they are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from p2smt.errors import P2Error

NEEDS = "reading StableHLO needs jax/jaxlib >= 0.7: pip install 'p2smt[jax]'"
_MIN_VERSION = (0, 7)


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
    """A parsed module and the MLIR context it lives in (the module is valid only while the context is)."""

    context: Any
    module: Any
    where: str

    def at(self, op: Any) -> str:
        """``where:line`` of an op (``where (source position)`` in a module printed with debug information)."""
        return position(self.where, op.location)


def line_of(location: Any) -> int:
    """The text line of a location (``loc("-":12:5)``); 0 when it names a position elsewhere (debug info)."""
    text = str(location)
    at = text.find('"-":')
    if at < 0:
        return 0
    digits = text[at + 4:].split(":", 1)[0]
    return int(digits) if digits.isdigit() else 0


def position(where: str, location: Any) -> str:
    """``where:line`` for a location in the text, else ``where`` with the location as printed."""
    line = line_of(location)
    if line:
        return f"{where}:{line}"
    text = str(location)
    inner = text[len("loc("):-1] if text.startswith("loc(") and text.endswith(")") else text
    return where if inner in ("unknown", "") else f"{where} (at {inner})"


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
        head = f"{where}:{spot}" if spot else position(where, first.location)
        raise P2Error(f"{head}: {' '.join(first.message.split())}") from None
    return MlirModule(context, module, where)
