"""llmsim: a discrete-event simulator of LLM inference serving on real hardware."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmsim import native

native.install()  # compiled hot modules, or their sources if those changed since (llmsim/native.py)

if TYPE_CHECKING:
    from llmsim.api import run
    from llmsim.results import Results
    from llmsim.scenario import Scenario, load_scenario

__all__ = ["Results", "Scenario", "load_scenario", "run"]

# The public names, imported when first used: ``import llmsim`` (every command's start-up) then
# costs the standard library, not pandas, SimPy and the cost model (~0.4 s here); a command
# imports what it needs when it needs it (docs/performance.md, "Start-up").
_LAZY = {
    "run": "llmsim.api",
    "Results": "llmsim.results",
    "Scenario": "llmsim.scenario",
    "load_scenario": "llmsim.scenario",
}


def __getattr__(name: str) -> object:
    """The public names above, and ``llmsim.__version__`` (pyproject.toml is its one source: cli.version)."""
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # looked up once
        return value
    if name == "__version__":
        from llmsim.cli import version

        return version()
    raise AttributeError(f"module 'llmsim' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY])
