"""Measure SMT encoding variants against each other: one JSON line per (variant, configuration, repetition).

A *variant* is an encoding of the registry with one set of options; a *configuration* is one distinct
synthesis problem (with a max length): the distinct problems of P2.md §7's grid (``paper-grid``), a
shipped set (``p2smt/experiments/NAME.yaml``, e.g. ``scale``) or a user YAML file. Work runs in a fixed
order — configurations in file order, then repetitions, then variants in command-line order — so a
variant's runs sit next to the others' in time (machine noise hits them alike).

Each run is one fresh child process (``_child_main``): it sets Z3's random seed (``smt.random_seed``,
``sat.random_seed``; seed = base seed + repetition), runs the engine with the per-call Z3 timeout and
answers with the programs and solver statistics. The parent kills it at the wall-clock limit
(``timeout_s`` plus a grace, start-up not counted) and records ``timeout``; a fresh process also makes
Z3's process-wide figures (memory) per run and frees all solver memory in between. The parent re-checks
every returned program with the concrete interpreter (``synth.recheck``, outside the measured time,
each distinct program once per configuration) and writes and flushes the line.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, model_validator

from p2smt import __version__
from p2smt.errors import InternalError, P2Error

STATUSES = ("complete", "unknown", "timeout", "error", "unsound", "skipped")
"""complete: every length exhausted; unknown: Z3 gave up (its timeout); timeout: killed at the wall-clock
limit; error: the run failed (message in ``error``); unsound: the interpreter rejected a returned
program; skipped: the configuration is above the variant's ``max_k``."""
GRACE_MIN_S = 1.0
GRACE_FRACTION = 0.25
"""Wall-clock limit of a run: ``timeout_s + max(GRACE_MIN_S, GRACE_FRACTION × timeout_s)``."""
STARTUP_S = 120.0
"""How long a child may take to import p2smt and Z3 (not charged to the run)."""
SHIPPED_DIR = Path(__file__).resolve().parent / "experiments"
PAPER_GRID = "paper-grid"
MAX_EXPERIMENT_DEVICES = 16384
"""Largest reduction group of a ``levels`` entry (scale.py measures up to 4,096)."""


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


# ------------------------------------------------------------------------------------ configurations

PositiveInt = Annotated[StrictInt, Field(ge=1)]


class ConfigEntry(BaseModel):
    """One configuration of a config file: an abstract hierarchy (``levels``: sizes outermost first,
    reducing over all of it) or a request on a system (every placement unless ``matrix`` is given)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str | None = None
    levels: tuple[Annotated[StrictInt, Field(ge=2)], ...] | None = Field(default=None, min_length=1)
    level_names: tuple[str, ...] | None = None
    system: str | None = None
    nodes: PositiveInt | None = None
    axes: tuple[PositiveInt, ...] | None = Field(default=None, min_length=1)
    reduce: tuple[Annotated[StrictInt, Field(ge=0)], ...] | None = Field(default=None, min_length=1)
    matrix: tuple[tuple[PositiveInt, ...], ...] | None = None
    hierarchy: Literal["a", "b", "c", "d"] = "d"
    max_len: PositiveInt | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ConfigEntry:
        if (self.levels is None) == (self.system is None):
            raise ValueError("give either levels: [SIZES] or system: NAME (with axes and reduce)")
        if self.levels is not None:
            extra = [f for f in ("nodes", "axes", "reduce", "matrix") if getattr(self, f) is not None]
            if extra:
                raise ValueError(f"{extra[0]} belongs to system entries, not to levels entries")
            if self.level_names is not None and len(self.level_names) != len(self.levels):
                raise ValueError(f"{len(self.level_names)} level_names for {len(self.levels)} levels")
            if math.prod(self.levels) > MAX_EXPERIMENT_DEVICES:
                raise ValueError(
                    f"levels {list(self.levels)} give {math.prod(self.levels)} devices; experiments take at "
                    f"most {MAX_EXPERIMENT_DEVICES} (the re-check of every program is exact at any size, "
                    "but larger groups only time out)"
                )
        elif self.axes is None or self.reduce is None:
            raise ValueError("a system entry needs axes and reduce")
        return self


class ConfigFile(BaseModel):
    """A config file: a description, a default max length and the configurations in run order."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    description: str = ""
    max_len: PositiveInt = 5
    configs: tuple[ConfigEntry, ...] = Field(min_length=1)


