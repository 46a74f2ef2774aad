"""Build hook: compile the simulator's hot modules with mypyc (``llmsim/native.py`` lists them
and explains the pure-Python fallback). Everything else about the package is in pyproject.toml.

``LLMSIM_PURE_PYTHON=1 pip install .`` skips the compilation (no C compiler needed)."""

import importlib.util
import os

from setuptools import setup


def _compiled_modules() -> list[str]:
    spec = importlib.util.spec_from_file_location("llmsim_native", os.path.join("llmsim", "native.py"))
    native = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(native)
    return [name.replace(".", "/") + ".py" for name in native.COMPILED]


def _ext_modules() -> list:
    if os.environ.get("LLMSIM_PURE_PYTHON", "") not in ("", "0"):
        return []
    from mypyc.build import mypycify

    # --follow-imports=silent: modules outside the list are read for their types, not checked
    return mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", *_compiled_modules()],
        opt_level="3",
        group_name="llmsim",
    )


setup(ext_modules=_ext_modules())
