"""Plain-text tables for the terminal (no dependency, stable column widths)."""

from __future__ import annotations


def fmt(v: object, digits: int = 3) -> str:
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


def table(rows: list[list[object]], headers: list[str], align: str | None = None) -> str:
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    align = align or "l" + "r" * (len(headers) - 1)

    def line(values: list[str]) -> str:
        return "  ".join(v.ljust(w) if a == "l" else v.rjust(w) for v, w, a in zip(values, widths, align, strict=False))

    out = [line(headers), "  ".join("-" * w for w in widths)]
    out += [line(r) for r in cells]
    return "\n".join(out)
