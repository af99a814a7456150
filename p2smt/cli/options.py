"""Shared option groups, declared once, and their reading into typed values (Request, EngineConfig)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from p2smt.errors import P2Error
from p2smt.model.limits import MAX_DEVICES, MAX_SECONDS
from p2smt.smt.budget import DEFAULT_PROOF_BUDGET

MAX_MATRIX_CHARS = 10_000
MAX_NAME_CHARS = 4096

ALGO_HELP = "ring | tree | nvls | auto"
BYTES_HELP = "bytes per device (default: P²'s 2^29 × nodes float32)"


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports usage errors as one line with exit code 2."""

    def error(self, message: str):  # type: ignore[override]
        raise P2Error(f"{self.prog}: {message}")

    def parse_args(self, args=None, namespace=None):  # type: ignore[override]
        """As argparse, but arguments no parser knows are reported under the sub-command that got them."""
        given = list(sys.argv[1:] if args is None else args)
        parsed, extra = self.parse_known_args(given, namespace)
        if extra:
            command = getattr(parsed, "command", None)
            # blamed on the sub-command only when the first unknown argument comes after its name
            after = command in given and extra[0] in given[given.index(command) + 1:]
            where = f"{self.prog} {command}" if after else self.prog
            raise P2Error(f"{where}: unrecognized arguments: {' '.join(extra)}")
        self._refuse_repeats(given, getattr(parsed, "command", None))
        return parsed

    def _refuse_repeats(self, given: list[str], command: str | None) -> None:
        """A flag that takes one value, given twice, is refused (argparse would keep the last silently)."""
        parsers = [self]
        for action in self._actions:
            if isinstance(action, argparse._SubParsersAction) and command in action.choices:
                parsers.append(action.choices[command])
        for parser in parsers:
            flags = parser._option_string_actions
            named = [flags[f] for t in given if (f := _flag_of(t, flags)) is not None]
            for action in parser._actions:
                # a switch (store_true) given twice says the same thing twice; a value given twice is ambiguous
                if type(action) is argparse._StoreAction and (n := sum(a is action for a in named)) > 1:
                    raise P2Error(f"{action.option_strings[-1]} given {n} times; give it once")


