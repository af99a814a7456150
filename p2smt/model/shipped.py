"""The communication profiles shipped with p2smt, by name, found without importing their model (the CLI's
``--help`` lists them at start-up)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["profiles_dir", "shipped_profiles"]


def profiles_dir() -> Path:
    return Path(__file__).resolve().parent / "profiles"


def shipped_profiles() -> list[str]:
    return sorted(p.stem for p in profiles_dir().glob("*.yaml"))
