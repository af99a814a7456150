"""Reading YAML input files with one-line errors that name the file (and line:column for syntax)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from p2smt.errors import P2Error


def read_yaml(path: Path, what: str) -> Any:
    """Parse ``path`` as UTF-8 YAML; malformed, unreadable or non-UTF-8 files raise P2Error."""
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise P2Error(f"{path}{where}: malformed YAML: {problem}") from None
    except UnicodeDecodeError as err:
        raise P2Error(f"{path}: not UTF-8 text (byte {err.start})") from None
    except OSError as err:
        raise P2Error(f"cannot read {what} {path}: {err.strerror}") from None
