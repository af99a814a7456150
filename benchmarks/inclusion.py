"""The symmetric engine's completeness proof at the real size: Theorem 3''s inclusion exploration.

For each real size vector (one reduction group, per-ancestor scope unless ``--scope``, the progress rule),
``synth.lockstep.real_included`` explores pairs (real state on the compressed interpreter, generic size-2
state on the bitmatrix one) and decides whether every program valid at the real size, of any length, is
valid at size 2. Each point runs in its own process under a wall-clock limit; it prints the pairs and
states explored, the decision (a counterexample's length), seconds and the process's peak RSS, then the
machine.

    python benchmarks/inclusion.py                                  # the default points
    python benchmarks/inclusion.py --sizes 64x64,16x16x16 --max-pairs 5000 --limit 300
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from p2smt.runs.child import OutcomeStatus, run_in_child
from p2smt.runs.machine import describe_machine

POINTS = "4x4,32x32,64x64,2x3x5,4x16x16,16x16x16,2x2x2x3,2x2x2x4,4x32x4x2"


def point(sizes: list[int], scope: str, max_pairs: int | None) -> dict:
    """One exploration in this process: its figures as JSON."""
    import resource

    from p2smt.model.dsl import problem
    from p2smt.synth.lockstep import real_included
    from p2smt.synth.symmetric import one_group_hierarchy

    def prob(sz):
        return problem(one_group_hierarchy([(f"l{j}", s) for j, s in enumerate(sz)], scope))

    generic = [2 if s > 1 else 1 for s in sizes]
    start = time.perf_counter()
    found = real_included(prob(sizes), sizes, prob(generic), generic, scope, max_pairs)
    seconds = time.perf_counter() - start
    cex = found.counterexample
    return {"sizes": sizes, "devices": prob(sizes).num_devices, "pairs": found.pairs, "states": list(found.states),
            "decision": "included" if cex is None else f"counterexample of {len(cex.labels)} steps",
            "seconds": round(seconds, 3), "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=POINTS, help="comma-separated size vectors, levels joined by x")
    ap.add_argument("--scope", default="per-ancestor", choices=["per-ancestor", "global"])
    ap.add_argument("--max-pairs", type=int, default=None, help="bound on the pairs explored (no decision above)")
    ap.add_argument("--limit", type=float, default=600.0, help="wall-clock seconds per point")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    rows = []
    print(f"{'sizes':>14} {'devices':>8} {'pairs':>8} {'states (real, generic)':>24} {'decision':>30} "
          f"{'seconds':>8} {'peak RSS':>9}")
    for text in args.sizes.split(","):
        sizes = [int(s) for s in text.split("x")]
        out = run_in_child(f"{__file__}:point", [sizes, args.scope, args.max_pairs], limit_s=args.limit)
        if out.status != OutcomeStatus.OK:
            print(f"{text:>14} {out.status.value}: {out.error}")
            rows.append({"sizes": sizes, "status": out.status.value, "error": out.error})
            continue
        r = out.value
        rows.append(r)
        print(f"{text:>14} {r['devices']:>8,} {r['pairs']:>8,} {tuple(r['states'])!s:>24} {r['decision']:>30} "
              f"{r['seconds']:>8.1f} {r['peak_rss_mib']:>5} MiB", flush=True)
    print(f"machine: {describe_machine()}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
