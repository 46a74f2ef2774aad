"""llmsim: a discrete-event simulator of LLM inference serving on real hardware."""

from llmsim import native

native.install()  # compiled hot modules, or their sources if those changed since (llmsim/native.py)

from llmsim.api import run  # noqa: E402
from llmsim.results import Results  # noqa: E402
from llmsim.scenario import Scenario, load_scenario  # noqa: E402

__version__ = "0.1.0"
__all__ = ["Results", "Scenario", "load_scenario", "run"]
