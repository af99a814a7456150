"""Shared fixtures for the core-model tests: data files, small hierarchies, the CLI in-process."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

SLOW = bool(os.environ.get("P2SMT_SLOW"))


def pytest_collection_modifyitems(config, items):
    """The one slow mechanism: tests marked ``slow`` run only with ``P2SMT_SLOW=1`` (minutes each)."""
    if SLOW:
        return
    skip = pytest.mark.skip(reason="slow: set P2SMT_SLOW=1 to run it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)

from p2smt.cli.main import main
from p2smt.model.hierarchy import SynthesisHierarchy, synthesis_hierarchy
from p2smt.model.placement import Placement

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture
def verify_hangs_at_step_3(monkeypatch):
    """Z3's plan checker hangs on the third step (steps 1..2 proved), so a --deadline ends verify there."""
    from p2smt.smt import check

    real = check.PlanChecker._node_failure

    def hang_on_step_3(self, t, nd, detail):
        if t == 2:
            __import__("time").sleep(600)
        return real(self, t, nd, detail)

    monkeypatch.setattr(check.PlanChecker, "_node_failure", hang_on_step_3)


@pytest.fixture
def deadline_after(monkeypatch):
    """``deadline_after(n)``: a command's ``--deadline`` passes right after its n-th finished piece (a placement,
    a step) reached the parent, whatever the machine's load: the clock of ``cli.bounded`` jumps past every
    deadline then. A test of what a run stopped at its deadline keeps, not of how fast its pieces come."""
    import time
    from contextlib import contextmanager

    from p2smt.cli import bounded

    def arm(n: int) -> None:
        shown = [0]
        real = bounded.progress_display

        @contextmanager
        def counting(args, label, total):
            shown[0] = 0  # each bounded run counts its own pieces
            with real(args, label, total) as show:
                def report(piece):
                    shown[0] += 1
                    show(piece)

                yield report

        class Clock:
            @staticmethod
            def monotonic() -> float:
                return time.monotonic() + (1e9 if shown[0] >= n else 0.0)

        monkeypatch.setattr(bounded, "progress_display", counting)
        monkeypatch.setattr(bounded, "time", Clock)

    return arm


def _hierarchy(
    sizes: Sequence[int],
    axes: Sequence[int],
    matrix: Sequence[Sequence[int]],
    reduce: Sequence[int],
    names: Sequence[str] | None = None,
    kind: str = "d",
    master_scope: str = "per-ancestor",
) -> SynthesisHierarchy:
    placement = Placement(tuple(sizes), tuple(axes), tuple(tuple(r) for r in matrix))
    names = tuple(names) if names else tuple(f"l{j}" for j in range(len(sizes)))
    return synthesis_hierarchy(placement, tuple(reduce), names, kind, master_scope)


@pytest.fixture(scope="session")
def hierarchy_of() -> Callable[..., SynthesisHierarchy]:
    """Factory: the synthesis hierarchy of (sizes, axes, matrix, reduce[, names, kind, master_scope])."""
    return _hierarchy


@pytest.fixture(scope="session")
def flat_hierarchy() -> Callable[..., SynthesisHierarchy]:
    """Factory: ``root`` + the given levels, synthesis index = physical id (one axis, fully reduced)."""

    def make(sizes: Sequence[int], names: Sequence[str] | None = None, master_scope: str = "per-ancestor"):
        n = 1
        for s in sizes:
            n *= s
        return _hierarchy(sizes, (n,), (tuple(sizes),), (0,), names, "d", master_scope)

    return make


@pytest.fixture
def run_cli(capsys) -> Callable[..., tuple[int, str, str]]:
    """Run ``p2smt.cli.main.main(argv)`` in-process: (exit code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        rc = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return rc, out, err

    return run
