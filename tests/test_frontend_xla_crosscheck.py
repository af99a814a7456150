"""p2smt's HLO text reader against XLA's own parser, on every .hlo fixture and attack file.

XLA's parser (jaxlib's ``hlo_module_from_text``) runs in a child process: it is a private entry point and aborts
the process on some malformed input. Per computation, both must see the same collectives (name and op), the
same operand edges (which instruction each collective reads) and the same replica groups; a module p2smt's
reader takes apart must be one XLA parses. A module p2smt refuses is no disagreement (it never proves it)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from p2smt.errors import P2Error
from p2smt.frontend.hlo import _computations, _hlo_attribute, _lexed, communicates
from p2smt.model.replica_groups import parse_groups_text

pytest.importorskip("jaxlib")
HLO = Path(__file__).parent / "data" / "hlo"
FILES = sorted(HLO.rglob("*.hlo"))

CHILD = r"""
import json, sys
sys.modules.setdefault("jax", None)  # XLA's parser only: no JAX runtime, no devices
try:
    from jaxlib import _hlo
except ImportError:
    sys.exit(3)
module = _hlo.hlo_module_from_text(open(sys.argv[1]).read())
options = _hlo.HloPrintOptions()
options.print_backend_config = False
options.print_metadata = False
printed, comp = {}, None
for line in module.to_string(options).splitlines():
    if line.rstrip().endswith("{") and " = " not in line.split("(")[0]:
        comp = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
    elif " = " in line and comp is not None:
        printed[(comp, line.strip().removeprefix("ROOT ").split(" = ", 1)[0].lstrip("%"))] = line
for c in module.computations():  # an async wrapper is printed as its start (``all-reduce-start``)
    for i in c.instructions():
        if i.opcode.name == "kAsyncStart":
            root = i.async_wrapped_root()
            wrapped = next(w.name for w in module.computations() if any(x.name == root.name for x in w.instructions()))
            printed.setdefault((wrapped, root.name), printed.get((c.name, i.name), ""))
out = {}
for c in module.computations():
    out[c.name] = [[i.name, i.opcode.name, [o.name for o in i.operands()], printed.get((c.name, i.name), "")]
                   for i in c.instructions()]
print(json.dumps(out))
"""

COLLECTIVES = {"kAllReduce", "kAllReduceStart", "kReduceScatter", "kAllGather", "kAllGatherStart",
               "kCollectivePermute", "kCollectivePermuteStart", "kAllToAll", "kRaggedAllToAll",
               "kCollectiveBroadcast", "kSend", "kRecv"}
"""XLA's opcodes that communicate (their -done halves only wait)."""


def _kebab(opcode: str) -> str:
    """``kAllReduceStart`` -> ``all-reduce-start``."""
    return "".join(f"-{c.lower()}" if c.isupper() else c for c in opcode[1:]).lstrip("-")


def _iota(dims: str, perm: str | None) -> np.ndarray:
    """``[dims]T(perm)`` flattened."""
    sizes = [int(d) for d in dims.split(",")]
    ids = np.arange(math.prod(sizes)).reshape(sizes)
    return (ids.transpose([int(p) for p in perm.split(",")]) if perm else ids).reshape(-1)


def _between(text: str, left: str, right: str) -> str:
    return text.split(left, 1)[1].split(right, 1)[0]


def _xla_groups(line: str) -> tuple:
    """The replica groups XLA prints for an instruction (its first ``, replica_groups=``), expanded here
    independently of p2smt's reader: ``{{0,1},{2,3}}``, ``[G,S]<=[dims]T(perm)`` or ``mesh[…] {axes}``."""
    if ", replica_groups=" not in line:
        return ()
    value = line.split(", replica_groups=", 1)[1]
    if value.startswith("{"):
        end = next(i for i in range(len(value)) if value[:i + 1].count("{") == value[:i + 1].count("}"))
        rows = json.loads(value[:end + 1].replace("{", "[").replace("}", "]"))
    elif value.startswith("mesh["):
        axes = [(a.split("=")[0].strip("' "), int(a.split("=")[1])) for a in _between(value, "mesh[", "]").split(",")]
        head = value.split("{", 1)[0]
        if "device_ids=(" in head:
            ids = _between(head, "device_ids=(", ")") + ")"
            ids = _iota(_between(ids, "[", "]"), _between(ids, "T(", ")") if "T(" in ids else None) \
                if ids.startswith("[") else np.array([int(v) for v in ids.rstrip(")").split(",")])
        else:
            ids = np.arange(math.prod(size for _, size in axes))
        picked = [a.strip("' ") for a in _between(value, "{", "}").split(",")]
        names = [n for n, _ in axes]
        keep = [names.index(p) for p in picked]
        order = [i for i in range(len(names)) if i not in keep] + keep
        rows = ids.reshape([s for _, s in axes]).transpose(order).reshape(-1, math.prod(axes[i][1] for i in keep))
    else:
        shape, rest = value[1:].split("]<=[", 1)
        dims, rest = rest.split("]", 1)
        perm = rest[2:rest.index(")")] if rest.startswith("T(") else None
        rows = _iota(dims, perm).reshape([int(v) for v in shape.split(",")])
    return tuple(tuple(int(v) for v in row) for row in rows)


def _by_position(instructions: list[tuple], communicates) -> tuple[int, list[tuple]]:
    """A computation's size and its collectives as (position, op, operands' positions, groups): names aside,
    which XLA makes unique across the module (``%a`` becomes ``%a.1``)."""
    at = {ins[0]: k for k, ins in enumerate(instructions)}
    return len(instructions), [(k, op, tuple(at[o] for o in operands), groups)
                               for k, (_, op, operands, groups) in enumerate(instructions) if communicates(op)]


def xla_view(path: Path) -> dict | None:
    """What XLA's parser sees (None: it refuses the module, or aborts)."""
    done = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode != 3, "this jaxlib has no jaxlib._hlo.hlo_module_from_text: the cross-check needs a new home"
    if done.returncode != 0:
        return None
    return {comp: _by_position([(name, _kebab(op) if op in COLLECTIVES else op, operands,
                                 _xla_groups(line) if op in COLLECTIVES else ())
                                for name, op, operands, line in instructions], lambda op: not op.startswith("k"))
            for comp, instructions in json.loads(done.stdout).items()}


def p2smt_view(path: Path) -> dict | None:
    """What p2smt's reader sees (None: it refuses the module's text)."""
    where = path.name
    try:
        comps = _computations(_lexed(path.read_text(), where), where, split=True)
        return {comp.name: _by_position([(i.name, i.op, i.operands, parse_groups_text(g) if (
            g := _hlo_attribute(i.attrs, "replica_groups")) else ()) for i in comp.body],
            communicates) for comp in comps}
    except P2Error:
        return None


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(HLO)))
def test_hlo_reader_sees_what_xla_sees(path):
    ours = p2smt_view(path)
    if ours is None:
        return  # refused: p2smt reads nothing of it, so it proves nothing of it
    theirs = xla_view(path)
    assert theirs is not None, f"{path.name}: p2smt reads a module XLA's parser refuses"
    assert ours == theirs


def test_the_reader_refuses_only_the_text_it_cannot_read():
    """Every other file is compared above: an operand written as an instruction, operands past the line and a
    use before its definition (which XLA refuses too) are refused by p2smt's reader."""
    assert {p.name for p in FILES if p2smt_view(p) is None} == {"nested-operand.hlo", "operands-on-next-line.hlo",
                                                                "use-before-definition.hlo"}
