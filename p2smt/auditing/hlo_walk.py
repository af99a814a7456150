"""Run a compiled (SPMD-partitioned) HLO module on layouts: the step-level check on what XLA will run.

After partitioning, the entry computation is per-device code, so every mesh axis is manual in ``walk.py``'s
sense: each parameter's layout comes from its ``sharding={…}`` (tile assignments matched to mesh axes),
fusions, calls, loops and branches are run in line, and each op moves layouts by the same rules as StableHLO
(``rules.py``, ``comm.py``; HLO opcodes mapped onto them). The text declares no output shardings, so outputs
are judged only against what the caller gives (``--expect``, or the function's declared shardings); the
findings on the way are reported regardless. What the walk cannot follow makes the output unverified.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from p2smt.auditing import comm
from p2smt.auditing.index import Affine, evaluate, partition_id
from p2smt.auditing.layout import AxisState, Finding, Layout
from p2smt.auditing.meshaxes import Mesh, axes_of_groups
from p2smt.auditing.rules import RULES, Op, Outcome, apply, generic, reshape, transpose
from p2smt.auditing.walk import Expected, OutputStatus, StepOutput, StepWalk, either, judge, settle
from p2smt.errors import P2Error
from p2smt.frontend.hlo_ir import (
    HloText,
    Instruction,
    leaves,
    major_to_minor,
    parse_hlo,
    parse_sharding,
    root,
    row_major,
)
from p2smt.model.collectives import Collective
from p2smt.model.replica_groups import global_groups

__all__ = ["NO_DECLARED", "layout_of_sharding", "walk_hlo"]

NO_DECLARED = "compiled HLO text does not declare output shardings; give --expect"
_OPAQUE = ("collective-permute", "all-to-all", "ragged-all-to-all", "collective-broadcast", "send", "recv",
           "infeed")
_LOCAL_CUSTOM_CALLS = ("X64Combine", "X64SplitLow", "X64SplitHigh", "lapack_", "annotate_device_placement")
_ZERO_FORMS = frozenset({"constant", "broadcast", "convert", "reshape", "bitcast", "copy"})
_IMPURE = frozenset({"parameter", "partition-id", "replica-id", "rng", "rng-bit-generator",
                     "rng-get-and-update-state", "custom-call", "infeed", "recv", "recv-done"})
_PASS = frozenset({"opt-barrier", "optimization-barrier", "async-update", "async-done", "all-reduce-done",
                   "all-gather-done", "reduce-scatter-done"})
_HLO_NAMES = {"broadcast": "broadcast_in_dim", "dot": "dot_general"}
MAX_RUN = 1_000_000  # instructions walked once fusions and calls are expanded


@dataclass(frozen=True)
class _Val:
    """One instruction's value: a layout, or a tuple of values; the integer it is as an affine function of the
    device's mesh coordinates (scalars only), and whether it is computed from constants alone."""

    value: Layout | tuple
    affine: Affine | None = None
    constant: bool = False


def _leaves_of(value) -> list[Layout]:
    return [value] if isinstance(value, Layout) else [x for v in value for x in _leaves_of(v)]


def _shaped(value, flat: list[Layout]):
    """``flat`` in the nesting of ``value``."""
    if isinstance(value, Layout):
        return flat.pop(0)
    return tuple(_shaped(v, flat) for v in value)


def _every(lay: Layout, axes: Sequence[str], why: str) -> Layout:
    for a in axes:
        lay = lay.lost(a, why)
    return lay


