"""One conformance suite for every registered encoding variant and option set (issue 4, item 2).

Every variant found by ``available_encodings()`` (a new file in ``encodings/`` is picked up
automatically) must return exactly the enumerative engine's program set, in canonical order, with
status "complete": (a) on the distinct synthesis problems of docs/evaluation-grid.md's grid (max length 5) and (b) on
random hierarchies (hypothesis). Option sets: the defaults plus each non-default value of each option
once (derived from the variant's typed options), plus ``EXTRA_OPTIONS``.

Tiers: the grid's small problems run in every ``pytest`` (``_in_ci``: default options up to
``CI_GRID_MAX_K`` devices, other option sets the one-level problems); the rest of the grid up to
``SLOW_OPTIONS_MAX_K`` devices for the option sets (``SLOW_DEFAULTS_MAX_K_BY_VARIANT`` for the defaults of
the slowest variants) is marked ``slow`` (``.ci/run`` sets
``P2SMT_SLOW=1`` and runs it):

    P2SMT_SLOW=1 pytest tests/test_encoding_conformance.py -m slow
"""

from __future__ import annotations

import json
import typing
from functools import cache
from math import prod

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from p2smt.errors import P2Error
from p2smt.model.dsl import problem
from p2smt.model.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Placement, matrices
from p2smt.model.problem import SynthesisProblem
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.smt.base import EncodingSpec
from p2smt.smt.engine import enumerate_z3
from p2smt.smt.registry import available_encodings, load_encoding
from p2smt.synth.enumerative import enumerate_programs

GRID_MAX_LEN = 5

# Option sets worth testing beyond the derived ones (combinations a variant's owner cares about).
EXTRA_OPTIONS: dict[str, list[dict]] = {
    "bitvec": [{"choice": "index", "padding": "exact", "lemmas": True}],
}
# CI tiers of the grid (the rest is ``slow``): default options up to CI_GRID_MAX_K devices (per variant
# overrides below); other option sets only the one-level problems (5 candidates) up to that size.
# bool-matrix's defaults on the whole grid are also tests/test_z3_conformance.py's job.
CI_GRID_MAX_K = 4
CI_GRID_MAX_K_BY_VARIANT = {"bool-matrix": 8}
# Slow tier: the defaults on the whole grid; other option sets up to this many devices (the two-level
# problems 2x2, 2x4 and 4x2 take the same encoding paths as 2x8 ... 4x16, at a fraction of the time:
# values' option sets cost ~15-35 s of CPU each at 8-16 devices, which the CI budget cannot pay 6 x 8 times).
SLOW_OPTIONS_MAX_K = 8
SLOW_OPTIONS_MAX_K_BY_VARIANT = {"representative": 64}  # ~1 s a problem: the whole grid
# Defaults stop at 16 devices for these (CI, 2 cores): bitvec took 230-320 s at 32 devices and at 64 grew
# past 23 GiB (OOM-killed); values took 150-300 s at 32-64.
SLOW_DEFAULTS_MAX_K_BY_VARIANT = {"bitvec": 16, "values": 16}
# Random hierarchies: largest device count per variant (slow variants get smaller ones).
RANDOM_MAX_K = {"bool-matrix": 8, "representative": 8}
RANDOM_MAX_K_DEFAULT = 6
RANDOM_EXAMPLES = 3


def _variants() -> list[EncodingSpec]:
    return available_encodings()


def _derived_options(spec: EncodingSpec) -> list[dict]:
    """The defaults, then each non-default value of each option once (Literal, bool, bounded int)."""
    out: list[dict] = [{}]
    for name, field in spec.options.model_fields.items():
        ann, default = field.annotation, field.default
        values: list = []
        if typing.get_origin(ann) is typing.Literal:
            values = [v for v in typing.get_args(ann) if v != default]
        elif ann is bool:
            values = [not default]
        elif ann is int:  # a small bounded range (e.g. a depth 0..3): its ends
            lo = next((m.ge for m in field.metadata if getattr(m, "ge", None) is not None), None)
            hi = next((m.le for m in field.metadata if getattr(m, "le", None) is not None), None)
            if lo is not None and hi is not None and hi - lo <= 3:
                values = [v for v in (lo, hi) if v != default]
        out.extend({name: v} for v in values)
    for extra in EXTRA_OPTIONS.get(spec.name, []):
        if extra not in out:
            out.append(extra)
    return out


def _option_id(opts: dict) -> str:
    return "defaults" if not opts else ",".join(f"{k}={v}" for k, v in opts.items())


