"""Public calibration measurements (``data/calibration.yaml``) and the model's prediction of each one."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

from p2smt.cost.step import flat_collective_time
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


def _seconds(collective: str, ranks: int, nbytes: int, entry: dict, key: int) -> float:
    if "time_us" in entry:
        return float(entry["time_us"][key]) * 1e-6
    coef = {"allreduce": 2 * (ranks - 1) / ranks}.get(collective, (ranks - 1) / ranks)
    return nbytes * coef / (float(entry["busbw_gbps"][key]) * 1e9)


@cache
def measurements() -> tuple[Measurement, ...]:
    """Every public point, in file order then by size."""
    out = []
    for entry in yaml.safe_load(DATA.read_text()):
        system = load_system(entry["system"], nodes=entry["nodes"])
        table = entry.get("time_us") or entry["busbw_gbps"]
        for key in sorted(table, key=int):
            nbytes = int(key)
            out.append(Measurement(entry["id"], entry["system"], entry["nodes"], entry["collective"], nbytes,
                                   _seconds(entry["collective"], system.num_devices, nbytes, entry, key),
                                   str(entry["nccl"]), " ".join(entry["source"].split())))
    return tuple(out)


def predict(point: Measurement, algo: str = "auto", system: System | None = None) -> float:
    """The model's time for ``point`` (``system`` overrides the file's, e.g. with other constants)."""
    system = system or load_system(point.system, nodes=point.nodes)
    return flat_collective_time(system, Collective.parse(point.collective), point.bytes, algo)


def calibration_points(algo: str = "auto", systems: dict[str, System] | None = None) -> list[dict]:
    """Every point with measured and predicted seconds and the relative error (predicted − measured)/measured."""
    out = []
    for m in measurements():
        predicted = predict(m, algo, (systems or {}).get(m.system))
        out.append({"source": m.source, "system": m.system, "collective": m.collective, "bytes": m.bytes,
                    "measured_s": m.seconds, "predicted_s": predicted,
                    "relative_error": (predicted - m.seconds) / m.seconds})
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
