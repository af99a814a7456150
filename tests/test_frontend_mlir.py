"""StableHLO read on jaxlib's MLIR: parse errors as where:line:col, one line; lines of modules printed with debug
information; one clear refusal without jax; no text lexing left in the StableHLO reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from p2smt.errors import P2Error
from p2smt.frontend.hlo import parse_module, read_module
from p2smt.frontend.mlir import NEEDS, nested, ops_of, parse_mlir, position

HLO = Path(__file__).parent / "data" / "hlo"
FRONTEND = Path(__file__).parent.parent / "p2smt" / "frontend"


def test_malformed_stablehlo_is_one_line_with_line_and_column():
    text = (HLO / "allreduce.mlir").read_text()
    broken = text.replace("stablehlo.add", "stablehlo.plus", 1)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if "stablehlo.add" in ln)
    with pytest.raises(P2Error) as err:
        parse_module(broken, "a.mlir")
    assert str(err.value).startswith(f"a.mlir:{line}:") and "stablehlo.plus" in str(err.value)
    assert len(str(err.value).splitlines()) == 1
    with pytest.raises(P2Error, match=r"^b.mlir:1:\d+: "):
        parse_mlir("module { func.func @f( }", "b.mlir")


def test_parse_mlir_keeps_its_context_and_walks_in_text_order():
    parsed = parse_mlir((HLO / "rs-ar-ag.mlir").read_text(), "r.mlir")
    names = [op.name for op in nested(ops_of(parsed.module.body))]
    assert [n for n in names if n.startswith("stablehlo.") and n.split(".")[1] in
            ("reduce_scatter", "all_reduce", "all_gather")] == ["stablehlo.reduce_scatter", "stablehlo.all_reduce",
                                                                 "stablehlo.all_gather"]
    assert parsed.context is not None and names[0] == "sdy.mesh"


def test_a_module_printed_with_debug_information_keeps_its_text_lines():
    plain = parse_module((HLO / "blueconnect.mlir").read_text(), "b.mlir")
    debug_text = (HLO / "blueconnect-debug.mlir").read_text()
    debug = parse_module(debug_text, "d.mlir")
    lines = [c.line for c in debug.collectives]
    assert all(op in debug_text.splitlines()[n - 1] for n, op in zip(lines, [c.op for c in debug.collectives],
                                                                    strict=True))
    assert [(c.collective, c.groups) for c in debug.collectives] == [(c.collective, c.groups)
                                                                     for c in plain.collectives]
    # where its line were not known, an op would be named by the source position its location gives
    parsed = parse_mlir(debug_text, "d.mlir")
    first = next(op for op in nested(ops_of(parsed.module.body)) if op.name == "stablehlo.reduce_scatter")
    assert parsed.at(first) == f"d.mlir:{lines[0]}"
    shown = position("d.mlir", first.location)
    assert shown.startswith("d.mlir (from ") and "generate.py:" in shown and shown.endswith(")")


def test_without_jax_reading_stablehlo_is_one_clear_error(tmp_path):
    script = ("import sys\nsys.modules['jax'] = sys.modules['jaxlib'] = None\n"
              "from p2smt.cli.main import main\nsys.exit(main(sys.argv[1:]))\n")
    argv = ["verify", "--system", "a100-4x16", "--level", "gpu=4", "--axes", "16", "--reduce", "0", "--matrix",
            "[[4,4]]", "--hlo"]
    done = subprocess.run([sys.executable, "-c", script, *argv, str(HLO / "allreduce.mlir")], check=False,
                          capture_output=True, text=True, timeout=300)
    assert (done.returncode, done.stdout) == (2, "") and done.stderr.strip().endswith(NEEDS)
    assert len(done.stderr.strip().splitlines()) == 1
    hlo = subprocess.run([sys.executable, "-c", script, *argv, str(HLO / "allreduce.hlo")], check=False,
                         capture_output=True, text=True, timeout=300)
    assert hlo.returncode == 0, hlo.stderr  # HLO text needs no jax


def test_regions_of_several_blocks_and_nested_modules_are_refused_split_too():
    for name, words in (("unreachable-block.mlir", "a second block in a region"),
                        ("nested-module-main.mlir", "a module inside the module")):
        with pytest.raises(P2Error, match=words):
            read_module((HLO / "handwritten" / name).read_text(), name, split=True)


def test_the_stablehlo_reader_lexes_no_text():
    for path in FRONTEND.glob("stablehlo*.py"):
        source = path.read_text()
        assert "import re" not in source and "re." not in source.replace("are.", ""), path
