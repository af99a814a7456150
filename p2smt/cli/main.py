"""The ``p2smt`` command line: thin sub-commands over the Python API, rich tables or ``--json``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from p2smt import __version__
from p2smt.errors import InternalError, P2Error

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_UNKNOWN = 0, 1, 2, 3, 4


class _ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        raise P2Error(f"{self.prog}: {message}")


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").strip("[]()").split(",") if v != "")
    except ValueError:
        raise P2Error(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise P2Error(f"expected comma-separated integers, got {text!r}")
    return values


def read_arg_text(value: str) -> tuple[str, str | None]:
    """``@FILE`` reads a file (returns its text and name), anything else is the text itself."""
    if value.startswith("@"):
        path = Path(value[1:])
        try:
            return path.read_text(encoding="utf-8"), str(path)
        except OSError as err:
            raise P2Error(f"cannot read {path}: {err.strerror}") from None
        except UnicodeDecodeError as err:
            raise P2Error(f"{path}: not UTF-8 text (byte {err.start})") from None
    return value, None


def emit(args: argparse.Namespace, payload: dict[str, Any], render: Callable[[Console], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=2))
    else:
        render(Console(highlight=False, width=max(100, Console().width)))


# ---------------------------------------------------------------- shared option groups


def add_system(p: argparse.ArgumentParser) -> None:
    p.add_argument("--system", required=True, help="shipped system name or path to a YAML file")
    p.add_argument("--nodes", type=int, help="re-instantiate the system with N nodes")
    p.add_argument("--level", action="append", default=[], metavar="NAME=SIZE",
                   help="resize a level, e.g. --level su=2 (repeatable)")


def add_request(p: argparse.ArgumentParser, matrix_required: bool = False) -> None:
    add_system(p)
    p.add_argument("--axes", required=True, help="parallelism axes, e.g. 4,16")
    p.add_argument("--reduce", required=True, help="reduction axes (indices), e.g. 0 or 0,2")
    p.add_argument("--matrix", required=matrix_required, help="one parallelism matrix, e.g. '[[1,4],[4,4]]'")
    p.add_argument("--hierarchy", default="d", choices=["a", "b", "c", "d"], help="synthesis hierarchy (P2.md §2)")
    p.add_argument(
        "--master-scope",
        default="per-ancestor",
        choices=["per-ancestor", "global"],
        help="reading of Master(e'): one group per e' node (default) or only the first",
    )


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


def level_sizes(items: list[str]) -> dict[str, int]:
    out = {}
    for item in items:
        name, _, size = item.partition("=")
        try:
            out[name.strip()] = int(size)
        except ValueError:
            raise P2Error(f"--level expects NAME=SIZE, got {item!r}") from None
    return out


def load(args: argparse.Namespace):
    from p2smt.model.system import load_system

    return load_system(args.system, args.nodes, level_sizes(args.level))


def request(args: argparse.Namespace):
    """(system, axes, reduction_axes, matrix or None) from the shared options."""
    from p2smt.model.placement import parse_matrix

    system = load(args)
    axes = int_list(args.axes)
    reduce = int_list(args.reduce)
    matrix = parse_matrix(args.matrix) if args.matrix else None
    return system, axes, reduce, matrix


def one_hierarchy(args: argparse.Namespace):
    """The placement and synthesis hierarchy of a request with one --matrix."""
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    system, axes, reduce, matrix = request(args)
    placement = Placement(system.sizes, axes, matrix)
    h = synthesis_hierarchy(placement, reduce, system.level_names, args.hierarchy, args.master_scope)
    return system, placement, reduce, h


# ---------------------------------------------------------------- commands


def cmd_topologies(args: argparse.Namespace) -> int:
    from p2smt.model.system import load_system, shipped_systems

    systems = [load_system(n) for n in shipped_systems()]
    payload = {
        "systems": [
            {
                "name": s.name,
                "levels": [[lv.name, lv.size] for lv in s.levels],
                "devices": s.num_devices,
                "interconnects": [ic.name for ic in s.interconnects],
                "description": s.description,
            }
            for s in systems
        ]
    }

    def render(c: Console) -> None:
        t = Table(title="shipped systems")
        for col in ("name", "levels", "devices", "interconnects", "description"):
            t.add_column(col, overflow="fold")
        for s in payload["systems"]:
            levels = " > ".join(f"{n} {k}" for n, k in s["levels"])
            t.add_row(s["name"], levels, str(s["devices"]), ", ".join(s["interconnects"]), s["description"])
        c.print(t)

    emit(args, payload, render)
    return EXIT_OK


def cmd_placements(args: argparse.Namespace) -> int:
    from p2smt.model.placement import Placement, matrices, parse_matrix

    system = load(args)
    axes = int_list(args.axes)
    if args.export == "jax-mesh":
        if not args.matrix:
            raise P2Error("--export jax-mesh needs --matrix")
        placement = Placement(system.sizes, axes, parse_matrix(args.matrix))
        order = list(placement.mesh_order())
        payload = {"matrix": [list(r) for r in placement.matrix], "axes": list(axes), "device_order": order}
        emit(args, payload, lambda c: c.print(
            f"# Mesh(np.array(jax.devices())[{order}].reshape({tuple(axes)}), axis_names)"))
        return EXIT_OK
    found = matrices(system.sizes, axes)
    payload = {
        "system": system.name,
        "levels": [[lv.name, lv.size] for lv in system.levels],
        "axes": list(axes),
        "matrices": [[list(r) for r in m] for m in found],
    }

    def render(c: Console) -> None:
        t = Table(title=f"{len(found)} placements of axes {list(axes)} on {system.name}")
        t.add_column("#", justify="right")
        for lv in system.levels:
            t.add_column(f"{lv.name} ({lv.size})", justify="center")
        for n, m in enumerate(found):
            t.add_row(str(n), *(" × ".join(str(m[i][j]) for i in range(len(axes))) for j in range(len(system.levels))))
        c.print(t)
        c.print("each cell: parts of axis 0 × axis 1 × … at that level")

    emit(args, payload, render)
    return EXIT_OK


def cmd_groups(args: argparse.Namespace) -> int:
    from p2smt.model.dsl import instruction_groups, lower_program, parse_program

    _, _, _, h = one_hierarchy(args)
    text, source = read_arg_text(args.instruction)
    program = parse_program(text, h, source)
    lowered = lower_program(h, program)
    rows = []
    for ins, step in zip(program.instructions, lowered):
        rows.append(
            {
                "instruction": str(ins),
                "synthesis_groups": [list(g) for g in instruction_groups(h, ins)],
                "device_groups": [list(g) for g in step.groups],
            }
        )
    payload = {"synthesis_hierarchy": [[n, s] for n, s in h.levels], "instructions": rows}

    def render(c: Console) -> None:
        c.print(f"synthesis hierarchy: {' > '.join(f'{n} {s}' for n, s in h.levels)}")
        for r in rows:
            c.print(f"[bold]{r['instruction']}[/bold]")
            c.print(f"  on the synthesis hierarchy: {r['synthesis_groups']}")
            c.print(f"  on the system ({len(r['device_groups'])} groups): {r['device_groups']}")

    emit(args, payload, render)
    return EXIT_OK


def request_of(args: argparse.Namespace):
    """The typed request of the shared request options (``--system … --master-scope``)."""
    from p2smt.model.placement import parse_matrix
    from p2smt.model.request import Request

    return Request(
        args.system, int_list(args.axes), int_list(args.reduce),
        matrix=parse_matrix(args.matrix) if args.matrix else None,
        nodes=args.nodes, levels=tuple(level_sizes(args.level).items()),
        hierarchy=args.hierarchy, master_scope=args.master_scope,
        require_progress=not getattr(args, "allow_noop", False),
    )


def engine_config(args: argparse.Namespace):
    """The typed engine configuration of ``--engine --max-len --timeout --encoding … --prune``."""
    from p2smt.synth.config import EngineConfig

    opts = None
    if getattr(args, "encoding_options", None):
        try:
            opts = json.loads(args.encoding_options)
        except json.JSONDecodeError as err:
            raise P2Error(f"--encoding-options is not JSON: {err.msg}") from None
        if not isinstance(opts, dict):
            raise P2Error("--encoding-options must be a JSON object")
    timeout = getattr(args, "timeout", None)
    return EngineConfig(
        engine=getattr(args, "engine", "enumerative"),
        max_len=args.max_len,
        timeout_ms=int(timeout * 1000) if timeout else None,
        encoding=getattr(args, "encoding", None),
        encoding_options=opts,
        emit_smt2=getattr(args, "emit_smt2", None),
        prune=getattr(args, "prune", "none"),
    )


def cmd_synth(args: argparse.Namespace) -> int:
    from p2smt.model.request import Request
    from p2smt.synth.driver import synthesize

    req = request_of(args)
    config = engine_config(args)
    system = req.load_system()
    axes = req.axes
    result = synthesize(Request.for_system(system, req.axes, req.reduce, matrix=req.matrix,
                                           hierarchy=req.hierarchy, master_scope=req.master_scope,
                                           require_progress=req.require_progress), config)
    payload = result.to_json()

    def render(c: Console) -> None:
        c.print(
            f"{system.name}: axes {list(axes)}, reduce {list(result.reduction_axes)}, engine {args.engine}, "
            f"max length {args.max_len}: [bold]{result.total_programs}[/bold] programs over "
            f"{len(result.matrices)} placements in {result.seconds:.3f} s — status {result.status}"
        )
        for m in result.matrices:
            t = Table(
                title=f"matrix {[list(r) for r in m.matrix]}  hierarchy "
                f"{' > '.join(f'{n} {s}' for n, s in m.hierarchy.levels)}  "
                f"({len(m.programs)} programs, {m.seconds:.3f} s, {m.status}"
                + (f"; same problem as {m.stats['same_problem_as']}" if "same_problem_as" in m.stats else "")
                + ")"
            )
            t.add_column("#", justify="right")
            t.add_column("program")
            for n, p in enumerate(m.programs[: args.show]):
                t.add_row(str(n), str(p))
            if len(m.programs) > args.show:
                t.add_row("…", f"{len(m.programs) - args.show} more (use --show or --json)")
            c.print(t)

    emit(args, payload, render)
    return EXIT_OK if result.status == "complete" else EXIT_FAIL


def plan_from_args(args: argparse.Namespace, h, placement, reduce):
    """(steps on the system, DSL program or None, label) from --program or --plan."""
    from p2smt.model.dsl import lower_program, parse_explicit_plan, parse_program

    if bool(args.program) == bool(args.plan):
        raise P2Error("give exactly one of --program TEXT|@FILE or --plan FILE.json")
    if args.program:
        text, source = read_arg_text(args.program)
        program = parse_program(text, h, source)
        return lower_program(h, program), program
    path = Path(args.plan)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise P2Error(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise P2Error(f"{path}: not UTF-8 text (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise P2Error(f"{path}:{err.lineno}:{err.colno}: malformed JSON: {err.msg}") from None
    return parse_explicit_plan(data, str(path)), None


def cmd_check(args: argparse.Namespace) -> int:
    from p2smt.semantics.dense import execute

    _, placement, reduce, h = one_hierarchy(args)
    plan, program = plan_from_args(args, h, placement, reduce)
    goal_groups = placement.reduction_groups(reduce)
    run = execute(
        placement.num_devices,
        [(s.collective, s.groups) for s in plan],
        goal_groups,
        require_progress=not args.allow_noop,
        chunks=len(goal_groups[0]),
    )
    payload = {
        "valid": run.valid,
        "program": str(program) if program else None,
        "steps": len(plan),
        "violation": run.violation.to_json() if run.violation else None,
        "defects": [
            {"device": d.device, "chunk": d.chunk, "missing": list(d.missing), "foreign": list(d.foreign)}
            for d in run.defects[:64]
        ],
    }

    def render(c: Console) -> None:
        if run.valid:
            c.print(f"[green]VALID[/green]: {len(plan)} steps reduce every group of axes {list(reduce)}")
        elif run.violation:
            v = run.violation
            c.print(f"[red]INVALID[/red] at step {v.step} ({v.rule}): {v.message}")
            c.print(f"  group {list(v.group)}")
        else:
            c.print("[red]INVALID[/red]: every precondition holds but the goal is not reached")
            for d in run.defects[:8]:
                c.print(f"  device {d.device} chunk {d.chunk}: missing {list(d.missing)} foreign {list(d.foreign)}")

    emit(args, payload, render)
    return EXIT_OK if run.valid else EXIT_FAIL


def cmd_plan(args: argparse.Namespace) -> int:
    from p2smt.cost.plan import plan, plot_plan, render_plan
    from p2smt.model.profile import load_profile

    profile = load_profile(args.profile)
    system = load(args)
    report = plan(profile, system, algo=args.algo, config=engine_config(args))
    if args.png:
        plot_plan(report, Path(args.png))
    if args.export_dir:
        report["exported"] = export_plan(report, profile, system, Path(args.export_dir))

    def render(c: Console) -> None:
        c.print(render_plan(report))
        best, worst = report["best"], report["worst"]
        c.print(
            f"best {best['matrix']} {best['total_seconds']:.4g} s per step; median "
            f"{report['median_seconds']:.4g} s; worst {worst['matrix']} {worst['total_seconds']:.4g} s"
        )
        if args.png:
            c.print(f"chart: {args.png}")

    emit(args, report, render)
    return EXIT_OK


def export_plan(report: dict[str, Any], profile, system, out: Path) -> list[str]:
    """Write the best placement's JAX mesh order and, per reduction, its program lowered to JAX and torch."""
    from p2smt.lower import lower_module, placement_target
    from p2smt.model.dsl import lower_program, parse_program
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.placement import Placement

    out.mkdir(parents=True, exist_ok=True)
    best = report["best"]
    axes = tuple(report["axes"].values())
    placement = Placement(system.sizes, axes, tuple(tuple(r) for r in best["matrix"]))
    written = []
    mesh = out / "mesh.json"
    mesh.write_text(json.dumps({
        "axis_names": list(report["axes"]), "axes": list(axes), "matrix": best["matrix"],
        "device_order": list(placement.mesh_order()),
    }, indent=2) + "\n")
    written.append(str(mesh))
    for comm in best["communications"]:
        if comm["program"] is None:
            continue
        red = tuple(sorted(profile.axis_index(a) for a in next(c for c in profile.communication if c.name == comm["name"]).axes))
        h = synthesis_hierarchy(placement, red, system.level_names)
        program = parse_program(comm["program"], h)
        target = placement_target(placement, red, system.level_names, list(report["axes"]), system.name)
        labels = [str(i) for i in program.instructions]
        for backend in ("jax", "torch"):
            path = out / f"{comm['name']}_{backend}.py"
            path.write_text(lower_module(backend, lower_program(h, program), target, labels))
            written.append(str(path))
    return written


