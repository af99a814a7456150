"""CLI exit codes of every sub-command, the wall-clock ``--deadline``, and hostile input refused cleanly.

Every refusal is one ``p2smt: error:`` line on stderr, exit 2, nothing on stdout and no file left behind.
Time limits are exercised with a plug-in encoding that sleeps far longer than the deadline.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
A100 = ["--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", "[[1,4],[4,4]]"]
RS_AR_AG = "(node, InsideGroup, ReduceScatter); (node, Parallel(root), AllReduce); (node, InsideGroup, AllGather)"
RS_AG = "(node, InsideGroup, ReduceScatter); (node, InsideGroup, AllGather)"
SLEEPY = '''
import time
from p2smt.smt.registry import load_encoding

BASE = load_encoding("bool-matrix")


def make(problem, max_len, options):
    """bool-matrix after a long sleep: a run that cannot finish before any test deadline."""
    time.sleep(600)
    return BASE.create(problem, max_len, options)


ENCODING = BASE.__class__("sleepy", "sleeps, then bool-matrix", BASE.options, make)
'''


def refused(rc: int, out: str, err: str, fragment: str = "") -> bool:
    lines = err.splitlines()
    return (rc == 2 and out == "" and len(lines) == 1 and lines[0].startswith("p2smt: error: ")
            and "Traceback" not in err and fragment in lines[0])


@pytest.fixture
def sleepy(tmp_path, monkeypatch):
    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "sleepy.py").write_text(SLEEPY)
    monkeypatch.setenv("P2SMT_ENCODINGS_PATH", str(folder))
    return folder


# ---------------------------------------------------------------- exit codes of every sub-command


def test_verify_exit_codes(run_cli):
    rc, out, _ = run_cli("verify", *A100, "--program", RS_AR_AG, "--json")
    assert rc == 0 and json.loads(out)["status"] == "proved"
    rc, out, _ = run_cli("verify", *A100, "--program", RS_AG, "--json")
    assert rc == 1 and json.loads(out)["status"] == "counterexample"


def test_verify_deadline_is_unknown_exit_4(run_cli, sleepy):
    rc, out, err = run_cli("verify", *A100, "--program", RS_AR_AG, "--encoding", "sleepy", "--deadline", "1",
                           "--json")
    payload = json.loads(out)
    assert rc == 4 and err == ""
    assert payload["status"] == "unknown" and "deadline of 1 s" in payload["message"] and payload["steps"] == 3


def test_best_unknown_at_deadline_exit_4(run_cli, sleepy):
    rc, out, _ = run_cli("best", *A100, "--method", "z3", "--encoding", "sleepy", "--deadline", "1", "--max-len", "3")
    assert rc == 4 and "UNKNOWN" in out and "deadline" in out


def test_synth_deadline_keeps_what_was_found(run_cli, sleepy):
    rc, out, _ = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--engine", "z3",
                         "--encoding", "sleepy", "--max-len", "3", "--deadline", "1", "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown" and payload["matrices"] == []
    rc, out, _ = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--max-len", "3",
                         "--deadline", "120", "--json")
    assert rc == 0 and json.loads(out)["total_programs"] > 0


def test_synth_human_output_ends_with_next_steps_and_legend(run_cli):
    rc, out, _ = run_cli("synth", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "0", "--max-len", "2")
    assert rc == 0
    tail = " ".join(out.split()[-60:])
    assert "p2smt rank --system v100-2x8" in tail and "p2smt best" in tail
    assert "rows = parallelism axes, columns = system levels" in " ".join(out.split())


def test_next_steps_keep_the_resized_system(run_cli):
    """The suggested rank and best commands keep --nodes and --level, so they ask about the same system."""
    rc, out, _ = run_cli("synth", "--system", "dgx-h100", "--nodes", "4", "--axes", "32", "--reduce", "0",
                         "--max-len", "2", "--engine", "pieces")
    tail = " ".join(out.split())
    assert rc == 0 and "p2smt rank --system dgx-h100 --nodes 4 --axes 32 --reduce 0" in tail
    rc, out, _ = run_cli("synth", "--system", "fig2-16gpu", "--level", "rack=2", "--axes", "32", "--reduce", "0",
                         "--max-len", "2", "--engine", "pieces")
    assert rc == 0 and "p2smt best --system fig2-16gpu --level rack=2 --axes 32" in " ".join(out.split())


def test_next_steps_say_what_best_does_at_the_size(run_cli):
    """best proves optimality up to 256 synthesis devices, searches alone up to 4,096 and refuses beyond: the
    hint says so, and above 4,096 suggests rank only."""
    rc, out, _ = run_cli("synth", "--system", "h100-superpod", "--axes", "2,512", "--reduce", "1", "--matrix",
                         "[[1,1,1,2],[4,32,4,1]]", "--max-len", "2", "--engine", "pieces")
    tail = " ".join(out.split())
    assert rc == 0 and "p2smt best --system h100-superpod" in tail and "proves it optimal" not in tail
    assert "not proved optimal by Z3 above 256 synthesis devices; 512 here" in tail
    rc, out, _ = run_cli("synth", "--system", "h100-superpod", "--level", "su=32", "--axes", "8192", "--reduce", "0",
                         "--max-len", "2", "--engine", "symmetric")
    tail = " ".join(out.split())
    assert rc == 0 and "p2smt rank --system h100-superpod --level su=32" in tail and "p2smt best --system" not in tail
    assert "searches at most 4,096 synthesis devices; 8,192 here" in tail


def test_a_node_resized_inside_is_not_offered_for_pricing(run_cli):
    """Resizing a level inside a node leaves no physical wiring to price on: synth says so instead of
    suggesting rank and best, and rank refuses with the same reason (exit 2, one line)."""
    rc, out, _ = run_cli("synth", "--system", "fig2-16gpu", "--level", "gpu=3", "--axes", "12", "--reduce", "0",
                         "--max-len", "2", "--engine", "pieces")
    text = " ".join(out.split())
    assert rc == 0 and "not priceable" in text and "p2smt rank" not in text
    rc, out, err = run_cli("rank", "--system", "fig2-16gpu", "--level", "gpu=3", "--axes", "12", "--reduce", "0",
                           "--max-len", "2")
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "physical.gpus_per_node is 8 (GPUs per 'server')" in err and "(cpu, gpu) hold 6" in err


def test_rank_deadline_ranks_the_placements_found(run_cli, monkeypatch):
    from dataclasses import replace

    from p2smt.synth import driver

    rc, out, _ = run_cli("rank", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "0", "--top", "1", "--json")
    assert rc == 0 and json.loads(out)["best"]["program"] and json.loads(out)["status"] == "complete"
    real = driver.synthesize

    def first_then_hang(req, config, *, on_matrix=None):
        found = real(replace(req, matrix=((1, 2), (2, 4))), config)
        on_matrix(found.matrices[0])
        __import__("time").sleep(600)

    monkeypatch.setattr(driver, "synthesize", first_then_hang)
    rc, out, _ = run_cli("rank", "--system", "v100-2x8", "--axes", "2,8", "--reduce", "0", "--deadline", "2",
                         "--json")
    payload = json.loads(out)
    assert rc == 4 and payload["status"] == "unknown" and "1 placement done" in payload["message"]
    assert [m["matrix"] for m in payload["matrices"]] == [[[1, 2], [2, 4]]]


def test_plan_deadline_is_unknown(run_cli, monkeypatch):
    from p2smt.cost import plan as plan_module

    monkeypatch.setattr(plan_module, "plan", lambda *a, **k: __import__("time").sleep(600))
    rc, out, _ = run_cli("plan", "--profile", "resnet50-dp", "--system", "v100-2x8", "--deadline", "1", "--json")
    assert rc == 4 and json.loads(out)["status"] == "unknown"


def test_cost_lower_encodings_draw(run_cli, tmp_path):
    rc, out, _ = run_cli("cost", "--system", "dgx-a100", "--collective", "allreduce", "--bytes", "1e6", "--json")
    assert rc == 0 and json.loads(out)["seconds"] > 0
    target = tmp_path / "m.py"
    rc, out, err = run_cli("lower", "--backend", "jax", *A100, "--program", RS_AR_AG, "--out", target)
    assert rc == 0 and out == f"wrote {target}\n" and err == "" and "def " in target.read_text()
    rc, out, _ = run_cli("encodings", "--json")
    assert rc == 0 and "bool-matrix" in {e["name"] for e in json.loads(out)["encodings"]}
    png = tmp_path / "v.png"
    rc, out, _ = run_cli("draw", "--system", "v100-2x8", "--out", png)
    assert rc == 0 and png.read_bytes()[:4] == b"\x89PNG" and [p.name for p in tmp_path.iterdir()] == ["m.py",
                                                                                                     "v.png"]


def test_run_without_backend_says_what_to_install(run_cli, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    rc, out, err = run_cli("run", "--backend", "torch", *A100, "--program", RS_AR_AG)
    assert refused(rc, out, err, "pip install 'p2smt[torch]'")


def test_sweep_needs_one_mode(run_cli):
    assert refused(*run_cli("sweep"), "exactly one of --paper or --grid")


def test_experiment_unsound_is_exit_3(run_cli, tmp_path):
    folder = tmp_path / "enc"
    folder.mkdir()
    (folder / "liar.py").write_text('''
import z3
from p2smt.smt.base import ACCEPTED, Encoding, EncodingOptions, EncodingSpec


class Liar(Encoding):
    """Every one-step program, valid or not."""

    def declare(self, solver):
        self.c = z3.Int("c", self.context)
        solver.add(0 <= self.c, self.c < len(self.problem.candidates))

    def length_assumptions(self, length):
        return [] if length == 1 else [z3.BoolVal(False, self.context)]

    def decode(self, model):
        return (model.eval(self.c).as_long(),)

    def blocking_clause(self, program):
        return self.c != program[0]


ENCODING = EncodingSpec("liar", "accepts anything", EncodingOptions, lambda p, n, o: Liar(p, n))
''')
    cfg = tmp_path / "one.yaml"
    cfg.write_text("max_len: 1\nconfigs:\n  - levels: [2]\n")
    rc, _, _ = run_cli("experiment", "--encodings", "liar", "--configs", cfg, "--out", tmp_path / "r.jsonl",
                       "--encodings-dir", folder, "--timeout", "60", "--json")
    assert rc == 3


# ---------------------------------------------------------------- hostile input: one line, exit 2, no file


SIZE_LIMITS = [
    ["cost", "--system", "dgx-a100", "--nodes", "100000", "--collective", "allreduce", "--bytes", "1e6"],
    ["cost", "--system", "dgx-a100", "--level", "node=1000000000", "--collective", "allreduce", "--bytes", "1"],
    ["draw", "--system", "dgx-a100", "--nodes", "1000000"],
    ["draw", "--system", "dgx-a100", "--nodes", "1000"],
    ["placements", "--system", "dgx-a100", "--nodes", "100000", "--axes", "8"],
    ["rank", "--system", "dgx-a100", "--nodes", "100000", "--axes", "800000", "--reduce", "0"],
]


@pytest.mark.parametrize("argv", SIZE_LIMITS, ids=lambda a: " ".join(a[:5]))
def test_size_limits(run_cli, argv, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert refused(*run_cli(*argv), "larger than this command handles")
    assert list(tmp_path.iterdir()) == []


def test_program_and_plan_size_limits(run_cli, tmp_path):
    assert refused(*run_cli("check", *A100, "--program", "@/dev/zero"), "is a character device, not a regular file")
    huge = tmp_path / "huge.p2"
    huge.write_bytes(b" " * ((4 << 20) + 1))
    assert refused(*run_cli("check", *A100, "--program", f"@{huge}"), "larger than 4 MB")
    long_program = tmp_path / "long.p2"
    long_program.write_text("; ".join(["(root, InsideGroup, AllReduce)"] * 5000))
    assert refused(*run_cli("verify", *A100, "--program", f"@{long_program}"), "at most 4096")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"collective": "AllReduce", "replica_groups": [[0, 1]]}] * 5000))
    assert refused(*run_cli("check", *A100, "--plan", plan), "plan.json: 5000 steps")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    assert refused(*run_cli("check", *A100, "--plan", deep), "nested too deeply")


@pytest.mark.parametrize("matrix", ["[[" + "9" * 5000 + "]]", "[" * 100_000 + "]" * 100_000,
                                    "[[1, 4], [4, " + "4" * 4500 + "]]"])
def test_hostile_matrix(run_cli, matrix):
    assert refused(*run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--matrix", matrix))


@pytest.mark.parametrize("argv", [
    ["cost", "--system", "dgx-a100", "--collective", "allreduce", "--bytes", "nan"],
    ["cost", "--system", "dgx-a100", "--collective", "allreduce", "--bytes", "inf"],
    ["cost", "--system", "dgx-a100", "--collective", "allreduce", "--bytes", "-1"],
    ["rank", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--bytes", "nan"],
    ["best", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--bytes", "inf"],
    ["synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--engine", "z3", "--timeout", "nan"],
    ["synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--engine", "z3", "--timeout", "inf"],
    ["verify", *A100, "--program", RS_AG, "--timeout", "-1"],
    ["verify", *A100, "--program", RS_AG, "--deadline", "nan"],
], ids=lambda a: " ".join(a[-2:]))
def test_non_finite_numbers(run_cli, argv):
    rc, out, err = run_cli(*argv)
    assert refused(rc, out, err, "positive, finite number")


@pytest.mark.parametrize("line, number", [
    ("nvswitch_port: {kind: nvswitch, bandwidth_gbps: 270", ".inf"),
    ("nvswitch_port: {kind: nvswitch, bandwidth_gbps: 270", ".nan"),
    ("- {name: nic, kind: network, joins: [node], bandwidth_gbps: 8", "-.inf"),
])
def test_non_finite_numbers_in_a_system_file(run_cli, tmp_path, line, number):
    text = (Path(__file__).parents[1] / "topologies" / "a100-4x16.yaml").read_text()
    assert line in text
    system = tmp_path / "system.yaml"
    system.write_text(text.replace(line, line.rsplit(" ", 1)[0] + " " + number, 1))
    assert refused(*run_cli("cost", "--system", system, "--collective", "allreduce", "--bytes", "1e6"), "finite")


def test_non_finite_numbers_in_a_profile(run_cli, tmp_path):
    profile = tmp_path / "profile.yaml"
    profile.write_text("name: p\naxes:\n  - {name: data, size: auto, kind: data}\ncommunication:\n"
                       "  - {name: x, axes: [data], bytes_per_device: .inf, count: 1}\n")
    assert refused(*run_cli("plan", "--system", "a100-4x16", "--profile", profile), "finite")


@pytest.mark.parametrize("make", ["missing-folder", "directory", "file-as-folder", "proc"])
@pytest.mark.parametrize("command", ["draw", "lower", "plan-png", "plan-export", "sweep"])
def test_output_paths(run_cli, tmp_path, make, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    target = {"missing-folder": tmp_path / "no" / "such" / "out.png", "directory": tmp_path,
              "file-as-folder": blocker / "out.png", "proc": Path("/proc/p2smt-out.png")}[make]
    if command == "plan-export" and make == "directory":
        target = blocker
    argv = {
        "draw": ["draw", "--system", "v100-2x8", "--out", target],
        "lower": ["lower", "--backend", "jax", *A100, "--program", RS_AR_AG, "--out", target],
        "plan-png": ["plan", "--profile", "resnet50-dp", "--system", "v100-2x8", "--png", target],
        "plan-export": ["plan", "--profile", "resnet50-dp", "--system", "v100-2x8", "--export-dir", target],
        "sweep": ["sweep", "--grid", "small", "--out", target],
    }[command]
    before = sorted(tmp_path.iterdir())
    assert refused(*run_cli(*argv))
    assert sorted(tmp_path.iterdir()) == before


def test_messages(run_cli, tmp_path):
    assert refused(*run_cli("placements", "--system", tmp_path, "--axes", "2"), "is a directory")
    rc, out, err = run_cli("placements", "--system", "x" * 1_000_000, "--axes", "2")
    assert refused(rc, out, err, "characters left out") and len(err) < 1000


def test_broken_pipe_exits_quietly():
    proc = subprocess.run(
        f"{sys.executable} -m p2smt synth --system a100-4x16 --axes 4,16 --reduce 1 --json | head -c 10",
        check=False, shell=True, capture_output=True, text=True, timeout=300)
    assert proc.stdout == '{\n  "statu' and proc.stderr == ""


def test_broken_pipe_exits_quietly_when_the_output_outgrows_the_pipe():
    """The reader leaves while p2smt is still writing (a pipe holds 64 KB): exit 0 and nothing on stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "p2smt", "placements", "--system", "h100-superpod", "--axes",
                             "2,2,2,2,2,2,2,2,2,2", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(10)
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 0 and err == b""