def layout_of_sharding(text: str | None, rank: int, mesh: Mesh) -> Layout:
    """A parameter's per-device layout from its HLO sharding: each tiled dimension sharded over the mesh axes
    (major first) whose row-major coordinates are its tile index on every device, the rest replicated. A
    sharding no union of mesh axes forms leaves every axis unknown."""
    lay = Layout(((),) * rank)
    if text is None:
        return _every(lay, mesh.names, "a parameter without a sharding")
    ts = parse_sharding(text, rank)
    if ts is not None and ts.replicated:
        return lay
    why = f"a parameter sharded {text}, which no union of mesh axes forms"
    if ts is None or ts.devices.size != mesh.num_devices or \
            sorted(ts.devices.reshape(-1).tolist()) != sorted(mesh.device_ids):
        return _every(lay, mesh.names, why)
    sizes = dict(mesh.axes)
    coords = mesh.coordinates()
    tiles = {int(d): idx for idx, d in zip(itertools.product(*map(range, ts.devices.shape)), ts.devices.reshape(-1))}
    dims: list[tuple[str, ...]] = []
    for d in range(rank):
        n = ts.devices.shape[d]
        found: tuple[str, ...] | None = () if n == 1 else None
        names = [a for a in mesh.names if sizes[a] > 1]
        for k in range(1, len(names) + 1):
            for chosen in itertools.permutations(names, k):
                if found is not None or math.prod(sizes[a] for a in chosen) != n:
                    continue
                if all(tiles[dev][d] == _row_major_index(coords[dev], chosen, sizes) for dev in tiles):
                    found = chosen
        if found is None:
            return _every(lay, mesh.names, why)
        dims.append(found)
    return Layout(tuple(dims))


def _row_major_index(coords: Mapping[str, int], axes: Sequence[str], sizes: Mapping[str, int]) -> int:
    index = 0
    for a in axes:
        index = index * sizes[a] + coords[a]
    return index


