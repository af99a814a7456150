"""Read the collectives of an XLA HLO text module into an explicit plan (StableHLO: ``stablehlo.py``).

HLO text is what ``jax.jit(f).lower(x).compile().as_text()`` prints; StableHLO is ``.lower(x).as_text()``.
``all-reduce``, ``reduce-scatter`` and ``all-gather`` (and their async ``-start``/``-done`` pairs, or
``async-start`` wrappers) of the entry computation are read in program order with their replica groups and
dimensions; each must sum (its ``to_apply``) and use the previous one's result (``hlo_program.py``).
Collectives that are not reductions (collective-permute, all-to-all, …) are errors naming the op and
line, never skipped, and so is a collective in any other computation (a loop body, a branch, a call).
XLA's ids are mapped to the system's devices through the mesh's device order (``placements --export
jax-mesh``): id i is mesh position i, i.e. system device ``order[i]``.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from pathlib import Path

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
from p2smt.frontend.loops import counted
from p2smt.frontend.reading import ModuleReading, ReadCollective
from p2smt.frontend.sdy_text import sdy_meshes
from p2smt.frontend.stablehlo import read_stablehlo
from p2smt.model.collectives import Collective, ExplicitPlan, ExplicitStep
from p2smt.model.replica_groups import DeviceSpace, GroupMode, global_groups, normalize, parse_groups_text

__all__ = ["HloCollective", "HloProgram", "ModuleReading", "hlo_plan", "parse_hlo_text", "parse_module",
           "read_device_order", "read_hlo_text", "read_module"]

_REDUCTIONS = {"all-reduce": Collective.ALL_REDUCE, "reduce-scatter": Collective.REDUCE_SCATTER,
               "all-gather": Collective.ALL_GATHER}
KEEPS = frozenset({"copy", "reshape", "get-tuple-element", "tuple",
                   "copy-start", "copy-done", "opt-barrier", "optimization-barrier", "async-done", "async-update",
                   "all-reduce-done", "all-gather-done", "reduce-scatter-done", "constant", "iota"})
"""HLO ops that keep every value and its position: a collective may read its predecessor's result through
them (a constant or an iota brings no contribution). Not ``convert`` (a narrower type rounds or wraps) nor
``bitcast-convert`` (it reinterprets the bits); a ``bitcast`` only between row-major layouts; a reshape
keeps positions along dimension 0 only, which ``Chain`` checks."""
_OTHERS = ("collective-permute", "all-to-all", "ragged-all-to-all", "collective-broadcast", "send", "recv")
_HLO_OP = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>[a-z][a-z0-9\-]*)\(")
_COMPUTATION = re.compile(r"^\s*(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(?:\(.*\)\s*->\s*.*)?\{\s*$")


def _braced(text: str, start: int) -> str:
    """The balanced ``{…}`` starting at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    raise P2Error(f"unbalanced braces in {text[start:start + 60]!r}")


def _top_level(attrs: str, key: str, where: str = "") -> int | None:
    """Where the value of ``key=`` starts in an instruction's attributes, read at the top level only: a
    ``key=`` inside ``backend_config={…}`` or ``frontend_attributes={…}`` is no attribute of the
    instruction (XLA ignores it there, so a reader that found it first would read a decoy). A key given
    twice is refused."""
    found, depth = [], 0
    for m in re.finditer(rf"(?<![\w.\-]){re.escape(key)}=|[{{\[(]|[}}\])]", attrs):
        token = m.group(0)
        if token in "{[(":
            depth += 1
        elif token in "}])":
            depth -= 1
        elif depth == 0:
            found.append(m.end())
    if len(found) > 1:
        raise P2Error(f"{where}{key}= given twice")
    return found[0] if found else None


def _attribute_token(attrs: str, key: str, where: str = "") -> str | None:
    """A top-level attribute's plain value (``to_apply=%add`` -> ``add``, ``index=1`` -> ``1``)."""
    start = _top_level(attrs, key, where)
    return None if start is None else re.match(r"%?([\w.\-]*)", attrs[start:]).group(1)


def _hlo_attribute(attrs: str, key: str) -> str | None:
    start = _top_level(attrs, key)
    if start is None:
        return None
    rest = attrs[start:]
    if rest.startswith("{"):
        return _braced(rest, 0)
    mesh = re.match(r"mesh\[[^\]]*\]\s*(?:,\s*device_ids=\([^()]*(?:\([^()]*\))?\)\s*)?\{[^}]*\}", rest)
    if mesh:
        return mesh.group(0)
    iota = re.match(r"\[[\d,\s]*\]\s*<=\s*\[[\d,\s]*\](?:T\([\d,\s]*\))?", rest)
    return iota.group(0) if iota else re.match(r"[^,\s]*", rest).group(0)