def test_json_never_contains_non_finite_numbers(run_cli):
    from p2smt.cli.output import emit
    from p2smt.errors import InternalError

    class Args:
        json = True

    with pytest.raises(InternalError):
        emit(Args(), {"x": float("nan")}, lambda c: None)


@pytest.mark.parametrize("argv", [
    ["plan", "--profile", "resnet50-dp", "--system", "v100-2x8", "--png", "{tmp}/chart.txt"],
    ["draw", "--system", "v100-2x8", "--out", "{tmp}/picture.svg"],
    ["experiment", "--encodings", "bitvec", "--configs", "paper-grid", "--out", "{tmp}/r.jsonl", "--png", "{tmp}/p.pdf"],
    ["experiment", "--encodings", "bitvec", "--configs", "paper-grid", "--out", "{tmp}/r.jsonl",
     "--png", "{tmp}/a-file/p.png"],
    ["experiment", "--encodings", "bitvec", "--configs", "paper-grid", "--out", "{tmp}/r.jsonl", "--max-len", "0"],
    ["experiment", "--encodings", "bitvec", "--configs", "paper-grid", "--out", "{tmp}/r.jsonl", "--max-k", "bitvec=-1"],
    ["sweep", "--paper", "--out", "{tmp}/s", "--workers", "0"],
    ["synth", "--system", "v100-2x8", "--axes", "16", "--reduce", "0", "--show", "-1"],
    ["run", "--backend", "torch", *A100, "--program", RS_AR_AG, "--repeats", "0"],
], ids=lambda a: " ".join(a[:1] + a[-2:-1]))
def test_flags_and_picture_names_are_checked_before_any_work(run_cli, tmp_path, argv):
    (tmp_path / "a-file").write_text("not a folder")
    before = sorted(tmp_path.iterdir())
    assert refused(*run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv]))
    assert sorted(tmp_path.iterdir()) == before


