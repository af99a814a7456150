"""Synthesis at scale: time and peak memory per engine for 64 -> 4,096 devices per reduction group.

Each point (max length, levels, devices, engine) runs in a fresh subprocess with a wall-clock timeout;
the child reports its own time and peak RSS (``resource.getrusage``). The reduction group is the whole
machine (axes ``[k]``, reduce axis 0) of ``h100-superpod`` re-sized by level: 4 non-trivial levels
``su x node x pcie 4 x gpu 2`` or 3 (``su = 1``). Engines: ``enumerative`` (P²'s search; its k^3
interpreter state limits it to 512 devices), ``pieces`` (the same search on ``pieces.py``'s compressed
state: exact at any size, so it also checks the representative encoding's programs for completeness
at the real size: the summary says whether the engines that finished a point found the same
programs), ``z3:bool-matrix`` (the exact default encoding) and
``z3:representative`` (size-2 hierarchy; its real-size check is a Z3 proof up to its
``z3_check_max_devices`` and the driver's re-check above, see p2smt/smt/representative.py) and
``symmetric`` (P²'s search on the generic size-2 instance, docs/symmetry.md; every program checked at
the real size by ``synth.recheck`` and the invalid ones dropped; status ``conjectured``; refused above 65,536
devices). Every
program a z3 engine returns (and ``pieces``' up to ``PIECES_ABOVE``) is re-checked by ``synth.recheck`` (the numpy interpreter up to
``synth.PIECES_ABOVE`` devices, ``pieces.py`` above, ``vectorized.py`` above 4,096); ``seconds`` includes that re-check. Once a point
times out, the larger sizes of the same (max length, levels, engine) are skipped, except for
``z3:representative`` (its size-2 solve is the same at every size, and its check mode changes). Prints the machine,
one line per point, a summary table per max length, and writes a PNG (and the rows as JSONL).

    python benchmarks/scale.py [--max-len 5[,3]] [--timeout 300] [--devices 64,256,1024,4096] [--jsonl F]
    python benchmarks/scale.py --from-jsonl F1,F2     # tables and PNG of earlier runs (e.g. run in parallel)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from p2smt.runs.child import OutcomeStatus, run_in_child
from p2smt.runs.machine import describe_machine
from p2smt.synth.config import EngineConfig

SHAPES = {  # levels -> devices -> (su, nodes per SU); pcie 4 x gpu 2 per node
    4: {64: (2, 4), 128: (2, 8), 256: (4, 8), 512: (4, 16), 1024: (4, 32), 2048: (4, 64), 4096: (4, 128),
        16384: (16, 128), 65536: (256, 32)},
    3: {64: (1, 8), 128: (1, 16), 256: (1, 32), 512: (1, 64), 1024: (1, 128), 2048: (1, 256), 4096: (1, 512),
        16384: (1, 2048), 65536: (1, 8192)},
}
ENGINES = ("enumerative", "pieces", "symmetric", "z3:bool-matrix", "z3:representative")
INTERPRETER_LIMIT = 512  # semantics.MAX_INTERPRETER_DEVICES: the enumerative search's k^3 state


def levels_for(n_levels: int, devices: int) -> dict[str, int]:
    su, nodes = SHAPES[n_levels][devices]
    return {"su": su, "node": nodes, "pcie": 4, "gpu": 2}


def point_spec(n_levels: int, devices: int, engine: str, max_len: int, options: dict | None = None) -> dict:
    """A point as JSON: the request (the whole re-sized superpod, axes [k], reduce axis 0) and the engine
    configuration built from an engine label ``NAME`` or ``z3:ENCODING``."""
    from p2smt.model.request import Request
    from p2smt.model.system import load_system

    levels = levels_for(n_levels, devices)
    sizes = load_system("h100-superpod", levels=levels).sizes
    name, _, encoding = engine.partition(":")
    config = EngineConfig(engine=name, max_len=max_len, encoding=encoding or None,
                          encoding_options=options if encoding == "representative" else None)
    request = Request("h100-superpod", (devices,), (0,), matrix=(tuple(sizes),), levels=tuple(levels.items()))
    return {"request": request.to_json(), "config": config.to_json(), "devices": devices}


def child(spec: dict) -> dict:
    """Run one point in this process (the child) and return its figures."""
    import resource

    from p2smt.model.dsl import problem
    from p2smt.model.hierarchy import synthesis_hierarchy
    from p2smt.model.request import Request
    from p2smt.synth.driver import rechecked_by, run_engine
    from p2smt.synth.recheck import recheck

    t0 = time.perf_counter()
    request = Request.from_json(spec["request"])
    config = EngineConfig.from_json(spec["config"])
    engine, k = config.engine, spec["devices"]
    system = request.load_system()
    (placement,) = request.placements(system)
    h = synthesis_hierarchy(placement, request.reduce, system.level_names)
    prob = problem(h)
    assert prob.num_devices == k, (prob.num_devices, k)
    built = time.perf_counter() - t0
    res = run_engine(prob, config, h)
    t1 = time.perf_counter()
    checked_by = rechecked_by(config.engine, k)  # the driver's policy: it raises on a failing program, except
    if checked_by:  # for representative's unchecked size-2 candidates, which it drops
        recheck(prob, res.programs, engine, drop=res.stats.get("real_check") == "recheck", sizes=h.sizes)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out = {
        "status": res.status,
        "programs": len(res.programs),
        "seconds": round(time.perf_counter() - t0, 3),
        "build_seconds": round(built, 3),
        "engine_seconds": round(t1 - t0 - built, 3),
        "recheck_seconds": round(time.perf_counter() - t1, 3) if checked_by else None,
        "recheck": checked_by,
        "programs_sha": hashlib.sha256(
            json.dumps([list(map(int, p)) for p in res.programs], separators=(",", ":")).encode()
        ).hexdigest()[:12],
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_mib": round(usage.ru_maxrss / 1024, 1),
    }
    stats = res.stats
    if "rests_on" in stats:
        out["rests_on"] = stats["rests_on"]
    if "rounds" in stats:
        rounds = stats["rounds"]
        out.update(
            real_check=stats["real_check"],
            rounds=len(rounds),
            size_refinements=stats["size_refinements"],
            completeness=stats.get("completeness"),
            solve_seconds=round(sum(r.get("solve_seconds", 0) for r in rounds), 3),
            check_seconds=round(sum(r.get("check_seconds", 0) for r in rounds), 3),
        )
    return out


def run_point(spec: dict, timeout: float) -> dict:
    """A point in a fresh child process (``runs.child``), killed with its process group at ``timeout``."""
    outcome = run_in_child(f"{Path(__file__).resolve()}:child", [spec], limit_s=timeout)
    if outcome.status == OutcomeStatus.OK:
        return outcome.value
    if outcome.status == OutcomeStatus.TIMEOUT:
        return {"status": "timeout", "seconds": round(outcome.seconds, 1)}
    return {"status": "error", "message": outcome.error}


FINISHED = ("complete", "conjectured", "unknown")
"""Row statuses with figures (``conjectured``: every program checked, completeness not proved)."""


def cell(row: dict) -> str:
    if row["status"] in FINISHED:
        mark = {"complete": "", "conjectured": " (conj.)"}.get(row["status"], f" ({row['status']})")
        return f"{row['seconds']:.1f} s / {row['peak_mib']:.0f} MiB{mark}"
    return row["status"]


def summary(rows: list[dict], max_len: int, engines: list[str]) -> str:
    """One line per (levels, devices), one column per engine: time / peak memory."""
    width = 26
    head = f"{'levels':>6} {'devices':>7}  " + "".join(f"{e:<{width}}" for e in engines)
    lines = [f"max length {max_len}", head, "-" * len(head)]
    keys = sorted({(r["levels"], r["devices"]) for r in rows if r["max_len"] == max_len})
    for levels, devices in keys:
        cells = []
        for e in engines:
            found = [r for r in rows if (r["max_len"], r["levels"], r["devices"], r["engine"]) ==
                     (max_len, levels, devices, e)]
            cells.append(f"{cell(found[0]) if found else '':<{width}}")
        done = [r["programs_sha"] for r in rows if (r["max_len"], r["levels"], r["devices"]) ==
                (max_len, levels, devices) and r["status"] in FINISHED[:2] and "programs_sha" in r]
        agree = "" if len(done) < 2 else "same programs" if len(set(done)) == 1 else "PROGRAMS DIFFER"
        lines.append(f"{levels:>6} {devices:>7}  " + "".join(cells) + agree)
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = sorted({r["max_len"] for r in rows}, reverse=True)
    series = sorted({(r["levels"], r["engine"]) for r in rows})
    colour = {key: f"C{i}" for i, key in enumerate(series)}  # the same series has the same colour everywhere
    fig, axes = plt.subplots(len(lengths), 2, figsize=(12, 4.2 * len(lengths)), squeeze=False)
    for row_axes, max_len in zip(axes, lengths):
        for levels, engine in series:
            pts = sorted((
                r for r in rows
                if (r["max_len"], r["levels"], r["engine"]) == (max_len, levels, engine)
                and r["status"] in FINISHED
            ), key=lambda r: r["devices"])
            if not pts:
                continue
            xs = [r["devices"] for r in pts]
            style = {"marker": "o" if levels == 4 else "s", "linestyle": "-" if levels == 4 else "--",
                     "color": colour[levels, engine]}
            label = f"{engine} ({levels} levels)"
            for ax, key in zip(row_axes, ("seconds", "peak_mib")):
                (line,) = ax.plot(xs, [r[key] for r in pts], label=label, **style)
                hollow = [r for r in pts if r.get("real_check") == "recheck"]
                if hollow:  # no real-size check inside the encoding: only the driver's re-check
                    ax.plot([r["devices"] for r in hollow], [r[key] for r in hollow], linestyle="none",
                            marker=style["marker"], markerfacecolor="white", color=line.get_color())
        for ax, what in zip(row_axes, ("wall time incl. re-check (s)", "peak memory (MiB)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("devices per reduction group")
            ax.set_title(f"{what}, programs up to length {max_len}", fontsize=10)
            ax.grid(True, which="both", alpha=0.3)
        row_axes[0].legend(fontsize=7)
    fig.suptitle(f"{title}\nhollow markers: representative without its own real-size check (driver re-check only)",
                 fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-len", default="5", help="comma-separated maximum program lengths (default 5)")
    ap.add_argument("--timeout", type=float, default=300.0, help="wall-clock seconds per point")
    ap.add_argument("--devices", default="64,256,1024,4096", help=f"from {sorted(SHAPES[4])}")
    ap.add_argument("--levels", default="3,4")
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--options", default="{}", help="representative encoding options (JSON)")
    ap.add_argument("--png", default="docs/scale.png")
    ap.add_argument("--jsonl", default=None, help="also write the rows here")
    ap.add_argument("--from-jsonl", default=None, help="comma-separated row files: only print tables and plot")
    args = ap.parse_args(argv)
    if args.from_jsonl:
        rows = [json.loads(line) for f in args.from_jsonl.split(",") for line in Path(f).read_text().splitlines()]
        report(rows, sorted({r["max_len"] for r in rows}, reverse=True), args.engines.split(","), args, rows[0].get("machine", "machine: ?"))
        return
    lengths = [int(v) for v in args.max_len.split(",")]
    devices_list = [int(v) for v in args.devices.split(",")]
    levels_list = [int(v) for v in args.levels.split(",")]
    engines = args.engines.split(",")
    bad = [d for d in devices_list if d not in SHAPES[4]] + [v for v in levels_list if v not in SHAPES]
    if bad:
        ap.error(f"unsupported devices/levels {bad}; devices: {sorted(SHAPES[4])}, levels: 3, 4")
    title = f"machine: {describe_machine()}"
    print(title)
    print(f"max lengths {lengths}, timeout {args.timeout:.0f} s per point\n")
    rows: list[dict] = []
    for max_len in lengths:
        header = f"{'len':>3} {'levels':>6} {'devices':>7} {'engine':<20} {'status':<10} {'programs':>8} " \
                 f"{'seconds':>9} {'peak MiB':>9}"
        print(header)
        print("-" * len(header))
        for n_levels in levels_list:
            timed_out: set[str] = set()
            for devices in devices_list:
                for engine in engines:
                    spec = point_spec(n_levels, devices, engine, max_len, json.loads(args.options))
                    if engine == "enumerative" and devices > INTERPRETER_LIMIT:
                        res = {"status": f"n/a >{INTERPRETER_LIMIT}"}
                    elif engine in timed_out:
                        res = {"status": "skipped"}
                    else:
                        res = run_point(spec, args.timeout)
                    if res["status"] == "timeout" and engine != "z3:representative":
                        timed_out.add(engine)  # representative's size-2 solve does not grow with the devices
                    row = {"max_len": max_len, "levels": n_levels, "devices": devices, "engine": engine, **res,
                           "machine": title}
                    rows.append(row)
                    extra = ""
                    if "recheck_seconds" in res and res["recheck_seconds"] is not None:
                        extra += f"  engine {res['engine_seconds']} s, re-check ({res['recheck']}) " \
                                 f"{res['recheck_seconds']} s"
                    if "rounds" in res:
                        extra += (f", real-size check {res['real_check']} {res['check_seconds']} s, "
                                  f"rounds {res['rounds']}, refinements {res['size_refinements']}, "
                                  f"{res['completeness']}")
                    if res["status"] == "error":
                        extra += f"  {res['message']}"
                    print(f"{max_len:>3} {n_levels:>6} {devices:>7} {engine:<20} {row['status']:<10} "
                          f"{row.get('programs', ''):>8} {row.get('seconds', ''):>9} "
                          f"{row.get('peak_mib', ''):>9}{extra}", flush=True)
        print()
    if args.jsonl:
        Path(args.jsonl).write_text("".join(json.dumps(r) + "\n" for r in rows))
    report(rows, lengths, engines, args, title)


def report(rows: list[dict], lengths: list[int], engines: list[str], args, title: str) -> None:
    for max_len in lengths:
        print(summary(rows, max_len, engines) + "\n")
    plot(rows, Path(args.png), title)
    print(f"wrote {args.png}" + (f" and {args.jsonl}" if args.jsonl else ""))


if __name__ == "__main__":
    main()