def _hlo_collective(attrs: str, lineno: int, op: str, where: str) -> HloCollective:
    """One collective from its attributes (the line after its operand list, lexed)."""
    base = op.removesuffix("-start")
    try:
        groups_text = _hlo_attribute(attrs, "replica_groups")
        groups = parse_groups_text(groups_text) if groups_text is not None else ()
    except P2Error as err:
        raise P2Error(f"{where}:{lineno}: {op}: {err}") from None
    channel = _hlo_attribute(attrs, "channel_id")
    use_global = _hlo_attribute(attrs, "use_global_device_ids")
    mode = GroupMode.of(channel is not None, use_global == "true")
    dims = _hlo_attribute(attrs, "dimensions")
    dim = int(dims.strip("{}").split(",")[0]) if dims and base != "all-reduce" else None
    return HloCollective(lineno, op, _REDUCTIONS[base], groups, mode, dim)


@dataclass
class _Instruction:
    line: int
    name: str
    op: str
    operands: list[str]
    text: str  # the line with its strings blanked
    shape: str = ""
    operand_shapes: tuple[str, ...] = ()
    root: bool = False  # the computation's result (``ROOT``)
    args: str = ""  # the text between the operand list's parentheses
    attrs: str = ""  # the text after them: the attributes

    @property
    def keeps(self) -> bool:
        """Whether the op keeps every value and its position; a bitcast only between row-major layouts,
        where it is a reshape (across layouts it can be a transpose)."""
        if self.op == "bitcast":
            return all(_row_major(sh) for sh in (self.shape, *self.operand_shapes))
        return self.op in KEEPS

    @property
    def reshapes(self) -> bool:
        return self.op in ("reshape", "bitcast")


def _row_major(shape: str) -> bool:
    """Whether an HLO shape's layout is the default one, major to minor (``f32[4,8]{1,0}``)."""
    m = re.search(r"\[([\d,\s]*)\]\s*\{([^}:]*)", shape)
    if m is None:
        return True
    rank = len([d for d in m.group(1).split(",") if d.strip()])
    return [int(v) for v in m.group(2).split(",") if v.strip()] == list(range(rank - 1, -1, -1))


@dataclass
class _Computation:
    name: str
    entry: bool
    body: list[_Instruction] = field(default_factory=list)