def test_written_files_get_a_new_files_mode_or_keep_their_own(run_cli, tmp_path):
    out = tmp_path / "v100.png"
    old = os.umask(0o027)
    try:
        assert run_cli("draw", "--system", "v100-2x8", "--out", out)[0] == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
        out.chmod(0o600)
        assert run_cli("draw", "--system", "v100-2x8", "--out", out)[0] == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o600
    finally:
        os.umask(old)


@pytest.mark.parametrize("flag, value, message", [
    ("--certificate", "a-file", "--certificate"),
    ("--certificate", "a-file/sub", "--certificate"),
    ("--proof-store", "a-file/sub", "a-file' is not a folder"),
    ("--proposer", "nosuch", "--proposer: one of enumerative, pieces"),
])
def test_messages_name_the_flag_at_fault(run_cli, tmp_path, flag, value, message):
    (tmp_path / "a-file").write_text("not a folder")
    target = str(tmp_path / value) if "file" in value else value
    assert refused(*run_cli("synth", *A100, flag, target), message)


def test_a_yaml_file_that_repeats_a_key_is_refused_and_merge_keys_still_merge(run_cli, tmp_path):
    from p2smt.model.yamlfile import read_yaml

    text = (Path(__file__).parents[1] / "topologies" / "a100-4x16.yaml").read_text()
    system = tmp_path / "twice.yaml"
    system.write_text("name: other\n" + text)
    assert refused(*run_cli("placements", "--system", system, "--axes", "4,16"), "appears twice")
    merged = tmp_path / "merged.yaml"
    merged.write_text("base: &b {x: 1, y: 2}\none: {<<: *b, x: 3}\n")
    assert read_yaml(merged, "test file")["one"] == {"x": 3, "y": 2}


