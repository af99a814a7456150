"""Everything that reaches generated source passes here: identifiers, labels, text and integers.

Nothing from user input is interpolated as code: names must be plain identifiers, DSL labels and
descriptions come from small character sets (one line, no quotes), numbers are written as repr(int).
"""

from __future__ import annotations

import keyword
import re
from collections.abc import Sequence
from numbers import Integral

from p2smt.errors import P2Error

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_LABEL = re.compile(r"[A-Za-z0-9_(), ;]{1,400}")
_TEXT = re.compile(r"[A-Za-z0-9_ ,.;:()\[\]+\-=/>]{0,200}")


def check_identifier(name: object, what: str) -> str:
    """A name that reaches generated code: an ASCII Python identifier, not a keyword."""
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or keyword.iskeyword(name):
        raise P2Error(f"{what} {name!r} is not a plain identifier (letters, digits, _; at most 64)")
    return name


def check_label(text: object) -> str:
    """A DSL instruction text that goes into a comment: identifiers, parentheses, commas only."""
    if not isinstance(text, str) or not _LABEL.fullmatch(text):
        raise P2Error(f"step label {text!r} is not DSL text (identifiers, '(', ')', ',', ';', spaces)")
    return text


def check_text(text: object) -> str:
    """A descriptive line for a generated docstring: a small safe character set, one line."""
    if not isinstance(text, str) or not _TEXT.fullmatch(text):
        raise P2Error(f"description {text!r} has characters not allowed in generated code")
    return text


def as_int(value: object, what: str) -> int:
    """An integer that will be written into code via repr(int): no bools, floats or strings."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise P2Error(f"{what} must be an integer, got {value!r}")
    return int(value)


def py(value: object) -> str:
    """Source text of nested tuples of ints (the only data the generators interpolate)."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(py(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(as_int(value, "generated constant"))


def _wrapped(name: str, items: list[str], width: int) -> list[str]:
    """``NAME = (item, item, ...)`` on one line if it fits in ``width``, else one or more items per line."""
    check_identifier(name, "constant name")
    one = f"{name} = ({', '.join(items)}{',' if len(items) == 1 else ''})"
    if len(one) <= width:
        return [one]
    lines, cur = [f"{name} = ("], "   "
    for it in items:
        if len(cur) + len(it) + 2 > width and cur.strip():
            lines.append(cur.rstrip())
            cur = "   "
        cur += f" {it},"
    lines.append(cur.rstrip())
    lines.append(")")
    return lines


def wrap_groups(name: str, groups: Sequence[Sequence[int]], width: int = 100) -> list[str]:
    """``NAME = (...)`` over several lines, one or more groups per line, within ``width``."""
    return _wrapped(name, [py(tuple(g)) for g in groups], width)


def wrap_ints(name: str, values: Sequence[int], width: int = 100) -> list[str]:
    """``NAME = (1, 2, ...)`` wrapped within ``width``."""
    return _wrapped(name, [repr(as_int(v, "generated constant")) for v in values], width)
