"""Read the collectives of an XLA HLO text module or a StableHLO module into an explicit plan.

HLO text is what ``jax.jit(f).lower(x).compile().as_text()`` prints; StableHLO is ``.lower(x).as_text()``.
``all-reduce``, ``reduce-scatter`` and ``all-gather`` (and their async ``-start``/``-done`` pairs, or
``async-start`` wrappers) are read in program order with their replica groups and dimensions.
Collectives that are not reductions (collective-permute, all-to-all, …) are errors naming the op and
line, never skipped. XLA's ids are mapped to the system's devices through the mesh's device order
(``placements --export jax-mesh``): id i is mesh position i, i.e. system device ``order[i]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from p2smt.errors import P2Error
from p2smt.model.collectives import Collective, ExplicitPlan, ExplicitStep, Group
from p2smt.model.replica_groups import DeviceSpace, GroupMode, global_groups, normalize, parse_groups_text

_REDUCTIONS = {"all-reduce": Collective.ALL_REDUCE, "reduce-scatter": Collective.REDUCE_SCATTER,
               "all-gather": Collective.ALL_GATHER}
_OTHERS = ("collective-permute", "all-to-all", "ragged-all-to-all", "collective-broadcast", "send", "recv")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_HLO_OP = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shape>.+?)\s+(?P<op>[a-z][a-z0-9\-]*)\(")
_COMPUTATION = re.compile(r"^\s*(?P<entry>ENTRY\s+)?%?(?P<name>[\w.\-]+)\s*(?:\(.*\)\s*->\s*.*)?\{\s*$")
_STABLE_OP = re.compile(r"\b(?:stablehlo|mhlo)\.(?P<op>all_reduce|reduce_scatter|all_gather|collective_permute|"
                        r"all_to_all|collective_broadcast|send|recv)\b")
_STABLE_REDUCTIONS = {"all_reduce": Collective.ALL_REDUCE, "reduce_scatter": Collective.REDUCE_SCATTER,
                      "all_gather": Collective.ALL_GATHER}


@dataclass(frozen=True)
class HloCollective:
    """One reduction collective as written: line, op, collective, groups (module ids), mode, dimension."""

    line: int
    op: str
    collective: Collective
    groups: tuple[Group, ...]
    mode: GroupMode
    dimension: int | None


@dataclass(frozen=True)
class HloProgram:
    """The reduction collectives of a module in program order, and the replicas × partitions it runs on."""

    name: str
    dialect: str
    space: DeviceSpace
    collectives: tuple[HloCollective, ...]

    def to_json(self) -> dict:
        return {"module": self.name, "dialect": self.dialect, "replicas": self.space.replicas,
                "partitions": self.space.partitions,
                "collectives": [{"line": c.line, "op": c.op, "collective": c.collective.value,
                                 "replica_groups": [list(g) for g in c.groups], "mode": c.mode.value,
                                 "dimension": c.dimension} for c in self.collectives]}


def _braced(text: str, start: int) -> str:
    """The balanced ``{…}`` starting at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start:i + 1]
    raise P2Error(f"unbalanced braces in {text[start:start + 60]!r}")


def _hlo_attribute(attrs: str, key: str) -> str | None:
    m = re.search(rf"\b{key}=", attrs)
    if m is None:
        return None
    rest = attrs[m.end():]
    if rest.startswith("{"):
        return _braced(rest, 0)
    mesh = re.match(r"mesh\[[^\]]*\]\s*\{[^}]*\}", rest)
    if mesh:
        return mesh.group(0)
    iota = re.match(r"\[[\d,\s]*\]\s*<=\s*\[[\d,\s]*\](?:T\([\d,\s]*\))?", rest)
    return iota.group(0) if iota else re.match(r"[^,\s]*", rest).group(0)


def _hlo_collective(line: str, lineno: int, op: str, where: str) -> HloCollective:
    attrs = _STRING.sub('""', line)
    base = op.removesuffix("-start")
    groups_text = _hlo_attribute(attrs, "replica_groups")
    try:
        groups = parse_groups_text(groups_text) if groups_text is not None else ()
    except P2Error as err:
        raise P2Error(f"{where}:{lineno}: {op}: {err}") from None
    channel = _hlo_attribute(attrs, "channel_id")
    use_global = _hlo_attribute(attrs, "use_global_device_ids")
    mode = GroupMode.of(channel is not None, use_global == "true")
    dims = _hlo_attribute(attrs, "dimensions")
    dim = int(dims.strip("{}").split(",")[0]) if dims and base != "all-reduce" else None
    return HloCollective(lineno, op, _REDUCTIONS[base], groups, mode, dim)


def _unsupported(op: str, lineno: int, where: str) -> P2Error:
    return P2Error(f"{where}:{lineno}: {op} is not a reduction collective; p2smt does not support it "
                   "(only all-reduce, reduce-scatter and all-gather)")


