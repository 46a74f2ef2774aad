"""Which of the simulator's hot modules run compiled, and the switch back to pure Python.

``setup.py`` compiles the modules listed here with mypyc: the same source, turned into a C
extension that runs the step loop ~2-3x faster (docs/performance.md). The ``.py`` files stay the
source of truth and run unchanged wherever the compiled ones cannot: Python imports a compiled
extension in preference to the ``.py`` beside it, so ``install()`` (called when ``llmsim`` is
imported) puts the sources first when

- ``LLMSIM_PURE_PYTHON=1`` is set (profiling the Python, debugging, comparing the two), or
- a source changed after it was compiled (an edit, a ``git checkout``): the extension would run
  the old code. A warning says so; ``make build`` (or ``pip install -e .``) compiles again.

All-or-nothing: compiled modules call each other's code directly in C, so mixing a compiled
``sim`` with a pure ``decodeset`` would run two different ``DecodeSet`` classes. This module uses
only the standard library: ``setup.py`` reads ``COMPILED`` from it before anything is installed.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import warnings
from pathlib import Path

# the simulation's inner loop: replicas, decode sets and runs, KV blocks, schedulers, step pricing
COMPILED = (
    "llmsim.request",
    "llmsim.kvcache",
    "llmsim.runs",
    "llmsim.fastpath",
    "llmsim.decodeset",
    "llmsim.gaps",
    "llmsim.steplog",
    "llmsim.stepcost",
    "llmsim.costmodel.comm",
    "llmsim.costmodel.fusedmoe",
    "llmsim.costmodel.gemm",
    "llmsim.costmodel.ops",
    "llmsim.costmodel.roofline",
    "llmsim.schedulers.plan",
    "llmsim.schedulers.base",
    "llmsim.schedulers.queue",
    "llmsim.schedulers.chunked",
    "llmsim.schedulers.traditional",
    "llmsim.schedulers.vllm",
    "llmsim.schedulers.trtllm",
    "llmsim.options",
    "llmsim.router",
    "llmsim.replica",
    "llmsim.pipeline",
    "llmsim.disagg",
    "llmsim.sim",
)
PURE_ENV = "LLMSIM_PURE_PYTHON"
_ROOT = Path(__file__).resolve().parent.parent  # the directory that holds the llmsim package
_SLACK_S = 2.0  # an install writes sources and extensions within moments of each other

mode = "pure Python"  # what install() chose: "compiled" or "pure Python (<why>)"


def source_path(name: str, root: Path = _ROOT) -> Path:
    return root.joinpath(*name.split(".")).with_suffix(".py")


def extension_path(name: str, root: Path = _ROOT) -> Path | None:
    """The compiled extension of module ``name``, if one was built."""
    src = source_path(name, root)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        ext = src.with_suffix(suffix)
        if ext.exists():
            return ext
    return None


def why_pure(root: Path = _ROOT) -> str | None:
    """Why this process must run the pure-Python modules, or None if the compiled ones are good."""
    if os.environ.get(PURE_ENV, "") not in ("", "0"):
        return f"{PURE_ENV} is set"
    exts = {name: extension_path(name, root) for name in COMPILED}
    if not all(exts.values()):
        return "not compiled" if not any(exts.values()) else "compiled modules missing"
    for name, ext in exts.items():
        src = source_path(name, root)
        if src.stat().st_mtime > ext.stat().st_mtime + _SLACK_S:  # type: ignore[union-attr]
            return f"{src.relative_to(root)} changed since it was compiled"
    return None


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Finds the compiled modules' ``.py`` files ahead of their extensions."""

    def find_spec(self, fullname, path, target=None):  # type: ignore[no-untyped-def]
        if fullname in COMPILED:
            return importlib.util.spec_from_file_location(fullname, source_path(fullname))
        return None


def install() -> str:
    """Choose compiled or pure Python for this process (before any compiled module is imported)."""
    global mode
    why = why_pure()
    if why is None:
        mode = "compiled"
        return mode
    if not any(isinstance(f, _SourceFirst) for f in sys.meta_path):
        sys.meta_path.insert(0, _SourceFirst())
    if "changed" in why or "missing" in why:
        warnings.warn(
            f"llmsim runs its pure-Python modules ({why}); `make build` compiles them again",
            stacklevel=3,
        )
    mode = f"pure Python ({why})"
    return mode
