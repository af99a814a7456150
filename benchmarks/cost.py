"""Cost-model benchmark: scoring throughput and accuracy against COSTS.md's calibration measurements.

Run: ``python benchmarks/cost.py [--json]``. Prints
1. (program, matrix) pairs scored per second (cold caches and warm), on P²'s 4×A100 grid requests;
2. predicted vs measured for C1 (8×A100 AllReduce busbw, NCCL 2.18) and C2 (8×H100 AllReduce and
   AllGather times, NCCL 2.18): per-point relative error and geometric means, with the model's
   parameters taken from the topology files (dgx-a100, dgx-h100), never fitted to these points.
The algorithm is ``auto`` (per collective the fastest of ring/tree/nvls), as NCCL's tuner picks one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from p2smt.cost import flat_collective_time
from p2smt.rank import rank_result
from p2smt.synth import synthesize
from p2smt.system import load_system

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# COSTS.md C1: 8 x A100-SXM4-80GB, NVSwitch, nccl-tests AllReduce busbw (GB/s).
C1_ALLREDUCE_BUSBW = {KIB: 0.04, 64 * KIB: 2.70, MIB: 36.22, 4 * MIB: 71.43, 16 * MIB: 109.22,
                      64 * MIB: 166.63, 256 * MIB: 213.87, GIB: 228.10, 4 * GIB: 230.48, 8 * GIB: 231.58}
# COSTS.md C2: 8 x H100, NVSwitch, times in us.
C2_ALLREDUCE_US = {KIB: 13.1, 64 * KIB: 20.0, MIB: 31.9, 16 * MIB: 116, 64 * MIB: 317, 256 * MIB: 1079,
                   GIB: 4029}
C2_ALLGATHER_US = {KIB: 9.5, 64 * KIB: 12.9, MIB: 18.3, 16 * MIB: 67.2, 64 * MIB: 192, 256 * MIB: 700,
                   GIB: 2664}
BANDWIDTH_BOUND = 64 * MIB


def calibration_points(algo: str = "auto") -> list[dict]:
    """Every calibration point with the model's prediction (seconds) and the relative error."""
    a100, h100 = load_system("dgx-a100", nodes=1), load_system("dgx-h100", nodes=1)
    n = 8
    points = []
    for size, busbw in C1_ALLREDUCE_BUSBW.items():
        measured = size * 2 * (n - 1) / n / (busbw * 1e9)
        points.append(("C1", "dgx-a100", "allreduce", size, measured))
    for coll, table in (("allreduce", C2_ALLREDUCE_US), ("allgather", C2_ALLGATHER_US)):
        for size, us in table.items():
            points.append(("C2", "dgx-h100", coll, size, us * 1e-6))
    out = []
    for source, system, coll, size, measured in points:
        predicted = flat_collective_time(a100 if system == "dgx-a100" else h100, coll, size, algo)
        out.append({"source": source, "system": system, "collective": coll, "bytes": size,
                    "measured_s": measured, "predicted_s": predicted,
                    "relative_error": (predicted - measured) / measured})
    return out


def summarize(points: list[dict], min_bytes: int = BANDWIDTH_BOUND) -> dict:
    """Geometric mean of |relative error| and of predicted/measured over points of at least min_bytes."""
    sel = [p for p in points if p["bytes"] >= min_bytes]
    abs_err = [max(abs(p["relative_error"]), 1e-6) for p in sel]
    ratio = [p["predicted_s"] / p["measured_s"] for p in sel]
    return {
        "points": len(sel),
        "geomean_abs_relative_error": math.exp(sum(map(math.log, abs_err)) / len(sel)),
        "geomean_ratio": math.exp(sum(map(math.log, ratio)) / len(sel)),
        "max_abs_relative_error": max(abs(p["relative_error"]) for p in sel),
        "worst": max(sel, key=lambda p: abs(p["relative_error"])),
    }


def throughput() -> dict:
    """(program, matrix) pairs scored per second on P²'s 4×A100 requests (cold then warm caches)."""
    system = load_system("a100-4x16")
    requests = [((64,), (0,)), ((8, 8), (1,)), ((8, 2, 4), (0,)), ((4, 2, 8), (2,))]
    results = [synthesize(system, axes, red) for axes, red in requests]
    pairs = sum(r.total_programs for r in results)
    out = {"pairs": pairs}
    for label in ("cold", "warm"):
        start = time.perf_counter()
        for r in results:
            rank_result(system, r, algo="ring")
        out[f"{label}_pairs_per_second"] = pairs / (time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    points = calibration_points()
    report = {"calibration": points, "summary": summarize(points),
              "summary_all_sizes": summarize(points, 0), "throughput": throughput()}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'source':6} {'collective':10} {'bytes':>12} {'measured us':>12} {'predicted us':>13} {'error':>8}")
    for p in points:
        mark = "" if p["bytes"] >= BANDWIDTH_BOUND else "   (latency regime)"
        print(f"{p['source']:6} {p['collective']:10} {p['bytes']:12d} {p['measured_s'] * 1e6:12.1f} "
              f"{p['predicted_s'] * 1e6:13.1f} {p['relative_error']:+8.1%}{mark}")
    s = report["summary"]
    print(f"\n>= 64 MB: {s['points']} points, geometric mean |error| {s['geomean_abs_relative_error']:.1%}, "
          f"geometric mean predicted/measured {s['geomean_ratio']:.3f}, max |error| "
          f"{s['max_abs_relative_error']:.1%} ({s['worst']['source']} {s['worst']['collective']} "
          f"{s['worst']['bytes']} B)")
    t = report["throughput"]
    print(f"throughput: {t['pairs']} (program, matrix) pairs, {t['cold_pairs_per_second']:.0f}/s cold, "
          f"{t['warm_pairs_per_second']:.0f}/s warm")
    return 0


if __name__ == "__main__":
    sys.exit(main())
