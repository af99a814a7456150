"""Run a StableHLO module's shard_map bodies on layouts (``layout.py``): the step-level half of the audit.

The module is walked with jaxlib's MLIR bindings from ``@main``. Values outside ``sdy.manual_computation`` are
the global values of the program as written (XLA's partitioner keeps their meaning; the collectives it adds
are only in compiled HLO, which ``walk`` reports). Inside, each body argument gets its layout from
``in_shardings``, each op moves layouts by ``rules.py`` and ``comm.py``, and each result is judged against
``out_shardings`` (or the user's ``expect``). What the walk cannot follow is said, never assumed.
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from p2smt.auditing import comm
from p2smt.auditing.index import Affine, evaluate, partition_id
from p2smt.auditing.layout import AxisState, Finding, FindingKind, Layout
from p2smt.auditing.meshaxes import Mesh, axes_of_groups
from p2smt.auditing.rules import Op, Outcome, apply
from p2smt.errors import P2Error

__all__ = ["Expected", "OutputStatus", "StepOutput", "StepWalk", "either", "judge", "settle", "walk_module"]

_COLLECTIVES = {"stablehlo.all_reduce", "stablehlo.reduce_scatter", "stablehlo.all_gather"}
_OPAQUE = {"stablehlo.all_to_all", "stablehlo.collective_permute", "stablehlo.collective_broadcast",
           "stablehlo.send", "stablehlo.recv"}
_LOCAL_CUSTOM_CALLS = ("Sharding", "X64Combine", "X64SplitLow", "X64SplitHigh", "lapack_", "annotate_device_placement")
_PLUMBING = {"func.return", "sdy.manual_computation", "sdy.mesh", "stablehlo.constant", "sdy.sharding_constraint",
             "stablehlo.optimization_barrier", "func.call"}
_PASS_VALUE = ("stablehlo.broadcast_in_dim", "stablehlo.convert", "stablehlo.reshape")  # one operand each
_ZERO_FORMS = ("stablehlo.constant", *_PASS_VALUE)
MAX_OPS = 2_000_000  # ops walked once calls are expanded: a bound on time for call trees that multiply


class OutputStatus(str, Enum):
    """An output's step-level verdict."""

    OK = "ok"
    FINDING = "finding"
    UNVERIFIED = "unverified"


@dataclass(frozen=True)
class Expected:
    """What an output must be: per dimension the mesh axes sharding it, and the axes it stays a partial sum
    over (``unreduced``); every other manual axis replicated."""

    dims: tuple[tuple[str, ...], ...]
    unreduced: frozenset[str] = frozenset()

    def describe(self) -> str:
        dims = ", ".join("+".join(d) if d else "-" for d in self.dims)
        return f"[{dims}]" + (f" unreduced {{{', '.join(sorted(self.unreduced))}}}" if self.unreduced else "")


@dataclass(frozen=True)
class StepOutput:
    """One output of the step: its index and name, what it was declared, what it is, and the verdict."""

    index: int
    name: str
    declared: str
    actual: str
    status: OutputStatus
    reasons: tuple[str, ...]

    def to_json(self) -> dict:
        return {"index": self.index, "name": self.name, "declared": self.declared, "actual": self.actual,
                "status": self.status.value, "reasons": list(self.reasons)}


@dataclass
class StepWalk:
    """What the walk found: the outputs' verdicts, the findings, and what it could not see."""

    outputs: list[StepOutput] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)  # ops that may communicate unseen: the text cannot be audited
    declared: list[Expected | None] = field(default_factory=list)  # per output, over every mesh axis, if known
    gspmd: list[str] = field(default_factory=list)  # ops outside shard_map on sharded values


@dataclass(frozen=True)
class _Outer:
    """A value outside shard_map: the manual outputs it is computed from, and whether GSPMD partitions an op on
    its way (it may add collectives there)."""

    deps: frozenset[int] = frozenset()
    gspmd: bool = False
    direct: int | None = None  # the shard_map output it is, passed on unchanged


def _ir():
    try:
        from jax.interpreters import mlir as jmlir
        from jaxlib.mlir import ir
        from jaxlib.mlir.dialects import sdy, stablehlo
    except ImportError:
        raise P2Error("auditing StableHLO needs jax/jaxlib >= 0.7: pip install 'p2smt[jax]'") from None
    return jmlir, ir, sdy, stablehlo


