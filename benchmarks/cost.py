"""Cost-model benchmark: scoring throughput and accuracy against docs/cost-model.md's calibration measurements.

Run: ``python benchmarks/cost.py [--json]``. Prints
1. predicted vs measured for C1 (8×A100 AllReduce busbw, NCCL 2.18) and C2 (8×H100 AllReduce and
   AllGather times, NCCL 2.18): per point the (algorithm, protocol) the tuner chose, NCCL's time, the
   harness floor, the relative error and the bound it must meet; geometric means; the model's
   parameters are the topology files' (dgx-a100, dgx-h100);
2. the harness constant ``launch_us_per_gpu`` (calibration.yaml): its fit on every point and
   leave-one-out errors (refit without point i, predict point i);
3. the global model constant estimated from these points, ``nccl.allreduce_plateau`` (P): its least-squares
   fit (log predicted/measured over the points >= 64 MB), the error of every point with P = 1 (NCCL's
   constants only), and leave-one-out errors: P fitted on the other points, the held-out point predicted
   by the model run with that P;
4. (program, matrix) pairs scored per second (cold caches and warm) on P²'s 4×A100 grid requests, the
   pairs priced per second on the 1,024-GPU h100-superpod (``scoring_throughput``), and the machine
   (CPU, cores, Python).
The algorithm is ``auto`` (per collective the fastest of ring/tree/nvls), as NCCL's tuner picks one.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from p2smt.cost import calibration
from p2smt.cost.calibration import BANDWIDTH_BOUND, fit_launch_us, launch_us_per_gpu, summarize
from p2smt.cost.model import programs_seconds
from p2smt.cost.rank import rank_result
from p2smt.model.request import Request
from p2smt.model.system import System, load_system
from p2smt.runs.machine import describe_machine, machine_info
from p2smt.synth.config import EngineConfig
from p2smt.synth.driver import synthesize


def with_plateau(system: System, plateau: float) -> System:
    """``system`` with ``nccl.allreduce_plateau`` replaced (the only parameter estimated from these points)."""
    phys = system.physical
    nccl = phys.nccl.model_copy(update={"allreduce_plateau": plateau})
    return system.model_copy(update={"physical": phys.model_copy(update={"nccl": nccl})})


def calibration_points(algo: str = "auto", plateau: float | None = None) -> list[dict]:
    """Every calibration point (``p2smt.cost.calibration``) predicted with ``plateau`` in place of the files'."""
    if plateau is None:
        return calibration.calibration_points(algo)
    systems = {m.system: with_plateau(load_system(m.system, nodes=m.nodes), plateau)
               for m in calibration.measurements()}
    return calibration.calibration_points(algo, systems)


def _fit_plateau(base: list[float], slope: list[float], measured: list[float]) -> float:
    """P >= 1 minimizing the sum of log(predicted/measured)^2, with predicted = base + (P-1)·slope."""
    def loss(p: float) -> float:
        return sum(math.log((b + (p - 1) * d) / m) ** 2 for b, d, m in zip(base, slope, measured))

    lo, hi = 1.0, 20.0
    for _ in range(200):  # golden-section search; the loss is convex in P on this range
        a, b = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        lo, hi = (lo, b) if loss(a) <= loss(b) else (a, hi)
    return round((lo + hi) / 2, 4)


def plateau_fit(min_bytes: int = BANDWIDTH_BOUND) -> dict:
    """The plateau constant fitted on all points >= min_bytes, every point's error with P = 1, and
    leave-one-out: P refitted without point i, point i predicted by the model run with that P.

    The model is affine in P for a fixed algorithm choice (α·(P−1)·β/(α+β) is added to α + β), so the fit
    uses the predictions at P = 1 and P = 2; every reported prediction is a fresh run of the model."""
    one = [p for p in calibration_points(plateau=1.0) if p["bytes"] >= min_bytes]
    two = [p for p in calibration_points(plateau=2.0) if p["bytes"] >= min_bytes]
    base = [p["predicted_s"] for p in one]
    slope = [q["predicted_s"] - p["predicted_s"] for p, q in zip(one, two)]
    measured = [p["measured_s"] for p in one]
    fitted = _fit_plateau(base, slope, measured)
    loo = []
    for i, point in enumerate(one):
        keep = [j for j in range(len(one)) if j != i]
        p_i = _fit_plateau([base[j] for j in keep], [slope[j] for j in keep], [measured[j] for j in keep])
        (held,) = [p for p in calibration_points(plateau=p_i) if (p["source"], p["collective"], p["bytes"]) ==
                   (point["source"], point["collective"], point["bytes"])]
        loo.append({"source": point["source"], "collective": point["collective"], "bytes": point["bytes"],
                    "plateau": p_i, "relative_error": held["relative_error"]})
    by_system = []
    for source in sorted({p["source"] for p in one}):
        keep = [j for j, p in enumerate(one) if p["source"] != source]
        p_s = _fit_plateau([base[j] for j in keep], [slope[j] for j in keep], [measured[j] for j in keep])
        held = [p for p in calibration_points(plateau=p_s) if p["source"] == source and p["bytes"] >= min_bytes]
        by_system.append({"held_out": source, "plateau": p_s,
                          "errors": {f"{p['collective']} {p['bytes']}": p["relative_error"] for p in held}})
    return {"fitted_plateau": fitted, "without_plateau": one, "leave_one_out": loo,
            "max_abs_loo_error": max(abs(x["relative_error"]) for x in loo),
            "leave_one_system_out": by_system}