def _lowering_inputs(args: argparse.Namespace):
    """(plan, target, step labels) for lower/run from the request and --program/--plan."""
    from p2smt.lower import placement_target

    system, placement, reduce, h = one_hierarchy(args)
    plan, program = plan_from_args(args, h, placement, reduce)
    names = args.axis_names.split(",") if args.axis_names else None
    target = placement_target(placement, reduce, system.level_names, names, system.name)
    labels = [str(i) for i in program.instructions] if program else None
    return plan, target, labels


def cmd_lower(args: argparse.Namespace) -> int:
    from p2smt.lower import lower_module

    plan, target, labels = _lowering_inputs(args)
    source = lower_module(args.backend, plan, target, labels)
    if args.out:
        Path(args.out).write_text(source)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(source)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    from p2smt.lower import run_program

    plan, target, labels = _lowering_inputs(args)
    report = run_program(
        args.backend, plan, target, step_labels=labels, length=args.length, repeats=args.repeats,
        timeout=args.run_timeout,
    )
    emit(args, report.to_json(), lambda c: c.print(report.summary()))
    return report.exit_code


def cmd_rank(args: argparse.Namespace) -> int:
    from p2smt.cost.rank import rank, render_rank

    report = rank(request_of(args), engine_config(args), algo=args.algo, bytes_per_device=args.bytes,
                  top=args.top)
    emit(args, report, lambda c: c.print(render_rank(report)))
    return EXIT_OK


