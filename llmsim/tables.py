"""Plain-text tables for the terminal (tabulate), one number format per column."""

from __future__ import annotations

import math


def fmt(v: object, digits: int = 3) -> str:
    """One number alone (a summary line): ``digits`` significant figures, thousands separated."""
    if v is None:
        return "-"
    if isinstance(v, float):
        if v != v:
            return "-"
        if v == 0:
            return "0"
        if abs(v) >= 1e5 or abs(v) < 1e-3:
            return f"{v:.{digits}g}"
        return f"{v:,.{digits}f}" if abs(v) < 10 else f"{v:,.{max(digits - 2, 0)}f}"
    return str(v)


def column_decimals(values: list[object], digits: int = 3) -> int:
    """Decimals that give the column's smallest non-zero float ``digits`` significant figures
    (at most 3, none for whole numbers of 100 and more), so that a column reads as one scale."""
    floats = [abs(v) for v in values if isinstance(v, float) and math.isfinite(v) and v != 0]
    if not floats:
        return 0
    return max(0, min(3, digits - 1 - math.floor(math.log10(min(floats)))))


def cells(rows: list[list[object]]) -> list[list[str]]:
    """Every cell as text, floats in a column sharing their decimals (the terminal's and the
    report's one number format)."""
    cols = list(zip(*rows, strict=True)) if rows else []
    decimals = [column_decimals(list(c)) for c in cols]
    return [[_cell(v, decimals[i]) for i, v in enumerate(r)] for r in rows]


def _cell(v: object, decimals: int) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        if v != 0 and (abs(v) >= 1e9 or abs(v) < 1e-3):
            return f"{v:.3g}"
        return f"{v:,.{decimals}f}"
    if isinstance(v, bool) or v is None:
        return "-" if v is None else str(v)
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def table(rows: list[list[object]], headers: list[str], align: str | None = None) -> str:
    """``rows`` under ``headers``; floats in a column share their decimals; the first column
    left-aligned and the others right-aligned unless ``align`` ("l"/"r" per column) says."""
    from tabulate import tabulate

    align = align or "l" + "r" * (len(headers) - 1)
    colalign = ["left" if a == "l" else "right" for a in align]
    return tabulate(cells(rows), headers=headers, tablefmt="simple", colalign=colalign, disable_numparse=True)