def location(op) -> str:
    """``line:col`` of an op in the text it was parsed from, or its source location (debug info)."""
    text = str(op.location)
    if text.startswith('loc("-":'):
        return text[len('loc("-":'):].rstrip(")")
    inner = text[4:-1] if text.startswith("loc(") else text
    return inner if len(inner) <= 120 else inner[:117] + "..."


def _shape(value) -> tuple[int, ...]:
    t = value.type
    return tuple(t.shape) if hasattr(t, "shape") else ()


class _Walker:
    def __init__(self, module, where: str, expect: Mapping[int, Expected]):
        self.jmlir, self.ir, self.sdy, self.shlo = _ir()
        self.module, self.where, self.expect = module, where, dict(expect)
        self.result = StepWalk()
        self.funcs = {}
        self.meshes: dict[str, Mesh] = {}
        self.sharded_module = False
        self.judged: list[tuple[OutputStatus, tuple[str, ...], str, str]] = []
        self.expected: list[Expected | None] = []  # per shard_map output, where its shard_map is manual on every axis
        self.ops = 0
        self.affine: dict = {}  # integer scalars known as affine functions of the mesh coordinates
        for op in module.body.operations:
            name = op.operation.name
            if name == "func.func":
                self.funcs[self.ir.StringAttr(op.attributes["sym_name"]).value] = op
            elif name == "sdy.mesh":
                self.meshes[self.ir.StringAttr(op.attributes["sym_name"]).value] = self._mesh(op)

    def _mesh(self, op) -> Mesh:
        m = self.sdy.MeshAttr(op.attributes["mesh"])
        axes = tuple((self.sdy.MeshAxisAttr(a).name, self.sdy.MeshAxisAttr(a).size) for a in m.axes)
        ids = tuple(int(i) for i in m.device_ids) if len(m.device_ids) else tuple(range(int(np.prod(
            [s for _, s in axes], dtype=np.int64))))
        return Mesh(axes, ids)

    # -- outside shard_map -------------------------------------------------------------------------------------
    def run(self) -> StepWalk:
        main = self.funcs.get("main")
        if main is None:
            raise P2Error(f"{self.where}: no @main function")
        args = list(main.regions[0].blocks[0].arguments)
        for attr in self._arg_attrs(main):
            if attr is not None and "sdy.sharding" in attr:
                self.sharded_module |= self._is_sharded(attr["sdy.sharding"])
            if attr is not None and "mhlo.sharding" in attr:  # GSPMD's annotation (Shardy off)
                self.sharded_module |= self._gspmd_sharded(attr["mhlo.sharding"])
        outs = self._outer(main, [_Outer() for _ in args])
        names = self._result_names(main, len(outs))
        for i, v in enumerate(outs):
            self.result.outputs.append(self._main_output(i, names[i], v))
        self.result.declared = self._declared_outputs(main, outs)
        self.result.findings = list(dict.fromkeys(self.result.findings))  # a loop's body runs more than once
        return self.result

    def _arg_attrs(self, func):
        if "arg_attrs" not in func.attributes:
            return []
        return [self.ir.DictAttr(a) for a in self.ir.ArrayAttr(func.attributes["arg_attrs"])]

    def _declared_outputs(self, main, outs: list[_Outer]) -> list[Expected | None]:
        """What each output must hold per device over every mesh axis: its shard_map's out_specs where it is a
        shard_map's output unchanged, else its own ``sdy.sharding`` (``jit``'s out_shardings), else unknown."""
        attrs = [self.ir.DictAttr(a) for a in self.ir.ArrayAttr(main.attributes["res_attrs"])] \
            if "res_attrs" in main.attributes else []
        rets = list(list(main.regions[0].blocks[0].operations)[-1].operands)
        declared: list[Expected | None] = []
        for i, v in enumerate(outs):
            if v.direct is not None:
                declared.append(self.expected[v.direct])
            elif i < len(attrs) and "sdy.sharding" in attrs[i] and i < len(rets):
                mesh = self._mesh_of(attrs[i]["sdy.sharding"], main)
                declared.append(self._declared(attrs[i]["sdy.sharding"], mesh.names, len(_shape(rets[i]))))
            else:
                declared.append(None)
        return declared

    def _result_names(self, func, n: int) -> list[str]:
        names = [f"output {i}" for i in range(n)]
        if "res_attrs" in func.attributes:
            for i, a in enumerate(self.ir.ArrayAttr(func.attributes["res_attrs"])):
                d = self.ir.DictAttr(a)
                if "jax.result_info" in d and i < n:
                    names[i] = self.ir.StringAttr(d["jax.result_info"]).value or names[i]
        return names

    def _gspmd_sharded(self, attr) -> bool:
        """Whether an ``mhlo.sharding`` string splits a value (anything but replicated or on one device)."""
        try:
            text = self.ir.StringAttr(attr).value.strip()
        except (TypeError, ValueError):
            return True  # not the string form: assume it splits the value (never assume replication)
        return text not in ("{replicated}", "{manual}") and not text.startswith("{maximal")

    def _is_sharded(self, attr) -> bool:
        ts = self.sdy.TensorShardingAttr(attr)
        return any(len(self.sdy.DimensionShardingAttr(d).axes) for d in ts.dimension_shardings)

    def _tick(self) -> None:
        self.ops += 1
        if self.ops > MAX_OPS:
            raise P2Error(f"{self.where}: more than {MAX_OPS} ops once calls are expanded; too large to audit")

    def _outer(self, func, args: list[_Outer], depth: int = 0) -> list[_Outer]:
        if depth > 64:
            raise P2Error(f"{self.where}: calls nested more than 64 deep")
        block = func.regions[0].blocks[0]
        env = dict(zip(block.arguments, args))
        for op in block.operations:
            self._tick()
            name = op.operation.name
            ins = [env.get(v, _Outer()) for v in op.operands]
            if name == "func.return":
                return ins
            if name == "sdy.manual_computation":
                outs = [_Outer(frozenset({k}), direct=k) for k in self._manual(op)]
            elif name == "func.call":
                callee = self.funcs[self.ir.FlatSymbolRefAttr(op.attributes["callee"]).value]
                outs = self._outer(callee, ins, depth + 1)
            else:
                self._hidden_check(op, name)
                if name in _COLLECTIVES or name in _OPAQUE:
                    self.result.hidden.append(f"{name.split('.', 1)[1]} at {location(op)} outside shard_map")
                if "mhlo.sharding" in op.attributes:
                    self.sharded_module |= self._gspmd_sharded(op.attributes["mhlo.sharding"])
                deps = frozenset().union(*(x.deps for x in ins)) if ins else frozenset()
                local = name in _PLUMBING
                gspmd = any(x.gspmd for x in ins) or (self.sharded_module and not local)
                if self.sharded_module and not local:
                    self.result.gspmd.append(f"{name.split('.', 1)[-1]} at {location(op)}")
                outs = [_Outer(deps, gspmd) for _ in op.results]
            for r, o in zip(op.results, outs):
                env[r] = o
        return []

    def _hidden_check(self, op, name: str) -> None:
        if name == "stablehlo.custom_call":
            target = self.ir.StringAttr(op.attributes["call_target_name"]).value
            if not target.startswith(_LOCAL_CUSTOM_CALLS):
                self.result.hidden.append(f"custom_call @{target} at {location(op)} (its communication, if any, "
                                          "is not in the text: audit the compiled HLO)")

    def _main_output(self, i: int, name: str, v: _Outer) -> StepOutput:
        judged = [self.judged[k] for k in sorted(v.deps)]
        reasons: list[str] = []
        status = OutputStatus.OK
        for st, rs, _, _ in judged:
            reasons += rs
            if st is OutputStatus.FINDING or (st is OutputStatus.UNVERIFIED and status is OutputStatus.OK):
                status = st
        if v.gspmd:
            reasons.append("computed outside shard_map on sharded values: XLA's partitioner adds its collectives "
                           "when compiling (they are in compiled HLO, not in this text)")
        declared = "; ".join(j[2] for j in judged) or "computed outside shard_map"
        actual = "; ".join(j[3] for j in judged) or "-"
        return StepOutput(i, name, declared, actual, status, tuple(reasons))

    # -- inside shard_map ---------------------------------------------------------------------------------------
    def _manual(self, op) -> list[int]:
        a = op.attributes
        ins = self.sdy.TensorShardingPerValueAttr(a["in_shardings"]).shardings
        outs = self.sdy.TensorShardingPerValueAttr(a["out_shardings"]).shardings
        manual = tuple(str(x) for x in self.sdy.ManualAxesAttr(a["manual_axes"])) if "manual_axes" in a else ()
        mesh = self._mesh_of(ins[0] if len(ins) else outs[0] if len(outs) else None, op)
        block = op.regions[0].blocks[0]
        layouts = [self._declared(s, manual, len(_shape(arg))) for s, arg in zip(ins, block.arguments)]
        results = self._body(block, [Layout(e.dims, e.unreduced) for e in layouts], manual, mesh, 0)
        ids = []
        for k, (lay, s) in enumerate(zip(results, outs)):
            index = len(self.judged)
            expected = self.expect.get(index) or self._declared(s, manual, len(lay.dims))
            self.expected.append(expected if {n for n, size in mesh.axes if size > 1} <= set(manual) else None)
            *verdict, found = judge(k, lay, expected, manual)
            self.result.findings += found
            self.judged.append(tuple(verdict))
            ids.append(index)
        return ids

    def _mesh_of(self, sharding, op) -> Mesh:
        if sharding is not None:
            ref = self.sdy.TensorShardingAttr(sharding).mesh_or_ref
            name = str(ref).lstrip("@").strip('"')
            if name in self.meshes:
                return self.meshes[name]
        if len(self.meshes) == 1:
            return next(iter(self.meshes.values()))
        raise P2Error(f"{self.where}:{location(op)}: shard_map on a mesh the module does not declare")

    def _declared(self, sharding, manual: Sequence[str], rank: int) -> Expected:
        ts = self.sdy.TensorShardingAttr(sharding)
        dims = []
        for d in ts.dimension_shardings:
            axes = []
            for ax in self.sdy.DimensionShardingAttr(d).axes:
                ref = self.sdy.AxisRefAttr(ax)
                if ref.sub_axis_info is not None:
                    raise P2Error(f"{self.where}: a sub-axis sharding ({ref}) is not supported by the audit")
                if ref.name in manual:
                    axes.append(ref.name)
            dims.append(tuple(axes))
        dims += [()] * (rank - len(dims))
        unreduced = frozenset(self.sdy.AxisRefAttr(x).name for x in ts.unreduced_axes) & set(manual)
        return Expected(tuple(dims[:rank]), unreduced)

    def _body(self, block, args: list[Layout], manual: tuple[str, ...], mesh: Mesh, depth: int,
              parent: Mapping | None = None) -> list[Layout]:
        """Run a block on layouts; ``parent`` holds the layouts of the values the block may capture (the body
        it stands in: a loop's or a branch's region), None for a function's body."""
        if depth > 64:
            raise P2Error(f"{self.where}: calls and regions nested more than 64 deep")
        env = ChainMap(dict(zip(block.arguments, args)), *([parent] if parent is not None else []))
        for op in block.operations:
            self._tick()
            name = op.operation.name
            ins = [env[v] if v in env else self._outside(v, manual) for v in op.operands]
            if name in ("sdy.return", "func.return", "stablehlo.return"):
                return ins
            self._track_index(op, name, mesh)
            outcome = self._step(op, name, ins, manual, mesh, depth, env)
            self.result.findings += outcome.findings
            for r, lay in zip(op.results, outcome.results):
                if name in _ZERO_FORMS and all(lay.state(a) is AxisState.REPLICATED for a in manual) \
                        and self._zero(r):
                    lay = Layout(lay.dims, zero=True)
                known = self.affine.get(r)
                if known is not None:  # an integer that depends on the mesh coordinates its terms name only
                    lay = Layout(((),) * len(lay.dims))
                    for a, _ in known.coeffs:
                        if a in manual:
                            lay = lay.varies(a, f"{name.split('.', 1)[-1]} at {location(op)} (the device's position)")
                env[r] = lay
        return []

    def _outside(self, value, manual) -> Layout:
        """A value captured from outside the body (a constant hoisted by JAX): whole on every device."""
        lay = Layout(((),) * len(_shape(value)))
        owner = value.owner
        name = owner.name if hasattr(owner, "name") and isinstance(owner.name, str) else ""
        if name != "stablehlo.constant":
            for a in manual:
                lay = lay.lost(a, "a value captured from outside the shard_map body")
        return lay

    def _track_index(self, op, name: str, mesh: Mesh) -> None:
        """Record the affine value of an integer scalar op over the mesh coordinates, where it has one."""
        if len(op.results) != 1 or _shape(op.results[0]) != () or "i" not in str(op.results[0].type.element_type):
            return
        kind = name.split(".", 1)[-1]
        value = None
        if name == "stablehlo.constant":
            value = Affine((), int(np.array(self.ir.DenseIntElementsAttr(op.attributes["value"])).reshape(-1)[0]))
        elif name == "stablehlo.partition_id":
            if mesh.device_ids == tuple(range(len(mesh.device_ids))):
                value = partition_id(mesh.axes)
        else:
            direction = ""
            if kind == "compare":
                direction = str(self.shlo.ComparisonDirectionAttr(op.attributes["comparison_direction"]).value)
            value = evaluate(kind, [self.affine.get(v) for v in op.operands], dict(mesh.axes), direction)
        if value is not None:
            self.affine[op.results[0]] = value

    def _op(self, op, name: str, manual, attrs: dict | None = None) -> Op:
        return Op(name, location(op), tuple(manual), tuple(_shape(v) for v in op.operands),
                  tuple(_shape(v) for v in op.results), attrs or {})

    def _step(self, op, name: str, ins: list[Layout], manual, mesh: Mesh, depth: int, env: dict) -> Outcome:
        if name in _COLLECTIVES:
            return self._collective(op, name, ins, manual, mesh)
        if name in _OPAQUE:
            return comm.opaque(self._op(op, name, manual), ins)
        if name in ("stablehlo.partition_id", "stablehlo.replica_id", "stablehlo.rng"):
            lay = Layout(((),) * len(_shape(op.results[0])))
            for a in manual:
                lay = lay.varies(a, f"{name.split('.', 1)[1]} at {location(op)} (the device's position)")
            return Outcome([lay])
        if name in ("func.call", "stablehlo.composite"):
            key = "callee" if name == "func.call" else "decomposition"
            return Outcome(self._call(op, self.funcs[self.ir.FlatSymbolRefAttr(op.attributes[key]).value], ins,
                                      manual, mesh, depth))
        if name == "stablehlo.custom_call":
            self._hidden_check(op, name)
        if name == "sdy.manual_computation":
            return comm.opaque(self._op(op, "nested shard_map", manual), ins)
        if name == "stablehlo.while":
            return Outcome(self._loop(op, ins, manual, mesh, depth, env))
        if name in ("stablehlo.case", "stablehlo.if"):
            return Outcome(self._branches(op, ins, manual, mesh, depth, env))
        if name != "stablehlo.reduce" and any(len(r.blocks) for r in op.regions):
            if self._has_collective(op):
                return comm.opaque(self._op(op, name, manual), ins)
            # a while, case or if may use values of the body it stands in without naming them as operands
            ins = ins + [env[v] if v in env else self._outside(v, manual) for v in self._captures(op)]
        return apply(self._op(op, name, manual, self._attrs(op, name)), ins)

    def _call(self, op, callee, ins: list[Layout], manual, mesh: Mesh, depth: int) -> list[Layout]:
        """A function run in line, the mesh-coordinate arithmetic of its arguments and results carried over."""
        block = callee.regions[0].blocks[0]
        for arg, v in zip(block.arguments, op.operands):
            if v in self.affine:
                self.affine[arg] = self.affine[v]
        out = self._body(block, ins, manual, mesh, depth + 1)
        ret = list(block.operations)[-1]
        for r, v in zip(op.results, ret.operands):
            if v in self.affine:
                self.affine[r] = self.affine[v]
        return out

    def _loop(self, op, ins: list[Layout], manual, mesh: Mesh, depth: int, env: Mapping) -> list[Layout]:
        """A while loop: its body run on the carried layouts until they no longer change (what differs
        between iterations becomes unknown); its condition must not communicate."""
        why = f"while at {location(op)}: differs between iterations"
        if self._has_collective(op.regions[0].blocks[0]):
            return comm.opaque(self._op(op, "while (its condition communicates)", manual), ins).results
        return settle(lambda now: self._body(op.regions[1].blocks[0], now, manual, mesh, depth + 1, env), ins,
                      manual, why)

    def _branches(self, op, ins: list[Layout], manual, mesh: Mesh, depth: int, env: Mapping) -> list[Layout]:
        """A case or if: each branch run; what differs between them, or along an axis where the branch taken
        differs, is unknown or varying."""
        index = ins[0]
        outs = [self._body(region.blocks[0], [], manual, mesh, depth + 1, env) for region in op.regions]
        return either(outs, index, manual, f"{op.operation.name.split('.', 1)[1]} at {location(op)}")

    def _captures(self, op) -> list:
        """The values an op's regions use that are defined outside it."""
        inside, used = set(), []
        stack = [op]
        while stack:
            o = stack.pop()
            for region in o.regions:
                for block in region.blocks:
                    inside.update(block.arguments)
                    for inner in block.operations:
                        inside.update(inner.results)
                        used += list(inner.operands)
                        stack.append(inner)
        seen, out = set(), []
        for v in used:
            if v not in inside and v not in seen:
                seen.add(v)
                out.append(v)
        return out

    def _constant_op(self, value):
        """The ``stablehlo.constant`` a value is, through broadcasts, converts and reshapes; None if none."""
        while not isinstance(value, self.ir.BlockArgument) and value.owner.name in _PASS_VALUE:
            value = value.owner.operands[0]
        if isinstance(value, self.ir.BlockArgument) or value.owner.name != "stablehlo.constant":
            return None
        return value.owner

    def _constant(self, value) -> bool:
        """Whether a value is computed from constants only (``psum(1, axis)``)."""
        return self._constant_op(value) is not None

    def _has_collective(self, op) -> bool:
        """Whether an op (or a block) communicates, or calls a function, anywhere inside it."""
        blocks = [op] if hasattr(op, "arguments") else [b for region in op.regions for b in region.blocks]
        for block in blocks:
            for inner in block.operations:
                n = inner.operation.name
                if n in _COLLECTIVES or n in _OPAQUE or n == "func.call" or self._has_collective(inner):
                    return True
        return False

    def _attrs(self, op, name: str) -> dict:
        a, ir = op.attributes, self.ir
        ints = (lambda key: tuple(int(x) for x in ir.DenseI64ArrayAttr(a[key])))
        if name == "stablehlo.broadcast_in_dim":
            return {"broadcast_dimensions": ints("broadcast_dimensions")}
        if name == "stablehlo.transpose":
            return {"permutation": ints("permutation")}
        if name == "stablehlo.dot_general":
            dn = self.shlo.DotDimensionNumbers(a["dot_dimension_numbers"])
            return {"lhs_batch": tuple(dn.lhs_batching_dimensions), "rhs_batch": tuple(dn.rhs_batching_dimensions),
                    "lhs_contract": tuple(dn.lhs_contracting_dimensions),
                    "rhs_contract": tuple(dn.rhs_contracting_dimensions)}
        if name == "stablehlo.reduce":
            return {"dimensions": ints("dimensions"), "sum": self._adds(op),
                    "zero_init": len(op.operands) == 2 and self._zero(op.operands[1])}
        if name in ("stablehlo.add", "stablehlo.subtract", "stablehlo.select"):
            return {"zeros": tuple(i for i, v in enumerate(op.operands) if self._zero(v))}
        if name == "stablehlo.convert":
            src, dst = (str(v.type.element_type) for v in (op.operands[0], op.results[0]))
            return {"linear": not dst.startswith(("i", "ui")) or src.startswith(("i", "ui"))}
        if name == "stablehlo.dot":
            rank = len(_shape(op.operands[0]))
            return {"lhs_batch": (), "rhs_batch": (), "lhs_contract": (rank - 1,), "rhs_contract": (0,)}
        if name == "stablehlo.slice":
            return {"start": ints("start_indices"), "limit": ints("limit_indices"), "strides": ints("strides")}
        if name == "stablehlo.dynamic_slice":
            mesh_sizes = {a: s for m in self.meshes.values() for a, s in m.axes}
            return {"slice_sizes": ints("slice_sizes"), "axis_sizes": mesh_sizes,
                    "offsets": [self.affine.get(v) for v in list(op.operands)[1:]]}
        if name == "stablehlo.concatenate":
            return {"dimension": ir.IntegerAttr(a["dimension"]).value}
        return {}

    def _zero(self, value) -> bool:
        """Whether a value is the constant zero (a sum's start)."""
        const = self._constant_op(value)
        if const is None:
            return False
        try:
            return not np.any(np.array(self.ir.DenseElementsAttr(const.attributes["value"])))
        except (TypeError, ValueError):
            return False

    def _adds(self, op) -> bool:
        """Whether an op's one region is ``add`` of its two block arguments (through converts)."""
        if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
            return False
        block = op.regions[0].blocks[0]
        body = [o for o in block.operations]
        if len(block.arguments) != 2 or not body or body[-1].operation.name != "stablehlo.return":
            return False
        ret = body[-1].operands
        if len(ret) != 1:
            return False
        adder = ret[0].owner
        if getattr(adder, "name", None) != "stablehlo.add":
            return False
        srcs = []
        for v in adder.operands:
            while not isinstance(v, self.ir.BlockArgument) and getattr(v.owner, "name", None) == "stablehlo.convert":
                v = v.owner.operands[0]
            if not isinstance(v, self.ir.BlockArgument):
                return False
            srcs.append(v.arg_number)
        return sorted(srcs) == [0, 1] and len(body) <= 2 + sum(
            1 for o in body if o.operation.name == "stablehlo.convert")

    def _collective(self, op, name: str, ins: list[Layout], manual, mesh: Mesh) -> Outcome:
        a = op.attributes
        groups = np.array(self.ir.DenseIntElementsAttr(a["replica_groups"]), dtype=np.int64)
        if groups.size == 0:
            groups = np.array([list(mesh.device_ids)])
        groups = tuple(tuple(int(x) for x in g if x >= 0) for g in groups.reshape(groups.shape[0], -1))
        global_ids = "use_global_device_ids" in a
        kind = name.split(".", 1)[1]
        reduced = axes_of_groups(mesh, groups, ordered=kind != "all_reduce") if global_ids else None
        if reduced is not None and any(r not in manual for r in reduced):
            reduced = None
        o = self._op(op, name, manual, {"axis_sizes": dict(mesh.axes)})
        if kind == "all_reduce":
            return comm.all_reduce(o, ins, reduced, self._adds(op), all(self._constant(v) for v in op.operands))
        if not self._adds(op) and kind == "reduce_scatter":
            return comm.opaque(o, ins)
        dim = int(self.ir.IntegerAttr(a["scatter_dimension" if kind == "reduce_scatter" else "all_gather_dim"]).value)
        fn = comm.reduce_scatter if kind == "reduce_scatter" else comm.all_gather
        return fn(o, ins, reduced, dim)


