"""The experiment harness: result lines, order, summary, plot, timeouts, failures and bad input.

Small plug-in encodings written into a temporary folder exercise the paths a real encoding rarely
takes (a run that hangs, a solver that gives up, an encoding that returns invalid programs, one that
misses a program); they are loaded through the registry exactly like user plug-ins.
"""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path

import pytest

from p2smt.errors import P2Error
from p2smt.runs.configs import _build, load_configs, shipped_configs
from p2smt.runs.experiment import parse_variants, run_experiment, run_key
from p2smt.runs.expreport import STATUSES, plot, render_summary, summarize
from p2smt.runs.store import read_rows
from p2smt.smt.registry import available_encodings
from p2smt.synth.enumerative import enumerate_programs

TINY = """\
description: two tiny hierarchies
max_len: 2
configs:
  - levels: [2]
  - levels: [2, 2]
    level_names: [node, gpu]
  - levels: [2, 2]        # the same problem again: deduplicated
"""
FIELDS = {
    "p2smt", "z3", "encoding", "options", "variant", "config", "config_index", "k", "levels", "hierarchy",
    "max_len", "repetition", "seed", "timeout_s", "status", "wall_seconds", "declare_seconds", "programs",
    "programs_sha256", "solver_calls", "conflicts", "decisions", "propagations", "memory_mb", "max_memory_mb",
    "max_rss_mb", "recheck_seconds", "error", "stats",
}

PLUGIN_BASE = '''
import time
import z3
from p2smt.smt.base import ACCEPTED, Encoding, EncodingOptions, EncodingSpec, Refinement


class OneStep(Encoding):
    """Programs of exactly one step: an integer choice of candidate, every model accepted."""

    def declare(self, solver):
        self.c = z3.Int("c", self.context)
        self.on = z3.Bool("len1", self.context)
        solver.add(0 <= self.c, self.c < len(self.problem.candidates))

    def length_assumptions(self, length):
        return [self.on] if length == 1 else [z3.Not(self.on), self.on]

    def decode(self, model):
        return (model.eval(self.c).as_long(),)

    def blocking_clause(self, program):
        return self.c != program[0]
'''
PLUGINS = {
    "liar": "class Enc(OneStep):\n    name = 'liar'\n",
    "giveup": "class Enc(OneStep):\n    name = 'giveup'\n\n    def refine(self, solver, program, timeout_ms=None):\n"
              "        return Refinement(False, 'unknown')\n",
    "sleeper": "class Enc(OneStep):\n    name = 'sleeper'\n\n    def declare(self, solver):\n"
               "        time.sleep(120)\n",
}
LOSSY = '''
from p2smt.smt.base import EncodingOptions, EncodingSpec, Refinement
from p2smt.smt.registry import load_encoding

BASE = load_encoding("bool-matrix")


def make(problem, max_len, options):
    """bool-matrix that silently drops the first program it finds (an incomplete encoding)."""
    enc = BASE.create(problem, max_len)
    plain = enc.refine
    dropped = []

    def refine(solver, program, timeout_ms=None):
        verdict = plain(solver, program, timeout_ms)
        if verdict.accepted and not dropped:
            dropped.append(program)
            solver.add(enc.blocking_clause(program))
            return Refinement(False, "program")
        return verdict

    enc.refine = refine
    enc.batch_refine = False
    return enc


ENCODING = EncodingSpec("lossy", "drops one program", EncodingOptions, make)
'''