CASES = [(spec.name, opts) for spec in _variants() for opts in _derived_options(spec)]
CASE_IDS = [f"{name}[{_option_id(opts)}]" for name, opts in CASES]


HIERARCHY: dict[SynthesisProblem, SynthesisHierarchy] = {}
"""The hierarchy each grid problem was first built from (wrapper strategies such as representative take it)."""


@cache
def grid_problems() -> tuple[SynthesisProblem, ...]:
    """The distinct synthesis problems of the whole grid (many matrices give the same one)."""
    for cfg in paper_grid():
        system = load_system(cfg.system)
        for m in matrices(system.sizes, cfg.axes):
            h = synthesis_hierarchy(Placement(system.sizes, cfg.axes, m), cfg.reduction_axes, system.level_names)
            HIERARCHY.setdefault(problem(h), h)
    return tuple(sorted(HIERARCHY, key=lambda p: (p.num_devices, len(p.candidates), HIERARCHY[p].sizes)))


@cache
def expected(prob: SynthesisProblem, max_len: int) -> tuple[tuple[int, ...], ...]:
    return tuple(enumerate_programs(prob, max_len))


def _grid_label(prob: SynthesisProblem) -> str:
    return f"k{prob.num_devices}-sizes{'x'.join(map(str, HIERARCHY[prob].sizes[1:]))}-c{len(prob.candidates)}"


def _in_ci(name: str, opts: dict, prob: SynthesisProblem) -> bool:
    if prob.num_devices > CI_GRID_MAX_K_BY_VARIANT.get(name, CI_GRID_MAX_K):
        return False
    return not opts or HIERARCHY[prob].nontrivial_levels <= 1


def _in_suite(name: str, opts: dict, prob: SynthesisProblem) -> bool:
    if opts:
        return prob.num_devices <= SLOW_OPTIONS_MAX_K_BY_VARIANT.get(name, SLOW_OPTIONS_MAX_K)
    return prob.num_devices <= SLOW_DEFAULTS_MAX_K_BY_VARIANT.get(name, prob.num_devices)


def _grid_params():
    out = []
    for (name, opts), case_id in zip(CASES, CASE_IDS):
        for i, prob in enumerate(grid_problems()):
            if not _in_suite(name, opts, prob):
                continue
            marks = () if _in_ci(name, opts, prob) else (pytest.mark.slow,)
            out.append(pytest.param(name, opts, i, id=f"{case_id}-{_grid_label(prob)}", marks=marks))
    return out


def _assert_same(
    name: str, opts: dict, prob: SynthesisProblem, max_len: int, h: SynthesisHierarchy | None = None
) -> None:
    res = enumerate_z3(prob, max_len, encoding=name, options=opts, hierarchy=h)
    want = expected(prob, max_len)
    assert res.status == "complete", (name, opts, res.stats)
    got = tuple(res.programs)
    if got != want:
        missing = [prob.label(p) for p in want if p not in set(got)][:3]
        extra = [prob.label(p) for p in got if p not in set(want)][:3]
        pytest.fail(f"{name} {json.dumps(opts)}: {len(got)} programs vs {len(want)}; "
                    f"missing {missing}, extra {extra}")


def test_grid_has_the_expected_distinct_problems():
    probs = grid_problems()
    assert 10 <= len(probs) <= 16
    assert max(p.num_devices for p in probs) == 64
    assert {len(expected(p, GRID_MAX_LEN)) for p in probs} == {3, 93}


def test_every_variant_is_covered():
    names = {name for name, _ in CASES}
    assert {"bool-matrix", "bitvec", "values"} <= names
    assert all(({} in [o for n, o in CASES if n == name]) for name in names)


@pytest.mark.parametrize(("name", "opts", "index"), _grid_params())
def test_grid_program_set_equals_enumerative(name, opts, index):
    prob = grid_problems()[index]
    _assert_same(name, opts, prob, GRID_MAX_LEN, HIERARCHY[prob])


# ---------------------------------------------------------------------------- random hierarchies


def _random_problem(
    levels: list[int], kept: int, require_progress: bool
) -> tuple[SynthesisProblem, SynthesisHierarchy]:
    """Reduction over ``levels`` (one axis split across them); with ``kept`` > 1 a second, kept axis
    on an extra level gives several goal groups (hierarchy kind "a")."""
    n = prod(levels)
    names = tuple(f"l{i}" for i in range(len(levels)))
    if kept == 1:
        placement = Placement(tuple(levels), (n,), (tuple(levels),))
        h = synthesis_hierarchy(placement, (0,), names)
    else:
        placement = Placement((kept, *levels), (kept, n), ((kept, *[1] * len(levels)), (1, *levels)))
        h = synthesis_hierarchy(placement, (1,), ("rep", *names), "a")
    return problem(h, require_progress), h


