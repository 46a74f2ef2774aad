"""llmsim: a discrete-event simulator of LLM inference serving on real hardware."""

from llmsim.api import run
from llmsim.results import Results
from llmsim.scenario import Scenario, load_scenario

__version__ = "0.1.0"
__all__ = ["Results", "Scenario", "load_scenario", "run"]