def _plugins(folder: Path) -> Path:
    folder.mkdir()
    for name, body in PLUGINS.items():
        spec = f"\nENCODING = EncodingSpec({name!r}, 'test plug-in', EncodingOptions, lambda p, n, o: Enc(p, n))\n"
        (folder / f"{name}.py").write_text(PLUGIN_BASE + "\n\n" + body + spec)
    (folder / "lossy.py").write_text(textwrap.dedent(LOSSY))
    return folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One real run: bool-matrix and values, two configurations, two repetitions, with a plot."""
    folder = tmp_path_factory.mktemp("exp")
    cfg = folder / "tiny.yaml"
    cfg.write_text(TINY)
    points = load_configs(cfg)
    variants = parse_variants("bool-matrix,values")
    out = folder / "sub" / "r.jsonl"
    seen = []
    rows = run_experiment(variants, points, out, repeat=2, timeout_s=120, seed=7, progress=seen.append)
    return {"points": points, "variants": variants, "rows": rows, "out": out, "seen": seen, "folder": folder}


def test_configs_are_deduplicated_and_labelled(tiny):
    points = tiny["points"]
    assert [p.label for p in points] == ["levels 2", "levels 2x2"]
    assert [(p.k, p.levels, p.max_len) for p in points] == [(2, 1, 2), (4, 2, 2)]
    assert points[1].also == ("levels 2x2",)
    assert points[1].hierarchy == (("root", 1), ("node", 2), ("gpu", 2))


def test_lines_are_written_in_order_with_every_field(tiny):
    rows, out = tiny["rows"], tiny["out"]
    assert read_rows(out) == json.loads(json.dumps(rows))  # what was returned is what was written
    assert tiny["seen"] == rows
    order = [(r["config_index"], r["repetition"], r["variant"]) for r in rows]
    assert order == [(c, rep, v) for c in (0, 1) for rep in (0, 1) for v in ("bool-matrix", "values")]
    for r in rows:
        assert FIELDS <= set(r), FIELDS - set(r)
        assert r["status"] == "complete" and r["status"] in STATUSES
        assert r["seed"] == 7 + r["repetition"] and r["max_len"] == 2 and r["timeout_s"] == 120
        assert r["z3"].count(".") >= 2 and r["wall_seconds"] > 0 and r["solver_calls"] >= 2
        assert r["conflicts"] is not None and r["decisions"] is not None and r["memory_mb"] > 0
        _, prob = _build(tiny["points"][r["config_index"]].spec)
        assert r["programs"] == len(enumerate_programs(prob, 2))
    digests = {(r["config_index"], r["programs_sha256"]) for r in rows}
    assert len(digests) == 2  # every variant and repetition found the same set on each configuration


def test_resume_keeps_finished_runs_and_runs_only_the_missing_ones(tiny):
    out = tiny["out"]
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:-2]) + lines[-2][:30])  # a kill mid-write after six runs
    seen = []
    rows = run_experiment(tiny["variants"], tiny["points"], out, repeat=2, timeout_s=120, seed=7,
                          progress=seen.append, resume=True)
    assert [(r["config_index"], r["repetition"], r["variant"]) for r in seen] == [
        (1, 1, "bool-matrix"), (1, 1, "values")]
    assert [r["key"] for r in rows] == [r["key"] for r in tiny["rows"]]
    assert [r["key"] for r in read_rows(out)] == [r["key"] for r in tiny["rows"]]
    assert len({r["key"] for r in rows}) == 8


def test_summary_table_and_plot(tiny):
    summary = summarize(tiny["rows"])
    table = {v["variant"]: v for v in summary["variants"]}
    assert list(table) == ["bool-matrix", "values"]
    for v in table.values():
        assert (v["configs"], v["runs"], v["complete"], v["unknown"], v["timeout"]) == (2, 4, 4, 0, 0)
        assert v["programs"] == sum(r["programs"] for r in tiny["rows"][:8:4])
        assert 0 < v["median_seconds"] <= v["total_seconds"]
    assert summary["disagreements"] == [] and summary["failures"] == []
    png = plot(tiny["rows"], tiny["folder"] / "plots" / "t.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_hang_give_up_and_unsound_runs_are_recorded(tmp_path):
    plugins = _plugins(tmp_path / "enc")
    cfg = tmp_path / "one.yaml"
    cfg.write_text("max_len: 1\nconfigs:\n  - levels: [2]\n")
    variants = parse_variants("sleeper,giveup,liar", extra_dirs=[plugins])
    rows = run_experiment(variants, load_configs(cfg), tmp_path / "r.jsonl", timeout_s=2.0,
                          extra_dirs=[plugins])
    by = {r["variant"]: r for r in rows}
    assert by["sleeper"]["status"] == "timeout" and by["sleeper"]["error"] == "killed after 3 s"
    assert by["giveup"]["status"] == "unknown" and by["giveup"]["programs_sha256"] is None
    assert by["liar"]["status"] == "unsound" and "interpreter rejects" in by["liar"]["error"]
    summary = summarize(rows)
    assert [f["variant"] for f in summary["failures"]] == ["liar"]
    text = _render(summary)
    assert "FAILED RUNS" in text


def test_conformance_disagreement_is_loud_and_max_k_skips(tmp_path):
    plugins = _plugins(tmp_path / "enc")
    cfg = tmp_path / "one.yaml"
    cfg.write_text("max_len: 2\nconfigs:\n  - levels: [2, 2]\n  - levels: [8]\n")
    variants = parse_variants(["bool-matrix", "lossy"], extra_dirs=[plugins])
    rows = run_experiment(variants, load_configs(cfg), tmp_path / "r.jsonl", timeout_s=120,
                          max_k={"lossy": 4}, extra_dirs=[plugins])
    assert [r["status"] for r in rows] == ["complete", "complete", "complete", "skipped"]
    assert rows[3]["reason"] == "k = 8 > max k 4"
    assert rows[0]["programs"] == rows[1]["programs"] + 1
    summary = summarize(rows)
    assert summary["disagreements"][0]["answers"] == {"bool-matrix": [rows[0]["programs"]],
                                                      "lossy": [rows[1]["programs"]]}
    assert len(summary["disagreements"]) == 1
    assert [v["skipped"] for v in summary["variants"]] == [0, 1]
    assert "CONFORMANCE DISAGREEMENT" in _render(summary)


def _render(summary) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=io.StringIO())
    for part in render_summary(summary):
        console.print(part)
    return console.export_text()


# ------------------------------------------------------------------------------------ configurations


def test_paper_grid_points_are_the_distinct_problems():
    points = load_configs("paper-grid")
    assert len(points) == 12
    assert sum(1 + len(p.also) for p in points) == 104  # every (request, matrix) pair of the grid
    assert sorted({p.k for p in points}) == [2, 4, 8, 16, 32, 64]
    assert {p.levels for p in points} == {1, 2}


def test_shipped_scale_set_reaches_256_devices_over_four_levels():
    assert "scale" in shipped_configs() and "paper-grid" in shipped_configs()
    points = load_configs("scale", max_len=2)
    assert max(p.k for p in points) == 256
    assert {p.levels for p in points} == {1, 2, 3, 4}
    assert {p.max_len for p in points} == {2}


def test_system_entries_expand_to_placements(tmp_path):
    cfg = tmp_path / "s.yaml"
    cfg.write_text("configs:\n  - system: a100-2x16\n    axes: [4, 8]\n    reduce: [0]\n"
                   "  - system: a100-2x16\n    axes: [4, 8]\n    reduce: [0]\n    matrix: [[2, 2], [1, 8]]\n"
                   "    name: mine\n")
    points = load_configs(cfg)
    assert [p.k for p in points] == [4, 4]  # two distinct problems; the named matrix repeats one
    assert points[1].also == ("mine",)


# ------------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("configs: [", "malformed YAML"),
        ("[1, 2]", "must be a mapping"),
        ("configs: []", "field configs"),
        ("configs:\n  - levels: [1]\n", "field configs.0.levels.0"),
        ("configs:\n  - levels: [2]\n    axes: [2]\n", "axes belongs to system entries"),
        ("configs:\n  - levels: [2, 2]\n    level_names: [a]\n", "1 level_names for 2 levels"),
        ("configs:\n  - levels: [256, 128]\n", "at most 16384"),
        ("configs:\n  - system: a100-2x16\n", "needs axes and reduce"),
        ("configs:\n  - system: nowhere\n    axes: [2]\n    reduce: [0]\n", "unknown system"),
        ("configs:\n  - levels: [2]\n    colour: red\n", "colour"),
        ("max_len: 99\nconfigs:\n  - levels: [2]\n", "max_len must be at most"),
    ],
)
def test_malformed_config_files_name_the_file_and_the_problem(tmp_path, text, message):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(P2Error, match=message) as err:
        load_configs(cfg)
    assert "bad.yaml" in str(err.value)


def test_unknown_config_lists_the_shipped_ones():
    with pytest.raises(P2Error, match="paper-grid, scale"):
        load_configs("no-such-set")


def test_bad_variants_list_what_exists():
    names = ", ".join(spec.name for spec in available_encodings())
    with pytest.raises(P2Error, match=f"available encodings: {names}"):
        parse_variants("bool-matrix,nope")
    with pytest.raises(P2Error, match=r"option colour: .*\(options: \w"):
        parse_variants("bool-matrix", ['bool-matrix={"colour": 1}'])
    with pytest.raises(P2Error, match="must be a JSON object"):
        parse_variants("bool-matrix", ["bool-matrix=[1]"])
    with pytest.raises(P2Error, match="not one of --encodings"):
        parse_variants("bool-matrix", ['values={}'])
    with pytest.raises(P2Error, match="not JSON"):
        parse_variants("bool-matrix", ["bool-matrix={oops"])
    with pytest.raises(P2Error, match="NAME=JSON"):
        parse_variants("bool-matrix", ["bool-matrix"])
    with pytest.raises(P2Error, match="repeats a name"):
        parse_variants("values,values")
    with pytest.raises(P2Error, match="at least one"):
        parse_variants(" , ")


def test_option_sets_make_one_variant_each():
    variants = parse_variants("bool-matrix,values", ['bool-matrix={"refine": "prefix"}', "bool-matrix={}"])
    assert [v.label for v in variants] == ['bool-matrix {"refine":"prefix"}', "bool-matrix", "values"]
    assert variants[0].options == {"refine": "prefix"}


def test_every_registered_encoding_is_a_variant():
    names = [spec.name for spec in available_encodings()]
    assert [v.encoding for v in parse_variants(",".join(names))] == names


def test_bad_run_parameters(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("configs:\n  - levels: [2]\n")
    points = load_configs(cfg)
    variants = parse_variants("bool-matrix")
    with pytest.raises(P2Error, match="--repeat"):
        run_experiment(variants, points, tmp_path / "r.jsonl", repeat=0)
    with pytest.raises(P2Error, match="--timeout"):
        run_experiment(variants, points, tmp_path / "r.jsonl", timeout_s=0)
    with pytest.raises(P2Error, match="--max-k names 'values'"):
        run_experiment(variants, points, tmp_path / "r.jsonl", max_k={"values": 4})
    (tmp_path / "file").write_text("")
    with pytest.raises(P2Error, match="cannot write"):
        run_experiment(variants, points, tmp_path / "file" / "r.jsonl")


def test_a_representative_run_without_its_certificate_is_conjectured_not_complete(tmp_path):
    """Every program re-checked but completeness not proved: the row and the summary say conjectured, and
    the set is still compared with the complete runs' sets."""
    cfg = tmp_path / "one.yaml"
    cfg.write_text("max_len: 3\nconfigs:\n  - levels: [2, 3]\n")
    variants = parse_variants("representative,bool-matrix", ['representative={"certify": "never"}'])
    rows = run_experiment(variants, load_configs(cfg), tmp_path / "r.jsonl", timeout_s=120)
    by = {r["encoding"]: r for r in rows}
    assert by["representative"]["status"] == "conjectured" and by["bool-matrix"]["status"] == "complete"
    assert by["representative"]["programs_sha256"] == by["bool-matrix"]["programs_sha256"] is not None
    summary = summarize(rows)
    counts = {v["variant"].split()[0]: (v["complete"], v["conjectured"]) for v in summary["variants"]}
    assert counts == {"representative": (0, 1), "bool-matrix": (1, 0)}
    assert summary["disagreements"] == []


def test_a_memory_cap_makes_an_oversized_run_an_error_line_and_keys_it(tmp_path):
    """``--memory``: a run whose estimate passes the cap is an error line naming it (no solver run), the cap is
    recorded and keyed; without it the key is what it was."""
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(TINY)
    points = load_configs(cfg)[1:]
    variants = parse_variants("bitvec")
    (row,) = run_experiment(variants, points, tmp_path / "r.jsonl", timeout_s=60, memory_gib=1e-9)
    assert row["status"] == "error" and "more than --memory" in row["error"] and row["memory_gib"] == 1e-9
    assert row["key"] != run_key(points[0], variants[0], 0, 0, 60.0)
    assert run_key(points[0], variants[0], 0, 0, 60.0, None) == run_key(points[0], variants[0], 0, 0, 60.0)
