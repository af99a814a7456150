"""A folder of Z3 certificates keyed by problem, so that a problem certified once is not proved again.

Sweeps meet one synthesis problem under many requests: P²'s grid certifies 78 placements, of which 12
are distinct problems. An entry records the program set Z3 proved valid and complete, and the proof's
figures. Its key is a SHA-256 of the problem (devices, goal groups, candidate groups, the progress rule),
the maximum length and a fingerprint of what the proof rests on: the Z3 side's source (``p2smt/smt``),
the default encoding's file, the problem definition and Z3's version. Editing any of them starts afresh.

An entry may also record a proof that ran out of its resource budget: Z3's counts are deterministic, so
the same attempt (same budget, same threads) is not made again. An entry is trusted as the proof it
records (delete the folder to prove again). A proposer whose set
differs from an entry's has the problem proved again, and the fresh proof decides.

>>> import tempfile
>>> from p2smt.model.problem import Candidate, SynthesisProblem
>>> from p2smt.model.collectives import Collective
>>> prob = SynthesisProblem(2, ((0, 1),), (Candidate("ar", Collective.ALL_REDUCE, ((0, 1),)),))
>>> folder = tempfile.TemporaryDirectory()
>>> store = ProofStore(folder.name)
>>> store.get(prob, 3) is None
True
>>> stats = {"validity": {"queries": 1}, "completeness": {"queries": 2}, "resource_units": 10, "seconds": 0.1}
>>> _ = store.put(prob, 3, [(0,)], stats)
>>> entry = store.get(prob, 3)
>>> sorted(entry.programs), entry.resource_units, entry.certificate["completeness"]
([(0,)], 10, {'queries': 2})
>>> folder.cleanup()
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import p2smt
from p2smt.errors import P2Error
from p2smt.model.problem import SynthesisProblem, canonical_order
from p2smt.timings import split_timings

__all__ = ["FORMAT", "ProofStore", "Spent", "StoredProof", "fingerprint", "problem_json"]

FORMAT = 2
"""The entries' layout; part of every key."""


@dataclass(frozen=True)
class Spent:
    """A proof that did not finish within ``budget`` resource units on ``jobs`` threads, and why: Z3's
    counts are deterministic, so the same attempt fails the same way (a timeout is never recorded)."""

    budget: int
    jobs: int
    why_not: str


@dataclass(frozen=True)
class StoredProof:
    """One entry: the certified program set (candidate indices), the proof's figures without its seconds
    (those of the run that made it are in the file) and the Z3 resource units it spent; or (``spent``) a
    proof that ran out of its budget, with the figures it reached."""

    key: str
    programs: frozenset[tuple[int, ...]]
    certificate: dict[str, Any]
    resource_units: int
    spent: Spent | None = None

    @property
    def certified(self) -> bool:
        return self.spent is None

    def fits(self, budget: int | None) -> bool:
        """Whether a fresh proof within ``budget`` units (None: unlimited) would finish as this one did."""
        return self.certified and (budget is None or self.resource_units <= budget)

    def answers(self, programs: frozenset[tuple[int, ...]] | set[tuple[int, ...]], budget: int | None,
                jobs: int) -> bool:
        """Whether the entry is what a fresh proof of ``programs`` within ``budget`` on ``jobs`` threads would
        give: the same certified set within the budget, or the same spent attempt (Z3's counts repeat)."""
        if self.spent is not None:
            return (budget, jobs) == (self.spent.budget, self.spent.jobs)
        return self.fits(budget) and self.programs == programs


def _sources() -> Iterable[Path]:
    """The files a certificate rests on: the Z3 side, the default encoding, the problem's definition."""
    from p2smt.smt.engine import DEFAULT_ENCODING
    from p2smt.smt.registry import load_encoding

    root = Path(p2smt.__file__).parent
    yield from sorted((root / "smt").glob("*.py"))
    yield root / "model" / "problem.py"
    yield root / "model" / "collectives.py"
    yield Path(load_encoding(DEFAULT_ENCODING).source)


def fingerprint() -> str:
    """SHA-256 of p2smt's version, Z3's version and the bytes of every file the proofs rest on (read again
    when a file changes, as the encoding registry reloads an edited encoding)."""
    stats = [(p, p.stat()) for p in _sources()]
    return _fingerprint(tuple((str(p), st.st_mtime_ns, st.st_size) for p, st in stats))


