"""Where a benchmark ran: CPU model, cores, memory, Python, z3, OS (printed beside every figure)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def _first_field(path: str, key: str) -> str | None:
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(key):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_info() -> dict[str, Any]:
    """The machine as a JSON-able mapping (memory_gib is None where /proc/meminfo is missing)."""
    import z3

    total = _first_field("/proc/meminfo", "MemTotal")
    return {
        "cpu": _first_field("/proc/cpuinfo", "model name") or platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "memory_gib": round(int(total.split()[0]) / 2**20) if total else None,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "z3": z3.get_version_string(),
        "platform": f"{platform.system()} {platform.release()}",
    }


def describe_machine(info: dict[str, Any] | None = None) -> str:
    """One line: "CPU, N cores, M GiB RAM; Python X (impl), z3 Y, OS"."""
    m = info or machine_info()
    mem = f", {m['memory_gib']} GiB RAM" if m["memory_gib"] else ""
    return (f"{m['cpu']}, {m['cores']} cores{mem}; Python {m['python']} ({m['implementation']}), "
            f"z3 {m['z3']}, {m['platform']}")