def cmd_cost(args: argparse.Namespace) -> int:
    from p2smt.cost.model import flat_collective_time

    system = load(args)
    seconds = flat_collective_time(system, args.collective, args.bytes, args.algo)
    payload = {"system": system.name, "devices": system.num_devices, "collective": args.collective,
               "bytes": args.bytes, "algo": args.algo, "seconds": seconds}
    emit(args, payload, lambda c: c.print(
        f"{args.collective} of {args.bytes:.4g} B over {system.num_devices} GPUs of {system.name} "
        f"({args.algo}): {seconds:.6g} s"))
    return EXIT_OK


def cmd_draw(args: argparse.Namespace) -> int:
    from p2smt.model.draw import draw_topology

    system = load(args)
    path = draw_topology(system, args.out or f"{system.name}.png")
    print(f"wrote {path}")
    return EXIT_OK


def cmd_sweep(args: argparse.Namespace) -> int:
    if bool(args.paper) == bool(args.grid):
        raise P2Error("give exactly one of --paper or --grid FILE")
    if args.paper:
        from p2smt.runs.paper import paper_sweep, render_sweep

        summary = paper_sweep(args.out or "p2-sweep", engine=args.engine, plots=not args.no_plots,
                              max_len=args.max_len)
        emit(args, {k: v for k, v in summary.items() if k != "rows"} | {"out": args.out or "p2-sweep"},
             lambda c: c.print(render_sweep(summary)))
        return EXIT_OK
    from p2smt.runs.gridsweep import render_summary, sweep

    summary = sweep(args.grid, Path(args.out or "sweep.jsonl"), scheduler=args.scheduler,
                    workers=args.workers, timeout_s=args.timeout, progress=not args.json)
    emit(args, summary.to_json(), lambda c: c.print(render_summary(summary)))
    return EXIT_OK if summary.succeeded else EXIT_FAIL


