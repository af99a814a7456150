"""Text and plans given on the command line: ``@FILE`` arguments, ``--program`` and ``--plan``."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from p2smt.cli.options import one_hierarchy
from p2smt.errors import P2Error
from p2smt.model.placement import Placement
from p2smt.model.yamlfile import read_text_at_most

MAX_INPUT_BYTES = 4 << 20
"""Largest program, plan or instruction file read (a 12-step program is a few hundred bytes)."""
MAX_PLAN_STEPS = 4096


def read_text(path: Path, flag: str) -> str:
    """A regular UTF-8 file of at most ``MAX_INPUT_BYTES`` (a FIFO, ``/dev/zero`` or a folder is refused at
    once, not waited on or read forever)."""
    try:
        return read_text_at_most(path, MAX_INPUT_BYTES, f"{flag} file")
    except OSError as err:
        raise P2Error(f"cannot read {flag} file {str(path)!r}: {err.strerror}") from None


def read_arg_text(value: str, flag: str = "--program") -> tuple[str, str | None]:
    """``@FILE`` reads a file (returns its text and name), anything else is the text itself; neither may be
    empty (an empty ``--program`` is a mistake, not "no program")."""
    if value.startswith("@"):
        if not value[1:]:
            raise P2Error(f"{flag} @: give a file name after @ (@FILE reads the text from FILE)")
        path = Path(value[1:])
        return read_text(path, flag), str(path)
    if not value.strip():
        raise P2Error(f"{flag} is empty; give DSL text (instructions separated by ';') or @FILE")
    return value, None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused when it repeats a key (``json`` would keep the last value silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise P2Error(f"the key {key!r} appears twice in one JSON object")
        out[key] = value
    return out


def read_json(path: Path, flag: str) -> Any:
    """A JSON file (a regular file, of at most ``MAX_INPUT_BYTES``) whose objects repeat no key."""
    text = read_text(path, flag)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as err:
        raise P2Error(f"{path}:{err.lineno}:{err.colno}: malformed JSON: {err.msg}") from None
    except P2Error as err:
        raise P2Error(f"{path}: {err}") from None
    except (RecursionError, ValueError):
        raise P2Error(f"{path}: JSON nested too deeply or a number too large") from None


def _bounded(plan, source: str):
    if len(plan) > MAX_PLAN_STEPS:
        raise P2Error(f"{source}: {len(plan)} steps; at most {MAX_PLAN_STEPS} are checked")
    return plan


def plan_from_args(args: argparse.Namespace, h, num_devices: int):
    """(steps on the system, DSL program or None, buffers) from ``--program``, ``--plan`` or ``--hlo`` (an XLA
    module may run its program on several buffers; the others give one)."""
    from p2smt.model.dsl import lower_program, parse_explicit_plan, parse_program

    hlo = getattr(args, "hlo", None)
    if sum(v is not None for v in (args.program, args.plan, hlo)) != 1:
        raise P2Error("give exactly one of --program TEXT|@FILE or --plan FILE.json"
                      + (" or --hlo FILE" if hasattr(args, "hlo") else ""))
    if getattr(args, "device_order", None) and not hlo:
        raise P2Error("--device-order maps the XLA ids of --hlo; it has no meaning without it")
    if hlo:
        plan, buffers = hlo_plan(args, num_devices)
        return _bounded(plan, args.hlo), None, buffers
    if args.program is not None:
        text, source = read_arg_text(args.program)
        program = parse_program(text, h, source)
        _bounded(program.instructions, source or "--program")
        return lower_program(h, program), program, 1
    path = Path(args.plan)
    data = read_json(path, "--plan")
    if isinstance(data, list):
        _bounded(data, str(path))
    return _bounded(parse_explicit_plan(data, str(path), num_devices), str(path)), None, 1


def hlo_plan(args: argparse.Namespace, num_devices: int):
    """The explicit plan of an HLO/StableHLO file, XLA ids mapped through --device-order (default: identity),
    and the number of buffers the module runs it on."""
    from p2smt.frontend.hlo import hlo_plan as plan_of
    from p2smt.frontend.hlo import parse_module, read_device_order

    text = read_text(Path(args.hlo), "--hlo")
    order = read_device_order(args.device_order) if args.device_order else None
    module = parse_module(text, args.hlo)
    return plan_of(module, num_devices, order), module.buffers


@dataclass(frozen=True)
class PlanRequest:
    """A plan to check or prove: its placement, goal groups, steps on the system and DSL program (or None)."""

    placement: Placement
    reduce: tuple[int, ...]
    goal_groups: tuple[tuple[int, ...], ...]
    steps: list[tuple[str, Any]]
    program: Any
    buffers: int = 1  # an XLA module's: the buffers it runs the program on

    @property
    def chunks(self) -> int:
        return len(self.goal_groups[0])

    def program_text(self) -> str | None:
        return str(self.program) if self.program else None

    def on_buffers(self) -> str:
        """``; the same program on N buffers`` for an XLA module that runs it on several, else nothing."""
        return f"; the same program on {self.buffers} buffers" if self.buffers > 1 else ""

    @property
    def labels(self) -> list[str] | None:
        """The DSL text of each step (None for a plan given as replica groups)."""
        return [str(i) for i in self.program.instructions] if self.program else None


def plan_request(args: argparse.Namespace) -> PlanRequest:
    """The request (one ``--matrix``) and the plan of ``--program``/``--plan`` of check and verify."""
    _, placement, reduce, h = one_hierarchy(args)
    plan, program, buffers = plan_from_args(args, h, placement.num_devices)
    goal_groups = placement.reduction_groups(reduce)
    return PlanRequest(placement, reduce, goal_groups, [(s.collective, s.groups) for s in plan], program, buffers)