@dataclass(frozen=True)
class Point:
    """One configuration to measure. ``spec`` rebuilds the problem in a child process (JSON);
    ``k``: devices of the reduction group; ``levels``: non-trivial levels; ``also``: other requests
    with the very same synthesis problem (deduplicated)."""

    label: str
    spec: dict[str, Any]
    max_len: int
    k: int
    levels: int
    hierarchy: tuple[tuple[str, int], ...]
    also: tuple[str, ...] = ()


def _build(spec: dict[str, Any]):
    """(synthesis hierarchy, problem) of a point spec."""
    from p2smt.model.dsl import problem
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    if "levels" in spec:
        sizes = tuple(spec["levels"])
        names = tuple(spec.get("level_names") or [f"l{i}" for i in range(len(sizes))])
        placement = Placement(sizes, (math.prod(sizes),), (sizes,))
        h = synthesis_hierarchy(placement, (0,), names)
    else:
        from p2smt.model.system import load_system

        system = load_system(spec["system"], spec.get("nodes"))
        placement = Placement(system.sizes, tuple(spec["axes"]), tuple(tuple(r) for r in spec["matrix"]))
        h = synthesis_hierarchy(placement, tuple(spec["reduce"]), system.level_names, spec.get("hierarchy", "d"))
    return h, problem(h)


def _request_specs(entry: ConfigEntry, system_name: str) -> list[tuple[str, dict[str, Any]]]:
    from p2smt.model.placement import matrices
    from p2smt.model.system import load_system

    system = load_system(system_name, entry.nodes)
    found = [entry.matrix] if entry.matrix is not None else matrices(system.sizes, entry.axes)
    out = []
    for m in found:
        label = f"{system.name} axes {list(entry.axes)} reduce {list(entry.reduce)} {[list(r) for r in m]}"
        spec = {"system": system_name, "nodes": entry.nodes, "axes": list(entry.axes),
                "reduce": list(entry.reduce), "matrix": [list(r) for r in m], "hierarchy": entry.hierarchy}
        out.append((label, spec))
    return out


def _identity(prob) -> tuple:
    """A problem up to the names of its levels (candidate labels): equal keys, equal program sets."""
    cands = tuple((c.collective, c.groups) for c in prob.candidates)
    return prob.num_devices, prob.goal_groups, cands, prob.require_progress


def _dedupe(items: Iterable[tuple[str, dict[str, Any], int]]) -> list[Point]:
    """Points from (label, spec, max_len), one per distinct (problem, max_len), first occurrence kept."""
    firsts: dict[Any, int] = {}
    points: list[Point] = []
    for label, spec, max_len in items:
        try:
            h, prob = _build(spec)
        except P2Error as err:
            raise P2Error(f"configuration {label}: {err}") from None
        key = (_identity(prob), max_len)
        if key in firsts:
            i = firsts[key]
            points[i] = replace(points[i], also=(*points[i].also, label))
            continue
        firsts[key] = len(points)
        points.append(Point(label, spec, max_len, prob.num_devices, h.nontrivial_levels, h.levels))
    return points


def paper_grid_points(max_len: int = 5) -> list[Point]:
    """The distinct synthesis problems of P2.md §7's grid, labelled by their first request and matrix."""
    from p2smt.runs.grid import paper_grid

    items = []
    for cfg in paper_grid():
        entry = ConfigEntry(system=cfg.system, axes=cfg.axes, reduce=cfg.reduction_axes)
        items.extend((label, spec, max_len) for label, spec in _request_specs(entry, cfg.system))
    return _dedupe(items)


def shipped_configs() -> list[str]:
    """Names accepted by ``load_configs`` besides a path: paper-grid and p2smt/experiments/*.yaml."""
    return [PAPER_GRID, *sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))]


def _field_error(source: str, err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(x) for x in first["loc"]) or "(top level)"
    more = f" (and {err.error_count() - 1} more)" if err.error_count() > 1 else ""
    return f"{source}: field {loc}: {first['msg']}{more}"