class _HloWalker:
    def __init__(self, module: HloText, where: str, mesh: Mesh):
        self.m, self.where, self.mesh = module, where, mesh
        self.axes = mesh.names
        self.findings: list[Finding] = []
        self.budget = MAX_RUN
        ordered = mesh.device_ids == tuple(range(mesh.num_devices)) and module.space.replicas == 1
        self.partition = partition_id(mesh.axes) if ordered else None

    # -- computations -------------------------------------------------------------------------------------------
    def run(self, comp, args: Sequence[_Val], stack: tuple[str, ...] = ()) -> _Val:
        if comp.name in stack or len(stack) > 64:
            raise P2Error(f"{self.where}: %{comp.name} calls itself, or calls nest more than 64 deep")
        env: dict[str, _Val] = {}
        for ins in comp.body:
            self.budget -= 1
            if self.budget < 0:
                raise P2Error(f"{self.where}: more than {MAX_RUN:,} instructions once fusions and calls are expanded")
            if ins.op == "parameter":
                k = int(ins.args) if ins.args.strip().isdigit() else -1
                env[ins.name] = self._parameter(ins) if comp.entry else args[k] if 0 <= k < len(args) else \
                    _Val(self._fresh(ins, f"parameter {ins.args} of %{comp.name}, not passed"))
                continue
            env[ins.name] = self._step(ins, [env[o] for o in ins.operands], (*stack, comp.name))
        last = root(comp)
        return env[last.name] if last is not None else _Val(())

    def _parameter(self, ins: Instruction) -> _Val:
        shapes = leaves(ins.shape)
        text = self.m.sharding(ins)
        if len(shapes) != 1:
            return _Val(tuple(_every(Layout(((),) * len(d)), self.axes, f"a tuple parameter {ins.name}")
                              for _, d in shapes))
        return _Val(layout_of_sharding(text, len(shapes[0][1]), self.mesh))

    def _fresh(self, ins: Instruction, why: str) -> Layout | tuple:
        """A value of ``ins``'s shape, unknown along every axis."""
        lays = [_every(Layout(((),) * len(d)), self.axes, why) for _, d in leaves(ins.shape)]
        return lays[0] if len(lays) == 1 and not ins.shape.lstrip().startswith("(") else tuple(lays)

    def _where(self, ins: Instruction) -> str:
        return f"line {ins.line} (%{ins.name})"

    def _op(self, ins: Instruction, name: str, attrs: dict | None = None) -> Op:
        return Op(name, self._where(ins), self.axes, tuple(tuple(d) for sh in ins.operand_shapes
                                                           for _, d in leaves(sh)[:1]),
                  tuple(d for _, d in leaves(ins.shape)), attrs or {})

    # -- one instruction ----------------------------------------------------------------------------------------
    def _step(self, ins: Instruction, ins_vals: list[_Val], stack: tuple[str, ...]) -> _Val:
        op = ins.op
        lays = [v.value for v in ins_vals]
        constant = op not in _IMPURE and all(v.constant for v in ins_vals) and not self._communicates(op)
        if op in ("fusion", "call", "async-start"):
            comp = self.m.called(ins, "to_apply" if op == "call" else "calls")
            if comp is None:
                return _Val(self._fresh(ins, f"{op} at {self._where(ins)} of a computation not in the text"))
            return self.run(comp, ins_vals, stack)
        if op == "tuple":
            return _Val(tuple(lays), constant=constant)
        if op == "get-tuple-element":
            index = self.m.ints(ins, "index")
            whole = ins_vals[0]
            if isinstance(whole.value, tuple) and index and index[0] < len(whole.value):
                part = whole.value[index[0]]
                return _Val(part, constant=whole.constant)
            return _Val(self._fresh(ins, f"get-tuple-element at {self._where(ins)} of a value not followed"))
        if op in _PASS or op == "add-dependency":
            return ins_vals[0] if ins_vals else _Val(())
        if op == "copy-start":
            return _Val((lays[0], lays[0], Layout(())), constant=constant)
        if op == "copy-done":
            v = lays[0]
            return _Val(v[0] if isinstance(v, tuple) else v, constant=constant)
        if op == "while":
            return _Val(self._loop(ins, ins_vals, stack))
        if op == "conditional":
            return _Val(self._branches(ins, ins_vals, stack))
        if op.removesuffix("-start").removesuffix("-done") in _OPAQUE:
            return _Val(self._fresh(ins, f"{op} at {self._where(ins)} (a collective the audit does not follow)"))
        base = op.removesuffix("-start")
        if base in ("all-reduce", "reduce-scatter", "all-gather"):
            return _Val(self._collective(ins, base, ins_vals))
        if op == "custom-call":
            target = self.m.string(ins, "custom_call_target") or "?"
            if not target.startswith(_LOCAL_CUSTOM_CALLS):
                return _Val(self._fresh(ins, f"custom-call @{target} at {self._where(ins)} (the audit does not "
                                             "follow it)"))
        if any(isinstance(v, tuple) for v in lays):
            return _Val(self._fresh(ins, f"{op} at {self._where(ins)} on a tuple"))
        affine = self._affine(ins, ins_vals)
        out = self._local(ins, ins_vals)
        self.findings += out.findings
        lay = out.results[0] if len(out.results) == 1 and not ins.shape.lstrip().startswith("(") \
            else tuple(out.results)
        if isinstance(lay, Layout):
            if affine is not None:  # an integer that depends on the mesh coordinates its terms name only
                lay = Layout(((),) * len(lay.dims))
                for a, _ in affine.coeffs:
                    lay = lay.varies(a, f"{op} at {self._where(ins)} (the device's position)")
            elif op in _ZERO_FORMS and all(lay.state(a) is AxisState.REPLICATED for a in self.axes) and (
                    self._zero_literal(ins) if op == "constant" else bool(lays) and lays[0].zero):
                lay = Layout(lay.dims, zero=True)
        return _Val(lay, affine, constant)

    def _communicates(self, op: str) -> bool:
        base = op.removesuffix("-start").removesuffix("-done")
        return base in _OPAQUE or base in ("all-reduce", "reduce-scatter", "all-gather")

    def _local(self, ins: Instruction, ins_vals: list[_Val]) -> Outcome:
        """An op without communication, by the rules (HLO opcodes named as StableHLO's)."""
        op, lays = ins.op, [v.value for v in ins_vals]
        where = self._where(ins)
        if op in ("constant", "iota", "after-all") or (op == "replica-id" and self.m.space.replicas == 1):
            return Outcome([Layout(((),) * len(d)) for _, d in leaves(ins.shape)] or [Layout(())])
        if op in ("partition-id", "replica-id", "rng", "rng-bit-generator", "rng-get-and-update-state"):
            return Outcome([_varies(Layout(((),) * len(d)), self.axes, f"{op} at {where} (the device's position)")
                            for _, d in leaves(ins.shape)])
        if op == "bitcast" and not all(row_major(sh) for sh in (ins.shape, *ins.operand_shapes)):
            return self._bitcast(ins, lays)
        name = "stablehlo." + _HLO_NAMES.get(op, "reshape" if op == "bitcast" else op.replace("-", "_"))
        if name not in RULES:
            return generic(self._op(ins, name), lays)
        return apply(self._op(ins, name, self._attrs(ins, name, ins_vals)), lays)

    def _bitcast(self, ins: Instruction, lays: list) -> Outcome:
        """A bitcast across layouts: the same bytes read in another order, i.e. a transpose into memory order, a
        reshape of the memory order, and a transpose out of it."""
        src, dst = major_to_minor(ins.operand_shapes[0]), major_to_minor(ins.shape)
        if src is None or dst is None or len(lays) != 1:
            return generic(self._op(ins, "stablehlo.bitcast"), lays, f"bitcast at {self._where(ins)}")
        a, b = leaves(ins.operand_shapes[0])[0][1], leaves(ins.shape)[0][1]
        mem_a, mem_b = tuple(a[d] for d in src), tuple(b[d] for d in dst)
        where = self._where(ins)
        x = transpose(Op("stablehlo.transpose", where, self.axes, (a,), (mem_a,), {"permutation": src}),
                      lays).results[0]
        if mem_a != mem_b:
            x = reshape(Op("stablehlo.reshape", where, self.axes, (mem_a,), (mem_b,)), [x]).results[0]
        back = tuple(dst.index(j) for j in range(len(b)))
        return transpose(Op("stablehlo.transpose", where, self.axes, (mem_b,), (b,), {"permutation": back}), [x])

    def _attrs(self, ins: Instruction, name: str, ins_vals: list[_Val]) -> dict:
        m, short = self.m, name.split(".", 1)[1]
        if short == "broadcast_in_dim":
            return {"broadcast_dimensions": m.ints(ins, "dimensions") or ()}
        if short == "transpose":
            return {"permutation": m.ints(ins, "dimensions") or ()}
        if short == "dot_general":
            return {k: m.ints(ins, f"{k}_dims") or () for k in ("lhs_batch", "rhs_batch")} | {
                "lhs_contract": m.ints(ins, "lhs_contracting_dims") or (),
                "rhs_contract": m.ints(ins, "rhs_contracting_dims") or ()}
        if short == "reduce":
            return {"dimensions": m.ints(ins, "dimensions") or (), "sum": m.adds(m.called(ins, "to_apply")),
                    "zero_init": len(ins_vals) == 2 and isinstance(ins_vals[1].value, Layout)
                    and ins_vals[1].value.zero}
        if short in ("add", "subtract", "select"):
            return {"zeros": tuple(i for i, v in enumerate(ins_vals) if isinstance(v.value, Layout) and v.value.zero)}
        if short == "convert":
            src, dst = (leaves(sh)[0][0] if leaves(sh) else "" for sh in (ins.operand_shapes[0], ins.shape))
            return {"linear": not _integer(dst) or _integer(src)}
        if short == "slice":
            spans = [tuple(int(v) for v in s.split(":")) for s in re.findall(r"\[([-\d:]+)\]", m.attribute(ins, "slice")
                                                                                or "")]
            return {"start": tuple(s[0] for s in spans), "limit": tuple(s[1] for s in spans),
                    "strides": tuple(s[2] if len(s) > 2 else 1 for s in spans)}
        if short == "dynamic_slice":
            return {"slice_sizes": m.ints(ins, "dynamic_slice_sizes") or (), "axis_sizes": dict(self.mesh.axes),
                    "offsets": [v.affine for v in ins_vals[1:]]}
        if short == "concatenate":
            return {"dimension": (m.ints(ins, "dimensions") or (0,))[0]}
        return {}

    def _zero_literal(self, ins: Instruction) -> bool:
        values = re.findall(r"[^\s{},()]+", ins.args)
        try:
            return bool(values) and all(float(v) == 0 for v in values)
        except ValueError:
            return False

    def _affine(self, ins: Instruction, ins_vals: list[_Val]) -> Affine | None:
        """The integer a scalar op gives as an affine function of the mesh coordinates, where it is exact."""
        shapes = leaves(ins.shape)
        if len(shapes) != 1 or shapes[0][1] != () or not (_integer(shapes[0][0]) or shapes[0][0] == "pred"):
            return None
        op, args = ins.op, [v.affine for v in ins_vals]
        if op == "constant":
            try:
                text = ins.args.strip()
                return Affine((), int(text == "true") if text in ("true", "false") else int(text))
            except ValueError:
                return None
        if op == "partition-id":
            return self.partition
        if op == "replica-id" and self.m.space.replicas == 1:
            return Affine(())
        power = args[1].const if len(args) == 2 and args[1] is not None and not args[1].coeffs else None
        if op == "and" and shapes[0][0] != "pred" and power is not None and power >= 0 and (power + 1) & power == 0:
            return evaluate("remainder", [args[0], Affine((), power + 1)], dict(self.mesh.axes))
        if op in ("shift-right-logical", "shift-right-arithmetic", "shift-left") and power is not None \
                and 0 <= power < 31:
            kind = "multiply" if op == "shift-left" else "divide"
            return evaluate(kind, [args[0], Affine((), 1 << power)], dict(self.mesh.axes))
        kind = {"broadcast": "broadcast_in_dim", "bitcast": "reshape"}.get(op, op)
        return evaluate(kind, args, dict(self.mesh.axes), (self.m.attribute(ins, "direction") or "").strip())

    # -- collectives, loops, branches ---------------------------------------------------------------------------
    def _collective(self, ins: Instruction, base: str, ins_vals: list[_Val]):
        found = self.m.collective(ins, self.where)
        o = self._op(ins, f"stablehlo.{base.replace('-', '_')}", {"axis_sizes": dict(self.mesh.axes)})
        try:
            groups = global_groups(found.groups, found.mode, self.m.space)
        except P2Error:
            groups = None
        reduced = axes_of_groups(self.mesh, groups, ordered=base != "all-reduce") \
            if groups is not None and self.m.space.num_devices == self.mesh.num_devices else None
        flat = [x for v in ins_vals for x in _leaves_of(v.value)]
        if base == "all-gather":
            out = comm.all_gather(o, flat, reduced, found.dimension or 0)
        else:
            adds = self.m.adds(self.m.called(ins, "to_apply"))
            if found.collective is Collective.ALL_REDUCE:
                out = comm.all_reduce(o, flat, reduced, adds, bool(ins_vals) and all(v.constant for v in ins_vals))
            elif adds:
                out = comm.reduce_scatter(o, flat, reduced, found.dimension or 0)
            else:
                out = comm.opaque(o, flat)
        self.findings += out.findings
        return out.results[0] if len(out.results) == 1 else tuple(out.results)

    def _loop(self, ins: Instruction, ins_vals: list[_Val], stack: tuple[str, ...]):
        cond, body = self.m.called(ins, "condition"), self.m.called(ins, "body")
        start = ins_vals[0].value if ins_vals else ()
        why = f"while at {self._where(ins)}: differs between iterations"
        if cond is None or body is None or self._talks(cond, set()):
            return self._fresh(ins, f"while at {self._where(ins)} (its condition communicates, or is not in the "
                                    "text)")

        def once(flat: list[Layout]) -> list[Layout]:
            out = self.run(body, [_Val(_shaped(start, list(flat)))], stack).value
            return _leaves_of(out)

        return _shaped(start, settle(once, _leaves_of(start), self.axes, why))

    def _branches(self, ins: Instruction, ins_vals: list[_Val], stack: tuple[str, ...]):
        comps = self.m.branches(ins)
        if comps is None or len(ins_vals) != len(comps) + 1 or not isinstance(ins_vals[0].value, Layout):
            return self._fresh(ins, f"conditional at {self._where(ins)} whose branches are not in the text")
        outs = [self.run(c, [v], stack).value for c, v in zip(comps, ins_vals[1:])]
        shape = outs[0]
        if any(len(_leaves_of(o)) != len(_leaves_of(shape)) for o in outs):
            return self._fresh(ins, f"conditional at {self._where(ins)}: its branches give different shapes")
        return _shaped(shape, either([_leaves_of(o) for o in outs], ins_vals[0].value, self.axes,
                                     f"conditional at {self._where(ins)}"))

    def _talks(self, comp, seen: set[str]) -> bool:
        """Whether a computation communicates, anywhere it calls."""
        seen.add(comp.name)
        for i in comp.body:
            if self._communicates(i.op):
                return True
            for key in ("calls", "to_apply", "body", "condition"):
                c = self.m.called(i, key)
                if c is not None and c.name not in seen and self._talks(c, seen):
                    return True
        return False


