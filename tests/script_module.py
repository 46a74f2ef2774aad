"""Import a script that is not a package module (benchmarks/*.py, notebooks/_make_notebooks.py)
under its own name, so tests can call its functions."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(name: str, path: Path) -> ModuleType:
    """The module of ``path``, registered in ``sys.modules`` as ``name`` (dataclasses look their
    module up there, and a script importing another by that name then gets this copy)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod
