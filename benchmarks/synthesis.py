"""Synthesis time per request of P²'s evaluation: the certified engine's two proofs and the pure Z3 engine
against P².

For each of P²'s 42 requests (all placements, max length 5, ``--prune p2-47``, in-process seconds) it
prints P²'s reported time (the P² paper, Appendix A: ``p2smt/runs/data/p2_synthesis_times.csv``), then
the certified engine with today's BMC proof (``--proof bmc``): the proposer's seconds, Z3's validity
proofs, Z3's completeness certificate, the part of those two spent in Z3's own checks ("solving": the
rest is building the formulas in z3py), its total and its CPU seconds (the figure to compare on a
shared machine); beside it the same request under the state-graph certificate (``--proof
certificate``) and under ``--proof auto`` (the certificate up to 32 devices, BMC beyond), CPU seconds,
each with whether it is at or under P²'s time and whether its sets equal BMC's; then the pure Z3
engine's total (``--no-z3`` skips it). Then the totals, the counts at or under P²'s time, whether every
set is equal, and the machine. A last line runs the requests again one after another with one proof
store, as a sweep does, so that each distinct problem is proved once (a figure of a sweep, not of a
request: P²'s times are per request).

    python benchmarks/synthesis.py                 # the whole grid
    python benchmarks/synthesis.py --only a100-4x16 --no-z3
    python benchmarks/synthesis.py --no-z3 --jobs 2  # the certified engine's Z3 proof on two threads
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
import time
from pathlib import Path

import p2smt
from p2smt.model.request import Request
from p2smt.model.system import load_system
from p2smt.runs.grid import paper_grid
from p2smt.runs.machine import describe_machine, machine_info
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize

P2_TIMES = Path(p2smt.__file__).parent / "runs" / "data" / "p2_synthesis_times.csv"


def p2_times() -> dict[tuple[str, tuple[int, ...], tuple[int, ...]], float]:
    """P²'s reported seconds per (system, axes, reduced axes)."""
    rows = csv.DictReader(line for line in P2_TIMES.read_text().splitlines() if not line.startswith("#"))
    return {
        (r["system"], tuple(map(int, r["axes"].split(","))), tuple(map(int, r["reduce"].split(",")))):
            float(r["p2_synthesis_seconds"])
        for r in rows
    }


def run(cfg, engine: str, jobs: int = 1, store: str | None = None, proof: str = "bmc"):
    """(result, wall seconds, CPU seconds) of one request under ``engine`` (CPU time: the figure to compare
    on a machine shared with other work, where wall time also counts the waits for a core; with
    ``jobs`` > 1 it is every thread's), reusing and adding to the proofs in ``store`` if given, the
    certified engine with ``proof``."""
    req = Request.for_system(load_system(cfg.system), cfg.axes, cfg.reduction_axes)
    start, cpu = time.perf_counter(), time.process_time()
    extra = {"proof": proof} if engine == "certified" else {}
    res = synthesize(req, EngineConfig(engine=engine, prune="p2-47", jobs=jobs, proof_store=store, **extra))
    return res, time.perf_counter() - start, time.process_time() - cpu


def parts(res) -> dict[str, float]:
    """The certified run's proposer, validity and completeness seconds, and the part of the last two spent
    in Z3's own checks (``solving``: the rest is building formulas in z3py), summed over solved placements."""
    out = {"proposer": 0.0, "validity": 0.0, "completeness": 0.0, "solving": 0.0}
    for m in res.matrices:
        out["proposer"] += m.stats.get("proposer_seconds", 0.0)
        cert = m.stats.get("certificate")
        if cert and "validity" in cert:
            out["validity"] += cert["validity"]["seconds"]
            out["completeness"] += cert["completeness"]["seconds"]
            out["solving"] += cert["validity"]["solver_seconds"] + cert["completeness"]["solver_seconds"]
    return out


def program_sets(res) -> list[list[str]]:
    """Each placement's programs as text, to compare two runs' sets."""
    return [list(map(str, m.programs)) for m in res.matrices]


def sweep_with_store(configs, jobs: int, expected: dict[str, list[list[str]]]) -> dict[str, float | int | bool]:
    """The requests run in order with one proof store (empty at the start), so that each distinct problem
    is proved once: the seconds, CPU seconds, how many placements' proofs were made and reused, and whether
    every set is certified and the one each request got alone (``expected``: label -> programs)."""
    seconds = cpu = 0.0
    proved = reused = 0
    same = True
    with tempfile.TemporaryDirectory(prefix="p2smt-bench-proofs-") as store:
        for cfg in configs:
            res, wall, used = run(cfg, "certified", jobs, store)
            seconds, cpu = seconds + wall, cpu + used
            certs = [m.stats["certificate"] for m in res.matrices if "certificate" in m.stats]
            reused += sum("reused" in c for c in certs)
            proved += sum("reused" not in c for c in certs)
            same &= bool(res.certified) and program_sets(res) == expected[cfg.label]
    return {"seconds": round(seconds, 4), "cpu_seconds": round(cpu, 4), "proved": proved, "reused": reused,
            "same": same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", help="only requests whose label contains this text")
    ap.add_argument("--no-z3", action="store_true", help="skip the pure Z3 engine")
    ap.add_argument("--json", help="write the rows as JSON to this file")
    ap.add_argument("--jobs", type=int, default=1, help="the certified engine's Z3 proof on N threads (default 1)")
    args = ap.parse_args(argv)
    reported = p2_times()
    configs = [c for c in paper_grid() if not args.only or args.only in c.label]
    head = (f"{'request':40s} {'progs':>5s} {'P² s':>7s} {'propose':>8s} {'valid':>7s} {'complete':>8s} "
            f"{'solving':>7s} {'bmc':>7s} {'cpu':>6s} {'≤P²':>4s} {'graph':>6s} {'≤P²':>4s} {'auto':>6s} {'≤P²':>4s} "
            f"{'same':>4s} {'pure z3':>8s} {'cpu':>6s} {'≤P²':>4s} cert same")
    print(head)
    print("-" * len(head))
    rows, all_certified, all_same = [], True, True
    alone: dict[str, list[list[str]]] = {}
    for cfg in configs:
        p2 = reported[(cfg.system, tuple(cfg.axes), tuple(cfg.reduction_axes))]
        res, total, cpu = run(cfg, "certified", args.jobs)
        split = parts(res)
        alone[cfg.label] = program_sets(res)
        row = {"request": cfg.label, "programs": res.total_programs, "p2_seconds": p2,
               "certified_seconds": round(total, 4), "certified_cpu_seconds": round(cpu, 4),
               "certified": bool(res.certified),
               **{f"{k}_seconds": round(v, 4) for k, v in split.items()}}
        all_certified &= bool(res.certified)
        line = (f"{cfg.label:40s} {res.total_programs:5d} {p2:7.3f} {split['proposer']:8.3f} "
                f"{split['validity']:7.3f} {split['completeness']:8.3f} {split['solving']:7.3f} {total:7.3f} {cpu:6.3f} "
                f"{'yes' if cpu <= p2 else 'no':>4s}")
        same_sets = True
        for proof in ("certificate", "auto"):
            other, _, other_cpu = run(cfg, "certified", args.jobs, proof=proof)
            same_sets &= program_sets(other) == alone[cfg.label] and bool(other.certified)
            row[f"{proof}_cpu_seconds"] = round(other_cpu, 4)
            line += f" {other_cpu:6.3f} {'yes' if other_cpu <= p2 else 'no':>4s}"
        row["proofs_same"] = same_sets
        all_certified &= same_sets
        line += f" {'yes' if same_sets else 'NO':>4s}"
        if not args.no_z3:
            z3res, z3total, z3cpu = run(cfg, "z3")
            same = [list(map(str, m.programs)) for m in z3res.matrices] == [
                list(map(str, m.programs)) for m in res.matrices]
            all_same &= same and z3res.status == "complete"
            row |= {"z3_seconds": round(z3total, 4), "z3_cpu_seconds": round(z3cpu, 4), "z3_status": str(z3res.status), "same_programs": same}
            line += f" {z3total:8.3f} {z3cpu:6.3f} {'yes' if z3total <= p2 else 'no':>4s}"
        else:
            line += f" {'-':>8s} {'-':>6s} {'-':>4s}"
        same_text = "-" if args.no_z3 else ("yes" if row["same_programs"] else "NO")
        line += f" {'yes' if res.certified else 'NO':>4s} {same_text:>4s}"
        print(line, flush=True)
        rows.append(row)
    print("-" * len(head))
    n = len(rows)

    def total(key: str) -> float:
        return sum(r[key] for r in rows)

    def under(key: str) -> int:
        return sum(r[key] <= r["p2_seconds"] for r in rows)

    print(f"totals over {n} requests: P² {total('p2_seconds'):.2f} s; certified (--jobs {args.jobs}) "
          f"{total('certified_seconds'):.2f} s "
          f"({total('certified_cpu_seconds'):.2f} s CPU) "
          f"(proposer {total('proposer_seconds'):.2f}, Z3 validity {total('validity_seconds'):.2f}, "
          f"Z3 completeness {total('completeness_seconds'):.2f}; of these two, in Z3's checks "
          f"{total('solving_seconds'):.2f})"
          + ("" if args.no_z3 else f"; pure Z3 {total('z3_seconds'):.2f} s ({total('z3_cpu_seconds'):.2f} s CPU)"))
    print(f"CPU seconds: BMC proof {total('certified_cpu_seconds'):.2f} s, {under('certified_cpu_seconds')}/{n} at or "
          f"under P²'s time; state-graph certificate {total('certificate_cpu_seconds'):.2f} s, "
          f"{under('certificate_cpu_seconds')}/{n}; --proof auto {total('auto_cpu_seconds'):.2f} s, "
          f"{under('auto_cpu_seconds')}/{n}; the same certified sets under all three: "
          f"{all(r['proofs_same'] for r in rows)}")
    print(f"at or under P²'s time: certified {sum(r['certified_seconds'] <= r['p2_seconds'] for r in rows)}/{n}"
          f" (Z3's checks alone: {sum(r['solving_seconds'] <= r['p2_seconds'] for r in rows)}/{n})"
          + ("" if args.no_z3 else f", pure Z3 {sum(r['z3_seconds'] <= r['p2_seconds'] for r in rows)}/{n}"))
    shared = sweep_with_store(configs, args.jobs, alone)
    print(f"the same requests one after another sharing a proof store, as a sweep does (not per request): "
          f"certified {shared['seconds']:.2f} s ({shared['cpu_seconds']:.2f} s CPU), {shared['proved']} proofs made "
          f"and {shared['reused']} reused of {shared['proved'] + shared['reused']}, "
          f"{'the same sets' if shared['same'] else 'SETS DIFFER'}")
    print(f"every request certified: {all_certified}" + ("" if args.no_z3 else f"; pure Z3 sets equal: {all_same}"))
    print(f"machine: {describe_machine()}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_info(), "jobs": args.jobs, "rows": rows,
                                                "shared_store": shared}, indent=2))
    return 0 if all_certified and all_same and shared["same"] else 1


if __name__ == "__main__":
    sys.exit(main())