def _split(text: str, start: int) -> tuple[str, str] | None:
    """(what the parentheses opened at ``start`` hold, the text after them: the attributes), or None when
    they do not close on the line."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + 1:i], text[i + 1:]
    return None


def _operands(inside: str, known: dict[str, _Instruction], where: str, lineno: int) -> list[str]:
    """The names of earlier instructions in an operand list; an instruction written inside it
    (``negate(f32[8] %a)``) or a ``%name`` not defined before is refused: the value it stands for would go
    untraced."""
    nested = re.search(r"(?<![\w.\-%])([a-z][a-z0-9\-]*)\(", inside)
    if nested:
        raise P2Error(f"{where}:{lineno}: an operand written as an instruction ({nested.group(1)}(…)); p2smt reads "
                      "operands by name only")
    # what is left once layouts and shapes (``f32[8]{0}``, ``(f32[8], s32[])``) are cut are operand names
    names = re.sub(r"\b[a-z]+\d*\[[^\]]*\]", " ", re.sub(r"\{[^{}]*\}", " ", inside))
    tokens = re.findall(r"%?([A-Za-z_][\w.\-]*)", names)
    unknown = next((t for t in tokens if t not in known), None)
    if unknown is not None:
        raise P2Error(f"{where}:{lineno}: operand %{unknown} is not defined before it")
    return [t for t in tokens if t in known]


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|/\*.*?\*/|//[^\n]*', re.DOTALL)


def _lexed(text: str, where: str) -> str:
    """The text as XLA's lexer reads it, in one pass from the left: each string blanked to ``""`` and each
    comment (``/* … */``, also across lines, and ``// …``) removed, newlines kept. Whichever starts first
    wins, so a quote inside a comment opens no string and a comment marker inside a string is text."""
    def blank(m: re.Match) -> str:
        token = m.group(0)
        return ('""' if token.startswith('"') else " ") + "\n" * token.count("\n")

    out = _TOKENS.sub(blank, text)
    stray = re.search(r'/\*|(?<!")"(?!")', out)
    if stray:
        raise P2Error(f"{where}:{out.count(chr(10), 0, stray.start()) + 1}: a comment or a string that does not end")
    return out


def _computations(lexed: str, where: str, split: bool = False) -> list[_Computation]:
    """Every computation of the lexed text with its instructions (their operands among the computation's own);
    a communication op that is not a reduction is refused unless the reading is ``split``."""
    out: list[_Computation] = []
    current: _Computation | None = None
    known: dict[str, _Instruction] = {}
    for lineno, line in enumerate(lexed.splitlines(), start=1):
        comp = _COMPUTATION.match(line)
        if comp and "=" not in line.split("{")[0]:
            current = _Computation(comp.group("name"), bool(comp.group("entry")))
            out.append(current)
            known = {}
            continue
        if line.strip() == "}":
            current = None
            continue
        m = _HLO_OP.match(line)
        if m is None:
            if current is not None and line.strip():  # an instruction in a form the reader does not know
                raise P2Error(f"{where}:{lineno}: a line p2smt cannot read as an instruction")
            continue
        op = m.group("op")
        if _opaque(op) and not split:
            raise unsupported(op, lineno, where)
        if current is None:
            raise P2Error(f"{where}:{lineno}: an instruction outside any computation")
        parts = _split(line, m.end() - 1)
        if parts is None and op not in _LITERALS:
            raise P2Error(f"{where}:{lineno}: an instruction whose operands go on past its line; p2smt reads one "
                          "instruction a line")
        args, attrs = parts or (line[m.end():], "")
        # a constant's or a parameter's parentheses hold a literal (``constant(-inf)``, ``parameter(0)``)
        operands = [] if op in _LITERALS else _operands(args, known, where, lineno)
        ins = _Instruction(lineno, m.group("name"), op, operands, line, m.group("shape"),
                           tuple(known[o].shape for o in operands), line.lstrip().startswith("ROOT"), args, attrs)
        known[ins.name] = ins
        current.body.append(ins)
    return out


def _sdy_mesh_sizes(header: str) -> list[int]:
    """The device count of each Shardy mesh the header's frontend attributes declare
    (``#sdy.mesh<["node"=4, "gpu"=4]>``: 16), as JAX prints HLO before SPMD partitioning."""
    out = []
    for axes in re.findall(r"#sdy\.mesh<\[([^\]]*)\]", header):
        sizes = [int(v) for v in re.findall(r'=\s*(\d+)', axes)]
        out.append(prod(sizes) if sizes else 1)
    return out


def _is_collective(ins: _Instruction) -> bool:
    return ins.op.removesuffix("-start") in _REDUCTIONS


def _opaque(op: str) -> bool:
    """Whether ``op`` communicates but is no reduction (a collective-permute, an all-to-all, …)."""
    return op.removesuffix("-start").removesuffix("-done") in _OTHERS


def communicates(op: str) -> bool:
    """Whether ``op`` starts communication (a reduction collective or another; not a ``-done`` that waits)."""
    return not op.endswith("-done") and (op.removesuffix("-start") in _REDUCTIONS or _opaque(op))


def _communicates(ins: _Instruction) -> bool:
    return _is_collective(ins) or _opaque(ins.op)


_LEAF = re.compile(r"\b(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[^\]]*)\]")


def _leaves(shape: str) -> list[tuple[str, tuple[int, ...]]]:
    """The arrays of an HLO shape, in order (``(f32[8]{0}, bf16[2,4])``); a bounded dynamic dim at its bound."""
    return [(m.group("type"), tuple(int(d.strip().removeprefix("<=")) for d in m.group("dims").split(",")
                                    if d.strip())) for m in _LEAF.finditer(shape)]


def _sized(found: HloCollective, ins: _Instruction, k: int, buffers: int, where: str) -> ReadCollective:
    """``found`` on its ``k``-th of ``buffers`` buffers, with the operand's and the result's sizes (an async
    start's shape holds its operands before its results)."""
    operand = (_leaves(ins.operand_shapes[k]) if k < len(ins.operand_shapes) else []) or [None]
    results = _leaves(ins.shape)
    if ins.op.endswith("-start") and len(results) == 2 * buffers:
        results = results[buffers:]
    result = results[k] if len(results) == buffers else results[-1] if results else operand[0]
    return ReadCollective.of(found, operand[0] or result, result, where)


def parse_hlo_text(text: str, where: str = "<hlo>") -> HloProgram:
    """The reduction collectives of an HLO text module: the entry computation's, in program order."""
    return read_hlo_text(text, where).program()


def read_hlo_text(text: str, where: str = "<hlo>", split: bool = False) -> ModuleReading:
    """An HLO text module read from its entry computation: to verify (``split`` False: one reduction program,
    refused where it is not) or split into chains (``reading.py``)."""
    lexed = _lexed(text, where)
    header = next((ln for ln in lexed.splitlines() if ln.startswith("HloModule")), None)
    if header is None:
        raise P2Error(f"{where}: not an HLO text module (no 'HloModule' line)")
    name = header.split()[1].rstrip(",")
    ints = {k: int(v) for k in ("replica_count", "num_partitions")
            if (v := _attribute_token(header, k, f"{where}: HloModule: ")) and v.isdigit()}
    if "num_partitions" not in ints and (meshes := _sdy_mesh_sizes(header)):  # HLO before partitioning
        if len(set(meshes)) > 1:
            raise P2Error(f"{where}: Shardy meshes of {sorted(set(meshes))} devices and no num_partitions: how many "
                          "devices the module runs on is not known")
        ints["num_partitions"] = meshes[0]
    space = DeviceSpace(ints.get("replica_count", 1), ints.get("num_partitions", 1))
    comps = _computations(lexed, where, split)
    by_name = {c.name: c for c in comps}
    entries = [c for c in comps if c.entry]
    if len(entries) != 1:
        raise P2Error(f"{where}: {len(entries)} ENTRY computations; an HLO module has one")
    chain, wrapped = Chain(where, split), set()

    def here(ins: _Instruction) -> str:
        return f"{where}:{ins.line}: {ins.op}: "

    def called(ins: _Instruction) -> _Computation | None:
        """The computation a fusion or an ``async-start`` runs (``calls=``), if the module has it."""
        name = _attribute_token(ins.attrs, "calls", here(ins)) if ins.op in ("fusion", "async-start") else None
        return by_name.get(name) if name else None

    def keeps(ins: _Instruction) -> bool:
        """Whether the op keeps every value and its position (a fusion: every op of its computation does)."""
        if ins.op in ("fusion", "async-start"):
            comp = called(ins)
            return comp is not None and all(i.keeps or i.op == "parameter" for i in comp.body)
        return ins.keeps

    def reshapes(ins: _Instruction) -> bool:
        comp = called(ins)
        return any(i.reshapes for i in comp.body) if comp is not None else ins.reshapes

    def collective(ins: _Instruction, operands: list[Value]) -> Value:
        """The collective's result: one per operand (a variadic collective runs a step on each buffer)."""
        found = _hlo_collective(ins.attrs, ins.line, ins.op, where)
        if found.collective is not Collective.ALL_GATHER:
            apply = _attribute_token(ins.attrs, "to_apply", here(ins))
            if apply is None or apply not in by_name:
                raise P2Error(f"{where}:{ins.line}: {ins.op} names no reduction computation (to_apply)")
            comp = by_name[apply]
            require_sum((SHARDING if sharding(i) else i.op for i in comp.body), f"to_apply=%{comp.name}", where,
                        ins.line, ins.op)
            if not _adds_its_parameters(comp, sharding):
                raise P2Error(f"{where}:{ins.line}: {ins.op} reduces with an add that is not of its two parameters "
                              f"(to_apply=%{comp.name}); p2smt proves sums only")
        count = max(len(operands), 1)
        sized = (lambda k: _sized(found, ins, k, count, where)) if split else (lambda k: ReadCollective.of(found))
        results = tuple(chain.add(sized(k), _flat(v)) for k, v in enumerate(operands)) or \
            (chain.add(sized(0), Flow()),)
        return results[0] if len(results) == 1 else results

    def wrapped_operands(ins: _Instruction, wrapper: _Computation, inner: _Instruction,
                         operands: list[Value]) -> list[Value]:
        """The async-start's operands in the order its collective reads them (as XLA requires, the wrapper
        holds its parameters and the collective only)."""
        other = next((i for i in wrapper.body if i.op != "parameter" and i is not inner), None)
        if other is not None:
            raise P2Error(f"{where}:{other.line}: {other.op} in the async computation %{wrapper.name} beside its "
                          "collective; p2smt reads async computations of parameters and one collective only")
        index = {i.name: int(i.args) for i in wrapper.body if i.op == "parameter" and i.args.strip().isdigit()}
        if any(index.get(o, len(operands)) >= len(operands) for o in inner.operands):
            raise P2Error(f"{where}:{ins.line}: {ins.op} does not pass what its collective reads")
        return [operands[index[o]] for o in inner.operands]

    inlined: set[str] = set()
    budget = [MAX_RUN]
    followed: dict[int, set[str]] = {}  # read split: the loop bodies and branches run, by the line naming them
    source = text.splitlines()  # the lines as written (strings kept)

    def sharding(ins: _Instruction) -> bool:
        """Whether ``ins`` is a sharding annotation: a ``custom-call`` of one operand to ``"Sharding"``."""
        return ins.op == "custom-call" and len(ins.operands) == 1 and \
            _top_string(source[ins.line - 1], "custom_call_target") == "Sharding"

    holds = _Holds(by_name)

    def loop(ins: _Instruction, operands: list[Value], stack: tuple[str, ...]) -> Value | None:
        """Read split, a ``while`` whose body (not its condition) runs communication: the body read as a scope of
        its own that runs the loop's trip count times, on what the loop carries (``carried``: read again until it
        settles); what the loop gives is what it carries. None: not such a loop."""
        names = [_attribute_token(ins.attrs, key, here(ins)) for key in ("condition", "body")]
        if len(operands) != 1 or not all(n in by_name for n in names) or holds(names[0]) or not holds(names[1]) \
                or names[1] in stack:
            return None
        runs = known_trip_count(source[ins.line - 1])
        token = chain.enter(runs if runs is not None else _counted_loop(ins, by_name, *names))
        carry = chain.settle(operands[0], lambda now: run(by_name[names[1]], [now], (*stack, names[1])), _carried)
        if carry is None:
            raise P2Error(f"{where}:{ins.line}: what the while carries does not settle; p2smt cannot follow it")
        chain.leave(token)
        inlined.add(names[1])
        followed[ins.line] = {names[1]}
        return carry

    def branches(ins: _Instruction, operands: list[Value], stack: tuple[str, ...]) -> Value | None:
        """Read split, a ``conditional`` whose branches run communication: each branch a scope of its own that runs
        once or not at all (``runs`` None); what it gives is any branch's result. None: not such a one."""
        listed = _hlo_attribute(ins.attrs, "branch_computations")
        names = re.findall(r"%?([\w.\-]+)", listed.strip("{}")) if listed else \
            [_attribute_token(ins.attrs, key, here(ins)) for key in ("true_computation", "false_computation")]
        if not names or len(operands) != len(names) + 1 or not all(n in by_name and n not in stack for n in names) \
                or not any(holds(n) for n in names):
            return None
        given = []
        for name, arg in zip(names, operands[1:], strict=True):
            token = chain.enter(None)
            given.append(run(by_name[name], [arg], (*stack, name)))
            chain.leave(token)
        inlined.update(names)
        followed[ins.line] = set(names)
        return _either(given)

    def run(comp: _Computation, args: list[Value], stack: tuple[str, ...]) -> Value:
        """Run ``comp`` in line on its arguments' values (the entry's parameters are the module's input); its
        root's value. A ``call`` runs its callee here, each time it is called."""
        flows: dict[str, Value] = {}
        for ins in comp.body:
            budget[0] -= 1
            if budget[0] < 0:
                raise P2Error(f"{where}: more than {MAX_RUN:,} instructions once calls are expanded")
            if ins.op == "parameter":
                k = int(ins.args) if ins.args.strip().isdigit() else -1
                flows[ins.name] = INPUT_FLOW if comp.entry else args[k] if 0 <= k < len(args) else UNTRACED_FLOW
                continue
            flows[ins.name] = step(ins, [flows[o] for o in ins.operands], stack)
        root = next((ins for ins in comp.body if ins.root), comp.body[-1] if comp.body else None)
        return flows[root.name] if root is not None else Flow()

    def step(ins: _Instruction, operands: list[Value], stack: tuple[str, ...]) -> Value:
        """The value of one instruction from its operands' values."""
        wrapper = called(ins) if ins.op == "async-start" else None
        if wrapper is not None and (talks := [i for i in wrapper.body if _opaque(i.op)]):
            wrapped.add(wrapper.name)
            return _Started(chain.communicate(talks[0].line, talks[0].op, _flat(tuple(operands))))
        if _opaque(ins.op):  # read split: recorded; its -done passes on what its start gives
            flow = _flat(tuple(operands))
            return flow if ins.op.endswith("-done") else chain.communicate(ins.line, ins.op, flow)
        inner = [i for i in wrapper.body if _is_collective(i)] if wrapper is not None else []
        if len(inner) > 1:
            raise P2Error(f"{where}:{inner[1].line}: two collectives in one async computation %{wrapper.name}")
        if wrapper is not None:
            wrapped.add(wrapper.name)
        found = ins if _is_collective(ins) else inner[0] if inner else None  # a -done op is no collective
        if found is not None:  # its operands meet only at the collective, which the chain checks
            if inner:
                operands = wrapped_operands(ins, wrapper, inner[0], operands)
            result = collective(found, operands)
            return _Started(result) if ins.op.endswith("-start") else result
        if ins.op == "call":
            callee = _attribute_token(ins.attrs, "to_apply", here(ins))
            if callee is None or callee not in by_name:
                raise P2Error(f"{where}:{ins.line}: a call whose computation p2smt cannot find")
            if callee in stack:
                raise P2Error(f"{where}:{ins.line}: %{callee} calls itself; p2smt reads straight-line code")
            inlined.add(callee)
            return run(by_name[callee], operands, (*stack, callee))
        if ins.op in _DONE and len(operands) == 1 and isinstance(operands[0], _Started):
            return operands[0] if ins.op == "async-update" else operands[0].result
        if ins.op == "convert" and len(operands) == 1 and ins.operand_shapes:
            types = [leaves[0][0] if (leaves := _leaves(sh)) else "" for sh in (ins.operand_shapes[0], ins.shape)]
            return converted(_flat(operands[0]), *types)
        if ins.op == "fusion" and (comp := called(ins)) is not None and any(i.op == "convert" for i in comp.body) \
                and all(i.op in ("parameter", "convert") or i.keeps for i in comp.body) and comp.name not in stack:
            return run(comp, operands, (*stack, comp.name))  # converts XLA fused: each read as it converts
        if split and ins.op in ("while", "conditional") and \
                (taken := (loop if ins.op == "while" else branches)(ins, operands, stack)) is not None:
            return taken
        if ins.op == "tuple":
            return tuple(operands)
        if ins.op == "get-tuple-element" and len(operands) == 1:
            index = _attribute_token(ins.attrs, "index", here(ins))
            whole = operands[0]
            return whole[int(index)] if isinstance(whole, tuple) and index and index.isdigit() and \
                int(index) < len(whole) else _flat(whole)
        if ins.op in _PASSES and len(operands) == 1:  # a copy, a barrier: its operand's buffers as they are
            return operands[0]
        if ins.op == "copy-start" and len(operands) == 1:  # (destination, source, context)
            return operands[0], operands[0], Flow()
        if ins.op == "copy-done" and len(operands) == 1:
            started = operands[0]
            return started[0] if isinstance(started, tuple) and len(started) == 3 else _flat(started)
        return Flow.through(ins.op, (_flat(v) for v in operands), keeps(ins), reshapes(ins))

    output = run(entries[0], [], (entries[0].name,))
    for comp in comps:
        stray = [i for i in comp.body if _communicates(i)]
        if stray and not comp.entry and comp.name not in wrapped and comp.name not in inlined:
            raise P2Error(f"{where}:{stray[0].line}: {stray[0].op} lies in computation %{comp.name}, not in the "
                          "entry computation; p2smt reads straight-line entry code only")
    _follows_every_collective(comps, by_name, {entries[0].name} | inlined | wrapped, where, followed)
    outputs = [_flat(v) for v in output] if isinstance(output, tuple) else [_flat(output)]
    if chain.in_loops:
        chain.reread = lambda: read_hlo_text(text, where).program()
    meshes = sdy_meshes(text.splitlines()[lexed.splitlines().index(header)], where) if split else ()
    return ModuleReading.of(name, "hlo", space, meshes, chain, outputs, [_flat(output)])


class _Holds:
    """Which computations run communication, also through the computations they name (cached)."""

    def __init__(self, by_name: dict[str, _Computation]):
        self.by_name = by_name
        self.holds: dict[str, bool] = {}

    def named(self, ins: _Instruction) -> list[str]:
        """The computations an instruction names: values only, a name after '=', '{' or ',' that no '=' follows
        (``body=%b``, not the key ``body``)."""
        return [t for t in re.findall(r"[={,]\s*%?([\w.\-]+)(?![\w.\-])(?!\s*=)", ins.attrs) if t in self.by_name]

    def __call__(self, name: str) -> bool:
        if name not in self.holds:
            self.holds[name] = False  # a cycle adds nothing
            comp = self.by_name[name]
            self.holds[name] = any(_communicates(i) or any(self(n) for n in self.named(i)) for i in comp.body)
        return self.holds[name]


def _follows_every_collective(comps: list[_Computation], by_name: dict[str, _Computation], ran: set[str],
                              where: str, followed: dict[int, set[str]]) -> None:
    """Refuse a computation that runs a collective, also through the computations it names, when a computation
    the reader ran names it other than as a ``call`` or an ``async-start`` it ran in line, or (read split) the
    body of a ``while`` or the branches of a ``conditional`` it followed (``followed``: by line): how often a
    collective runs elsewhere (a loop's condition, a fusion's computation) is not in the text."""
    holds = _Holds(by_name)
    for comp in comps:
        if comp.name not in ran:
            continue
        for ins in comp.body:
            inline = _attribute_token(ins.attrs, "to_apply" if ins.op == "call" else "calls") \
                if ins.op in ("call", "async-start") else None
            for ref in holds.named(ins):
                if ref != inline and ref not in followed.get(ins.line, ()) and holds(ref):
                    raise P2Error(f"{where}:{ins.line}: {ins.op} runs %{ref}, which runs a collective, in a way "
                                  "p2smt does not follow; it reads straight-line code only (calls run in line)")


def _top_value(line: str, key: str) -> int | None:
    """Where the value of an instruction's top-level attribute ``key=`` starts in its line as written (strings
    kept): a ``key=`` in a string, a comment or nested deeper is none; None also when given twice."""
    def blank(m: re.Match) -> str:  # the same length, so positions in it are positions in the line
        token = m.group(0)
        return '"' + "x" * (len(token) - 2) + '"' if token.startswith('"') else " " * len(token)

    try:
        return _top_level(_TOKENS.sub(blank, line), key)
    except P2Error:
        return None


def _top_string(line: str, key: str) -> str | None:
    """A top-level string attribute's value (``custom_call_target="Sharding"``: ``Sharding``)."""
    at = _top_value(line, key)
    m = re.match(r'"((?:[^"\\]|\\.)*)"', line[at:]) if at is not None else None
    return m.group(1) if m else None


def known_trip_count(line: str) -> int | None:
    """XLA's ``known_trip_count`` in a ``while`` instruction's top-level ``backend_config`` (the line as written,
    strings kept). One in a string, a comment or nested deeper is no count of this loop, nor one of two."""
    at = _top_value(line, "backend_config")
    try:
        config, _ = json.JSONDecoder().raw_decode(line[at:]) if at is not None else (None, 0)
        if isinstance(config, str):  # an older XLA prints backend_config as a string
            config = json.loads(config)
        n = config["known_trip_count"]["n"]
        return int(n) if str(n).isdigit() else None
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def _adds_its_parameters(comp: _Computation, sharding: Callable[[_Instruction], bool]) -> bool:
    """Whether a reduction computation's result is ``add`` of its parameters 0 and 1, one each (through
    converts, copies and ``sharding`` annotations): an add of one parameter twice passes a check of op names
    alone."""
    by = {i.name: i for i in comp.body}

    def source(name: str) -> _Instruction | None:
        ins = by.get(name)
        while ins is not None and (ins.op in ("convert", "copy", "bitcast") or sharding(ins)) and \
                len(ins.operands) == 1:
            ins = by.get(ins.operands[0])
        return ins

    root = source(next((i.name for i in comp.body if i.root), comp.body[-1].name if comp.body else ""))
    if root is None or root.op != "add" or len(root.operands) != 2:
        return False
    found = [source(o) for o in root.operands]
    numbers = [int(i.args) if i is not None and i.op == "parameter" and i.args.strip().isdigit() else -1
               for i in found]
    return sorted(numbers) == [0, 1]


@dataclass(frozen=True)
class _Started:
    """An async collective under way (its ``-start``): only its ``-done`` gives its ``result``. XLA's start
    value is a tuple of the operands and the result, so read any other way it is untraced."""

    result: Value


Value = Flow | tuple | _Started
"""What an HLO value is computed from: a flow, a tuple of values (a tuple, a variadic collective's results), or
an async collective under way."""
_LITERALS = frozenset({"constant", "parameter"})
MAX_RUN = 1_000_000  # instructions run once calls are expanded: a bound on time for call trees that multiply
_DONE = frozenset({"all-reduce-done", "all-gather-done", "reduce-scatter-done", "async-done", "async-update"})
_PASSES = frozenset({"copy", "opt-barrier", "optimization-barrier"})
"""Ops whose result is their operand, tuple elements in place (a fusion may reorder them: it is read whole)."""


def _carried(before: Value, init: Value, out: Value) -> Value:
    """``carried`` on each element of a tuple a loop carries."""
    if all(isinstance(v, tuple) and len(v) == len(init) for v in (before, out)) and isinstance(init, tuple):
        return tuple(_carried(b, i, o) for b, i, o in zip(before, init, out, strict=True))
    return carried(_flat(before), _flat(init), _flat(out))


def _either(values: list[Value]) -> Value:
    """``joined`` on each element of the tuples the branches of a conditional give."""
    if all(isinstance(v, tuple) and len(v) == len(values[0]) for v in values):
        return tuple(_either([v[k] for v in values]) for k in range(len(values[0])))
    return joined("conditional", (_flat(v) for v in values))


def _counted_loop(ins: _Instruction, by_name: dict[str, _Computation], cond: str, body: str) -> int | None:
    """The iterations of a ``while`` that is a counted loop (``loops.py``) written out (HLO before XLA's passes):
    the condition's root compares element k of its parameter with a constant, the body's root tuple gives
    element k plus a constant back, and the loop starts from a tuple whose element k is a constant."""
    def by(comp: _Computation) -> dict[str, _Instruction]:
        return {i.name: i for i in comp.body}

    def root(comp: _Computation) -> _Instruction | None:
        return next((i for i in comp.body if i.root), None)

    def element(ins: _Instruction | None, comp: _Computation) -> int | None:  # get-tuple-element(param), index=k
        if ins is None or ins.op != "get-tuple-element" or len(ins.operands) != 1 or \
                getattr(by(comp).get(ins.operands[0]), "op", None) != "parameter":
            return None
        index = _attribute_token(ins.attrs, "index")
        return int(index) if index and index.isdigit() else None

    def value(ins: _Instruction | None) -> int | None:
        text = ins.args.strip() if ins is not None and ins.op == "constant" else ""
        return int(text) if re.fullmatch(r"-?\d+", text) else None

    home = next((c for c in by_name.values() if any(i is ins for i in c.body)), None)
    cond_c, body_c = by_name[cond], by_name[body]
    test, ret = root(cond_c), root(body_c)
    if home is None or test is None or ret is None or test.op != "compare" or len(test.operands) != 2 or \
            ret.op != "tuple" or len(ins.operands) != 1:
        return None
    direction = _attribute_token(test.attrs, "direction") or ""
    left, right = (by(cond_c).get(o) for o in test.operands)
    if element(left, cond_c) is None:
        left, right, direction = right, left, {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, direction)
    k, limit = element(left, cond_c), value(right)
    init = by(home).get(ins.operands[0])
    if k is None or limit is None or init is None or init.op != "tuple" or k >= len(init.operands) or \
            k >= len(ret.operands):
        return None
    add = by(body_c).get(ret.operands[k])
    if add is None or add.op != "add" or len(add.operands) != 2:
        return None
    a, b = (by(body_c).get(o) for o in add.operands)
    step = value(b) if element(a, body_c) == k else value(a) if element(b, body_c) == k else None
    start = value(by(home).get(init.operands[k]))
    kind = re.match(r"\s*([su])(\d+)\[\]", left.shape)
    if step is None or start is None or kind is None:
        return None
    return counted(direction, start, step, limit, int(kind.group(2)), kind.group(1) == "s")


def _flat(value: Value) -> Flow:
    """One flow for a whole value (a tuple's elements together)."""
    if isinstance(value, Flow):
        return value
    if isinstance(value, _Started):
        return UNTRACED_FLOW
    return Flow.through("tuple", (_flat(v) for v in value), True)


def parse_module(text: str, where: str = "<hlo>") -> HloProgram:
    """HLO text or StableHLO, told apart by the header: its one reduction program (the verify reading)."""
    return read_module(text, where).program()


def read_module(text: str, where: str = "<hlo>", split: bool = False) -> ModuleReading:
    """HLO text or StableHLO, told apart by the header, read to verify or ``split`` (``reading.py``)."""
    if re.search(r"^HloModule\b", text, re.MULTILINE):
        return read_hlo_text(text, where, split)
    if re.search(r"^\s*module\b", text, re.MULTILINE):
        return read_stablehlo(text, where, split)
    raise P2Error(f"{where}: neither an HLO text module ('HloModule …') nor StableHLO ('module @… {{')")


MAX_DEVICE_ORDER_BYTES = 16 << 20
"""Largest device order file read (a million ids fit in a few MiB): ``/dev/urandom`` or a huge file is refused
before it is read, not read into memory."""


def read_device_order(path: str | Path) -> tuple[int, ...]:
    """A mesh device order: a JSON list, or an object with ``device_order`` (``placements --export jax-mesh``);
    a regular file of at most ``MAX_DEVICE_ORDER_BYTES``."""
    path = Path(path)
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            raise P2Error(f"{path}: not a regular file; the device order is a JSON file")
        with path.open("rb") as handle:
            raw = handle.read(MAX_DEVICE_ORDER_BYTES + 1)
    except OSError as err:
        raise P2Error(f"cannot read {path}: {err.strerror}") from None
    if len(raw) > MAX_DEVICE_ORDER_BYTES:
        raise P2Error(f"{path}: more than {MAX_DEVICE_ORDER_BYTES >> 20} MiB; a device order is a short JSON list")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise P2Error(f"{path}: not a JSON device order") from None
    order = data.get("device_order") if isinstance(data, dict) else data
    if not isinstance(order, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in order):
        raise P2Error(f"{path}: expected a list of device ids or an object with 'device_order'")
    return tuple(order)


def hlo_plan(program: HloProgram, num_devices: int, device_order: Sequence[int] | None = None) -> ExplicitPlan:
    """The explicit plan on system devices: XLA id i is system device ``device_order[i]``."""
    if program.space.num_devices != num_devices:
        raise P2Error(f"the module runs on {program.space.num_devices} devices ({program.space.replicas} replicas "
                      f"× {program.space.partitions} partitions) but the system has {num_devices}")
    order = tuple(device_order) if device_order is not None else tuple(range(num_devices))
    if sorted(order) != list(range(num_devices)):
        raise P2Error(f"the device order must list each of the {num_devices} system devices once")
    if not program.collectives:
        raise P2Error(f"module {program.name}: no all-reduce, reduce-scatter or all-gather to verify")
    dims = {c.dimension for c in program.collectives if c.dimension is not None}
    if len(dims) > 1:
        raise P2Error(f"reduce-scatter/all-gather along different dimensions {sorted(dims)}: p2smt's position "
                      "model follows one dimension")
    steps = []
    for c in program.collectives:
        groups = global_groups(c.groups, c.mode, program.space)
        steps.append(ExplicitStep(c.collective, normalize(tuple(tuple(order[d] for d in g) for g in groups),
                                                          num_devices)))
    return tuple(steps)
