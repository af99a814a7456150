"""Public calibration measurements (``data/calibration.yaml``) and the model's prediction of each one.

A prediction is NCCL's time from the cost model, floored by the benchmark harness: when one host
thread drives ``gpus_per_process`` GPUs (nccl-tests ``-g``), an iteration cannot finish before that
thread has enqueued every GPU's kernel, ``gpus_per_process × launch_us_per_gpu``. The floor belongs
to the measurement, not to the system: training runs one process per GPU, so the cost model never
applies it. ``launch_us_per_gpu`` is the one constant fitted on these points (``fit_launch_us``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from p2smt.cost.step import flat_collective_choice
from p2smt.model.collectives import Collective
from p2smt.model.system import System, load_system

DATA = Path(__file__).with_name("data") / "calibration.yaml"
BANDWIDTH_BOUND = 64 << 20
"""Points of at least this many bytes are in the bandwidth-bound regime."""


@dataclass(frozen=True)
class Measurement:
    """One measured point: a collective over all GPUs of ``system`` (``nodes`` nodes) at ``bytes``."""

    source: str
    system: str
    nodes: int
    collective: str
    bytes: int
    seconds: float
    nccl: str
    reference: str
    gpus_per_process: int = 1


def _seconds(collective: str, ranks: int, nbytes: int, entry: dict, key: int) -> float:
    if "time_us" in entry:
        return float(entry["time_us"][key]) * 1e-6
    coef = {"allreduce": 2 * (ranks - 1) / ranks}.get(collective, (ranks - 1) / ranks)
    return nbytes * coef / (float(entry["busbw_gbps"][key]) * 1e9)


@cache
def _data() -> dict:
    return yaml.safe_load(DATA.read_text())


def launch_us_per_gpu() -> float:
    """The harness's fitted host enqueue time per GPU driven by one thread (microseconds)."""
    return float(_data()["harness"]["launch_us_per_gpu"])


@cache
def measurements() -> tuple[Measurement, ...]:
    """Every public point, in file order then by size."""
    out = []
    for entry in _data()["points"]:
        system = load_system(entry["system"], nodes=entry["nodes"])
        table = entry.get("time_us") or entry["busbw_gbps"]
        for key in sorted(table, key=int):
            nbytes = int(key)
            out.append(Measurement(entry["id"], entry["system"], entry["nodes"], entry["collective"], nbytes,
                                   _seconds(entry["collective"], system.num_devices, nbytes, entry, key),
                                   str(entry["nccl"]), " ".join(entry["source"].split()),
                                   int(entry.get("gpus_per_process", 1))))
    return tuple(out)


def harness_floor(point: Measurement, launch_us: float | None = None) -> float:
    """Seconds the benchmark's host thread needs per iteration to enqueue its GPUs' kernels."""
    per_gpu = launch_us_per_gpu() if launch_us is None else launch_us
    return point.gpus_per_process * per_gpu * 1e-6 if point.gpus_per_process > 1 else 0.0


def predict(point: Measurement, algo: str = "auto", system: System | None = None,
            launch_us: float | None = None) -> float:
    """The model's time for ``point`` (``system`` overrides the file's, e.g. with other constants)."""
    system = system or load_system(point.system, nodes=point.nodes)
    nccl = flat_collective_choice(system, Collective.parse(point.collective), point.bytes, algo).seconds
    return max(nccl, harness_floor(point, launch_us))


def calibration_points(algo: str = "auto", systems: dict[str, System] | None = None,
                       launch_us: float | None = None) -> list[dict]:
    """Every point with measured and predicted seconds, the relative error (predicted − measured)/measured,
    the (algorithm, protocol) the tuner chose, NCCL's own time and the harness floor."""
    out = []
    for m in measurements():
        system = (systems or {}).get(m.system) or load_system(m.system, nodes=m.nodes)
        choice = flat_collective_choice(system, Collective.parse(m.collective), m.bytes, algo)
        floor = harness_floor(m, launch_us)
        predicted = max(choice.seconds, floor)
        out.append({"source": m.source, "system": m.system, "collective": m.collective, "bytes": m.bytes,
                    "measured_s": m.seconds, "predicted_s": predicted, "nccl_s": choice.seconds,
                    "floor_s": floor, "gpus_per_process": m.gpus_per_process,
                    "algo": choice.algo, "protocol": choice.protocol.value,
                    "relative_error": (predicted - m.seconds) / m.seconds})
    return out


def fit_launch_us(points: Sequence[dict]) -> float:
    """``launch_us_per_gpu`` minimizing Σ log(predicted/measured)² over ``points`` (rows of
    ``calibration_points``): predicted = max(nccl_s, gpus_per_process × L). Only multi-GPU-per-process
    points depend on L; golden-section search over 0–50 µs (the loss is unimodal in L)."""
    rows = [p for p in points if p["gpus_per_process"] > 1]

    def loss(launch: float) -> float:
        return sum(math.log(max(p["nccl_s"], p["gpus_per_process"] * launch * 1e-6) / p["measured_s"]) ** 2
                   for p in rows)

    lo, hi = 0.0, 50.0
    for _ in range(200):
        a, b = lo + (hi - lo) * 0.382, lo + (hi - lo) * 0.618
        lo, hi = (lo, b) if loss(a) <= loss(b) else (a, hi)
    return round((lo + hi) / 2, 2)


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
