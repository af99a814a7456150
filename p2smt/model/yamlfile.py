"""Reading input files with one-line errors that name the file (and line:column for YAML syntax)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from p2smt.errors import P2Error
from p2smt.model.paths import read_bytes_at_most


class _UniqueKeys(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key (PyYAML keeps the last one silently)."""


def _mapping(loader: _UniqueKeys, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor``: construct_mapping merges it
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            repeated = key in seen
        except TypeError:  # an unhashable key: construct_mapping's own error names it
            continue
        if repeated:
            raise yaml.constructor.ConstructorError(None, None, f"the key {key!r} appears twice in one mapping",
                                                    key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeys.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


MAX_YAML_BYTES = 1 << 20
"""Largest system, profile, grid or configuration file read (the shipped ones are a few KB): a bigger one
is refused before PyYAML builds it (a 5 MB list takes it about a minute and 1.7 GB)."""


def read_text_at_most(path: Path, limit: int, what: str) -> str:
    """``path`` as UTF-8 text of at most ``limit`` bytes; a missing file, one that is not a regular file (a
    FIFO, ``/dev/zero``: refused, not read forever), a larger or non-UTF-8 file raises P2Error naming it as a
    ``what``. An OSError while reading is the caller's to word."""
    data = read_bytes_at_most(path, limit, what)
    if len(data) > limit:
        raise P2Error(f"{path}: larger than {limit >> 20} MB; not a {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise P2Error(f"{path}: not UTF-8 text (byte {err.start})") from None


def read_yaml(path: Path, what: str) -> Any:
    """Parse ``path`` as UTF-8 YAML of at most ``MAX_YAML_BYTES``; malformed, unreadable, too large or
    non-UTF-8 files, and mappings that repeat a key, raise P2Error."""
    try:
        return yaml.load(read_text_at_most(path, MAX_YAML_BYTES, what), Loader=_UniqueKeys)  # a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise P2Error(f"{path}{where}: malformed YAML: {problem}") from None
    except OSError as err:
        raise P2Error(f"cannot read {what} {path}: {err.strerror}") from None
