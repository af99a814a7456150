"""Read the collectives of a StableHLO module (MLIR text, ``jax.jit(f).lower(x).as_text()``).

The text is read as a tree of statements and regions, then run from ``@main`` as straight-line code:
``func.call`` runs its callee (twice when called twice), ``stablehlo.composite`` its decomposition,
``sdy.manual_computation`` and a collective's own combiner region run in line. A collective inside any
other region (a ``while`` loop, a ``case`` or ``if`` branch, …), directly or through a call, is an error:
p2smt reads straight-line code only, and counting a loop's collective once would prove a double count.
Each collective must sum and start or extend a chain (``hlo_program.py``); a value defined in a form the
reader does not know, or never defined, is untraced, and a collective that reads one is refused.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from p2smt.errors import P2Error
from p2smt.frontend.hlo_program import (
    INPUT_FLOW,
    UNTRACED_FLOW,
    Chain,
    Flow,
    HloCollective,
    HloProgram,
    require_sum,
    unsupported,
)
from p2smt.frontend.reading import ModuleReading, ReadCollective
from p2smt.frontend.sdy_text import sdy_meshes
from p2smt.model.collectives import Collective, Group
from p2smt.model.replica_groups import DeviceSpace, GroupMode

__all__ = ["parse_stablehlo", "read_stablehlo"]

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SYMBOL = re.compile(r'@"((?:[^"\\]|\\.)*)"')
_STATEMENT = re.compile(r"^\s*(?:(?P<results>%[\w.\-#:$]+(?:\s*,\s*%[\w.\-#:$]+)*)\s*=\s*)?"
                        r"\"?(?P<op>(?:[a-z_]+\.)+[a-z_0-9]+|return|call|module)\b")
_DEFINITION = re.compile(r"(?:^|[\s;])%[\w.\-$]+(?::\d+)?\s*=(?!=)")
_REDUCTIONS = {"all_reduce": Collective.ALL_REDUCE, "reduce_scatter": Collective.REDUCE_SCATTER,
               "all_gather": Collective.ALL_GATHER}
_OTHERS = ("collective_permute", "all_to_all", "collective_broadcast", "send", "recv")
_IN_LINE = ("sdy.manual_computation",)  # ops whose one region runs once, where the op stands
MAX_STEPS = 100_000  # collectives after expanding calls: a bound on memory for call trees that multiply


@dataclass
class _Statement:
    line: int
    op: str | None  # None: a line that only opens a region of the statement before (``cond {``)
    results: list[str]
    operands: list[str]
    text: str
    regions: list[list[_Statement]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)  # the arguments its (first) region declares
    block: list[str] = field(default_factory=list)  # the arguments of its region's block (``^bb0(%a, %b)``)
    tail: str = ""  # the line that closes its last region (``}) : (tensor<8xf32>) -> tensor<8xf32>``)

    @property
    def kind(self) -> str:
        """The op's name without its dialect (``all_reduce``), or the op itself."""
        return self.op.split(".", 1)[1] if self.op and self.op.startswith(("stablehlo.", "mhlo.")) else self.op or ""


def _names(text: str) -> list[str]:
    """The values a text names, ``%v`` or one result ``%v#k`` of a multi-result op."""
    return re.findall(r"%([\w.\-$]+(?:#\d+)?)", text)


def _results(text: str) -> list[str]:
    """The values a statement defines: ``%v`` or ``%v:N`` (then ``v#0`` … ``v#N-1``)."""
    out = []
    for name, count in re.findall(r"%([\w.\-$]+)(?::(\d+))?", text):
        out += [f"{name}#{k}" for k in range(int(count))] if count else [name]
    return out


def _outside_parentheses(text: str) -> str:
    """The text with what every balanced ``(…)`` holds left out."""
    while True:
        inner = re.sub(r"\([^()]*\)", "", text)
        if inner == text:
            return text
        text = inner