def test_placements_bound_their_count_and_refuse_an_unused_matrix(run_cli, monkeypatch):
    from p2smt.model import placement

    axes = ["--system", "h100-superpod", "--axes", "2,2,2,2,2,32"]
    assert len(placement.matrices((4, 32, 4, 2), (2, 2, 2, 2, 2, 32))) == 456
    monkeypatch.setattr(placement, "MAX_PLACEMENTS", 455)  # the count at which the search stops, made small
    assert refused(*run_cli("placements", *axes), "more than 455 placements")
    monkeypatch.setattr(placement, "MAX_PLACEMENTS", 456)
    assert run_cli("placements", *axes, "--json")[0] == 0
    assert refused(*run_cli("placements", "--system", "a100-4x16", "--axes", "4,16", "--matrix", "[[1,4],[4"),
                   "--matrix is read with --export only")


@pytest.mark.parametrize("argv, message", [
    (["verify", *A100, "--program", RS_AG, "--values", "--encoding", "bitvec"], "--values proves with its own"),
    (["best", *A100, "--method", "search", "--encoding", "bitvec"], "options of the Z3 bound strategy"),
    (["best", *A100, "--method", "search", "--bound", "sum"], "options of the Z3 bound strategy"),
    (["best", *A100, "--proof", "none", "--timeout", "5"], "--proof none calls no solver"),
    (["best", *A100, "--method", "search", "--no-lookahead"], "options of the Z3 bound strategy"),
    (["sweep", "--paper", "--workers", "2"], "--paper runs in this process"),
    (["sweep", "--grid", "small", "--no-plots"], "a --grid sweep draws no plots"),
    (["placements", "--system", "a100-4x16", "--axes", "4,16", "--axis-names", "dp,tp"], "read with --export only"),
    (["placements", "--system", "a100-4x16", "--nodes", "2", "--level", "node=8", "--axes", "16"], "give one of them"),
    (["placements", "--system", "a100-4x16", "--level", "node=2", "--level", "node=4", "--axes", "16"], "given twice"),
    (["check", *A100, "--program", RS_AG, "--device-order", "[0]"], "no meaning without it"),
], ids=lambda a: " ".join(a[:1]) if isinstance(a, list) else a[:20])
def test_flags_that_would_be_ignored_are_refused(run_cli, argv, message):
    assert refused(*run_cli(*argv), message)