def _varies(lay: Layout, axes: Sequence[str], why: str) -> Layout:
    for a in axes:
        lay = lay.varies(a, why)
    return lay


def _integer(element: str) -> bool:
    return bool(re.fullmatch(r"[su]\d+", element))


def walk_hlo(text: str, where: str, mesh: Mesh | None, expect: Mapping[int, Expected] | None = None,
             names: Sequence[str] | None = None, strict: bool = True) -> StepWalk | None:
    """The step-level audit of compiled HLO: its outputs judged against ``expect`` (by output index: ``--expect``,
    or the function's declared shardings; ``strict``: one naming no output of that rank is an error), its
    findings on the way. None when the text is not SPMD-partitioned per-device code (HLO before partitioning)
    or no mesh names its devices' axes."""
    module = parse_hlo(text, where)
    if not module.partitioned or mesh is None or mesh.num_devices != module.space.num_devices:
        return None
    walker = _HloWalker(module, where, mesh)
    try:
        out = walker.run(module.entry, [], ())
    except (IndexError, KeyError, ValueError, ZeroDivisionError) as err:  # a module whose shapes do not agree
        raise P2Error(f"{where}: the step-level walk cannot follow this module ({type(err).__name__}: {err})") \
            from None
    results = list(out.value) if isinstance(out.value, tuple) else [out.value]
    walk = StepWalk()
    expect = dict(expect or {})
    for k, exp in expect.items() if strict else ():
        lays = _leaves_of(results[k]) if 0 <= k < len(results) else []
        if len(lays) != 1 or len(lays[0].dims) != len(exp.dims):
            raise P2Error(f"--expect {k}: the module's entry has {len(results)} output(s)" + (
                f"; output {k} has rank {len(lays[0].dims)}, the spec gives {len(exp.dims)} dimension(s)"
                if len(lays) == 1 else ""))
    for i, value in enumerate(results):
        name = names[i] if names is not None and i < len(names) else f"output {i}"
        lays = _leaves_of(value)
        exp = expect.get(i)
        if len(lays) != 1:
            walk.outputs.append(StepOutput(i, name, exp.describe() if exp else "-", "-", OutputStatus.UNVERIFIED,
                                           ("a tuple output: the audit judges arrays",)))
            continue
        lay = lays[0]
        if exp is None:
            walk.outputs.append(StepOutput(i, name, "-", lay.describe(mesh.names), OutputStatus.UNVERIFIED,
                                           (NO_DECLARED,)))
            continue
        status, reasons, declared, actual, found = judge(i, lay, exp, mesh.names)
        walker.findings += found
        walk.outputs.append(StepOutput(i, name, declared, actual, status, reasons))
    walk.findings = list(dict.fromkeys(walker.findings))  # a loop's body runs more than once
    return walk