def cmd_verify(args: argparse.Namespace) -> int:
    """Prove a plan with Z3 (Boolean state, or ∀ data values with --values) or give a counterexample."""
    from p2smt.semantics.dense import execute

    _, placement, reduce, h = one_hierarchy(args)
    plan, program = plan_from_args(args, h, placement, reduce)
    goal_groups = placement.reduction_groups(reduce)
    steps = [(s.collective, s.groups) for s in plan]
    timeout_ms = int(args.timeout * 1000) if args.timeout else None
    common = {"require_progress": not args.allow_noop, "timeout_ms": timeout_ms, "chunks": len(goal_groups[0])}
    if args.values:
        from p2smt.smt.cegis import verify_values

        proof = verify_values(placement.num_devices, steps, goal_groups, **common)
    else:
        from p2smt.smt.verify import prove_plan

        proof = prove_plan(placement.num_devices, steps, goal_groups, encoding=args.encoding, **common)
    oracle = execute(placement.num_devices, steps, goal_groups, not args.allow_noop, len(goal_groups[0]))
    if proof.status != "unknown" and (proof.status == "proved") != oracle.valid and not args.values:
        raise InternalError(
            f"Z3 says {proof.status} but the interpreter says {'valid' if oracle.valid else 'invalid'}"
        )
    payload = proof.to_json() | {"program": str(program) if program else None, "steps": len(plan)}

    def render(c: Console) -> None:
        if proof.status == "proved":
            what = "for every integer input" if args.values else "the goal holds and no precondition fails"
            c.print(f"[green]PROVED[/green]: {what} ({len(plan)} steps, {placement.num_devices} devices)")
            return
        if proof.status == "unknown":
            c.print(f"[yellow]UNKNOWN[/yellow]: {payload.get('message', 'the solver gave up')}")
            return
        c.print(f"[red]COUNTEREXAMPLE[/red]: {payload.get('message', '')}")
        for key in ("failing_step", "group", "devices", "device", "chunk", "rule", "expected", "actual"):
            if payload.get(key) is not None:
                c.print(f"  {key.replace('_', ' ')}: {payload[key]}")
        for d in payload.get("defects", [])[:8]:
            c.print(f"  defect: {d}")
        for dev, rows in list(payload.get("states", {}).items())[:8]:
            c.print(f"  final state of device {dev}: {rows}")
        for key in ("inputs", "witness"):
            if payload.get(key):
                c.print(f"  {key.replace('_', ' ')}: {payload[key]}")

    emit(args, payload, render)
    return {"proved": EXIT_OK, "counterexample": EXIT_FAIL}.get(proof.status, EXIT_UNKNOWN)


