"""Ranking the plan table: cheapest first, the cost-latency Pareto front, the candidates that never met the SLOs.

``cheapest_first`` keeps the plan table's index, so a ranked row still says which evaluated point
(and so which ``Point``: ``capacity_plan`` keeps ``points[i]`` for ``table.loc[i]``) it is; the
published frames (``pareto_front``, ``infeasible_candidates``) are renumbered from 0."""

from __future__ import annotations

import math

import pandas as pd


def cheapest_first(table: pd.DataFrame) -> pd.DataFrame:
    """The points that meet the SLOs, by price then p99 TTFT (ties keep the order they were evaluated in)."""
    return table[table["feasible"]].sort_values(["usd_per_hour", "p99_ttft_ms"], kind="stable")


def pareto_front(df: pd.DataFrame, cost: str, latency: str) -> pd.DataFrame:
    """Rows no other row beats on both cost and latency (lower is better for both)."""
    d = df.dropna(subset=[cost, latency]).sort_values([cost, latency], kind="stable")
    keep, best = [], math.inf
    for idx, v in zip(d.index, d[latency], strict=True):
        if v < best:
            keep.append(idx)
            best = v
    return d.loc[keep].reset_index(drop=True)


def infeasible_candidates(table: pd.DataFrame, candidate: pd.Series | None = None) -> pd.DataFrame:
    """Per candidate that never met the SLOs: its last (largest) evaluated point and why.

    ``candidate`` says which candidate each row belongs to (any hashable id, on the table's index).
    Without it, a row's candidate is its ``config`` less the replica count: the only identity left in
    a table read back from ``plan.csv``."""
    if table.empty:
        return table
    key = table["config"].str.split(" ", n=1).str[1] if candidate is None else candidate
    bad = table[~key.isin(set(key[table["feasible"].astype(bool)]))]
    return bad[~key[bad.index].duplicated(keep="last")].reset_index(drop=True)
