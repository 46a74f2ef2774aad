"""One efficiency term fitted to measurements, and the tables that show it: the shared pieces of the benchmark scripts' fits
(forward_passes.py, layer_products.py, moe_kernels.py).

Each fit prices its rows with llmsim for a trial value of one profile term and keeps the value whose
prices have the least squared log error against the measurements (a ratio error, so a row off by
x2 weighs as one off by /2, whatever its size).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from llmsim.hardware import HardwareProfile, load_profile
from llmsim.tables import table


def with_efficiency(hw: HardwareProfile, term: str, value: float | None, source: str) -> HardwareProfile:
    """``hw`` with ``efficiency.<term>`` set to ``value`` (None: the term removed)."""
    data = hw.model_dump()
    if value is None:
        data["efficiency"].pop(term, None)
    else:
        data["efficiency"][term] = {"value": value, "source": source}
    return HardwareProfile.model_validate(data)


def least_log_error(price: Callable[[float], np.ndarray], measured: np.ndarray) -> float:
    """The value in [0.2, 1] whose prices ``price(value)`` have the least squared log error against
    ``measured``: 0.01 steps, then 0.001 around the best. A best value at either end of the range
    is returned as it is: read it as "the term alone cannot fit these rows"."""

    def loss(value: float) -> float:
        return float(np.sum(np.log(price(value) / measured) ** 2))

    best = min(np.linspace(0.2, 1.0, 81), key=loss)
    return round(float(min(np.linspace(max(0.2, best - 0.01), min(1.0, best + 0.01), 21), key=loss)), 3)


def priced(rows: pd.DataFrame, price_row: Callable, hw: HardwareProfile | None = None) -> np.ndarray:
    """Every row's ``price_row(row, profile)``: on ``hw``, or (None) on the row's own GPU's shipped profile."""
    profiles = {gpu: hw or load_profile(gpu) for gpu in rows["gpu"].unique()}
    return np.array([price_row(r, profiles[r.gpu]) for r in rows.itertuples()])


def fit_gemm_fraction(
    rows: pd.DataFrame, hw: HardwareProfile, price_row: Callable, measured: str, source: str
) -> float:
    """The ``gemm_max_fraction`` of ``hw`` whose prices of ``rows`` have the least squared log error
    against their ``measured`` column."""
    trial = lambda f: with_efficiency(hw, "gemm_max_fraction", f, source)  # noqa: E731
    return least_log_error(lambda f: priced(rows, price_row, trial(f)), rows[measured].to_numpy())


def fit_rows(rows: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """``gpu``'s rows marked ``fit``."""
    return rows[(rows["gpu"] == gpu) & (rows["split"] == "fit")]


def print_scored(
    rows: pd.DataFrame, measured: str, priced: np.ndarray, labels: list[str], groups: list[str], fmt: str
) -> None:
    """Every row's measured and priced milliseconds and their error, then MAPE, min and max per group."""
    err = priced / rows[measured].to_numpy() - 1
    cells = [
        [*(getattr(r, c) for c in labels), format(m, fmt), format(q, fmt), f"{e:+.1%}"]
        for r, m, q, e in zip(rows.itertuples(), rows[measured], priced, err, strict=True)
    ]
    print(table(cells, [*labels, "measured ms", "llmsim ms", "err"]))
    print()
    summary = [
        [*key, len(g), f"{g['err'].abs().mean():.1%}", f"{g['err'].min():+.1%}", f"{g['err'].max():+.1%}"]
        for key, g in rows.assign(err=err).groupby(groups, sort=False)
    ]
    print(table(summary, [*groups, "rows", "MAPE", "min", "max"]))
    print()


def print_fit(profile: str, rows: int, fitted: float, shipped: float) -> None:
    print(table([[profile, rows, fitted, shipped]], ["profile", "fit rows", "fitted gemm_max_fraction", "shipped"]))
