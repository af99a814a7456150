"""Must-show: a sweep on a local dask.distributed cluster (started here, loopback only) is killed midway
and resumed; no task is lost or run twice, and the resumed run submits exactly the missing tasks."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from p2smt.runs.gridfile import load_grid
from p2smt.runs.gridsweep import sweep
from p2smt.runs.store import read_rows as read_results
from p2smt.runs.tasks import expand, task_key

distributed = pytest.importorskip("distributed")

GRID = """
systems: [a100-2x16, v100-2x8, dgx-a100]
axes: [[2, auto], [4, auto]]
reductions: [[0], [1], [0, 1]]
algorithms: [ring, tree]
bytes: [default, 1.0e+8]
engine: enumerative
max_len: 3
timeout_s: 60
"""


def complete_lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def test_dask_sweep_killed_midway_resumes_without_losing_or_repeating_tasks(tmp_path):
    grid_path = tmp_path / "grid.yaml"
    grid_path.write_text(GRID)
    keys = [task_key(t) for t in expand(load_grid(grid_path))]
    assert len(keys) == 72 and len(set(keys)) == 72
    out = tmp_path / "results.jsonl"

    with distributed.LocalCluster(host="127.0.0.1", n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None, worker_dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tcp://127.0.0.1:")
        with distributed.Client(address) as client:
            worker_pids = set(client.run(os.getpid).values())
        code = (
            "import sys; from p2smt.runs.gridsweep import sweep; "
            "sweep(sys.argv[1], sys.argv[2], scheduler=sys.argv[3], progress=False)"
        )
        driver = subprocess.Popen([sys.executable, "-c", code, str(grid_path), str(out), address],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 90
            while complete_lines(out) < 8 and driver.poll() is None and time.monotonic() < deadline:
                time.sleep(0.02)
            assert driver.poll() is None, f"the driver ended before it was killed: {driver.stderr.read()!r}"
            driver.send_signal(signal.SIGKILL)
            driver.wait(timeout=10)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait()

        before = [r["key"] for r in read_results(out)]
        assert 8 <= len(before) < len(keys), "the sweep was not killed midway"
        assert len(set(before)) == len(before)
        missing = [k for k in keys if k not in set(before)]

        summary = sweep(grid_path, out, scheduler=address, progress=False)

    assert summary.total == len(keys)
    assert summary.skipped_existing == len(before)
    assert list(summary.submitted_keys) == missing and summary.submitted == len(missing)
    assert summary.finished == len(missing) and summary.by_status == {"ok": len(missing)}
    rows = read_results(out)
    after = [r["key"] for r in rows]
    assert sorted(after) == sorted(keys), "every task exactly once"
    assert {r["worker"]["pid"] for r in rows} <= worker_pids, "tasks ran on the cluster's workers"
    assert all(r["status"] == "ok" and r["best"] for r in rows)
