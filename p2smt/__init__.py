"""p2smt: synthesize, prove, rank and lower reduction programs for parallelism placements on GPU hierarchies.

The names below load their layer on first use, so ``import p2smt`` stays cheap.

>>> import p2smt
>>> p2smt.Request("a100-4x16", axes=(4, 16), reduce=(1,)).axes
(4, 16)
"""

from __future__ import annotations

import sys
import types
from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "Request": "p2smt.model.request",
    "SolveStatus": "p2smt.model.status",
    "ProofStatus": "p2smt.model.status",
    "HierarchyKind": "p2smt.model.request",
    "MasterScope": "p2smt.model.request",
    "Engine": "p2smt.synth.config",
    "EngineConfig": "p2smt.synth.config",
    "Goal": "p2smt.model.goal",
    "P2Error": "p2smt.errors",
    "load_system": "p2smt.api",
    "placements": "p2smt.api",
    "verify": "p2smt.api",
    "lower": "p2smt.api",
    "run": "p2smt.api",
    "check": "p2smt.api",
    "cost": "p2smt.api",
    "groups": "p2smt.api",
    "topologies": "p2smt.api",
    "audit": "p2smt.api",
    "audit_text": "p2smt.api",
    "recheck": "p2smt.api",
    "synthesize": "p2smt.synth.driver",
    "rank": "p2smt.cost.rank",
    "best": "p2smt.cost.best",
    "plan": "p2smt.cost.plan",
    "load_profile": "p2smt.model.profile",
}

__all__ = [
    "Engine",
    "EngineConfig",
    "Goal",
    "HierarchyKind",
    "MasterScope",
    "P2Error",
    "ProofStatus",
    "Request",
    "SolveStatus",
    "__version__",
    "audit",
    "audit_text",
    "best",
    "check",
    "cost",
    "groups",
    "load_profile",
    "load_system",
    "lower",
    "placements",
    "plan",
    "rank",
    "recheck",
    "run",
    "synthesize",
    "topologies",
    "verify",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'p2smt' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__


class _CallableModule(types.ModuleType):
    """A sub-package named like an API function (``p2smt.lower``, ``p2smt.cost``): calling it calls the
    function, so ``p2smt.lower(...)`` keeps working once the sub-package is imported, and imports through
    the package (``import p2smt.cost.rank as r``) keep reaching the sub-package."""

    def _function(self) -> Any:
        name = self.__name__.rpartition(".")[2]
        return getattr(import_module(_EXPORTS[name]), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function()(*args, **kwargs)

    @property
    def __signature__(self) -> Any:
        """The function's signature, so ``inspect.signature(p2smt.lower)`` shows its real parameters."""
        import inspect

        return inspect.signature(self._function())


class _Package(types.ModuleType):
    """Importing a sub-package sets the package attribute of its name; for a name that is also an API
    function the sub-package becomes callable as that function (``_CallableModule``)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _EXPORTS and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