@pytest.mark.parametrize("engine", ["auto", "pieces"])  # certified: the symmetric engine's programs, not certified
def test_the_exact_search_refuses_what_it_cannot_finish(run_cli, engine):
    big = ["synth", "--system", "h100-superpod", "--level", "su=256", "--axes", "65536", "--reduce", "0"]
    assert refused(*run_cli(*big, "--engine", engine), "use --engine symmetric")


def test_an_unknown_argument_is_reported_under_its_sub_command(run_cli, tmp_path):
    rc, out, err = run_cli("draw", "--system", "dgx1-v100", "--out", tmp_path / "d.png", "--json")
    assert refused(rc, out, err, "p2smt draw: unrecognized arguments: --json")
    assert not (tmp_path / "d.png").exists()


@pytest.mark.parametrize("flag, engine", [("--certificate", "certified"), ("--emit-smt2", "z3")])
def test_proof_folders_in_a_missing_folder_are_refused_as_every_output(run_cli, tmp_path, flag, engine):
    rc, out, err = run_cli("synth", *A100, "--engine", engine, flag, tmp_path / "missing" / "queries")
    assert refused(rc, out, err, "missing' does not exist") and not (tmp_path / "missing").exists()


def test_progress_into_a_log_is_one_plain_line_per_piece(run_cli):
    """``--progress`` with stderr not a terminal (a log file) prints a line per finished placement, not a
    live bar (which printed only an empty line there)."""
    rc, out, err = run_cli("synth", "--system", "a100-4x16", "--axes", "4,16", "--reduce", "1", "--engine", "pieces",
                           "--progress", "--json")
    assert rc == 0 and json.loads(out)["status"] == "complete"
    lines = err.splitlines()
    assert [line.split(" done")[0] for line in lines] == [f"synth: placements: {i}/3" for i in (1, 2, 3)]