def cmd_encodings(args: argparse.Namespace) -> int:
    from p2smt.smt.registry import available_encodings

    extra = [args.encodings_dir] if args.encodings_dir else []
    specs = available_encodings(extra)
    payload = {
        "encodings": [
            {"name": e.name, "description": e.description, "source": e.source,
             "options": json.loads(json.dumps(e.options.model_json_schema().get("properties", {}), default=str))}
            for e in specs
        ]
    }

    def render(c: Console) -> None:
        t = Table(title="SMT encodings")
        for col in ("name", "description", "options"):
            t.add_column(col, overflow="fold")
        for e in payload["encodings"]:
            opts = "; ".join(
                f"{k}: {v.get('enum', v.get('type', ''))} = {v.get('default')!r}" for k, v in e["options"].items()
            )
            t.add_row(e["name"], e["description"], opts)
        c.print(t)

    emit(args, payload, render)
    return EXIT_OK


def cmd_experiment(args: argparse.Namespace) -> int:
    """Run encoding variants over a configuration set; JSONL lines, a summary table, an optional PNG."""
    from p2smt.runs.experiment import experiment
    from p2smt.runs.expreport import render_summary

    max_k = {}
    for item in args.max_k:
        name, _, k = item.partition("=")
        try:
            max_k[name.strip()] = int(k)
        except ValueError:
            raise P2Error(f"--max-k expects NAME=K, got {item!r}") from None
    extra = [args.encodings_dir] if args.encodings_dir else []
    console = Console(stderr=True, highlight=False)

    def progress(row: dict[str, Any]) -> None:
        if not args.json:
            secs = row.get("wall_seconds")
            done = f" in {secs:.3f} s, {row.get('programs')} programs" if secs is not None else ""
            console.print(f"{row['variant']}  {row['config']}  rep {row['repetition']}: {row['status']}{done}")

    summary = experiment(
        args.encodings, args.configs, args.out, options=args.options, repeat=args.repeat,
        timeout_s=args.timeout, max_len=args.max_len, seed=args.seed, png=args.png, max_k=max_k or None,
        extra_dirs=extra, progress=progress,
    )

    def render(c: Console) -> None:
        title = (f"{summary['configs']}: {summary['points']} configurations × "
                 f"{summary['repeat']} repetitions ({summary['stats']['seconds']:.1f} s)")
        for part in render_summary(summary, title):
            c.print(part)
        c.print(f"results: {summary['out']}" + (f"; plot: {summary['png']}" if summary.get("png") else ""))

    emit(args, summary, render)
    if summary["failures"] and any(f["status"] == "unsound" for f in summary["failures"]):
        return EXIT_INTERNAL
    return EXIT_FAIL if summary["disagreements"] or summary["failures"] else EXIT_OK


