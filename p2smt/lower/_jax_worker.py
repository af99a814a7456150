"""Subprocess entry: run generated JAX modules on N CPU host devices and check exact sums.

Started by run.py with XLA_FLAGS=--xla_force_host_platform_device_count=N, JAX_PLATFORMS=cpu and
JAX_ENABLE_X64=1 set before jax is imported. Usage: python -m p2smt.lower._jax_worker JOB OUT.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import traceback

from p2smt.lifeline import hold


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _timed(fn, arg):
    t0 = time.perf_counter()
    out = fn(arg)
    out.block_until_ready()
    return out, time.perf_counter() - t0


def run_case(case: dict, num_devices: int, repeats: int) -> dict:
    import jax
    import numpy as np

    from p2smt.lower.check import MAX_REPORTED, compare, device_input

    mod = _load(case["module"], f"p2smt_generated_{case['index']}")
    mesh = mod.make_mesh(jax.devices()[:num_devices])
    length, k, goal = case["length"], mod.NUM_CHUNKS, case.get("goal")
    x = np.stack([device_input(d, num_devices, length, k, goal) for d in range(num_devices)])
    state0 = mod.to_global(x, mesh)
    whole = mod.sharded(mod.reduce_local, mesh)
    out, setup_s = _timed(whole, state0)
    result = mod.from_global(out)
    group_of = {d: g for g in case["groups"] for d in g}
    mismatches = []
    for d in range(num_devices):
        mismatches += compare(d, result[d], group_of[d], k, length, goal, num_devices)
    start = mod.sharded(mod._place, mesh)
    steps = [mod.sharded(step, mesh) for step in mod.STEPS]
    finish = mod.sharded(mod.finish, mesh)
    state = start(state0)
    for fn in steps:  # first call compiles; not timed
        state = fn(state)
    chained = mod.from_global(finish(state))
    step_s = [float("inf")] * len(steps)
    total_s = float("inf")
    for _ in range(max(1, repeats)):
        state = start(state0)
        for i, fn in enumerate(steps):
            state, dt = _timed(fn, state)
            step_s[i] = min(step_s[i], dt)
        total_s = min(total_s, _timed(whole, state0)[1])
    error = None
    if not np.array_equal(chained, result):
        error = "running the steps one by one gave a different result than the whole program"
    return {
        "ok": not mismatches and error is None,
        "bad_devices": sorted({m[0] for m in mismatches}),
        "mismatches": mismatches[:MAX_REPORTED],
        "setup_s": setup_s,
        "step_s": step_s,
        "total_s": total_s,
        "error": error,
    }


def main(job_path: str, out_path: str) -> int:
    hold()  # ends with the p2smt process that started it
    with open(job_path) as f:
        job = json.load(f)
    import jax

    n = job["num_devices"]
    if len(jax.devices()) < n:
        raise SystemExit(f"only {len(jax.devices())} JAX devices, need {n}")
    results = []
    for case in job["cases"]:
        try:
            results.append(run_case(case, n, job["repeats"]))
        except Exception as err:  # noqa: BLE001  (any failure of a case is reported, the others still run)
            tb = traceback.format_exc(limit=3)
            results.append({"ok": False, "error": f"{type(err).__name__}: {err}\n{tb}"})
    with open(out_path, "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
