"""Every notebook in notebooks/ runs top to bottom (nbclient) and ends with a computed conclusion."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9]*.ipynb"))


def test_the_five_notebooks_exist():
    names = [p.stem for p in NOTEBOOKS]
    for stem in (
        "01_quickstart",
        "02_chunked_prefill_what_if",
        "03_disaggregation_and_heterogeneous_pools",
        "04_hardware_what_if",
        "05_capacity_plan_azure_trace",
    ):
        assert stem in names


# Every notebook runs in `make test` (10-30 s each; pytest-xdist spreads them over both cores).
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_concludes(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    last = nb.cells[-1]
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert len(text.strip()) > 40, f"{path.name}: the last cell should print its conclusion"
    assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