def _paren_groups(text: str) -> list[str]:
    """The top-level ``(…)`` groups of a text, in order."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
            if depth == 1:
                start = i + 1
        elif ch == ")" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start:i])
    return out


def _tree(text: str, where: str) -> tuple[list[_Statement], str, DeviceSpace]:
    """The module's statements as a tree (a region is a list of statements), its name and device space."""
    top: list[_Statement] = []
    stack: list[tuple[_Statement, list[_Statement]]] = []  # open regions: (owner, its statements)
    body = top

    def open_region(owner: _Statement) -> list[_Statement]:
        region: list[_Statement] = []
        owner.regions.append(region)
        stack.append((owner, region))
        return region

    def close_region() -> tuple[_Statement, list[_Statement]]:
        """The owner of the region closed, and the statements its owner's line belongs to."""
        owner, _ = stack.pop()
        return owner, stack[-1][1] if stack else top
    for lineno, line in enumerate(text.splitlines(), start=1):
        # a quoted symbol (``@"<lambda>"``) becomes a plain one before strings are blanked, same name for same text
        line = _SYMBOL.sub(lambda m: "@q" + m.group(1).encode().hex(), line)
        quoted = _STRING.sub(lambda s: s.group(0) if s.group(0).startswith(('"stablehlo.', '"mhlo.')) else '""',
                             line)
        clean = _STRING.sub('""', line).split("//", 1)[0]  # strings blanked first: a "//" in one is no comment
        quoted = quoted.split("//", 1)[0]
        stripped = clean.strip()
        if stripped.startswith("^"):  # a block: the region's first, with its arguments
            if not stack or stack[-1][1] or stack[-1][0].block:
                raise P2Error(f"{where}:{lineno}: a second block in a region; p2smt reads straight-line code")
            stack[-1][0].block = _names(clean) or ["^"]  # ``^bb0(%a: tensor<f32> loc(…), %b: …):`` names them
        if not stripped or stripped.startswith("^"):  # a comment-only line is empty once cut
            continue
        opens, closes = clean.count("{"), clean.count("}")
        if stripped.startswith("}"):  # closes the region, may open the owner's next (``} do {``, ``}, {``)
            if not stack:
                raise P2Error(f"{where}:{lineno}: '}}' closes no region")
            owner, body = close_region()
            owner.tail = clean
            if opens > closes - 1:
                body = open_region(owner)
            continue
        m = _STATEMENT.match(quoted)
        if m is None:  # ``cond {``: the next region of the statement before
            if opens > closes and body:
                body = open_region(body[-1])
            elif not stripped.startswith("#"):  # only attribute and location aliases stand alone
                raise P2Error(f"{where}:{lineno}: a statement p2smt cannot read")
            continue
        if _DEFINITION.search(_outside_parentheses(quoted[m.end():])):  # ``while(%i = %c)`` binds, in parentheses
            raise P2Error(f"{where}:{lineno}: two statements on one line; p2smt reads one statement a line")
        if m.group("results") and opens <= closes and " : " not in clean:  # every op's type closes its line
            raise P2Error(f"{where}:{lineno}: a statement that goes on past its line; p2smt reads one statement "
                          "a line")
        head = quoted[m.end():]
        groups = _paren_groups(head)
        # generic form and calls: ``op(%a, %b)``; custom form: ``op %a, %b : type`` (values before the colon)
        generic = head.lstrip('"').lstrip().startswith("(")
        operands = _names(groups[0]) if generic and groups else _names(head.split(" : ")[0])
        args = _names(groups[-1]) if opens > closes and len(groups) > 1 else []
        stmt = _Statement(lineno, m.group("op"), _results(m.group("results") or ""), operands, quoted, args=args)
        body.append(stmt)
        if opens > closes:
            body = open_region(stmt)
        elif closes > opens and stack:  # ``}) : (…)`` after a statement on the same line
            _, body = close_region()
    header = re.search(r"module\s+@([\w.\-]+)", text)
    ints = {k: int(m.group(1)) for k in ("num_replicas", "num_partitions")
            if (m := re.search(rf"mhlo\.{k}\s*=\s*(\d+)", text))}
    return top, header.group(1) if header else "module", DeviceSpace(ints.get("num_replicas", 1),
                                                                     ints.get("num_partitions", 1))


def _properties(text: str) -> str:
    """A statement's text with what nested dictionaries hold left out: its own properties and attributes
    (``<{…}>``, ``{…}``) stay, a key inside a value such as ``composite_attributes = {…}`` is no property."""
    out, depth = [], 0
    for ch in text:
        if ch == "{":
            depth += 1
            if depth >= 2:
                continue
        elif ch == "}":
            depth -= 1
            if depth >= 1:
                continue
        elif depth >= 2:
            continue
        out.append(ch)
    return "".join(out)


def _key(name: str) -> str:
    """A pattern for property ``name`` itself, not a longer name ending in it (``areplica_groups``, ``x.name``)
    nor a value so named (``%use_global_device_ids``)."""
    return rf"(?<![\w.$%]){name}"