def parse_config_file(data: Any, source: str, base_dir: Path | None = None,
                      max_len: int | None = None) -> list[Point]:
    """Validate a parsed config document into points (``max_len`` overrides every entry's)."""
    from p2smt.synth.driver import MAX_LEN_LIMIT

    if not isinstance(data, dict):
        raise P2Error(f"{source}: a config file must be a mapping, got {type(data).__name__}")
    try:
        doc = ConfigFile.model_validate(data)
    except ValidationError as err:
        raise P2Error(_field_error(source, err)) from None
    items = []
    for i, entry in enumerate(doc.configs):
        length = max_len or entry.max_len or doc.max_len
        if length > MAX_LEN_LIMIT:
            raise P2Error(f"{source}: configs.{i}: max_len must be at most {MAX_LEN_LIMIT}, got {length}")
        if entry.levels is not None:
            names = entry.level_names
            label = entry.name or "levels " + "x".join(str(s) for s in entry.levels)
            spec = {"levels": list(entry.levels), "level_names": list(names) if names else None}
            items.append((label, spec, length))
            continue
        system = entry.system
        if (system.endswith((".yaml", ".yml")) or os.sep in system) and base_dir and not Path(system).is_absolute():
            system = str((base_dir / system).resolve())
        try:
            specs = _request_specs(entry, system)
        except P2Error as err:
            raise P2Error(f"{source}: configs.{i}: {err}") from None
        items.extend(((entry.name or label) if entry.matrix is not None else label, spec, length)
                     for label, spec in specs)
    try:
        return _dedupe(items)
    except P2Error as err:
        raise P2Error(f"{source}: {err}") from None


def load_configs(name_or_path: str | Path, max_len: int | None = None) -> list[Point]:
    """``paper-grid``, a shipped set name (``scale``) or a YAML file path -> points in run order."""
    from p2smt.model.yamlfile import read_yaml

    text = str(name_or_path)
    if text == PAPER_GRID:
        return paper_grid_points(max_len or 5)
    path = Path(text)
    if not path.exists() and path.suffix == "" and (SHIPPED_DIR / f"{path.name}.yaml").is_file():
        path = SHIPPED_DIR / f"{path.name}.yaml"
    if not path.is_file():
        raise P2Error(f"config file {text!r} does not exist (shipped: {', '.join(shipped_configs())})")
    return parse_config_file(read_yaml(path, "config file"), str(path), path.resolve().parent, max_len)


# ------------------------------------------------------------------------------------------ one run