def bound(nbytes: int) -> float:
    """The per-point error bound: 10 % at >= 64 MB, 20 % from 64 KiB to 64 MB, 35 % below."""
    return 0.10 if nbytes >= BANDWIDTH_BOUND else (0.20 if nbytes >= 64 << 10 else 0.35)


def launch_fit() -> dict:
    """``launch_us_per_gpu`` fitted on every point, and leave-one-out: refit without point i, predict i."""
    points = calibration_points()
    loo = []
    for i, point in enumerate(points):
        launch = fit_launch_us(points[:i] + points[i + 1:])
        predicted = max(point["nccl_s"], point["gpus_per_process"] * launch * 1e-6 if point["gpus_per_process"] > 1
                        else 0.0)
        loo.append({"source": point["source"], "collective": point["collective"], "bytes": point["bytes"],
                    "launch_us_per_gpu": launch,
                    "relative_error": (predicted - point["measured_s"]) / point["measured_s"]})
    return {"fitted": fit_launch_us(points), "used": launch_us_per_gpu(), "leave_one_out": loo,
            "max_abs_loo_error": max(abs(x["relative_error"]) for x in loo)}


def throughput() -> dict:
    """(program, matrix) pairs scored per second on P²'s 4×A100 requests (cold then warm caches)."""
    system = load_system("a100-4x16")
    requests = [((64,), (0,)), ((8, 8), (1,)), ((8, 2, 4), (0,)), ((4, 2, 8), (2,))]
    results = [synthesize(Request.for_system(system, axes, red)) for axes, red in requests]
    pairs = sum(r.total_programs for r in results)
    out = {"pairs": pairs}
    for label in ("cold", "warm"):
        start = time.perf_counter()
        for r in results:
            rank_result(system, r, algo="ring")
        out[f"{label}_pairs_per_second"] = pairs / (time.perf_counter() - start)
    return out


SUPERPOD_REQUESTS = (((1024,), (0,)), ((32, 32), (1,)))
"""1,024 GPUs: one reduction group over all four levels (7,636 programs of length <= 5), and the 18
placements of a 32 x 32 grid reducing the second axis."""


