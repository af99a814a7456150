"""Discovery of encoding plug-ins: one ``*.py`` file per variant, loaded by path.

Folders searched, in order: the shipped ``encodings/`` (``p2smt/data/encodings`` in a wheel,
``./encodings`` in a checkout), then ``extra_dirs``, then ``P2SMT_ENCODINGS_PATH`` (``os.pathsep``
separated). ``foo_bar.py`` is encoding ``foo-bar``; it must define a module-level ``ENCODING`` spec
whose name matches. ``encodings`` is not imported as a package (the standard library owns that name):
files are loaded under private module names, fresh for every call, so nothing is cached globally.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from p2smt.errors import P2Error
from p2smt.model.system import _packaged_dir
from p2smt.smt.base import EncodingSpec

SHARDED_ENCODINGS = ("bool-matrix", "bitvec", "values")
"""The encodings that state the sharded goals of docs/semantics.md §6 (the others refuse them)."""

ENV_VAR = "P2SMT_ENCODINGS_PATH"


def encoding_dirs(extra_dirs: Iterable[str | Path] = ()) -> list[Path]:
    """The folders searched for encodings, shipped one first; missing extra folders are errors."""
    out: list[Path] = []
    shipped = _packaged_dir("encodings")
    if shipped is not None:
        out.append(shipped)
    for raw in (*extra_dirs, *[p for p in os.environ.get(ENV_VAR, "").split(os.pathsep) if p]):
        path = Path(raw)
        if not path.is_dir():
            raise P2Error(f"encodings folder {str(path)!r} {'is not a folder' if path.exists() else 'does not exist'}")
        if path.resolve() not in [p.resolve() for p in out]:
            out.append(path)
    return out


def _name_of(path: Path) -> str:
    return path.stem.replace("_", "-")


def _files(extra_dirs: Iterable[str | Path]) -> dict[str, Path]:
    """Encoding name -> file; a name defined in two folders is an error (no silent shadowing)."""
    found: dict[str, Path] = {}
    for folder in encoding_dirs(extra_dirs):
        for path in sorted(folder.glob("*.py")):
            if path.name.startswith("_"):
                continue
            name = _name_of(path)
            if name in found and found[name].resolve() != path.resolve():
                raise P2Error(f"encoding {name!r} is defined twice: {found[name]} and {path}")
            found[name] = path
    return found


def _load(path: Path) -> EncodingSpec:
    """The file's spec; re-executed only when the file changes (loading costs ≈ 13 ms per problem)."""
    stat = path.stat()
    return _load_file(str(path), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _load_file(name: str, mtime_ns: int, size: int) -> EncodingSpec:
    path = Path(name)
    module_name = f"p2smt_encodings.{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise P2Error(f"cannot load encoding file {path}")
    module = importlib.util.module_from_spec(spec)
    previous = sys.modules.get(module_name)
    sys.modules[module_name] = module  # dataclasses and pydantic resolve annotations through sys.modules
    try:
        spec.loader.exec_module(module)
    except P2Error:
        raise
    except Exception as err:  # noqa: BLE001 - a broken plug-in is bad input, not an internal error
        raise P2Error(f"encoding file {path} failed to load: {type(err).__name__}: {err}") from None
    finally:
        if previous is None:
            sys.modules.pop(module_name, None)
        else:
            sys.modules[module_name] = previous
    enc = getattr(module, "ENCODING", None)
    if not isinstance(enc, EncodingSpec):
        raise P2Error(f"encoding file {path} defines no ENCODING spec (p2smt.smt.base.EncodingSpec)")
    if enc.name != _name_of(path):
        raise P2Error(f"encoding file {path} declares name {enc.name!r}; expected {_name_of(path)!r}")
    return replace(enc, source=str(path))


def available_encodings(extra_dirs: Iterable[str | Path] = ()) -> list[EncodingSpec]:
    """Every discoverable encoding, sorted by name."""
    files = _files(extra_dirs)
    return [_load(files[name]) for name in sorted(files)]


def load_encoding(name: str, extra_dirs: Iterable[str | Path] = ()) -> EncodingSpec:
    """The encoding called ``name``; an unknown name is a P2Error listing the known ones."""
    files = _files(extra_dirs)
    if name not in files:
        known = ", ".join(sorted(files)) or "none"
        raise P2Error(f"unknown encoding {name!r}; available encodings: {known}")
    return _load(files[name])
