"""Subprocess entry: one gloo rank running generated torch.distributed modules, checking exact sums.

All cases of a job share one process group (started once). Usage:
python -m p2smt.lower._torch_worker JOB OUTDIR: imports torch once, forks one process per rank;
rank r appends one JSON line per case to OUTDIR/rank<r>.jsonl (its errors go to OUTDIR/rank<r>.err).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import time
import traceback
from datetime import timedelta

from p2smt.lifeline import hold


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_case(case: dict, rank: int, num_devices: int, repeats: int) -> dict:
    import torch
    import torch.distributed as dist

    from p2smt.lower.check import MAX_REPORTED, compare, device_input

    mod = _load(case["module"], f"p2smt_generated_{case['index']}")
    length, k, goal = case["length"], mod.NUM_CHUNKS, case.get("goal")
    x = torch.from_numpy(device_input(rank, num_devices, length, k, goal).copy())
    dist.barrier()
    t0 = time.perf_counter()
    mod.setup()
    setup_s = time.perf_counter() - t0
    out = mod.reduce(x)
    group = next(g for g in case["groups"] if rank in g)
    mismatches = compare(rank, out.numpy(), group, k, length, goal, num_devices)
    chunk = length // k
    step_s = [float("inf")] * len(mod.STEPS)
    total_s = float("inf")
    for _ in range(max(1, repeats)):
        buf = x.clone()
        for i, step in enumerate(mod.STEPS):
            dist.barrier()
            t0 = time.perf_counter()
            buf = step(buf, chunk)
            step_s[i] = min(step_s[i], time.perf_counter() - t0)
        dist.barrier()
        t0 = time.perf_counter()
        mod.reduce(x)
        total_s = min(total_s, time.perf_counter() - t0)
    dist.barrier()
    mod.teardown()
    return {
        "ok": not mismatches,
        "bad_devices": sorted({m[0] for m in mismatches}),
        "mismatches": mismatches[:MAX_REPORTED],
        "setup_s": setup_s,
        "step_s": step_s,
        "total_s": total_s,
        "error": None,
    }


def main(job_path: str, rank: int, out_dir: str) -> int:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    with open(job_path) as f:
        job = json.load(f)
    n = job["num_devices"]
    dist.init_process_group(
        "gloo",
        init_method=f"file://{job['store']}",
        rank=rank,
        world_size=n,
        timeout=timedelta(seconds=job["timeout"]),
    )
    status = 0
    with open(os.path.join(out_dir, f"rank{rank}.jsonl"), "w") as out:
        for case in job["cases"]:
            try:
                result = run_case(case, rank, n, job["repeats"])
            except Exception as err:  # noqa: BLE001  (reported; ranks may be out of step, so stop)
                tb = traceback.format_exc(limit=3)
                result = {"ok": False, "error": f"rank {rank}: {type(err).__name__}: {err}\n{tb}"}
                status = 1
            out.write(json.dumps(result) + "\n")
            out.flush()
            if status:
                break
    if status == 0:
        dist.destroy_process_group()
    return status


def launch(job_path: str, out_dir: str) -> int:
    """Import torch once, then fork one process per rank (fast start: no N-fold torch import)."""
    import multiprocessing

    hold()  # ends with the p2smt process that started it, and its ranks with it
    import torch  # noqa: F401  (imported before forking so every rank inherits it)

    with open(job_path) as f:
        n = json.load(f)["num_devices"]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_rank_entry, args=(job_path, r, out_dir, os.getpid())) for r in range(n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return max(p.exitcode or 0 for p in procs)


def _rank_entry(job_path: str, rank: int, out_dir: str, launcher: int) -> None:
    hold(launcher)
    with open(os.path.join(out_dir, f"rank{rank}.err"), "w") as err:
        os.dup2(err.fileno(), 2)
        status = main(job_path, rank, out_dir)
    sys.exit(status)


if __name__ == "__main__":
    sys.exit(launch(sys.argv[1], sys.argv[2]))
