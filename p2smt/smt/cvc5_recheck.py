"""cvc5's re-check of a ``--certificate`` folder: every SMT-LIB2 file states the answer Z3 gave
(``(set-info :status sat|unsat)``), and cvc5, a solver that shares no code with Z3, must give the same.

cvc5's Python package has no command-line tool, so the files are read with its own SMT-LIB2 parser.
A file cvc5 answers differently is ``refuted``; one it gives no answer on (its time limit, or a file it
cannot read) is ``unknown``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.paths import kind_of, read_bytes_at_most

MAX_CERTIFICATE_BYTES = 1 << 30
"""Largest certificate file read (those of P²'s grid are at most a few MB)."""
_STATUS = re.compile(r"^\(set-info :status (sat|unsat)\)\s*$", re.MULTILINE)


class Verdict(Enum):
    """cvc5's verdict on one certificate file."""

    CONFIRMED = "confirmed"  # cvc5 gives Z3's answer
    REFUTED = "refuted"  # cvc5 gives the other answer: one of the two solvers is wrong
    UNKNOWN = "unknown"  # cvc5 gives no answer (time limit) or cannot read the file


@dataclass(frozen=True)
class Recheck:
    """One file's re-check: Z3's recorded answer, cvc5's, the verdict and cvc5's seconds."""

    file: str
    expected: str
    answer: str
    verdict: Verdict
    seconds: float
    reason: str | None = None  # why the answer is unknown, when cvc5 said more than "unknown"

    def to_json(self) -> dict[str, Any]:
        out = {"file": self.file, "expected": self.expected, "cvc5": self.answer, "verdict": self.verdict.value,
               "stats": {"seconds": round(self.seconds, 6)}}
        return out | ({"reason": self.reason} if self.reason else {})


def certificate_files(folder: str | Path) -> list[Path]:
    """The ``*.smt2`` files of ``folder`` in name order; a missing folder, a file given instead, or a folder
    with none, is refused."""
    root = Path(folder)
    if not root.is_dir():
        raise P2Error(f"{str(root)!r} {'is not a folder' if root.exists() else 'does not exist'}; give the "
                      "folder given to --certificate")
    files = sorted(p for p in root.iterdir() if p.name.endswith(".smt2"))
    if not files:
        raise P2Error(f"{str(root)!r} holds no certificate files (*.smt2)")
    for p in files:
        if (kind := kind_of(p.stat().st_mode)) is not None:
            raise P2Error(f"{p} is {kind}, not a certificate file")
    return files


def expected_answer(text: str, name: str) -> str:
    """The answer Z3 recorded in a certificate (its one ``:status``), or a refusal of a file that is none."""
    found = _STATUS.findall(text)
    if len(found) != 1 or text.count("(check-sat") != 1:
        raise P2Error(f"{name}: not a certificate file (one '(set-info :status sat|unsat)' and one check-sat)")
    return found[0]


def cvc5_answer(text: str, name: str, timeout_s: float | None = None) -> tuple[str, str | None]:
    """cvc5's answer to the script's ``check-sat`` (``sat``, ``unsat`` or ``unknown``) and, when it gives
    none, why."""
    import cvc5

    solver = cvc5.Solver(cvc5.TermManager())
    if timeout_s is not None:
        solver.setOption("tlimit-per", str(max(1, int(timeout_s * 1000))))
    parser = cvc5.InputParser(solver)
    parser.setStringInput(cvc5.InputLanguage.SMT_LIB_2_6, text, name)
    symbols = parser.getSymbolManager()
    answer = "unknown"
    try:
        while not (cmd := parser.nextCommand()).isNull():
            out = cmd.invoke(solver, symbols).strip()
            if out in ("sat", "unsat", "unknown"):
                answer = out
    except RuntimeError as err:  # cvc5's parse and option errors
        return "unknown", f"cvc5 cannot read it: {' '.join(str(err).split())[:200]}"
    if answer == "unknown":
        return answer, "cvc5 gave no answer" + (f" within {timeout_s:g} s" if timeout_s is not None else "")
    return answer, None


def recheck(folder: str | Path, *, timeout_s: float | None = None,
            report: Callable[[Recheck], None] | None = None) -> list[Recheck]:
    """cvc5's verdict on every certificate file of ``folder`` (name order), each reported as it is done.
    Every file is read and its recorded answer found before cvc5 runs on any."""
    try:
        import cvc5  # noqa: F401
    except ImportError:
        raise P2Error("recheck needs the cvc5 Python package: pip install 'p2smt[cvc5]' (or pip install cvc5)") from None
    texts = []
    for path in certificate_files(folder):
        data = read_bytes_at_most(path, MAX_CERTIFICATE_BYTES, "certificate file")
        if len(data) > MAX_CERTIFICATE_BYTES:
            raise P2Error(f"{path}: larger than {MAX_CERTIFICATE_BYTES >> 20} MB; not a certificate file")
        text = data.decode("utf-8", errors="replace")
        texts.append((path.name, text, expected_answer(text, path.name)))
    done = []
    for name, text, expected in texts:
        start = time.perf_counter()
        # the recorded status removed: cvc5 would stop at an answer that differs from it instead of giving it
        answer, reason = cvc5_answer(_STATUS.sub("", text), name, timeout_s)
        verdict = (Verdict.UNKNOWN if answer == "unknown" else
                   Verdict.CONFIRMED if answer == expected else Verdict.REFUTED)
        done.append(Recheck(name, expected, answer, verdict, time.perf_counter() - start, reason))
        if report is not None:
            report(done[-1])
    return done