@functools.lru_cache(maxsize=8)
def _fingerprint(files: tuple[tuple[str, int, int], ...]) -> str:
    import z3

    h = hashlib.sha256(f"{p2smt.__version__}\0{z3.get_version_string()}\0".encode())
    for name, _, _ in files:
        path = Path(name)
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def problem_json(prob: SynthesisProblem) -> dict[str, Any]:
    """The problem as canonical JSON (labels included: a program is reported by its candidates' labels)."""
    return {
        "devices": prob.num_devices,
        "goal": [list(g) for g in prob.goal_groups],
        "candidates": [[c.label, c.collective.value, [list(g) for g in c.groups]] for c in prob.candidates],
        "progress": prob.require_progress,
        **({} if prob.sharding is None else {"sharded_goal": {  # the AllReduce goal's keys unchanged
            "kind": prob.sharding.kind.value, "rank": list(prob.sharding.rank), "shards": prob.sharding.shards}}),
    }


class ProofStore:
    """Certificates in ``root`` (created on the first write), one JSON file per (problem, maximum length)."""

    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        if self.root.exists() and not self.root.is_dir():
            raise P2Error(f"--proof-store {root} exists and is not a folder")
        above = next(p for p in self.root.parents if p.exists())
        if not above.is_dir():
            raise P2Error(f"--proof-store {root}: {above} is not a folder")

    def ensure(self) -> ProofStore:
        """The store with its folder made (a sweep checks it before its tasks run)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise P2Error(f"--proof-store: cannot create {self.root} ({err.strerror})") from None
        return self

    def key(self, prob: SynthesisProblem, max_len: int) -> str:
        """The entry's name: SHA-256 of the layout, the fingerprint, the length and the problem."""
        text = json.dumps({"format": FORMAT, "fingerprint": fingerprint(), "max_len": max_len,
                           "problem": problem_json(prob)}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    def path(self, key: str) -> Path:
        """The entry's file."""
        return self.root / f"{key}.json"

    def get(self, prob: SynthesisProblem, max_len: int) -> StoredProof | None:
        """The entry of this problem and length, or None; an unreadable entry is an error naming its file."""
        key = self.key(prob, max_len)
        path = self.path(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise P2Error(f"--proof-store: cannot read {path} ({err}); delete it to prove again") from None
        try:
            if data["format"] != FORMAT or data["key"] != key:
                raise ValueError("another key or format")
            programs = frozenset(tuple(p) for p in data["programs"])
            if not all(type(i) is int and 0 <= i < len(prob.candidates) for p in programs for i in p):
                raise ValueError("a program that is not a list of candidate indices")
            certificate = data["certificate"]
            spent = data["spent"]
            proofs = ("validity", "completeness") if spent is None else ("validity",)
            if not all(type(certificate[proof]["queries"]) is int for proof in proofs):
                raise ValueError("a certificate without its queries")
            units = data["resource_units"]
            if type(units) is not int:
                raise ValueError("resource_units is not an integer")
            if spent is not None:
                spent = Spent(spent["budget"], spent["jobs"], spent["why_not"])
                if type(spent.budget) is not int or type(spent.jobs) is not int or type(spent.why_not) is not str:
                    raise ValueError("a spent budget that is not (units, jobs, why)")
            return StoredProof(key, programs, dict(certificate), units, spent)
        except (KeyError, TypeError, ValueError) as err:
            raise P2Error(f"--proof-store: {path} is not a proof entry ({err}); delete it to prove again") from None

    def put(self, prob: SynthesisProblem, max_len: int, programs: Iterable[tuple[int, ...]],
            stats: dict[str, Any], spent: Spent | None = None) -> Path | None:
        """Record a certified set with its proof's statistics, or (``spent``) a proof that ran out of its
        budget, unless the store already has a certified set for the problem (written whole or not at all)."""
        import z3

        if spent is not None:
            found = self.get(prob, max_len)
            if found is not None and found.certified:
                return None
        key = self.key(prob, max_len)
        certificate, timed = split_timings(stats)
        entry = {"format": FORMAT, "key": key, "p2smt": p2smt.__version__, "z3": z3.get_version_string(),
                 "devices": prob.num_devices, "candidates": len(prob.candidates), "max_len": max_len,
                 "programs": [list(p) for p in canonical_order(set(programs))] if spent is None else [],
                 "certificate": certificate, "resource_units": int(stats.get("resource_units", 0)),
                 "spent": None if spent is None else {"budget": spent.budget, "jobs": spent.jobs,
                                                      "why_not": spent.why_not},
                 "timings": timed}
        self.ensure()
        tmp = None
        try:
            fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{key[:12]}.", suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(entry, f, sort_keys=True)
            os.replace(tmp, self.path(key))
            tmp = None
        except OSError as err:
            raise P2Error(f"--proof-store: cannot write to {self.root} ({err.strerror})") from None
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
        return self.path(key)