def judge(k: int, lay: Layout, exp: Expected,
          manual: Sequence[str]) -> tuple[OutputStatus, tuple[str, ...], str, str, list[Finding]]:
    """Output ``k``'s layout against what it must be, along each of ``manual``: its status, the reasons, what
    was declared, what it is, and the findings."""
    reasons: list[str] = []
    findings: list[Finding] = []
    status = OutputStatus.OK

    def worse(st: OutputStatus, why: str, kind: FindingKind | None = None, axis: str | None = None):
        nonlocal status
        reasons.append(why)
        if kind is not None:
            findings.append(Finding(kind, why, "output", f"output {k}", axis, k))
        if st is OutputStatus.FINDING or status is OutputStatus.OK:
            status = st

    for a in manual:
        s = lay.state(a)
        want = next((d for d, axes in enumerate(exp.dims) if a in axes), None)
        if s is AxisState.UNKNOWN:
            why = lay.why(a)
            worse(OutputStatus.FINDING if why.startswith("the finding at") else OutputStatus.UNVERIFIED,
                  f"along {a}: {why}")
        elif a in exp.unreduced:
            if s is not AxisState.PARTIAL:
                worse(OutputStatus.FINDING, f"declared a partial sum over {a} (unreduced) but it is {s.value}",
                      FindingKind.SHARDING_MISMATCH, a)
        elif s is AxisState.PARTIAL:
            worse(OutputStatus.FINDING, f"a partial sum over {a} reaches the output (a psum over {a} is "
                                        "missing)", FindingKind.PARTIAL_TO_OUTPUT, a)
        elif want is None:
            if s is AxisState.VARYING:
                worse(OutputStatus.FINDING, f"declared replicated over {a} but it differs along {a}: "
                                            f"{lay.why(a)}", FindingKind.VARYING_OUTPUT, a)
            elif s is AxisState.SHARDED:
                worse(OutputStatus.FINDING, f"declared replicated over {a} but each device holds only its "
                                            f"block (sharded along dimension {lay.sharded_dim(a)})",
                      FindingKind.SHARDING_MISMATCH, a)
        elif s is AxisState.VARYING:
            worse(OutputStatus.UNVERIFIED, f"declared sharded along dimension {want} over {a}; it differs "
                                           f"along {a} ({lay.why(a)}), and the audit cannot tell whether each "
                                           "device holds its own block")
        elif s is AxisState.REPLICATED:
            worse(OutputStatus.FINDING, f"declared sharded along dimension {want} over {a} but every device "
                                        f"holds the whole value: the output repeats it once per device along "
                                        f"{a}", FindingKind.SHARDING_MISMATCH, a)
        elif lay.dims[want] != exp.dims[want] if want < len(lay.dims) else True:
            worse(OutputStatus.FINDING, f"declared sharded along dimension {want} by {list(exp.dims[want])} "
                                        f"but it is sharded along dimension {lay.sharded_dim(a)} by "
                                        f"{list(lay.dims[lay.sharded_dim(a)])}", FindingKind.SHARDING_MISMATCH, a)
    return status, tuple(reasons), exp.describe(), lay.describe(tuple(manual)), findings



