"""The docs stay true to the code: every scenario key is documented."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from llmsim.scenario import Scenario

DOC = (Path(__file__).resolve().parents[1] / "docs" / "scenario.md").read_text()
INTERNAL = {"base_dir"}  # set by the loader, not by users


def _keys(model: type[BaseModel], prefix: str = ""):
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        yield path
        for t in (field.annotation, *typing.get_args(field.annotation)):
            for inner in (t, *typing.get_args(t)):
                if isinstance(inner, type) and issubclass(inner, BaseModel) and inner is not model:
                    yield from _keys(inner, path + ".")


def test_every_scenario_key_is_documented() -> None:
    missing = []
    for path in sorted(set(_keys(Scenario)) - INTERNAL):
        # a key is documented by its full path or, inside a documented sub-table, by its own name
        if f"`{path}`" not in DOC and f"`{path.rsplit('.', 1)[-1]}`" not in DOC:
            missing.append(path)
    assert not missing, f"docs/scenario.md lacks: {missing}"