def _dense_groups(attrs: str, lineno: int, where: str) -> tuple[Group, ...]:
    found = re.findall(_key("replica_groups") + r"\s*=", attrs)
    if len(found) > 1:
        raise P2Error(f"{where}:{lineno}: replica_groups given twice")
    m = re.search(_key("replica_groups") + r"\s*=\s*dense<([^>]*)>\s*:\s*tensor<(\d+)x(\d+)xi64>", attrs)
    if m is None:
        raise P2Error(f"{where}:{lineno}: replica_groups not in the dense<…> : tensor<GxSxi64> form")
    body, g, s = m.group(1).strip(), int(m.group(2)), int(m.group(3))
    if not body:
        return ()
    rows = json.loads(body) if body.startswith("[") else [[int(body)] * s for _ in range(g)]
    return tuple(tuple(int(d) for d in r if d >= 0) for r in rows)


def _tensor(text: str) -> tuple[str, tuple[int, ...]]:
    """``8x16xf32`` (what ``tensor<…>`` holds, an encoding after a comma left out): (element type, shape)."""
    rest, dims = text.split(",")[0].strip(), []
    while (cut := rest.partition("x"))[1] and cut[0].isdigit():
        dims.append(int(cut[0]))
        rest = cut[2]
    return rest, tuple(dims)


def _types(signature: str) -> list[tuple[str, tuple[int, ...]]]:
    """Every ``tensor<…>`` of a type signature, in order."""
    out, at = [], signature.find("tensor<")
    while at >= 0:
        depth, end = 0, at + len("tensor")
        for end in range(at + len("tensor"), len(signature)):
            depth += {"<": 1, ">": -1}.get(signature[end], 0)
            if depth == 0:
                break
        out.append(_tensor(signature[at + len("tensor<"):end]))
        at = signature.find("tensor<", end)
    return out


def _sized(found: HloCollective, stmt: _Statement, where: str) -> ReadCollective:
    """``found`` with its operand's and its result's sizes, from the op's type signature."""
    signature = (stmt.tail or stmt.text).rsplit(" : ", 1)[-1]
    operands, _, results = signature.partition("->")
    ins, outs = _types(operands), _types(results)
    if not ins or not outs:
        raise P2Error(f"{where}:{stmt.line}: {stmt.kind} whose operand and result types p2smt cannot read")
    return ReadCollective.of(found, ins[0], outs[0], where)


def _collective(stmt: _Statement, where: str) -> HloCollective:
    text = _properties(stmt.text)
    handle = re.search(_key("channel_handle") + r"\s*=\s*#(?:stablehlo|mhlo)\.channel_handle<handle\s*=\s*(\d+)",
                       text)
    mode = GroupMode.of(handle is not None and int(handle.group(1)) > 0,
                        bool(re.search(_key("use_global_device_ids") + r"(?![\w.$])", text)))
    dim = re.search(_key("(?:scatter_dimension|all_gather_dim)") + r"\s*=\s*(\d+)", text)
    collective = _REDUCTIONS[stmt.kind]
    if collective is not Collective.ALL_GATHER:
        ops = [s.kind for region in stmt.regions for s in region]
        require_sum(ops, "its reduction region", where, stmt.line, stmt.kind)
        if not _adds_its_arguments(stmt):
            raise P2Error(f"{where}:{stmt.line}: {stmt.kind} reduces with an add that is not of its region's two "
                          "arguments; p2smt proves sums only")
    return HloCollective(stmt.line, stmt.kind, collective, _dense_groups(text, stmt.line, where), mode,
                         int(dim.group(1)) if dim else None)


def _adds_its_arguments(stmt: _Statement) -> bool:
    """Whether a collective's reduction region returns ``add`` of its block's arguments, each once (through
    converts and sharding constraints): an add of one argument twice passes a check of op names alone."""
    region = stmt.regions[0] if stmt.regions else []
    defined = {r: s for s in region for r in s.results}

    def source(name: str) -> str:
        s = defined.get(name)
        while s is not None and (s.kind == "convert" or s.op == "sdy.sharding_constraint") and len(s.operands) == 1:
            name, s = s.operands[0], defined.get(s.operands[0])
        return name

    ret = next((s for s in region if s.kind == "return"), None)
    if ret is None or not ret.operands:
        return False
    used = []
    for value in ret.operands:
        add = defined.get(source(value))
        if add is None or add.kind != "add" or len(add.operands) != 2:
            return False
        used += [source(o) for o in add.operands]
    return sorted(used) == sorted(stmt.block) and len(set(used)) == len(used)


