"""Every notebook in notebooks/ runs top to bottom (nbclient), draws its key figure and ends with a
computed conclusion; the committed notebooks are the ones notebooks/_make_notebooks.py writes."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from script_module import load_script

HERE = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(HERE.glob("[0-9]*.ipynb"))


def _pngs(nb: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in o.get("data", {})
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") in ("display_data", "execute_result")
    )


def test_the_notebooks_exist():
    names = [p.stem for p in NOTEBOOKS]
    for stem in (
        "01_quickstart",
        "02_chunked_prefill_what_if",
        "03_disaggregation_and_heterogeneous_pools",
        "04_hardware_what_if",
        "05_capacity_plan_azure_trace",
        "06_moe_parallelism",
        "07_agentic_autoscaling",
    ):
        assert stem in names


def test_committed_notebooks_are_the_generated_ones_with_outputs():
    """The cells match _make_notebooks.py (edit it, then `python notebooks/_make_notebooks.py --execute`)
    and the committed copies keep their executed outputs, figures included."""
    make = load_script("_make_notebooks", HERE / "_make_notebooks.py")
    assert sorted(make.NOTEBOOKS) == [p.stem for p in NOTEBOOKS]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        want = [(kind == "md", src) for kind, src in make.NOTEBOOKS[path.stem]]
        have = [(c.cell_type == "markdown", c.source) for c in nb.cells]
        assert have == want, f"{path.name} differs from notebooks/_make_notebooks.py: regenerate it"
        assert _pngs(nb) >= 1, f"{path.name}: committed without its executed figure"


# Every notebook runs in `make test` (10-30 s each; pytest-xdist spreads them over both cores).
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_draws_and_concludes(path):
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    assert not any(o.get("output_type") == "error" for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert _pngs(nb) >= 1, f"{path.name}: no figure (image/png output); draw the key figure with show(fig)"
    last = nb.cells[-1]
    text = "".join(o.get("text", "") for o in last.outputs if o.get("output_type") == "stream")
    assert len(text.strip()) > 40, f"{path.name}: the last cell should print its conclusion"
