"""Golden CLI outputs: the architecture must not change what any command prints (measured figures aside).

Record anew with ``P2SMT_RECORD_GOLDEN=1 pytest tests/test_golden.py``; a deliberate change updates its golden
file in a commit of its own that says why.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from p2smt.cli.main import main
from p2smt.timings import is_timing

GOLDEN = Path(__file__).parent / "golden"
ROOT = Path(__file__).parent.parent
CASES = json.loads((GOLDEN / "cases.json").read_text())
# Measured, not computed, and only ever inside a ``stats`` subtree: its durations (``is_timing``) and Z3's
# memory figures (they depend on what the process did before). Everything else is compared.
MEMORY = {"memory", "max memory"}


def normalize(value, in_stats: bool = False):
    if isinstance(value, dict):
        return {k: normalize(v, in_stats or k == "stats") for k, v in value.items()
                if not (in_stats and (is_timing(k) or k in MEMORY))}
    if isinstance(value, list):
        return [normalize(v, in_stats) for v in value]
    return value


def run_case(argv: list[str], capsys) -> dict:
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        rc = main(argv)
    finally:
        os.chdir(cwd)
    out, err = capsys.readouterr()
    # Encoding files live in the checkout or, installed from a wheel, in the package's data folder.
    out, err = (re.sub(r'[^"\s]*/encodings/', "<encodings>/", text) for text in (out, err))
    if "--json" in argv:
        return {"rc": rc, "stderr": err, "json": normalize(json.loads(out)) if out else None}
    return {"rc": rc, "stderr": err, "text": out}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_golden(case, capsys):
    got = run_case(case["argv"], capsys)
    path = GOLDEN / f"{case['name']}.json"
    text = json.dumps(got, indent=1, sort_keys=False) + "\n"
    if os.environ.get("P2SMT_RECORD_GOLDEN"):
        path.write_text(text)
        return
    assert text == path.read_text(), f"{case['name']}: output changed (see {path})"