def scoring_throughput(max_len: int = 5) -> dict:
    """(program, matrix) pairs priced per second by ``programs_seconds`` on the 1,024-GPU
    ``h100-superpod`` (cold: every step priced; warm: the steps looked up), as ``rank`` prices a
    synthesis result (``checked``: volumes on the row abstraction). Synthesis by the ``symmetric``
    engine, not timed."""
    system = load_system("h100-superpod")
    config = EngineConfig(engine="symmetric", max_len=max_len)
    results = [synthesize(Request.for_system(system, axes, red), config) for axes, red in SUPERPOD_REQUESTS]
    pairs = sum(r.total_programs for r in results)
    out: dict = {"system": system.name, "max_len": max_len, "pairs": pairs,
                 "matrices": sum(len(r.matrices) for r in results)}
    for label in ("cold", "warm"):
        start = time.perf_counter()
        for r in results:
            for m in r.matrices:
                programs_seconds(system, m.hierarchy, m.programs, algo="ring", checked=True)
        out[f"{label}_pairs_per_second"] = pairs / (time.perf_counter() - start)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    args = parser.parse_args(argv)
    points = calibration_points()
    report = {"calibration": points, "summary": summarize(points),
              "summary_all_sizes": summarize(points, 0), "launch": launch_fit(), "plateau": plateau_fit(),
              "throughput": throughput(), "scoring_at_scale": scoring_throughput(), "machine": machine_info()}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'source':6} {'collective':10} {'bytes':>12} {'measured us':>12} {'NCCL us':>9} {'floor us':>9} "
          f"{'predicted us':>13} {'error':>8} {'bound':>6}  chosen")
    for p in points:
        ok = "" if abs(p["relative_error"]) <= bound(p["bytes"]) else "  OUT OF BOUND"
        print(f"{p['source']:6} {p['collective']:10} {p['bytes']:12d} {p['measured_s'] * 1e6:12.1f} "
              f"{p['nccl_s'] * 1e6:9.1f} {p['floor_s'] * 1e6:9.1f} {p['predicted_s'] * 1e6:13.1f} "
              f"{p['relative_error']:+8.1%} {bound(p['bytes']):6.0%}  {p['algo']}/{p['protocol']}{ok}")
    s = report["summary"]
    print(f"\n>= 64 MB: {s['points']} points, geometric mean |error| {s['geomean_abs_relative_error']:.1%}, "
          f"geometric mean predicted/measured {s['geomean_ratio']:.3f}, max |error| "
          f"{s['max_abs_relative_error']:.1%} ({s['worst']['source']} {s['worst']['collective']} "
          f"{s['worst']['bytes']} B)")
    s_all = report["summary_all_sizes"]
    print(f"all sizes: {s_all['points']} points, geometric mean |error| {s_all['geomean_abs_relative_error']:.1%}, "
          f"max |error| {s_all['max_abs_relative_error']:.1%}")
    lf = report["launch"]
    print(f"\nharness launch_us_per_gpu: file {lf['used']}, fit on all points {lf['fitted']}; leave-one-out "
          "(points whose prediction depends on it):")
    for loo in lf["leave_one_out"]:
        if loo["source"] == "C1" and loo["bytes"] < 1 << 21:
            print(f"  {loo['source']} {loo['collective']} {loo['bytes']:>8d} B: refit {loo['launch_us_per_gpu']:.2f} us, "
                  f"error {loo['relative_error']:+.1%}")
    print(f"max |leave-one-out error| over all points {lf['max_abs_loo_error']:.1%}")
    fit = report["plateau"]
    used = load_system("dgx-a100", nodes=1).physical.nccl.allreduce_plateau
    print(f"\nnccl.allreduce_plateau: files use {used}, least-squares fit on the >= 64 MB points {fit['fitted_plateau']}")
    print(f"{'source':6} {'collective':10} {'bytes':>12} {'error P=1':>10} {'error P':>8} {'LOO P':>7} {'LOO error':>10}")
    now = {(p["source"], p["collective"], p["bytes"]): p for p in points}
    for p1, loo in zip(fit["without_plateau"], fit["leave_one_out"]):
        cur = now[(p1["source"], p1["collective"], p1["bytes"])]
        print(f"{p1['source']:6} {p1['collective']:10} {p1['bytes']:12d} {p1['relative_error']:+10.1%} "
              f"{cur['relative_error']:+8.1%} {loo['plateau']:7.3f} {loo['relative_error']:+10.1%}")
    print(f"max |leave-one-out error| {fit['max_abs_loo_error']:.1%}")
    for cross in fit["leave_one_system_out"]:
        errs = ", ".join(f"{k.split()[0]} {int(k.split()[1]) >> 20} MiB {v:+.1%}" for k, v in cross["errors"].items())
        print(f"fit without {cross['held_out']} (P = {cross['plateau']:.3f}) predicts {cross['held_out']}: {errs}")
    t = report["throughput"]
    print(f"\nthroughput: {t['pairs']} (program, matrix) pairs, {t['cold_pairs_per_second']:.0f}/s cold, "
          f"{t['warm_pairs_per_second']:.0f}/s warm")
    sc = report["scoring_at_scale"]
    print(f"scoring on {sc['system']} (1,024 GPUs, length <= {sc['max_len']}): {sc['pairs']} (program, matrix) pairs "
          f"over {sc['matrices']} matrices, {sc['cold_pairs_per_second']:.0f}/s cold, "
          f"{sc['warm_pairs_per_second']:.0f}/s warm")
    print(f"machine: {describe_machine(report['machine'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
