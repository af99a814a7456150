"""Print every step of ``tests/jax_steps.py`` (16 CPU devices) as StableHLO and compiled HLO, with a manifest.

Run: ``python tests/data/audit/generate.py [OUT_DIR]`` (default: this directory). ``NAME.mlir`` is
``jit(f).lower(*args).as_text()``, ``NAME.hlo`` is ``.lower(*args).compile().as_text()`` (what XLA runs,
GSPMD's collectives and custom_partitioning bodies included); for the steps in ``HIDDEN`` also
``NAME-unpartitioned.hlo`` (``.lower(*args).as_text(dialect="hlo")``). ``manifest.json`` gives, per step, whether its
numbers are right (checked here, on the devices, against its numpy reference), the class of its bug, its mesh
(axis names, shape, device ids in mesh order) and a line on what it does: the ground truth an audit of the
printed text is judged against.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/

import jax_steps

HIDDEN = ("custom-partitioning-sum", "wrong-hidden-custom-partitioning", "gspmd-sum", "wrong-gspmd-inserted")


def manifest_entry(step: jax_steps.Step, matches: bool) -> dict:
    mesh = step.mesh
    return {"correct": step.correct, "matches_reference": matches,
            "finding": step.finding.value if step.finding else None,
            "mesh": {"axis_names": list(mesh.axis_names), "shape": [int(n) for n in mesh.devices.shape],
                     "device_ids": [int(d.id) for d in mesh.devices.flat]},
            "doc": " ".join(step.doc.split())}


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    manifest = {}
    for name in jax_steps.BUILDERS:
        step = jax_steps.build(name)
        lowered = step.fn.lower(*step.args)
        (out / f"{name}.mlir").write_text(lowered.as_text())
        (out / f"{name}.hlo").write_text(lowered.compile().as_text())
        if name in HIDDEN:  # HLO before partitioning: as blind to these collectives as StableHLO
            (out / f"{name}-unpartitioned.hlo").write_text(lowered.as_text(dialect="hlo"))
        manifest[name] = manifest_entry(step, jax_steps.matches(step))
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    bad = [n for n, e in manifest.items() if e["correct"] != e["matches_reference"]]
    if bad:
        print(f"generate.py: the numbers contradict the correct flag of {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent))