def settle(run: Callable[[list[Layout]], list[Layout]], ins: Sequence[Layout], axes: Sequence[str],
           why: str) -> list[Layout]:
    """A loop's carried layouts: its body ``run`` on them until they no longer change (what differs between
    iterations becomes unknown, with ``why``); after 8 runs, all that is not replicated is forgotten."""
    carried = list(ins)
    for _ in range(8):
        joined = [c.joined(o, axes, why) for c, o in zip(carried, run(carried))]
        if joined == carried:
            return carried
        carried = joined
    return [_forget(c, axes, why) for c in carried]


def either(outs: Sequence[Sequence[Layout]], index: Layout, axes: Sequence[str], label: str) -> list[Layout]:
    """What a branch op gives (``label``: the op and where): what differs between its branches' results is
    unknown, and along an axis where the branch taken (``index``) differs, varying or unknown."""
    why = f"{label}: its branches differ"
    results = list(outs[0])
    for other in outs[1:]:
        results = [a.joined(b, axes, why) for a, b in zip(results, other)]
    for a in axes:
        if index.state(a) is not AxisState.REPLICATED:
            pick = f"{label} takes a branch that depends on the device along {a}"
            results = [r.lost(a, pick) if r.state(a) in (AxisState.PARTIAL, AxisState.UNKNOWN)
                       or index.state(a) is AxisState.UNKNOWN else r.varies(a, pick) for r in results]
    return results


def _forget(lay: Layout, axes: Sequence[str], why: str) -> Layout:
    for a in axes:
        if lay.state(a) is not AxisState.REPLICATED:
            lay = lay.lost(a, why)
    return lay


def walk_module(module, where: str = "<stablehlo>", expect: Mapping[int, Expected] | None = None) -> StepWalk:
    """The step-level audit of a parsed StableHLO module (an ``ir.Module``); ``expect`` overrides what a
    shard_map output (numbered across the module's shard_maps in order) must be."""
    return _Walker(module, where, expect or {}).run()