# ---------------------------------------------------------------- found by fuzzing (session 14)


def test_a_communication_name_cannot_leave_the_export_folder(run_cli, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    profile = tmp_path / "t.yaml"
    profile.write_text('name: x\naxes: [{name: d, size: auto}]\n'
                       'communication: [{name: "../escaped", axes: [d], bytes_per_device: 1e6}]\n')
    (tmp_path / "exp").mkdir()
    rc, out, err = run_cli("plan", "--profile", profile, "--system", "dgx-h100", "--export-dir", tmp_path / "exp")
    assert refused(rc, out, err, "must be an identifier")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["exp", "t.yaml"]


def test_a_text_file_is_not_emptied_as_a_results_file(run_cli, tmp_path):
    notes = tmp_path / "n.txt"
    notes.write_text("notes, no newline")
    grid = tmp_path / "g.yaml"
    grid.write_text("systems: [v100-2x8]\naxes: [[2, 8]]\nreductions: [[0]]\nengine: auto\nmax_len: 3\n")
    rc, out, err = run_cli("sweep", "--grid", grid, "--out", notes, "--workers", "1")
    assert refused(rc, out, err, "not a result line") and notes.read_text() == "notes, no newline"


@pytest.mark.parametrize(("edit", "fragment"), [
    (lambda t: t.replace('"gpu[0-15]"', '"gpu[0-999999999]"'), "more than 4,096 endpoints"),
    (lambda t: t.replace("gpus_per_node: 16", "gpus_per_node: 100000000"), "gpus_per_node"),
    (lambda t: t.replace("size: 4", "size: true", 1), "size"),
    (lambda t: t + "\n# " + "x" * (2 << 20) + "\n", "larger than 1 MB"),
])
def test_system_files_too_large_or_loosely_typed_are_refused_up_front(run_cli, tmp_path, edit, fragment):
    text = (Path(__file__).parent.parent / "topologies" / "a100-4x16.yaml").read_text()
    edited = edit(text)
    assert edited != text
    path = tmp_path / "s.yaml"
    path.write_text(edited)
    assert refused(*run_cli("placements", "--system", path, "--axes", "4"), fragment)


@pytest.mark.parametrize("argv", [
    ("placements", "--system", "a" * 300, "--axes", "4"),
    ("synth", *A100, "--engine", "z3", "--encoding-options", '{"choice": ' + "9" * 5000 + "}"),
    ("check", *A100, "--plan", "ITERATED"),
    ("verify", *A100, "--program", RS_AR_AG, "--timeout", "1e10"),
    ("cost", "--system", "dgx-h100", "--collective", "allreduce", "--bytes", "1e308"),
    ("synth", *A100, "--engine", "auto", "--timeout", "5"),
    ("synth", *A100, "--proof-store", "no/such/dir"),
    ("lower", *A100, "--program", RS_AR_AG, "--backend", "jax", "--out", "adir/"),
    ("synth", "--system", "h100-superpod", "--level", "su=32", "--axes", "8192", "--reduce", "0", "--engine", "z3"),
    ("best", "--system", "h100-superpod", "--level", "su=32", "--axes", "8192", "--reduce", "0"),
    ("plan", "--profile", "gpt3-13b-tp-dp", "--system", "h100-superpod", "--level", "su=256"),
    ("best", "--system", "v100-2x8", "--axes", "16,1", "--reduce", "1"),
    ("placements", "--system", "a100-4x16", "--system", "dgx-h100", "--axes", "4"),
    ("synth", *A100, "--max-len=3", "--max-len", "4"),
    ("synth", *A100, "--max", "3", "--max-len", "4"),
])
def test_hostile_values_are_one_line_refusals(run_cli, tmp_path, monkeypatch, argv):
    monkeypatch.chdir(tmp_path)
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps([{"collective": "AllReduce", "replica_groups": "[16,4]<=[" + "1," * 64 + "64]"}]))
    argv = [str(plan) if a == "ITERATED" else a for a in argv]
    assert refused(*run_cli(*argv))
    assert list(tmp_path.iterdir()) == [plan]


def test_an_unreachable_dask_scheduler_is_refused_at_once(run_cli, tmp_path):
    grid = tmp_path / "g.yaml"
    grid.write_text("systems: [v100-2x8]\naxes: [[2, 8]]\nreductions: [[0]]\nengine: auto\nmax_len: 3\n")
    rc, out, err = run_cli("sweep", "--grid", grid, "--scheduler", "tcp://127.0.0.1:1", "--out", tmp_path / "o")
    assert refused(rc, out, err, "cannot connect to the dask scheduler")


def test_a_switch_given_twice_says_the_same_thing(run_cli):
    rc, out, _ = run_cli("placements", "--system", "v100-2x8", "--axes", "16", "--json", "--json")
    assert rc == 0 and json.loads(out)


def test_zero_bytes_after_the_last_result_line_are_a_killed_write(tmp_path):
    from p2smt.runs.store import ResultStore

    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"key": "a", "task": 1}\n' + b"\x00" * 16)
    with ResultStore(path, marker="task") as store:
        assert store.keys == {"a"}
    assert path.read_bytes() == b'{"key": "a", "task": 1}\n'
