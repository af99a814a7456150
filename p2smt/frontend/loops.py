"""How many times a loop runs, where the module says it: XLA's ``known_trip_count`` (compiled HLO, ``hlo.py``), or JAX's
counted loop (``fori_loop``, ``scan``): a carried integer that starts at a constant, grows by a constant each
iteration, and is compared with a constant by the condition. None where the count is not known."""

from __future__ import annotations

from typing import Any

import numpy as np

from p2smt.frontend.mlir import MlirModule, bindings, ops_of

_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE", "EQ": "EQ"}


def counted(direction: str, start: int, step: int, limit: int, bits: int, signed: bool) -> int | None:
    """Iterations of ``for (i = start; i DIRECTION limit; i += step)`` on ``bits``-wide integers, or None when it
    does not end, or wraps around before it does (then the count is not the arithmetic one)."""
    low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
    if not (low <= start <= high and low <= limit <= high):
        return None
    if direction in ("LT", "LE") and step > 0:
        n = max(0, -(-(limit - start) // step) if direction == "LT" else (limit - start) // step + 1)
    elif direction in ("GT", "GE") and step < 0:
        n = max(0, -(-(start - limit) // -step) if direction == "GT" else (start - limit) // -step + 1)
    elif direction == "NE" and step != 0 and (limit - start) % step == 0 and (limit - start) // step >= 0:
        n = (limit - start) // step
    else:
        return None
    return n if low <= start + n * step <= high else None


def trip_count(mod: MlirModule, op: Any) -> int | None:
    """A ``stablehlo.while``'s iteration count when it is a counted loop (module docstring), else None."""
    ir, _ = bindings()
    cond, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    cond_ops, body_ops = ops_of(cond), ops_of(body)
    if not cond_ops or not body_ops or len(cond_ops[-1].operands) != 1:
        return None
    compare = cond_ops[-1].operands[0].owner
    if not isinstance(compare, ir.Operation | ir.OpView) or compare.operation.name != "stablehlo.compare":
        return None
    compare = compare.operation
    from jaxlib.mlir.dialects import stablehlo

    direction = stablehlo.ComparisonDirectionAttr(compare.attributes["comparison_direction"]).value
    left, right = compare.operands
    if not _argument_of(ir, left, cond):
        left, right, direction = right, left, _SWAPPED[direction]
    limit = _constant(ir, right)
    if not _argument_of(ir, left, cond) or limit is None:
        return None
    k = left.arg_number
    returned = body_ops[-1].operands
    if k >= len(returned) or k >= len(op.operands):
        return None
    add = returned[k].owner
    if not isinstance(add, ir.Operation | ir.OpView) or add.operation.name != "stablehlo.add":
        return None
    a, b = add.operation.operands
    step = _constant(ir, b) if _argument_of(ir, a, body, k) else _constant(ir, a) if _argument_of(ir, b, body, k) \
        else None
    start = _constant(ir, op.operands[k])
    if step is None or start is None:
        return None
    try:
        width = ir.IntegerType(ir.RankedTensorType(left.type).element_type)
    except ValueError:  # not an integer: no count
        return None
    compared = str(compare.attributes["compare_type"]) if "compare_type" in compare.attributes else ""
    if compared and "SIGNED" not in compared:  # FLOAT, TOTALORDER: not an integer count
        return None
    signed = "UNSIGNED" not in compared if compared else not width.is_unsigned
    return counted(direction, start, step, limit, width.width, signed)


def _argument_of(ir: Any, value: Any, block: Any, number: int | None = None) -> bool:
    """Whether ``value`` is an argument of ``block`` (the ``number``-th, if given)."""
    return isinstance(value, ir.BlockArgument) and value.owner == block and \
        (number is None or value.arg_number == number)


def _constant(ir: Any, value: Any) -> int | None:
    """The integer a scalar ``stablehlo.constant`` holds (None: not one)."""
    owner = value.owner
    if not isinstance(owner, ir.Operation | ir.OpView) or owner.operation.name != "stablehlo.constant":
        return None
    try:
        data = np.asarray(ir.DenseIntElementsAttr(owner.operation.attributes["value"]))
    except ValueError:
        return None
    return int(data) if data.ndim == 0 else None