def _child_main() -> None:
    """Entry point of a run process: answer one request line from stdin with one result line."""
    protocol = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not corrupt the protocol
    import z3

    from p2smt.smt.engine import enumerate_z3

    protocol.write(json.dumps({"ready": True}) + "\n")
    protocol.flush()
    req = json.loads(sys.stdin.readline())
    try:
        z3.set_param("smt.random_seed", int(req["seed"]))
        z3.set_param("sat.random_seed", int(req["seed"]))
        h, prob = _build(req["spec"])
        start = time.perf_counter()
        res = enumerate_z3(prob, req["max_len"], encoding=req["encoding"], options=req["options"],
                           timeout_ms=req["timeout_ms"], extra_dirs=req["extra_dirs"], hierarchy=h)
        wall = time.perf_counter() - start
        out = {"status": res.status, "wall_seconds": wall, "programs": [list(p) for p in res.programs],
               "stats": res.stats}
    except P2Error as err:
        out = {"status": "error", "error": str(err)}
    except Exception as err:  # noqa: BLE001 - a failed run is a result line, not a crashed experiment
        out = {"status": "error", "error": f"{type(err).__name__}: {err}"}
    try:
        import resource

        out["max_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    except ImportError:  # not on POSIX
        pass
    protocol.write(json.dumps(out, default=str) + "\n")
    protocol.flush()


def hard_limit(timeout_s: float) -> float:
    return timeout_s + max(GRACE_MIN_S, GRACE_FRACTION * timeout_s)


def run_in_child(request: dict[str, Any], limit_s: float) -> tuple[dict[str, Any], float]:
    """Run one request in a fresh process; (answer, seconds from request to answer or kill)."""
    env = dict(os.environ)
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from p2smt.runs.experiment import _child_main; _child_main()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    lines: queue.Queue[str | None] = queue.Queue()
    tail: list[str] = []

    def pump(stream, sink) -> None:
        for line in stream:
            sink(line)
        sink(None)

    threading.Thread(target=pump, args=(proc.stdout, lines.put), daemon=True).start()
    threading.Thread(target=pump, args=(proc.stderr, lambda s: tail.append(s or "")), daemon=True).start()
    start = time.perf_counter()
    try:
        try:
            ready = lines.get(timeout=STARTUP_S)
        except queue.Empty:
            ready = None
        if ready is None:
            raise InternalError(f"a run process did not start: {''.join(tail[-5:]).strip() or 'no message'}")
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.close()
        start = time.perf_counter()
        try:
            line = lines.get(timeout=limit_s)
        except queue.Empty:
            return {"status": "timeout", "error": f"killed after {limit_s:.1f} s"}, time.perf_counter() - start
        if line is None:
            proc.wait()
            msg = "".join(tail[-5:]).strip() or "no message"
            return {"status": "error", "error": f"run process exited ({proc.returncode}): {msg}"}, \
                time.perf_counter() - start
        return json.loads(line), time.perf_counter() - start
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _digest(programs: Sequence[Sequence[int]]) -> str:
    text = json.dumps([list(p) for p in programs], separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class _Checked:
    """Programs already confirmed by the interpreter, per configuration index."""

    seen: dict[int, set[tuple[int, ...]]] = field(default_factory=dict)

    def recheck(self, index: int, point: Point, programs: list[tuple[int, ...]], engine: str) -> float:
        from p2smt.synth.driver import recheck

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


def measure(point: Point, index: int, variant: Variant, rep: int, *, seed: int, timeout_s: float,
            extra_dirs: Sequence[str], checked: _Checked, z3_version: str) -> dict[str, Any]:
    """One run: the child's answer, re-checked, as a result line."""
    row = _row(point, index, variant, rep, seed, timeout_s, z3_version)
    request = {"spec": point.spec, "encoding": variant.encoding, "options": variant.options,
               "max_len": point.max_len, "timeout_ms": max(1, int(timeout_s * 1000)), "seed": seed,
               "extra_dirs": list(extra_dirs)}
    answer, elapsed = run_in_child(request, hard_limit(timeout_s))
    status = answer["status"]
    stats = answer.get("stats", {})
    programs = [tuple(p) for p in answer.get("programs", [])]
    row.update({
        "status": status,
        "wall_seconds": round(answer.get("wall_seconds", elapsed), 6),
        "declare_seconds": stats.get("declare_seconds"),
        "programs": len(programs) if status in ("complete", "unknown") else None,
        "programs_sha256": _digest(programs) if status == "complete" else None,
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
) -> list[dict[str, Any]]:
    """Run every (configuration, repetition, variant) in that order; each line is written to ``out``
    (truncated first) and flushed as soon as it is measured. ``max_k``: encoding name -> the largest k
    it runs on (larger configurations are ``skipped`` lines)."""
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
    path = Path(out)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("w", encoding="utf-8")
    except OSError as err:
        raise P2Error(f"cannot write {path}: {err.strerror}") from None
    with handle:
        for index, point in enumerate(points):
            for rep in range(repeat):
                for variant in variants:
                    cap = max_k.get(variant.encoding)
                    if cap is not None and point.k > cap:
                        row = _row(point, index, variant, rep, seed + rep, timeout_s, version)
                        row.update({"status": "skipped", "reason": f"k = {point.k} > max k {cap}"})
                    else:
                        row = measure(point, index, variant, rep, seed=seed + rep, timeout_s=timeout_s,
                                      extra_dirs=extra, checked=checked, z3_version=version)
                    handle.write(json.dumps(row, default=str) + "\n")
                    handle.flush()
                    rows.append(row)
                    if progress is not None:
                        progress(row)
    return rows


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a results file (for re-summarizing or re-plotting)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise P2Error(f"cannot read {p}: {err.strerror}") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise P2Error(f"{p}:{n}: malformed JSON line: {err.msg}") from None
    return rows


# ----------------------------------------------------------------------------------- summary and plot


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: configurations, runs by status, median and total wall time, programs (summed over
    configurations with a complete run); and every configuration whose complete runs disagree."""
    variants: dict[str, dict[str, Any]] = {}
    by_config: dict[int, dict[str, set[tuple[int, str]]]] = {}
    labels: dict[int, str] = {}
    for r in rows:
        v = variants.setdefault(r["variant"], {"variant": r["variant"], "configs": set(), "runs": 0,
                                               "counts": {s: 0 for s in STATUSES}, "times": [],
                                               "programs": {}})
        v["counts"][r["status"]] = v["counts"].get(r["status"], 0) + 1
        if r["status"] == "skipped":
            continue
        v["configs"].add(r["config_index"])
        v["runs"] += 1
        v["times"].append(r["wall_seconds"])
        if r["status"] == "complete":
            v["programs"].setdefault(r["config_index"], r["programs"])
            labels[r["config_index"]] = r["config"]
            by_config.setdefault(r["config_index"], {}).setdefault(r["variant"], set()).add(
                (r["programs"], r["programs_sha256"]))
    table = []
    for v in variants.values():
        times = v["times"]
        table.append({
            "variant": v["variant"], "configs": len(v["configs"]), "runs": v["runs"], **v["counts"],
            "median_seconds": round(statistics.median(times), 6) if times else None,
            "total_seconds": round(sum(times), 6),
            "programs": sum(v["programs"].values()),
        })
    disagreements = []
    for index in sorted(by_config):
        answers = by_config[index]
        if len({a for found in answers.values() for a in found}) > 1:
            disagreements.append({
                "config_index": index, "config": labels[index],
                "answers": {var: sorted(n for n, _ in found) for var, found in answers.items()},
            })
    problems = [{"variant": r["variant"], "config": r["config"], "status": r["status"], "error": r.get("error")}
                for r in rows if r["status"] in ("error", "unsound")]
    return {"variants": table, "disagreements": disagreements, "failures": problems}


def render_summary(summary: dict[str, Any], title: str = "experiment"):
    """Rich renderables: the per-variant table, then loud panels for disagreements and failures."""
    from rich.panel import Panel
    from rich.table import Table

    t = Table(title=title, caption="ok: complete; unk: Z3 gave up (its timeout); t/o: killed at the wall-clock "
              "limit; median and total over the runs that were not skipped")
    t.add_column("variant", min_width=14, overflow="fold")
    for col in ("configs", "runs", "ok", "unk", "t/o", "err", "skip", "median s", "total s", "programs"):
        t.add_column(col, justify="right", overflow="fold")
    for v in summary["variants"]:
        med = "—" if v["median_seconds"] is None else f"{v['median_seconds']:.3f}"
        t.add_row(v["variant"], str(v["configs"]), str(v["runs"]), str(v["complete"]), str(v["unknown"]),
                  str(v["timeout"]), str(v["error"] + v["unsound"]), str(v["skipped"]), med,
                  f"{v['total_seconds']:.2f}", str(v["programs"]))
    out: list[Any] = [t]
    if summary["disagreements"]:
        lines = [f"{d['config']}: " + "; ".join(f"{var} -> {counts}" for var, counts in d["answers"].items())
                 for d in summary["disagreements"]]
        out.append(Panel("\n".join(lines), title="CONFORMANCE DISAGREEMENT: complete runs found different "
                         "program sets", style="bold red"))
    if summary["failures"]:
        lines = [f"{f['variant']} on {f['config']}: {f['status']}: {f['error']}" for f in summary["failures"]]
        out.append(Panel("\n".join(lines), title="FAILED RUNS", style="bold red"))
    return out


def plot(rows: Sequence[dict[str, Any]], path: str | Path, title: str = "") -> Path:
    """PNG: wall time vs reduction-group size k (log-log); per variant a line through the median time of
    its complete runs at each k, every run a dot, runs without an answer (unknown, timeout) an ×."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    order = list(dict.fromkeys(r["variant"] for r in rows))
    for i, variant in enumerate(order):
        color = f"C{i % 10}"
        mine = [r for r in rows if r["variant"] == variant and r["status"] not in ("skipped", "error", "unsound")]
        done = [r for r in mine if r["status"] == "complete"]
        cut = [r for r in mine if r["status"] != "complete"]
        ks = sorted({r["k"] for r in done})
        med = [statistics.median(r["wall_seconds"] for r in done if r["k"] == k) for k in ks]
        ax.plot(ks, med, "-", color=color, label=variant, linewidth=1.6)
        ax.plot([r["k"] for r in done], [max(r["wall_seconds"], 1e-4) for r in done], "o", color=color,
                alpha=0.45, markersize=4)
        if cut:
            ax.plot([r["k"] for r in cut], [max(r["wall_seconds"], 1e-4) for r in cut], "x", color=color,
                    markersize=7, label=f"{variant}: unknown / timeout")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("reduction-group size k (devices)")
    ax.set_ylabel("wall time per run (s)")
    ax.set_title(title or "solve time vs reduction-group size")
    ax.grid(True, which="both", alpha=0.3)
    if order:
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=120)
    except OSError as err:
        raise P2Error(f"cannot write {out}: {err.strerror}") from None
    finally:
        plt.close(fig)
    return out


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
) -> dict[str, Any]:
    """The whole workflow behind ``p2smt experiment``: validate, run, summarize, plot."""
    extra = list(extra_dirs)
    variants = parse_variants(encodings, options, extra)
    points = load_configs(configs, max_len)
    start = time.perf_counter()
    rows = run_experiment(variants, points, out, repeat=repeat, timeout_s=timeout_s, seed=seed,
                          max_k=max_k, extra_dirs=extra, progress=progress)
    summary = summarize(rows)
    summary.update({"out": str(out), "configs": str(configs), "points": len(points), "repeat": repeat,
                    "seconds": round(time.perf_counter() - start, 3)})
    if png is not None:
        summary["png"] = str(plot(rows, png, f"{configs}: time vs k"))
    return summary
