"""Measure SMT encoding variants against each other: one JSON line per (variant, configuration, repetition).

A *variant* is an encoding of the registry with one set of options; a *configuration* is one distinct
synthesis problem with a max length (``runs.configs``). Work runs in a fixed order — configurations in
file order, then repetitions, then variants in command-line order — so a variant's runs sit next to the
others' in time (machine noise hits them alike).

Each run is one call in a fresh child process (``runs.child``): ``run_variant`` sets Z3's random seed
(``smt.random_seed``, ``sat.random_seed``; seed = base seed + repetition), runs the engine with the
per-call Z3 timeout and answers with the programs and solver statistics. The call is killed at the
wall-clock limit (``timeout_s`` plus a grace, start-up not counted) and recorded as ``timeout``; a fresh
process also makes Z3's process-wide figures (memory) per run and frees all solver memory in between.
The parent re-checks every returned program with the concrete interpreter (``synth.recheck``, outside
the measured time, each distinct program once per configuration) and appends the line to the results
file (``runs.store``); with ``resume`` the runs already in the file are kept and not run again.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from p2smt import __version__
from p2smt.errors import InternalError, P2Error
from p2smt.runs.child import OutcomeStatus, hard_limit, run_in_child
from p2smt.runs.configs import Point, _build, load_configs
from p2smt.runs.expreport import plot, summarize
from p2smt.runs.store import ResultStore

PRELOAD = ("z3", "p2smt.smt.engine", "p2smt.smt.registry", "p2smt.runs.configs")
"""Imported by a run's child before it is ready (start-up is not charged to the run)."""

# ------------------------------------------------------------------------------------------ variants


@dataclass(frozen=True)
class Variant:
    """One encoding with one option set (``options_json``: canonical JSON of the user's options)."""

    encoding: str
    options_json: str = "{}"

    @property
    def options(self) -> dict[str, Any]:
        return json.loads(self.options_json)

    @property
    def label(self) -> str:
        return self.encoding if self.options_json == "{}" else f"{self.encoding} {self.options_json}"


def parse_variants(
    encodings: str | Sequence[str], options: Sequence[str] = (), extra_dirs: Iterable[str | Path] = ()
) -> list[Variant]:
    """Variants from ``A,B,…`` and ``NAME=JSON`` option sets (repeatable: one variant per set; an
    encoding without a set runs with its defaults). Names and options are validated against the registry."""
    from p2smt.smt.registry import load_encoding

    names = [n.strip() for n in (encodings.split(",") if isinstance(encodings, str) else encodings)]
    names = [n for n in names if n]
    if not names:
        raise P2Error("--encodings needs at least one encoding name")
    if len(set(names)) != len(names):
        raise P2Error(f"--encodings repeats a name: {','.join(names)} (use --options NAME=JSON per option set)")
    extra = list(extra_dirs)
    specs = {n: load_encoding(n, extra) for n in names}
    sets: dict[str, list[str]] = {n: [] for n in names}
    for item in options:
        name, sep, text = item.partition("=")
        name = name.strip()
        if not sep:
            raise P2Error(f"--options expects NAME=JSON, got {item!r}")
        if name not in sets:
            raise P2Error(f"--options {name!r}: not one of --encodings ({', '.join(names)})")
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise P2Error(f"--options {name}: not JSON: {err.msg}") from None
        if not isinstance(value, dict):
            raise P2Error(f"--options {name}: must be a JSON object, got {text!r}")
        specs[name].parse_options(value)
        canon = json.dumps(value, sort_keys=True, separators=(",", ":"))
        if canon in sets[name]:
            raise P2Error(f"--options {name}={canon} is given twice")
        sets[name].append(canon)
    return [Variant(n, s) for n in names for s in (sets[n] or ["{}"])]


# ------------------------------------------------------------------------------------------ one run