def cmd_best(args: argparse.Namespace) -> int:
    """The N cheapest programs per placement under the cost model, found and proved optimal with Z3."""
    from p2smt.cost.best import best

    system, axes, reduce, matrix = request(args)
    opts = engine_config(args)
    result = best(system, axes, reduce, matrix=matrix, max_len=args.max_len, top=args.top, algo=args.algo,
                  bytes_per_device=args.bytes, timeout_ms=opts.timeout_ms,
                  encoding=opts.encoding or "bool-matrix", encoding_options=opts.encoding_options,
                  hierarchy_kind=args.hierarchy, master_scope=args.master_scope,
                  require_progress=not args.allow_noop, bound=args.bound, lookahead=not args.no_lookahead)
    payload = result.to_json()

    def render(c: Console) -> None:
        c.print(f"{system.name}: axes {list(axes)}, reduce {list(result.reduction_axes)}, max length "
                f"{args.max_len}, {args.algo}, {result.bytes_per_device:.4g} bytes per device: "
                f"[bold]{result.status}[/bold] ({len(result.matrices)} placements, {result.seconds:.3f} s)")
        for m in result.matrices:
            levels = " > ".join(f"{n} {s}" for n, s in m.hierarchy.levels)
            t = Table(title=f"matrix {[list(r) for r in m.matrix]}  hierarchy {levels}  "
                            f"({m.status}, {m.seconds:.3f} s)")
            t.add_column("#", justify="right")
            t.add_column("seconds", justify="right")
            t.add_column("program")
            for i, p in enumerate(m.programs, 1):
                t.add_row(str(i), f"{p.seconds:.6g}", p.text)
            c.print(t)
        if payload["best"]:
            b = payload["best"]
            c.print(f"best: matrix {b['matrix']}  {b['seconds']:.6g} s  {b['program']}")

    emit(args, payload, render)
    return EXIT_OK if result.status == "optimal" else EXIT_UNKNOWN


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = _ArgumentParser(prog="p2smt", description=__doc__)
    parser.add_argument("--version", action="version", version=f"p2smt {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)

    p = sub.add_parser("topologies", help="list the shipped systems")
    add_json(p)
    p.set_defaults(func=cmd_topologies)

    p = sub.add_parser("placements", help="enumerate the parallelism matrices of axes on a system")
    add_system(p)
    p.add_argument("--axes", required=True)
    p.add_argument("--matrix")
    p.add_argument("--export", choices=["jax-mesh"], help="print the device order realizing --matrix")
    add_json(p)
    p.set_defaults(func=cmd_placements)

    p = sub.add_parser("groups", help="show the device groups of instructions on a placement")
    add_request(p, matrix_required=True)
    p.add_argument("--instruction", required=True, help="DSL text (or @FILE), e.g. '(node, InsideGroup, AllReduce)'")
    add_json(p)
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser("synth", help="synthesize every valid reduction program up to --max-len")
    add_request(p)
    p.add_argument("--max-len", type=int, default=5)
    p.add_argument("--engine", default="enumerative", help="enumerative | pieces (compressed state, any size) | z3 | z3-cegis")
    p.add_argument("--encoding", help="Z3 encoding variant (see `p2smt encodings`)")
    p.add_argument("--encoding-options", help="JSON object of encoding options")
    p.add_argument("--timeout", type=float, help="seconds per solver call")
    p.add_argument("--emit-smt2", metavar="DIR", help="write each solver query as SMT-LIB2 into DIR")
    p.add_argument("--prune", default="none", help="named pruning of the complete set (see docs); default none")
    p.add_argument("--allow-noop", action="store_true", help="allow steps in which a group changes nothing")
    p.add_argument("--show", type=int, default=20, help="programs shown per matrix (human output)")
    add_json(p)
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("check", help="run a plan through the concrete interpreter")
    add_request(p, matrix_required=True)
    p.add_argument("--program", help="DSL text or @FILE")
    p.add_argument("--plan", help="JSON file: [{collective, replica_groups}, …] on physical device ids")
    p.add_argument("--allow-noop", action="store_true")
    add_json(p)
    p.set_defaults(func=cmd_check)

    for name, helptext in (("lower", "emit JAX or torch.distributed code for a program"),
                           ("run", "run a lowered program on local CPU devices and check exact sums")):
        p = sub.add_parser(name, help=helptext)
        add_request(p, matrix_required=True)
        p.add_argument("--backend", required=True, choices=["jax", "torch"])
        p.add_argument("--program", help="DSL text or @FILE")
        p.add_argument("--plan", help="JSON file: [{collective, replica_groups}, …] on physical device ids")
        p.add_argument("--axis-names", help="comma-separated names of the axes (identifiers)")
        if name == "lower":
            p.add_argument("--out", help="write the module here instead of stdout")
            p.set_defaults(func=cmd_lower)
        else:
            p.add_argument("--length", type=int, help="elements per device (a multiple of the group size)")
            p.add_argument("--repeats", type=int, default=1)
            p.add_argument("--run-timeout", type=float, default=600.0, help="seconds before the run is killed")
            add_json(p)
            p.set_defaults(func=cmd_run)

    p = sub.add_parser("rank", help="rank every placement's programs by predicted time")
    add_request(p)
    p.add_argument("--algo", default="ring", help="ring | tree | nvls | auto")
    p.add_argument("--bytes", type=float, help="bytes per device (default: P²'s 2^29 × nodes float32)")
    p.add_argument("--top", type=int, help="keep the N fastest programs per placement")
    p.add_argument("--engine", default="enumerative")
    p.add_argument("--max-len", type=int, default=5)
    add_json(p)
    p.set_defaults(func=cmd_rank)

    p = sub.add_parser("cost", help="predicted time of one flat collective over all GPUs")
    add_system(p)
    p.add_argument("--collective", required=True,
                   choices=["allreduce", "reducescatter", "allgather", "reduce", "broadcast"])
    p.add_argument("--bytes", type=float, required=True, help="nccl-tests convention")
    p.add_argument("--algo", default="ring", help="ring | tree | nvls | auto")
    add_json(p)
    p.set_defaults(func=cmd_cost)

    p = sub.add_parser("draw", help="write a picture of a system's physical topology")
    add_system(p)
    p.add_argument("--out", help="PNG path (default: SYSTEM.png)")
    p.set_defaults(func=cmd_draw)

    p = sub.add_parser("sweep", help="the P² evaluation grid (--paper) or a grid file, resumable, on dask")
    p.add_argument("--paper", action="store_true", help="run P2.md §7's grid: synthesis + ranking")
    p.add_argument("--grid", help="grid YAML file or shipped grid name")
    p.add_argument("--out", help="--paper: output folder (p2-sweep); --grid: JSONL file (sweep.jsonl)")
    p.add_argument("--engine", default="enumerative")
    p.add_argument("--max-len", type=int, default=5)
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--scheduler", help="dask.distributed scheduler address (default: local cores)")
    p.add_argument("--workers", type=int, help="local workers / tasks in flight")
    p.add_argument("--timeout", type=float, help="per-task seconds")
    add_json(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("verify", help="prove a plan with Z3, or return a counterexample")
    add_request(p, matrix_required=True)
    p.add_argument("--program", help="DSL text or @FILE")
    p.add_argument("--plan", help="JSON file: [{collective, replica_groups}, …] on physical device ids")
    p.add_argument("--values", action="store_true", help="prove over all integer data values (CEGIS encoding)")
    p.add_argument("--encoding", default="bool-matrix", help="encoding that proves the Boolean semantics")
    p.add_argument("--timeout", type=float, help="seconds per solver call")
    p.add_argument("--allow-noop", action="store_true")
    add_json(p)
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("encodings", help="list the SMT encoding variants and their options")
    p.add_argument("--encodings-dir", help="another folder of encoding files")
    add_json(p)
    p.set_defaults(func=cmd_encodings)

    p = sub.add_parser("plan", help="rank placements for a whole model's communication profile")
    p.add_argument("--profile", required=True, help="shipped profile name or path to a YAML file")
    add_system(p)
    p.add_argument("--algo", default="ring", help="ring | tree | nvls | auto")
    p.add_argument("--engine", default="enumerative")
    p.add_argument("--max-len", type=int, default=5)
    p.add_argument("--png", help="write a stacked-bar chart of per-placement time")
    p.add_argument("--export-dir", help="write the best placement's mesh order and lowered programs here")
    add_json(p)
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("experiment", help="measure SMT encoding variants: JSONL per run, summary table, PNG")
    p.add_argument("--encodings", required=True, help="comma-separated encoding names (see `p2smt encodings`)")
    p.add_argument("--options", action="append", default=[], metavar="NAME=JSON",
                   help="an option set of one encoding, e.g. 'bitvec={\"choice\":\"index\"}' (repeatable: "
                        "one variant per set)")
    p.add_argument("--configs", required=True, help="paper-grid | a shipped set (scale) | a YAML file")
    p.add_argument("--repeat", type=int, default=1, help="repetitions (seed = --seed + repetition)")
    p.add_argument("--out", default="results.jsonl", help="JSONL results (overwritten)")
    p.add_argument("--png", help="write solve time vs reduction-group size (log-log) here")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds per run: Z3's per-call limit (-> unknown) and, plus a grace, the wall-clock "
                        "kill (-> timeout)")
    p.add_argument("--max-len", type=int, help="override every configuration's max length")
    p.add_argument("--max-k", action="append", default=[], metavar="NAME=K",
                   help="run encoding NAME only on configurations with k <= K (repeatable)")
    p.add_argument("--seed", type=int, default=0, help="Z3 random seed of repetition 0")
    p.add_argument("--encodings-dir", help="another folder of encoding files")
    add_json(p)
    p.set_defaults(func=cmd_experiment)

    p = sub.add_parser("best", help="the N cheapest programs under the cost model, found and proved with Z3")
    add_request(p)
    p.add_argument("--engine", default="z3", choices=["z3"], help="the search is Z3's (kept for symmetry)")
    p.add_argument("--max-len", type=int, default=8)
    p.add_argument("--top", type=int, default=1, help="programs per placement (rank order)")
    p.add_argument("--algo", default="ring", help="ring | tree | nvls | auto")
    p.add_argument("--bytes", type=float, help="bytes per device (default: P²'s 2^29 × nodes float32)")
    p.add_argument("--timeout", type=float,
                   help="seconds per solver call; a placement that runs out is 'unknown'")
    p.add_argument("--encoding", help="counterexample-guided encoding (default bool-matrix)")
    p.add_argument("--encoding-options", help="JSON object of encoding options")
    p.add_argument("--bound", default="clauses", choices=["clauses", "sum"],
                   help="how cost <= U reaches the solver: prefix clauses (default) or also a bit-vector sum")
    p.add_argument("--allow-noop", action="store_true", help="allow steps in which a group changes nothing")
    p.add_argument("--no-lookahead", action="store_true",
                   help="bound a prefix by the next step alone, not by the count abstraction's cheapest completion")
    add_json(p)
    p.set_defaults(func=cmd_best)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except P2Error as err:
        print(f"p2smt: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except InternalError as err:
        print(f"p2smt: INTERNAL ERROR (please report): {err}", file=sys.stderr)
        return EXIT_INTERNAL
    except KeyboardInterrupt:
        print("p2smt: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
