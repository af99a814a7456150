"""Read the collectives of a StableHLO module (MLIR text, ``jax.jit(f).lower(x).as_text()``) as MLIR parses it.

jaxlib's MLIR parses and verifies the text (``mlir.py``); the reader walks the ops it gives, their operands'
defining ops and block arguments, and their typed attributes. The module is run from ``@main`` as straight-line
code: ``func.call`` runs its callee (twice when called twice), ``stablehlo.composite`` its decomposition,
``sdy.manual_computation``, ``sdy.named_computation`` (a named call: its region runs once on its operands) and a
collective's own combiner region run in line. A collective inside any other
region (a ``while`` loop, a ``case`` or ``if`` branch, …), directly or through a call, is an error: p2smt reads
straight-line code only, and counting a loop's collective once would prove a double count. A region of several
blocks and a module inside the module are refused too. Each collective must sum and start or extend a chain
(``hlo_program.py``).
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np

from p2smt.errors import P2Error
from p2smt.frontend.hlo_program import (
    INPUT_FLOW,
    SHARDING,
    UNTRACED_FLOW,
    Chain,
    Flow,
    HloCollective,
    HloProgram,
    carried,
    converted,
    joined,
    require_sum,
    unsupported,
)
from p2smt.frontend.loops import trip_count
from p2smt.frontend.mlir import MlirModule, bindings, nested, ops_of, parse_mlir, region_ops
from p2smt.frontend.reading import ModuleMesh, ModuleReading, ReadCollective
from p2smt.model.collectives import Collective, Group
from p2smt.model.replica_groups import DeviceSpace, GroupMode

__all__ = ["parse_stablehlo", "read_stablehlo"]

_REDUCTIONS = {"all_reduce": Collective.ALL_REDUCE, "reduce_scatter": Collective.REDUCE_SCATTER,
               "all_gather": Collective.ALL_GATHER}
_OTHERS = ("collective_permute", "all_to_all", "collective_broadcast", "send", "recv")
_IN_LINE = ("sdy.manual_computation", "sdy.named_computation")  # ops whose one region runs once, where they stand
_RETURNS = ("func.return", "sdy.return", "stablehlo.return", "mhlo.return")
_CALLS = ("func.call",)
KEEPS = frozenset({"reshape", "optimization_barrier", "constant", "iota"})
"""StableHLO ops that keep every value and its position (a constant or an iota brings no contribution; not
``convert``, which can round or wrap, nor ``bitcast_convert``; ``Chain`` checks a reshape's dimension)."""
MAX_STEPS = 100_000  # collectives after expanding calls: a bound on memory for call trees that multiply


def _kind(op: Any) -> str:
    """The op's name without its dialect (``all_reduce``) for StableHLO (and MHLO) ops, else its full name."""
    name = op.name
    for dialect in ("stablehlo.", "mhlo."):
        if name.startswith(dialect):
            return name[len(dialect):]
    return name


def _structure(mod: MlirModule) -> None:
    """Refuse a region of several blocks (a block after the first runs only if branched to, and p2smt reads
    straight-line code) and a module inside the module (which ``@main`` runs would be guessed)."""
    for op in nested(ops_of(mod.module.body)):
        if op.name == "builtin.module":
            raise P2Error(f"{mod.at(op)}: a module inside the module; p2smt reads one module")
        for region in op.regions:
            if len(region.blocks) > 1:
                second = ops_of(region.blocks[1])
                raise P2Error(f"{mod.at(second[0] if second else op)}: a second block in a region; p2smt reads "
                              "straight-line code")


def _string(attrs: Any, key: str) -> str | None:
    ir, _ = bindings()
    return ir.StringAttr(attrs[key]).value if key in attrs else None


def _symbol_ref(attrs: Any, key: str) -> str | None:
    ir, _ = bindings()
    return ir.FlatSymbolRefAttr(attrs[key]).value if key in attrs else None


def _integer(attrs: Any, key: str) -> int | None:
    ir, _ = bindings()
    return ir.IntegerAttr(attrs[key]).value if key in attrs else None


def _symbols(op: Any) -> list[str]:
    """Every ``@name`` the op's attributes refer to (``called_computations = [@f]``), quoted names too."""
    ir, _ = bindings()
    out = []
    for key in op.attributes:
        attr = op.attributes[key]
        if isinstance(attr, ir.DenseElementsAttr | ir.StringAttr):  # data: it names no symbol
            continue
        text = str(attr)
        at = text.find("@")
        while at >= 0:
            rest = text[at + 1:]
            if rest.startswith('"'):
                name = rest[1:].split('"', 1)[0]
            else:
                end = next((i for i, ch in enumerate(rest) if not (ch.isalnum() or ch in "_.$-")), len(rest))
                name = rest[:end]
            out.append(name)
            at = text.find("@", at + 1)
    return out


def _groups(mod: MlirModule, op: Any) -> tuple[Group, ...]:
    """The ``replica_groups`` dense G×S attribute (padding ids < 0 dropped)."""
    ir, _ = bindings()
    if "replica_groups" not in op.attributes:
        raise P2Error(f"{mod.at(op)}: {_kind(op)} without replica_groups")
    try:
        rows = np.asarray(ir.DenseIntElementsAttr(op.attributes["replica_groups"]))
    except ValueError:
        raise P2Error(f"{mod.at(op)}: replica_groups not in the dense<…> : tensor<GxSxi64> form") from None
    if rows.ndim != 2:
        raise P2Error(f"{mod.at(op)}: replica_groups of shape {list(rows.shape)}, not [groups, size]")
    return tuple(tuple(int(d) for d in row if d >= 0) for row in rows) if rows.size else ()


def _channel(op: Any) -> int:
    """The op's channel handle (0: none)."""
    if "channel_handle" not in op.attributes:
        return 0
    from jaxlib.mlir.dialects import stablehlo

    attr = op.attributes["channel_handle"]
    try:
        return stablehlo.ChannelHandle(attr).handle
    except ValueError:  # an MHLO handle: the same fields, printed
        text = str(attr)
        digits = text[text.find("handle = ") + len("handle = "):].split(",")[0].split(">")[0].strip()
        return int(digits) if "handle = " in text and digits.isdigit() else 0


def _collective(mod: MlirModule, op: Any) -> HloCollective:
    kind, line = _kind(op), mod.line(op)
    attrs = op.attributes
    mode = GroupMode.of(_channel(op) > 0, "use_global_device_ids" in attrs)
    dim = _integer(attrs, "scatter_dimension") if "scatter_dimension" in attrs else _integer(attrs, "all_gather_dim")
    collective = _REDUCTIONS[kind]
    if collective is not Collective.ALL_GATHER:
        block = op.regions[0].blocks[0] if len(op.regions) and len(op.regions[0].blocks) else None
        require_sum([SHARDING if _sharding(o) else _kind(o) for o in ops_of(block)] if block is not None else [],
                    "its reduction region",
                    mod.where, line, kind)
        if not _adds_its_arguments(block):
            raise P2Error(f"{mod.at(op)}: {kind} reduces with an add that is not of its region's two arguments; "
                          "p2smt proves sums only")
    return HloCollective(line, kind, collective, _groups(mod, op), mode, dim)


def _adds_its_arguments(block: Any) -> bool:
    """Whether a reduction region returns ``add`` of its block's arguments, each once (through converts and
    sharding constraints): an add of one argument twice passes a check of op names alone."""
    ir, _ = bindings()

    def source(value: Any) -> Any:
        owner = value.owner
        while isinstance(owner, ir.Operation | ir.OpView) and len(owner.operands) == 1 and \
                (_kind(owner.operation) == "convert" or _sharding(owner.operation)):
            value = owner.operands[0]
            owner = value.owner
        return value

    ops = ops_of(block)
    if not ops or _kind(ops[-1]) != "return" or not len(ops[-1].operands):
        return False
    used = []
    for value in ops[-1].operands:
        add = source(value).owner
        if not isinstance(add, ir.Operation | ir.OpView) or _kind(add.operation) != "add" or len(add.operands) != 2:
            return False
        used += [source(o) for o in add.operands]
    numbers = [v.arg_number if isinstance(v, ir.BlockArgument) and v.owner == block else -1 for v in used]
    return sorted(numbers) == list(range(len(block.arguments)))


def _type(value: Any) -> tuple[str, tuple[int, ...]]:
    """(element type, shape) of a ranked tensor value."""
    ir, _ = bindings()
    tensor = ir.RankedTensorType(value.type)
    return str(tensor.element_type), tuple(tensor.shape)


def _sized(mod: MlirModule, found: HloCollective, op: Any, k: int) -> ReadCollective:
    """``found`` on its ``k``-th operand, with that operand's and its result's sizes."""
    try:
        operand, result = _type(op.operands[k]), _type(op.results[k])
    except ValueError:
        raise P2Error(f"{mod.at(op)}: {found.op} on a value that is not a ranked tensor") from None
    return ReadCollective.of(found, operand, result, mod.where)


def _sharding(op: Any) -> bool:
    """Whether ``op`` is a sharding annotation (JAX's ``custom_call @Sharding``, Shardy's constraint) of one
    operand: it passes its operand on."""
    return len(op.operands) == 1 and (op.name == "sdy.sharding_constraint" or (
        _kind(op) == "custom_call" and _string(op.attributes, "call_target_name") == "Sharding"))


def _adds_unit_dims(op: Any) -> bool:
    """Whether ``op`` is a ``broadcast_in_dim`` that only adds dimensions of size 1 (JAX's untiled all_gather
    puts one before the gathered one): as many elements, in the same row-major order, so a reshape."""
    if _kind(op) != "broadcast_in_dim" or len(op.operands) != 1:
        return False
    ir, _ = bindings()
    try:
        dims = list(ir.DenseI64ArrayAttr(op.attributes["broadcast_dimensions"]))
        before, after = (ir.RankedTensorType(v.type).shape for v in (op.operands[0], op.results[0]))
    except (KeyError, ValueError):
        return False
    return all(a < b for a, b in pairwise(dims)) and \
        all(after[d] == size for d, size in zip(dims, before, strict=True)) and \
        all(size == 1 for d, size in enumerate(after) if d not in dims)


def _keeps(op: Any) -> bool:
    return _kind(op) in KEEPS or _sharding(op)


def _callee(mod: MlirModule, op: Any) -> str | None:
    """The function a call runs, or a composite's decomposition (what XLA runs for it)."""
    if _kind(op) == "composite":
        name = _symbol_ref(op.attributes, "decomposition")
        if name is None:
            raise P2Error(f"{mod.at(op)}: a composite whose decomposition p2smt cannot read")
        return name
    if op.name in _CALLS:
        return _symbol_ref(op.attributes, "callee")
    return None


def _meshes(mod: MlirModule) -> tuple[ModuleMesh, ...]:
    """The module's Shardy meshes (``sdy.mesh @mesh = <["a"=4, "b"=4]>``), in order."""
    from jaxlib.mlir.dialects import sdy

    out = []
    for op in ops_of(mod.module.body):
        if op.name == "sdy.mesh":
            mesh = sdy.MeshAttr(op.attributes["mesh"])
            axes = tuple((axis.name, axis.size) for axis in map(sdy.MeshAxisAttr, mesh.axes))
            ids = tuple(mesh.device_ids) or tuple(range(int(np.prod([s for _, s in axes]))))
            out.append(ModuleMesh(_string(op.attributes, "sym_name") or "mesh", axes, ids))
    return tuple(out)


def parse_stablehlo(text: str, where: str = "<stablehlo>") -> HloProgram:
    """The reduction collectives of a StableHLO module, run from ``@main`` as straight-line code."""
    return read_stablehlo(text, where).program()


def read_stablehlo(text: str, where: str = "<stablehlo>", split: bool = False) -> ModuleReading:
    """A StableHLO module run from ``@main``: read to verify (``split`` False) or split into chains."""
    mod = parse_mlir(text, where)
    _structure(mod)
    top = mod.module.operation.attributes
    name = _string(top, "sym_name") or "module"
    space = DeviceSpace(_integer(top, "mhlo.num_replicas") or 1, _integer(top, "mhlo.num_partitions") or 1)
    funcs = {_string(op.attributes, "sym_name"): op for op in ops_of(mod.module.body) if op.name == "func.func"}
    if not funcs:
        raise P2Error(f"{where}: no func.func in the module")
    public = [n for n, f in funcs.items() if _string(f.attributes, "sym_visibility") == "public"]
    entry = "main" if "main" in funcs else public[0] if len(public) == 1 else next(iter(funcs)) if len(funcs) == 1 \
        else None
    if entry is None:
        raise P2Error(f"{where}: no @main and {len(public)} public functions: which one runs is not known")
    chain = Chain(where, split)
    holds: dict[str, Any] = {}  # function -> its first collective, through calls (None: none)
    memo: dict[tuple[str, tuple[Flow, ...]], list[Flow]] = {}  # calls of functions without collectives

    def body(fn: str, op: Any) -> Any:
        """The one block of a function's body (a declaration has none: what it computes is not known)."""
        blocks = funcs[fn].regions[0].blocks
        if not len(blocks):
            raise P2Error(f"{mod.at(op)}: @{fn} has no body; p2smt cannot follow what it computes")
        return blocks[0]

    def first_collective(ops: list[Any], seen: tuple[str, ...]) -> Any:
        for op in ops:
            kind = _kind(op)
            if kind in _OTHERS and not split:
                raise unsupported(kind, mod.line(op), where)
            if kind in _REDUCTIONS or kind in _OTHERS:
                return op
            callee = _callee(mod, op)
            if callee is not None and callee in funcs and callee not in seen and \
                    (held := holding(callee, seen)) is not None:
                return held
            found = first_collective(region_ops(op), seen)
            if found is not None:
                return found
        return None

    def holding(fn: str, seen: tuple[str, ...]) -> Any:
        """The first collective function ``fn`` runs, through its calls (cached; None: it runs none)."""
        if fn not in holds:
            holds[fn] = None  # a call back into ``fn`` finds none here; running it is refused
            blocks = funcs[fn].regions[0].blocks
            holds[fn] = first_collective(ops_of(blocks[0]), (*seen, fn)) if len(blocks) else None
        return holds[fn]

    def call(op: Any, callee: str, flows: list[Flow], stack: tuple[str, ...]) -> list[Flow]:
        if callee not in funcs:
            raise P2Error(f"{mod.at(op)}: call of @{callee}, which the module does not define")
        if callee in stack:
            raise P2Error(f"{mod.at(op)}: @{callee} calls itself; p2smt reads straight-line code only")
        key, pure = (callee, tuple(flows)), holding(callee, stack) is None
        if pure and key in memo:
            return memo[key]
        block = body(callee, op)
        out = run(ops_of(block), bind(block.arguments, flows), (*stack, callee))
        if pure:
            memo[key] = out
        return out

    def bind(args: Any, flows: list[Flow], missing: Flow = UNTRACED_FLOW) -> dict[Any, Flow]:
        """Each block argument to the flow in its position; one with no flow gets ``missing``."""
        return {a: flows[i] if i < len(flows) else missing for i, a in enumerate(args)}

    def run(ops: list[Any], scope: dict[Any, Flow], stack: tuple[str, ...]) -> list[Flow]:
        """Run ``ops`` in line; the flows of the values its return gives back."""
        returned: list[Flow] = []
        for op in ops:
            kind = _kind(op)
            flows = [scope.get(v, UNTRACED_FLOW) for v in op.operands]
            callee = _callee(mod, op)
            if callee is None:
                for sym in _symbols(op):
                    if sym in funcs and (held := holding(sym, stack)) is not None:
                        raise P2Error(f"{mod.at(op)}: {op.name} names @{sym}, which runs the {_kind(held)} at line "
                                      f"{mod.line(held)}, in a way p2smt does not follow (only calls and "
                                      "composites)")
            if kind in _OTHERS and not split:
                first_collective([op], stack)  # raises naming it
            if op.name in _RETURNS:
                returned = flows
                continue
            if kind in _REDUCTIONS:
                if len(chain.collectives) + len(flows) > MAX_STEPS:
                    raise P2Error(f"{where}: more than {MAX_STEPS:,} collectives once calls are expanded")
                found = _collective(mod, op)
                results = [chain.add(_sized(mod, found, op, k) if split else ReadCollective.of(found), flow)
                           for k, flow in enumerate(flows)]
            elif kind in _OTHERS:  # read split: recorded, what it gives is its own
                results = [chain.communicate(mod.line(op), kind, Flow.through(kind, flows, True))]
            elif callee is not None:
                results = call(op, callee, flows, stack)
            elif len(op.regions) and op.name in _IN_LINE:
                block = op.regions[0].blocks[0]
                results = run(ops_of(block), dict(scope) | bind(block.arguments, flows), stack)
            elif len(op.regions):
                inside = region_ops(op)
                found = first_collective(inside, stack)
                if found is not None and split and kind == "while" and \
                        first_collective(ops_of(op.regions[0].blocks[0]), stack) is None:
                    results = loop(op, flows, scope, stack)
                elif found is not None and split and kind in ("case", "if"):
                    results = branches(op, flows, scope, stack)
                elif found is not None:
                    raise P2Error(f"{mod.at(found)}: {_kind(found)} runs inside the {op.name} at line "
                                  f"{mod.line(op)}; p2smt reads straight-line code only (no loops, branches "
                                  "or other regions)")
                else:
                    used = [scope[v] for o in nested(inside) for v in o.operands if v in scope]
                    results = [Flow.through(kind, flows + used, False)]
            elif kind == "optimization_barrier":  # each result is its operand
                results = flows
            elif kind == "convert" and len(flows) == 1:
                results = [converted(flows[0], _type(op.operands[0])[0], _type(op.results[0])[0])]
            else:
                reshapes = kind == "reshape" or _adds_unit_dims(op)
                results = [Flow.through(kind, flows, _keeps(op) or reshapes, reshapes)]
            for i, r in enumerate(op.results):
                scope[r] = results[i] if i < len(results) else Flow.through(kind, results, True)
        return returned

    def loop(op: Any, init: list[Flow], scope: dict[Any, Flow], stack: tuple[str, ...]) -> list[Flow]:
        """Read split, a ``while`` whose body runs collectives: the body read once as a scope of its own that runs
        the loop's trip count times, on what the loop carries: what it starts from and, once an iteration has
        run, what the body gives back (read again until that settles). What the loop gives is what it carries."""
        block = op.regions[1].blocks[0]
        token = chain.enter(trip_count(mod, op))
        carry = chain.settle(list(init), lambda now: run(ops_of(block), dict(scope) | bind(block.arguments, now), stack),
                             lambda now, first, out: [carried(*f) for f in zip(now, first, out, strict=False)])
        if carry is None:
            raise P2Error(f"{mod.at(op)}: what the while carries does not settle; p2smt cannot follow it")
        chain.leave(token)
        return carry

    def branches(op: Any, flows: list[Flow], scope: dict[Any, Flow], stack: tuple[str, ...]) -> list[Flow]:
        """Read split, a ``case`` or an ``if`` whose branches run collectives: each branch a scope of its own that
        runs once or not at all (``runs`` None); what it gives is any branch's result."""
        given = []
        for region in op.regions:
            token = chain.enter(None)
            given.append(run(ops_of(region.blocks[0]), dict(scope), stack))
            chain.leave(token)
        return [joined(_kind(op), [out[i] for out in given if i < len(out)])
                for i in range(len(op.results))]

    block = body(entry, funcs[entry])
    outputs = run(ops_of(block), bind(block.arguments, [], INPUT_FLOW), (entry,))
    if chain.in_loops:
        chain.reread = lambda: read_stablehlo(text, where).program()
    return ModuleReading.of(name, "stablehlo", space, _meshes(mod) if split else (), chain, outputs)