def parse_hlo_text(text: str, where: str = "<hlo>") -> HloProgram:
    """The reduction collectives of an HLO text module, in the entry computation's order."""
    header = next((ln for ln in text.splitlines() if ln.startswith("HloModule")), None)
    if header is None:
        raise P2Error(f"{where}: not an HLO text module (no 'HloModule' line)")
    name = header.split()[1].rstrip(",")
    ints = {k: int(m.group(1)) for k in ("replica_count", "num_partitions")
            if (m := re.search(rf"\b{k}=(\d+)", header))}
    space = DeviceSpace(ints.get("replica_count", 1), ints.get("num_partitions", 1))
    per_computation: dict[str, list[HloCollective]] = {}
    entry: list[HloCollective | str] = []
    current, is_entry = None, False
    for lineno, line in enumerate(text.splitlines(), start=1):
        comp = _COMPUTATION.match(line)
        if comp and "=" not in line.split("{")[0]:
            current, is_entry = comp.group("name"), bool(comp.group("entry"))
            per_computation.setdefault(current, [])
            continue
        m = _HLO_OP.match(line)
        if m is None:
            continue
        op = m.group("op")
        base = op.removesuffix("-start").removesuffix("-done")
        if base in _OTHERS:
            raise _unsupported(op, lineno, where)
        if op == "async-start" and is_entry:
            called = re.search(r"\bcalls=%?([\w.\-]+)", _STRING.sub('""', line))
            if called:
                entry.append(called.group(1))
            continue
        if base not in _REDUCTIONS or op.endswith("-done"):
            continue
        found = _hlo_collective(line, lineno, op, where)
        if is_entry:
            entry.append(found)
        else:
            per_computation.setdefault(current or "", []).append(found)
    ordered: list[HloCollective] = []
    used: set[str] = set()
    for item in entry:
        if isinstance(item, str):
            ordered += per_computation.get(item, [])
            used.add(item)
        else:
            ordered.append(item)
    for comp_name, found in per_computation.items():
        if found and comp_name not in used:
            raise P2Error(f"{where}:{found[0].line}: {found[0].op} lies in computation %{comp_name}, not in the "
                          "entry computation; p2smt reads straight-line entry code only")
    return HloProgram(name, "hlo", space, tuple(ordered))


def _dense_groups(attrs: str, lineno: int, where: str) -> tuple[Group, ...]:
    m = re.search(r"replica_groups\s*=\s*dense<([^>]*)>\s*:\s*tensor<(\d+)x(\d+)xi64>", attrs)
    if m is None:
        raise P2Error(f"{where}:{lineno}: replica_groups not in the dense<…> : tensor<GxSxi64> form")
    body, g, s = m.group(1).strip(), int(m.group(2)), int(m.group(3))
    if not body:
        return ()
    if body.startswith("["):
        rows = json.loads(body)
    else:
        rows = [[int(body)] * s for _ in range(g)]
    return tuple(tuple(int(d) for d in r if d >= 0) for r in rows)


def parse_stablehlo(text: str, where: str = "<stablehlo>") -> HloProgram:
    """The reduction collectives of a StableHLO (MLIR text) module, in text order within one function."""
    header = re.search(r"module\s+@([\w.\-]+)", text)
    name = header.group(1) if header else "module"
    ints = {k: int(m.group(1)) for k in ("num_replicas", "num_partitions")
            if (m := re.search(rf"mhlo\.{k}\s*=\s*(\d+)", text))}
    space = DeviceSpace(ints.get("num_replicas", 1), ints.get("num_partitions", 1))
    out: list[HloCollective] = []
    function, first_function = None, None
    for lineno, line in enumerate(text.splitlines(), start=1):
        clean = _STRING.sub(lambda s: s.group(0) if s.group(0).startswith('"stablehlo.') else '""', line)
        fn = re.search(r"func\.func\s+(?:\w+\s+)?@([\w.\-]+)", clean)
        if fn:
            function = fn.group(1)
        m = _STABLE_OP.search(clean)
        if m is None:
            continue
        op = m.group("op")
        if op not in _STABLE_REDUCTIONS:
            raise _unsupported(op, lineno, where)
        first_function = first_function or function
        if function != first_function:
            raise P2Error(f"{where}:{lineno}: collectives in two functions (@{first_function}, @{function}); "
                          "p2smt reads the collectives of one function only")
        handle = re.search(r"channel_handle\s*=\s*#stablehlo\.channel_handle<handle\s*=\s*(\d+)", clean)
        has_channel = handle is not None and int(handle.group(1)) > 0
        mode = GroupMode.of(has_channel, bool(re.search(r"\buse_global_device_ids\b", clean)))
        dim = re.search(r"\b(?:scatter_dimension|all_gather_dim)\s*=\s*(\d+)", clean)
        out.append(HloCollective(lineno, op, _STABLE_REDUCTIONS[op], _dense_groups(clean, lineno, where), mode,
                                 int(dim.group(1)) if dim else None))
    return HloProgram(name, "stablehlo", space, tuple(out))


def parse_module(text: str, where: str = "<hlo>") -> HloProgram:
    """HLO text or StableHLO, told apart by the header."""
    if re.search(r"^HloModule\b", text, re.MULTILINE):
        return parse_hlo_text(text, where)
    if re.search(r"^\s*module\b", text, re.MULTILINE):
        return parse_stablehlo(text, where)
    raise P2Error(f"{where}: neither an HLO text module ('HloModule …') nor StableHLO ('module @… {{')")


def read_device_order(path: str | Path) -> tuple[int, ...]:
    """A mesh device order: a JSON list, or an object with ``device_order`` (``placements --export jax-mesh``)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise P2Error(f"cannot read {path}: {err.strerror}") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
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
