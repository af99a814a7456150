"""Shardy meshes as HLO text prints them in its header (``xla.sdy.meshes={mesh = #sdy.mesh<["a"=4, "b"=4]>}``,
``device_ids=[…]`` where the order is not the identity)."""

from __future__ import annotations

import re
from math import prod

from p2smt.errors import P2Error
from p2smt.frontend.reading import ModuleMesh

_MESH = re.compile(r'(?P<name>[\w.\-]+)\s*=\s*#sdy\.mesh<\s*\[(?P<axes>[^\]]*)\]'
                   r'(?:\s*,\s*device_ids\s*=\s*\[(?P<ids>[\d,\s]*)\])?\s*>')
_AXIS = re.compile(r'\\*"(?P<name>[^"\\]+)\\*"\s*=\s*(?P<size>\d+)')


def sdy_meshes(header: str, where: str) -> tuple[ModuleMesh, ...]:
    """Every Shardy mesh a header line declares, in order."""
    out = []
    for m in _MESH.finditer(header):
        axes = tuple((a.group("name"), int(a.group("size"))) for a in _AXIS.finditer(m.group("axes")))
        count = prod(size for _, size in axes)
        ids = tuple(int(v) for v in m.group("ids").split(",") if v.strip()) if m.group("ids") else tuple(range(count))
        if sorted(ids) != list(range(count)):
            raise P2Error(f"{where}: Shardy mesh {m.group('name')}: device_ids must list each of its {count} "
                          "devices once")
        out.append(ModuleMesh(m.group("name"), axes, ids))
    return tuple(out)