def _random_case(name: str):
    max_k = RANDOM_MAX_K.get(name, RANDOM_MAX_K_DEFAULT)

    @st.composite
    def case(draw):
        levels = draw(st.lists(st.integers(2, 6), min_size=1, max_size=3).filter(lambda ls: prod(ls) <= max_k))
        kept = draw(st.sampled_from([1, 1, 2])) if prod(levels) * 2 <= max_k else 1
        progress = draw(st.sampled_from([True, True, False]))
        max_len = 4 if prod(levels) * kept <= 4 else 3
        return levels, kept, progress, max_len

    return case()


@pytest.mark.parametrize(("name", "opts"), CASES, ids=CASE_IDS)
def test_random_hierarchies_equal_enumerative(name, opts):
    @settings(
        max_examples=RANDOM_EXAMPLES, deadline=None, derandomize=True, database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(_random_case(name))
    def check(case):
        levels, kept, progress, max_len = case
        prob, h = _random_problem(levels, kept, progress)
        _assert_same(name, opts, prob, max_len, h)

    check()


# ---------------------------------------------------------------------------- errors


def test_unknown_encoding_lists_the_available_ones():
    with pytest.raises(P2Error) as err:
        load_encoding("nope")
    message = str(err.value)
    assert "unknown encoding 'nope'" in message
    for spec in _variants():
        assert spec.name in message


@pytest.mark.parametrize("name", [spec.name for spec in _variants()])
def test_bad_options_name_the_option_and_list_the_known_ones(name):
    spec = load_encoding(name)
    prob = grid_problems()[0]
    with pytest.raises(P2Error) as err:
        enumerate_z3(prob, 1, encoding=name, options={"no_such_option": 1})
    message = str(err.value)
    assert "no_such_option" in message and name in message
    for option in spec.options.model_fields:
        assert option in message
    for field_name, field in spec.options.model_fields.items():
        if typing.get_origin(field.annotation) is typing.Literal:
            with pytest.raises(P2Error, match=field_name):
                enumerate_z3(prob, 1, encoding=name, options={field_name: "no-such-value"})
            break


def test_cli_unknown_encoding_exits_2_with_the_list(run_cli):
    rc, _out, err = run_cli("synth", "--system", "a100-2x16", "--axes", "2,16", "--reduce", "0", "--engine", "z3",
                           "--encoding", "nope")
    assert rc == 2
    assert "nope" in err and "bool-matrix" in err and "bitvec" in err


def test_cli_bad_encoding_option_exits_2(run_cli):
    rc, _out, err = run_cli("synth", "--system", "a100-2x16", "--axes", "2,16", "--reduce", "0", "--engine", "z3",
                           "--encoding", "bitvec", "--encoding-options", json.dumps({"choice": "gray"}))
    assert rc == 2
    assert "choice" in err and "bitvec" in err


def _terminal_cases() -> list[tuple[str, SynthesisProblem]]:
    """Problems on both sides of each clause of ``goal_is_terminal``: progress off, devices outside every
    goal group (hierarchy (a) with a global master scope), and groups within one goal group."""
    system = load_system("a100-2x16")
    out = []
    for kind, scope in (("d", "per-ancestor"), ("a", "global"), ("b", "per-ancestor"), ("c", "per-ancestor")):
        placement = Placement(system.sizes, (2, 16), ((1, 2), (2, 8)))
        h = synthesis_hierarchy(placement, (1,), system.level_names, kind, scope)
        for progress in (True, False):
            out.append((f"{kind}-{scope}-{progress}", problem(h, progress)))
    return out


@pytest.mark.parametrize("name, prob", _terminal_cases(), ids=[n for n, _ in _terminal_cases()])
def test_goal_is_terminal_agrees_at_both_former_call_sites(name, prob):
    """bitvec and the checked encodings once had their own ``goal_is_terminal`` (only bitvec's looked at
    progress and at devices outside every goal group): both now read the one stricter definition."""
    from p2smt.smt.structure import goal_is_terminal

    bitvec = load_encoding("bitvec").create(prob, 2)
    checked = load_encoding("bool-matrix").create(prob, 2)
    assert bitvec.terminal == checked.terminal == goal_is_terminal(prob)
    if not prob.require_progress:
        assert not checked.terminal
    outside = set(range(prob.num_devices)) - {d for g in prob.goal_groups for d in g}
    if any(set(g) & outside for c in prob.candidates for g in c.groups):
        assert not checked.terminal
