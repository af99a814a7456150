"""Layer rules: import-linter's contracts (pyproject.toml) hold, and encoding files import only the Z3 side."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent
# Encodings build formulas: they may use the model and the Z3 side, never an interpreter or a layer above.
ENCODING_MAY_IMPORT = ("p2smt.errors", "p2smt.model.", "p2smt.smt.")


def lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    return subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)


def test_import_contracts_hold():
    run = lint_imports()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def p2smt_imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
    return [n for n in names if n == "p2smt" or n.startswith("p2smt.")]


@pytest.mark.parametrize("path", sorted((ROOT / "encodings").glob("*.py")), ids=lambda p: p.name)
def test_encodings_import_only_the_solver_side(path):
    bad = [n for n in p2smt_imports(path) if not (n + ".").startswith(ENCODING_MAY_IMPORT)]
    assert not bad, f"{path.name} imports {bad}"


def test_encodings_folder_is_not_a_package():
    assert not (ROOT / "encodings" / "__init__.py").exists()
    import encodings  # the standard library's, never ours

    assert Path(encodings.__file__).parent != ROOT / "encodings"