def _symbol(stmt: _Statement) -> str | None:
    """The first ``@name`` a statement names (a function's, a callee's)."""
    m = re.search(r"@([\w.\-$]+)", stmt.text)
    return m.group(1) if m else None


def _functions(top: list[_Statement], where: str, inside: bool = False) -> dict[str, _Statement]:
    """The functions of the module by name; a module inside the module is refused (which ``@main`` runs, and
    which functions a call sees, would be guessed)."""
    out = {}
    for stmt in top:
        if stmt.op == "module":
            if inside:
                raise P2Error(f"{where}:{stmt.line}: a module inside the module; p2smt reads one module")
            out |= _functions([s for region in stmt.regions for s in region], where, True)
        elif stmt.op == "func.func" and (name := _symbol(stmt)):
            out[name] = stmt
    return out


def _body(fn: _Statement) -> list[_Statement]:
    return fn.regions[0] if fn.regions else []


def _params(fn: _Statement) -> list[str]:
    """A function's parameters, in order."""
    return _names((_paren_groups(fn.text) or [""])[0])


def _bind(names: list[str], flows: list[Flow], missing: Flow = UNTRACED_FLOW) -> dict[str, Flow]:
    """Each name to the flow in its position; one with no flow gets ``missing`` (the entry's parameters:
    the module's input)."""
    return {n: flows[i] if i < len(flows) else missing for i, n in enumerate(names)}


def _nested(stmts: list[_Statement]):
    """Every statement of ``stmts`` and of their regions, at any depth."""
    for s in stmts:
        yield s
        for region in s.regions:
            yield from _nested(region)


KEEPS = frozenset({"reshape", "optimization_barrier", "constant", "iota"})
"""StableHLO ops that keep every value and its position (a constant or an iota brings no contribution; not
``convert``, which can round or wrap, nor ``bitcast_convert``; ``Chain`` checks a reshape's dimension)."""


def _keeps(stmt: _Statement) -> bool:
    if stmt.kind == "custom_call":  # JAX's sharding annotation only
        return bool(re.search(r"custom_call\s+@Sharding(?![\w.\-$])", stmt.text))
    return stmt.kind in KEEPS or stmt.op in ("sdy.sharding_constraint",)


def _callee(stmt: _Statement, where: str) -> str | None:
    """The function a call runs, or a composite's decomposition (what XLA runs for it)."""
    if stmt.kind == "composite":
        m = re.search(_key("decomposition") + r"\s*=\s*@([\w.\-$]+)", _properties(stmt.text))
        if m is None:
            raise P2Error(f"{where}:{stmt.line}: a composite whose decomposition p2smt cannot read")
        return m.group(1)
    if stmt.op in ("func.call", "call"):
        name = _symbol(stmt)
        if name is None:  # never read past a call: its callee may hold a collective
            raise P2Error(f"{where}:{stmt.line}: a call whose callee p2smt cannot read")
        return name
    return None


def parse_stablehlo(text: str, where: str = "<stablehlo>") -> HloProgram:
    """The reduction collectives of a StableHLO module, run from ``@main`` as straight-line code."""
    return read_stablehlo(text, where).program()


