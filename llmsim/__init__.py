"""llmsim: a discrete-event simulator of LLM inference serving on real hardware."""

from llmsim import native

native.install()  # compiled hot modules, or their sources if those changed since (llmsim/native.py)

from llmsim.api import run  # noqa: E402
from llmsim.results import Results  # noqa: E402
from llmsim.scenario import Scenario, load_scenario  # noqa: E402

__all__ = ["Results", "Scenario", "load_scenario", "run"]


def __getattr__(name: str) -> str:
    """``llmsim.__version__``, looked up when asked (pyproject.toml is its one source: cli.version)."""
    if name == "__version__":
        from llmsim.cli import version

        return version()
    raise AttributeError(f"module 'llmsim' has no attribute {name!r}")