def _flag_of(token: str, flags: dict) -> str | None:
    """The option a command-line token names, also as argparse's unique abbreviation (``--max`` for
    ``--max-len``); None for a value."""
    name = token.split("=", 1)[0]
    if name in flags or not name.startswith("--"):
        return name if name in flags else None
    found = [f for f in flags if f.startswith(name)]
    return found[0] if len(found) == 1 else None


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").strip("[]()").split(",") if v != "")
    except ValueError:
        raise P2Error(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise P2Error(f"expected comma-separated integers, got {text!r}")
    return values


def name_ints(items: list[str], flag: str = "--level", value: str = "SIZE") -> dict[str, int]:
    """``NAME=INT`` options (``--level su=2``, ``--max-k z3=64``) as a dict."""
    out = {}
    for item in items:
        name, _, size = item.partition("=")
        try:
            number = int(size)
        except ValueError:
            raise P2Error(f"{flag} expects NAME={value}, got {item!r}") from None
        if name.strip() in out:
            raise P2Error(f"{flag} {name.strip()} is given twice")
        out[name.strip()] = number
    return out


def file_arg(text: str) -> str:
    """A file or folder name option (``--out``, ``--png``): an empty one is refused by every command alike."""
    if not text:
        raise argparse.ArgumentTypeError("expected a file name, got ''")
    return text


def picture_path(path: str, flag: str) -> Path:
    """A picture's output: a name ending in ``.png``, or a device or FIFO to write the PNG through."""
    from p2smt.cli.output import png_path
    from p2smt.model.paths import written_through

    return Path(path) if written_through(path) else png_path(path, flag)


def seconds(text: str) -> float:
    """A positive, finite number of seconds up to ``MAX_SECONDS`` (``--timeout``, ``--deadline``)."""
    return _positive(text, "seconds", MAX_SECONDS)


def gibibytes(text: str) -> float:
    """A positive, finite number of GiB (``--memory``)."""
    from p2smt.smt.memory import MOST_GIB

    return _positive(text, "GiB", MOST_GIB)


def byte_count(text: str) -> float:
    """A positive, finite number of bytes up to a profile's largest message (``--bytes``)."""
    from p2smt.model.profile import MAX_BYTES  # one bound for a flag and a profile's bytes_per_device

    return _positive(text, "bytes", MAX_BYTES)


def refuse_given(flags: Sequence[tuple[str, object]], why: str) -> None:
    """Refuses the ``(flag, value)`` pairs given (a truthy value) that the chosen mode would ignore."""
    given = [flag for flag, value in flags if value]
    if given:
        raise P2Error(f"{', '.join(given)}: {why}")


def count(text: str) -> int:
    """A whole number of at least 1 (``--repeats``, ``--workers``, ``--repeat``, ``--max-len``)."""
    return _whole(text, 1)


def shown(text: str) -> int:
    """A whole number of at least 0 (``--show``: programs shown per matrix)."""
    return _whole(text, 0)


def _whole(text: str, least: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text[:40]!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least {least}, got {text[:40]!r}")
    return value


def _positive(text: str, unit: str, most: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of {unit}, got {text[:40]!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of {unit}, got {text[:40]!r}")
    if value > most:
        raise argparse.ArgumentTypeError(f"at most {most:g} {unit}, got {text[:40]!r}")
    return value


# ---------------------------------------------------------------- option groups


def add_system(p: argparse.ArgumentParser) -> None:
    p.add_argument("--system", required=True, help="shipped system name or path to a YAML file")
    p.add_argument("--nodes", type=int, help="re-instantiate the system with N nodes")
    p.add_argument("--level", action="append", default=[], metavar="NAME=SIZE",
                   help="resize a level, e.g. --level su=2 (repeatable)")


def add_request(p: argparse.ArgumentParser, matrix_required: bool = False) -> None:
    """The request options; ``matrix_required``: the command works on one placement, ``--matrix`` or the only
    placement of ``--axes`` (``request_of`` refuses axes with several, counted)."""
    add_system(p)
    p.add_argument("--axes", required=True, help="parallelism axes, e.g. 4,16")
    p.add_argument("--reduce", required=True, help="reduction axes (indices), e.g. 0 or 0,2")
    p.add_argument("--matrix", help="one parallelism matrix, e.g. '[[1,4],[4,4]]'"
                   + (" (default: the only placement of --axes, if there is one)" if matrix_required else ""))
    if matrix_required:
        p.set_defaults(one_placement=p.prog.rpartition(" ")[2])
    p.add_argument("--hierarchy", default="d", choices=["a", "b", "c", "d"],
                   help="synthesis hierarchy (docs/semantics.md)")
    p.add_argument(
        "--master-scope",
        default="per-ancestor",
        choices=["per-ancestor", "global"],
        help="reading of Master(e'): one group per e' node (default) or only the first",
    )


def add_plan_input(p: argparse.ArgumentParser, hlo: bool = False) -> None:
    p.add_argument("--program", help="DSL text or @FILE")
    p.add_argument("--plan", help="JSON file: [{collective, replica_groups}, …] on physical device ids")
    if hlo:
        p.add_argument("--hlo", help="HLO text (compile().as_text()) or StableHLO (lower().as_text()) module")
        p.add_argument("--device-order", help="JSON mesh device order for --hlo (placements --export jax-mesh "
                                              "--json, or a list); XLA id i is system device order[i]")


def add_search(p: argparse.ArgumentParser, grid: bool = False, engine: str = "certified") -> None:
    """The engine options (``engine``: the default). ``grid``: a sweep's, where ``--engine``, ``--max-len``
    and ``--proof-budget`` replace a grid file's settings (default: the grid's) and the per-request options
    (``--proposer``, ``--jobs``, ``--inclusion-pairs``) are not offered, a grid file having no place for them."""
    grids = "the grid's"
    p.add_argument("--engine", default=None if grid else engine,
                   help=f"default {grids + ' (certified unless it names another)' if grid else engine}. "
                        "certified: a proposer's programs proved valid and complete by Z3 | "
                        "auto: the fastest exact explicit engine (pieces, re-checked) | "
                        "enumerative | pieces (compressed state, up to 4,096 devices) | z3 | z3-cegis | symmetric")
    p.add_argument("--max-len", type=int, default=None if grid else 5,
                   help=f"longest program (default {grids if grid else 5})")
    p.add_argument("--proof-budget", type=int, default=None if grid else DEFAULT_PROOF_BUDGET, metavar="M",
                   help="certified engine: millions of Z3 resource units each placement's proof may spend (default "
                        f"{grids + ', else ' if grid else ''}{DEFAULT_PROOF_BUDGET}, about 35-45 s of Z3 "
                        "on a 2-core EPYC; 0: no limit). The same bound on every machine; past it the result says the "
                        "programs are not certified, and why")
    p.add_argument("--proof-store", metavar="DIR",
                   help="certified engine: reuse the proofs in DIR of problems proved before (same problem, "
                        "length, Z3 side and Z3 version) and add new ones"
                        + (" (default: a store for this run only, so requests share their problems' proofs)"
                           if grid else ""))
    if grid:
        return
    p.add_argument("--proposer", help="certified engine's proposer: enumerative | pieces (default: pieces)")
    p.add_argument("--jobs", type=int, default=1, metavar="N",
                   help="certified engine: Z3's proofs on N threads (0: one per core; default 1)")
    p.add_argument("--inclusion-pairs", type=int, metavar="N",
                   help="symmetric engine: prove completeness at the real size exploring at most N pairs of states "
                        "(any number of levels; 0: no proof). Default: the proof runs with 2 non-trivial levels up to "
                        "16,384 devices and 3 up to 4,096, at most 5,000 pairs")


def add_allow_noop(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-noop", action="store_true", help="allow steps in which a group changes nothing")


def add_algo(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", default="ring", help=ALGO_HELP)


def add_cost(p: argparse.ArgumentParser) -> None:
    """``--algo`` and ``--bytes`` (per device) of the commands that rank programs."""
    add_algo(p)
    p.add_argument("--bytes", type=byte_count, help=BYTES_HELP)


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")


# ---------------------------------------------------------------- reading the options


def system_of(args: argparse.Namespace, max_devices: int = MAX_DEVICES):
    """The system of ``--system --nodes --level``, refused above ``max_devices`` devices."""
    from p2smt.model.system import load_system

    if len(args.system) > MAX_NAME_CHARS:
        raise P2Error(f"--system {args.system!r} is not a system name or path (longer than {MAX_NAME_CHARS})")
    if Path(args.system).is_dir():
        raise P2Error(f"--system {args.system!r} is a directory, not a system YAML file")
    return within_size(load_system(args.system, args.nodes, name_ints(args.level)), max_devices)


def within_size(system, max_devices: int = MAX_DEVICES):
    """``system`` itself, or a one-line refusal when it has more than ``max_devices`` devices."""
    if system.num_devices > max_devices:
        raise P2Error(f"{system.name} with {system.num_devices} devices is larger than this command handles "
                      f"({max_devices}); lower --nodes or --level")
    return system


def matrix_of(text: str | None):
    """``--matrix`` parsed, with one-line refusals of huge numbers and deep nesting."""
    from p2smt.model.placement import parse_matrix

    if not text:
        return None
    if len(text) > MAX_MATRIX_CHARS:
        raise P2Error(f"--matrix is {len(text)} characters long (at most {MAX_MATRIX_CHARS})")
    try:
        return parse_matrix(text)
    except (ValueError, RecursionError):
        raise P2Error("--matrix: not a list of lists of small integers") from None


def request_of(args: argparse.Namespace):
    """The typed request of the shared request options (``--system … --master-scope``)."""
    from p2smt.cli.goals import goal_of
    from p2smt.model.goal import ALLREDUCE
    from p2smt.model.request import Request

    system_of(args)
    reduce = int_list(args.reduce)
    request = Request(
        args.system, int_list(args.axes), reduce,
        matrix=matrix_of(args.matrix),
        nodes=args.nodes, levels=tuple(name_ints(args.level).items()),
        hierarchy=args.hierarchy, master_scope=args.master_scope,
        require_progress=not getattr(args, "allow_noop", False),
        goal=goal_of(args, reduce) if hasattr(args, "goal") else ALLREDUCE,  # commands with --goal
    )
    if getattr(args, "one_placement", None):  # a command on one placement: --matrix, or the only one
        from p2smt.api import one_placement

        return one_placement(request, args.one_placement)
    return request


def one_hierarchy(args: argparse.Namespace):
    """(system, placement, reduction axes, synthesis hierarchy) of a request with one ``--matrix``."""
    from p2smt.model.hierarchy import synthesis_hierarchy

    req = request_of(args)
    system = req.load_system()
    (placement,) = req.placements(system)
    h = synthesis_hierarchy(placement, req.reduce, system.level_names, req.hierarchy, req.master_scope)
    return system, placement, req.reduce, h


def json_object_option(text: str | None, flag: str) -> dict[str, Any] | None:
    """A JSON object given on the command line (``--encoding-options``), or None."""
    if not text:
        return None
    try:
        opts = json.loads(text)
    except json.JSONDecodeError as err:
        raise P2Error(f"{flag} is not JSON: {err.msg}") from None
    if not isinstance(opts, dict):
        raise P2Error(f"{flag} must be a JSON object")
    return opts


def timeout_ms(args: argparse.Namespace) -> int | None:
    """``--timeout`` seconds as the engines' milliseconds (None: no limit)."""
    timeout = getattr(args, "timeout", None)
    return None if timeout is None else max(1, int(timeout * 1000))  # 0.0001 s is 1 ms, not "no limit"


EXPLICIT_ENGINES = ("auto", "pieces", "enumerative", "symmetric")
"""Engines that call no solver: ``--timeout`` (per solver call) is refused with them, not ignored."""


def engine_config(args: argparse.Namespace):
    """The typed engine configuration of ``--engine --max-len --timeout --encoding … --prune``."""
    from p2smt.cli.output import folder_path
    from p2smt.synth.config import EngineConfig

    for flag in ("--emit-smt2", "--certificate", "--proof-store"):
        if folder := getattr(args, flag[2:].replace("-", "_"), None):
            folder_path(folder, flag)  # as every output: a missing parent folder is refused, not made
    engine = getattr(args, "engine", "certified")
    if getattr(args, "timeout", None) is not None and engine in EXPLICIT_ENGINES:
        raise P2Error(f"--timeout: only with --engine certified, z3 or z3-cegis (it bounds each solver call; the "
                      f"{engine} engine calls none; --deadline bounds a whole run)")
    return EngineConfig(
        engine=engine,
        max_len=args.max_len,
        timeout_ms=timeout_ms(args),
        encoding=getattr(args, "encoding", None),
        encoding_options=json_object_option(getattr(args, "encoding_options", None), "--encoding-options"),
        emit_smt2=getattr(args, "emit_smt2", None),
        prune=getattr(args, "prune", "none"),
        proposer=getattr(args, "proposer", None),
        proof_budget=getattr(args, "proof_budget", DEFAULT_PROOF_BUDGET),
        proof_store=getattr(args, "proof_store", None),
        certificate=getattr(args, "certificate", None),
        jobs=getattr(args, "jobs", 1),
        inclusion_pairs=getattr(args, "inclusion_pairs", None),
        memory_gib=getattr(args, "memory", None),
    )