def read_stablehlo(text: str, where: str = "<stablehlo>", split: bool = False) -> ModuleReading:
    """A StableHLO module run from ``@main``: read to verify (``split`` False) or split into chains."""
    top, name, space = _tree(text, where)
    funcs = _functions(top, where)
    if not funcs:
        raise P2Error(f"{where}: no func.func in the module")
    public = [n for n, f in funcs.items() if re.search(r"func\.func\s+public\b", f.text)]
    entry = "main" if "main" in funcs else public[0] if len(public) == 1 else next(iter(funcs)) if len(funcs) == 1 \
        else None
    if entry is None:
        raise P2Error(f"{where}: no @main and {len(public)} public functions: which one runs is not known")
    chain = Chain(where, split)
    holds: dict[str, _Statement | None] = {}  # function -> its first collective, through calls (None: none)
    memo: dict[tuple[str, tuple[Flow, ...]], list[Flow]] = {}  # calls of functions without collectives

    def first_collective(stmts: list[_Statement], seen: tuple[str, ...]) -> _Statement | None:
        for s in stmts:
            if s.kind in _OTHERS and not split:
                raise unsupported(s.kind, s.line, where)
            if s.kind in _REDUCTIONS or s.kind in _OTHERS:
                return s
            callee = _callee(s, where)
            if callee is not None and callee in funcs and callee not in seen and \
                    (held := holding(callee, seen)) is not None:
                return held
            found = next((f for region in s.regions if (f := first_collective(region, seen)) is not None), None)
            if found is not None:
                return found
        return None

    def holding(fn: str, seen: tuple[str, ...]) -> _Statement | None:
        """The first collective function ``fn`` runs, through its calls (cached; None: it runs none)."""
        if fn not in holds:
            holds[fn] = None  # a call back into ``fn`` finds none here; running it is refused
            holds[fn] = first_collective(_body(funcs[fn]), (*seen, fn))
        return holds[fn]

    def flow_of(scope: dict[str, Flow], name: str) -> Flow:
        # a value the reader cannot trace: a collective that reads it is refused, never proved
        return scope.get(name) or scope.get(name.split("#")[0]) or UNTRACED_FLOW

    def call(s: _Statement, callee: str, flows: list[Flow], stack: tuple[str, ...]) -> list[Flow]:
        if callee not in funcs:
            raise P2Error(f"{where}:{s.line}: call of @{callee}, which the module does not define")
        if callee in stack:
            raise P2Error(f"{where}:{s.line}: @{callee} calls itself; p2smt reads straight-line code only")
        key, pure = (callee, tuple(flows)), holding(callee, stack) is None
        if pure and key in memo:
            return memo[key]
        out = run(_body(funcs[callee]), _bind(_params(funcs[callee]), flows), (*stack, callee))
        if pure:
            memo[key] = out
        return out

    def run(stmts: list[_Statement], scope: dict[str, Flow], stack: tuple[str, ...]) -> list[Flow]:
        """Run ``stmts`` in line; the flows of the values its ``return`` gives back."""
        returned: list[Flow] = []
        for s in stmts:
            flows = [flow_of(scope, o) for o in s.operands]
            callee = _callee(s, where)
            if callee is None:
                for sym in re.findall(r"@([\w.\-$]+)", s.text):
                    if sym in funcs and (held := holding(sym, stack)) is not None:
                        raise P2Error(f"{where}:{s.line}: {s.op} names @{sym}, which runs the {held.kind} at line "
                                      f"{held.line}, in a way p2smt does not follow (only calls and composites)")
            if s.kind in _OTHERS and not split:
                first_collective([s], stack)  # raises naming it
            if s.op in ("return", "func.return", "sdy.return"):
                returned = flows
                continue
            if s.kind in _REDUCTIONS:
                if len(chain.collectives) >= MAX_STEPS:
                    raise P2Error(f"{where}: more than {MAX_STEPS:,} collectives once calls are expanded")
                found = _collective(s, where)
                results = [chain.add(_sized(found, s, where) if split else ReadCollective.of(found),
                                     Flow.through(s.kind, flows, True))]
            elif s.kind in _OTHERS:  # read split: recorded, what it gives is its own
                results = [chain.communicate(s.line, s.kind, Flow.through(s.kind, flows, True))]
            elif callee is not None:
                results = call(s, callee, flows, stack)
            elif s.regions and s.op in _IN_LINE:
                inner = dict(scope) | _bind(s.args, flows)
                results = run(s.regions[0], inner, stack)
            elif s.regions:
                found = first_collective([r for region in s.regions for r in region], stack)
                if found is not None:
                    raise P2Error(f"{where}:{found.line}: {found.kind} runs inside the {s.op} at line {s.line}; "
                                  "p2smt reads straight-line code only (no loops, branches or other regions)")
                used = [flow_of(scope, o) for r in _nested([r for region in s.regions for r in region])
                        for o in r.operands if o in scope]
                results = [Flow.through(s.kind, flows + used, False)]
            elif s.kind == "optimization_barrier":  # each result is its operand
                results = flows
            else:
                results = [Flow.through(s.kind, flows, _keeps(s), s.kind == "reshape")]
            for i, r in enumerate(s.results):
                scope[r] = results[i] if i < len(results) else Flow.through(s.kind, results, True)
            if s.results and "#" in s.results[0]:
                scope[s.results[0].split("#")[0]] = Flow.through(s.kind, results, True)
        return returned

    outputs = run(_body(funcs[entry]), _bind(_params(funcs[entry]), [], INPUT_FLOW), (entry,))
    return ModuleReading.of(name, "stablehlo", space, sdy_meshes(text, where) if split else (), chain, outputs)