def run_variant(request: dict[str, Any]) -> dict[str, Any]:
    """One run, in the child: seed Z3, build the problem, run the encoding; programs, stats, peak RSS."""
    import z3

    from p2smt.smt.engine import enumerate_z3
    from p2smt.smt.memory import MemoryCap

    z3.set_param("smt.random_seed", int(request["seed"]))
    z3.set_param("sat.random_seed", int(request["seed"]))
    h, prob = _build(request["spec"])
    start = time.perf_counter()
    res = enumerate_z3(prob, request["max_len"], encoding=request["encoding"], options=request["options"],
                       timeout_ms=request["timeout_ms"], extra_dirs=request["extra_dirs"], hierarchy=h,
                       memory=MemoryCap.of(request.get("memory_gib")))
    conjectured = res.status == "complete" and res.stats.get("completeness") == "conjectured"
    out = {"status": "conjectured" if conjectured else res.status, "wall_seconds": time.perf_counter() - start,
           "programs": [list(p) for p in res.programs], "stats": res.stats}
    try:
        import resource

        out["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except ImportError:  # not on POSIX
        pass
    return out


def _digest(programs: Sequence[Sequence[int]]) -> str:
    text = json.dumps([list(p) for p in programs], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class _Checked:
    """Programs already confirmed by the interpreter, per configuration index."""

    seen: dict[int, set[tuple[int, ...]]] = field(default_factory=dict)

    def recheck(self, index: int, point: Point, programs: list[tuple[int, ...]], engine: str) -> float:
        from p2smt.synth.recheck import recheck

        done = self.seen.setdefault(index, set())
        todo = [p for p in programs if p not in done]
        start = time.perf_counter()
        if todo:
            _, prob = _build(point.spec)
            recheck(prob, todo, engine)
            done.update(todo)
        return time.perf_counter() - start


def _row(point: Point, index: int, variant: Variant, rep: int, seed: int, timeout_s: float,
         z3_version: str) -> dict[str, Any]:
    return {
        "p2smt": __version__, "z3": z3_version, "encoding": variant.encoding, "options": variant.options,
        "variant": variant.label, "config": point.label, "config_index": index, "k": point.k,
        "levels": point.levels, "hierarchy": [[n, s] for n, s in point.hierarchy], "max_len": point.max_len,
        "repetition": rep, "seed": seed, "timeout_s": timeout_s,
    }


def run_key(point: Point, variant: Variant, rep: int, seed: int, timeout_s: float,
            memory_gib: float | None = None) -> str:
    """sha256 of what determines a run (version, variant, problem, max length, repetition, seed, timeout, and
    the memory cap when one is given)."""
    fields = {"p2smt": __version__, "variant": variant.label, "spec": point.spec, "max_len": point.max_len,
              "repetition": rep, "seed": seed, "timeout_s": timeout_s}
    if memory_gib is not None:
        fields["memory_gib"] = memory_gib
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def measure(point: Point, index: int, variant: Variant, rep: int, *, seed: int, timeout_s: float,
            extra_dirs: Sequence[str], checked: _Checked, z3_version: str,
            memory_gib: float | None = None) -> dict[str, Any]:
    """One run: the child's answer, re-checked, as a result line (``memory_gib``: the Z3 encodings' memory cap,
    None for the default share of the RAM)."""
    row = _row(point, index, variant, rep, seed, timeout_s, z3_version)
    if memory_gib is not None:
        row["memory_gib"] = memory_gib
    request = {"spec": point.spec, "encoding": variant.encoding, "options": variant.options,
               "max_len": point.max_len, "timeout_ms": max(1, int(timeout_s * 1000)), "seed": seed,
               "extra_dirs": list(extra_dirs), "memory_gib": memory_gib}
    outcome = run_in_child("p2smt.runs.experiment:run_variant", [request], limit_s=hard_limit(timeout_s),
                           preload=PRELOAD)
    if outcome.status == OutcomeStatus.OK:
        answer = outcome.value
    else:
        answer = {"status": outcome.status.value, "error": outcome.error}
    status = answer["status"]
    stats = answer.get("stats", {})
    programs = [tuple(p) for p in answer.get("programs", [])]
    row.update({
        "status": status,
        "wall_seconds": round(answer.get("wall_seconds", outcome.seconds), 6),
        "declare_seconds": stats.get("declare_seconds"),
        "programs": len(programs) if status in ("complete", "conjectured", "unknown") else None,
        "programs_sha256": _digest(programs) if status in ("complete", "conjectured") else None,
        "solver_calls": stats.get("solver_calls"),
        "conflicts": stats.get("conflicts"),
        "decisions": stats.get("decisions"),
        "propagations": stats.get("propagations"),
        "memory_mb": stats.get("memory"),
        "max_memory_mb": stats.get("max memory"),
        "max_rss_mb": answer.get("max_rss_mb"),
        "recheck_seconds": None,
        "error": answer.get("error"),
        "stats": stats,
    })
    if programs:
        try:
            row["recheck_seconds"] = round(checked.recheck(index, point, programs, variant.label), 6)
        except InternalError as err:
            row["status"] = "unsound"
            row["error"] = str(err)
    return row


# -------------------------------------------------------------------------------------- experiment


def run_experiment(
    variants: Sequence[Variant],
    points: Sequence[Point],
    out: str | Path,
    *,
    repeat: int = 1,
    timeout_s: float = 300.0,
    seed: int = 0,
    max_k: dict[str, int] | None = None,
    extra_dirs: Iterable[str | Path] = (),
    progress: Callable[[dict[str, Any]], None] | None = None,
    resume: bool = False,
    memory_gib: float | None = None,
) -> list[dict[str, Any]]:
    """Run every (configuration, repetition, variant) in that order; each line is appended to ``out`` and
    fsynced as soon as it is measured. ``out`` is emptied first unless ``resume``, which keeps its lines
    and runs only the missing ones. ``max_k``: encoding name -> the largest k it runs on (larger
    configurations are ``skipped`` lines). ``memory_gib``: the encodings' memory cap (``--memory``; None: the
    default share of the RAM), past which a run is refused or ends unknown. Returns every line of the work, in
    work order."""
    import z3

    if repeat < 1:
        raise P2Error(f"--repeat must be at least 1, got {repeat}")
    if not (timeout_s > 0 and math.isfinite(timeout_s)):
        raise P2Error(f"--timeout must be a positive number of seconds, got {timeout_s}")
    if not variants or not points:
        raise P2Error("an experiment needs at least one variant and one configuration")
    max_k = dict(max_k or {})
    unknown = sorted(set(max_k) - {v.encoding for v in variants})
    if unknown:
        raise P2Error(f"--max-k names {unknown[0]!r}, which is not one of the encodings run")
    extra = [str(Path(d).resolve()) for d in extra_dirs]
    version = z3.get_version_string()
    checked = _Checked()
    rows = []
    with ResultStore(out, fresh=not resume, marker="variant") as store:
        done = {r["key"]: r for r in store.rows}
        for index, point in enumerate(points):
            for rep in range(repeat):
                for variant in variants:
                    key = run_key(point, variant, rep, seed + rep, timeout_s, memory_gib)
                    if key in done:
                        rows.append(done[key])
                        continue
                    cap = max_k.get(variant.encoding)
                    if cap is not None and point.k > cap:
                        row = _row(point, index, variant, rep, seed + rep, timeout_s, version)
                        row.update({"status": "skipped", "reason": f"k = {point.k} > max k {cap}"})
                    else:
                        row = measure(point, index, variant, rep, seed=seed + rep, timeout_s=timeout_s,
                                      extra_dirs=extra, checked=checked, z3_version=version,
                                      memory_gib=memory_gib)
                    row["key"] = key
                    store.append(row)
                    rows.append(row)
                    if progress is not None:
                        progress(row)
    return rows


def experiment(
    encodings: str | Sequence[str],
    configs: str | Path,
    out: str | Path,
    *,
    options: Sequence[str] = (),
    repeat: int = 1,
    timeout_s: float = 300.0,
    max_len: int | None = None,
    seed: int = 0,
    png: str | Path | None = None,
    max_k: dict[str, int] | None = None,
    extra_dirs: Iterable[str | Path] = (),
    progress: Callable[[dict[str, Any]], None] | None = None,
    resume: bool = False,
    memory_gib: float | None = None,
) -> dict[str, Any]:
    """The whole workflow behind ``p2smt experiment``: validate, run, summarize, plot (timings under
    ``stats``)."""
    extra = list(extra_dirs)
    variants = parse_variants(encodings, options, extra)
    points = load_configs(configs, max_len)
    start = time.perf_counter()
    rows = run_experiment(variants, points, out, repeat=repeat, timeout_s=timeout_s, seed=seed,
                          max_k=max_k, extra_dirs=extra, progress=progress, resume=resume, memory_gib=memory_gib)
    summary = summarize(rows)
    summary.update({"out": str(out), "configs": str(configs), "points": len(points), "repeat": repeat,
                    "stats": {"seconds": round(time.perf_counter() - start, 3)}})
    if png is not None:
        summary["png"] = str(plot(rows, png, f"{configs}: time vs k"))
    return summary
