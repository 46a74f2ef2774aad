"""A workload is columns: arrival time, prompt and output tokens, and optional class / prefix hashes."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from llmsim.errors import UserError
from llmsim.workload.limits import MAX_ABS_ARRIVAL_S, MAX_ARRIVAL_S, MAX_TOKENS_PER_REQUEST

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class Workload:
    """Requests sorted by arrival. Arrays share one length; optional columns may be None."""

    arrival_s: np.ndarray  # float64, seconds from the start, non-decreasing
    prompt_tokens: np.ndarray  # int64 >= 1
    output_tokens: np.ndarray  # int64 >= 0 (0 = prefill only)
    klass: np.ndarray | None = None  # object array of class names (per-class SLOs)
    block_hashes: list[list[int]] | None = None  # per request, one id per prefix block
    # per request, the ids its answer continues block_hashes with, where a later prompt repeats that
    # answer (multi-turn chats): vLLM caches the generated tokens' full blocks too, so the next turn
    # hits them (kvcache.BlockManager.commit at the request's finish)
    output_hashes: list[list[int]] | None = None
    hash_block_tokens: int = 0  # tokens per hashed block (Mooncake: 512)
    source: str = "synthetic"
    meta: dict = field(default_factory=dict)
    # calls that wait on answers (closed-loop sessions, sub-calls; sim: feeder.Feeder): request i is
    # sent delay_s[i] after every request in after_idx[after_ptr[i]:after_ptr[i + 1]] is answered
    # (those come before it); its arrival_s is then only the earliest it can be sent (its session's start)
    after_ptr: np.ndarray | None = None  # int64, len + 1
    after_idx: np.ndarray | None = None  # int64
    delay_s: np.ndarray | None = None  # float64, seconds after the last answer waited for
    session: np.ndarray | None = None  # int64, the session a request belongs to
    lora: np.ndarray | None = None  # int64, the LoRA adapter a request runs with (-1: the base model)

    def __post_init__(self) -> None:
        self.arrival_s = np.asarray(self.arrival_s, dtype=np.float64)
        self.prompt_tokens = np.asarray(self.prompt_tokens, dtype=np.int64)
        self.output_tokens = np.asarray(self.output_tokens, dtype=np.int64)
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError("workload columns differ in length")

    def __len__(self) -> int:
        return len(self.arrival_s)

    def tokens_per_id(self, block_tokens: int) -> int:
        """Tokens each content id names: its own hash block (Mooncake: 512), else ``block_tokens``."""
        return self.hash_block_tokens or block_tokens

    def validate(self, origin: str) -> None:
        """Raise a UserError naming the first bad request (its index from 0, and the trace it was
        read from: a trace's own loader has named file rows already, so what reaches here is
        what slicing, scaling or generating made)."""
        if len(self) == 0:
            raise UserError(f"{origin}: the workload has no requests")
        bad = _first(~np.isfinite(self.arrival_s) | (self.arrival_s < 0))
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: arrival time must be a finite number >= 0, got {self.arrival_s[bad]}"
            )
        # traffic spread over more than ~32 years is a rate, speedup or unit off by orders of
        # magnitude; seconds past MAX_ABS_ARRIVAL_S keep too few digits for a step's duration (every
        # latency would round to 0). Absolute Unix times (~1.7e9 s) stay fine on both counts.
        bad = _first(self.arrival_s - self.arrival_s.min() > MAX_ARRIVAL_S)
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: arrival at {self.arrival_s[bad]:.3g} s is past {MAX_ARRIVAL_S:.0e} s "
                "(about 32 years) after the first; is a rate, speedup, interval or timestamp unit off?"
            )
        bad = _first(self.arrival_s > MAX_ABS_ARRIVAL_S)
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: arrival at {self.arrival_s[bad]:.3g} s is past {MAX_ABS_ARRIVAL_S:.0e} s, "
                "where seconds keep too few digits for a step's duration; give times from the trace's start"
            )
        bad = _first(np.diff(self.arrival_s) < 0)
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad + 1)}: arrival times are not sorted "
                f"({self.arrival_s[bad + 1]} after {self.arrival_s[bad]})"
            )
        if self.after_ptr is not None:
            self._validate_dependencies(origin)
        bad = _first(self.prompt_tokens < 1)
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: prompt tokens must be >= 1, got {self.prompt_tokens[bad]}"
            )
        bad = _first(self.output_tokens < 0)
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: output tokens must be >= 0, got {self.output_tokens[bad]}"
            )
        # a generated prompt can outgrow the bound its parts kept (conversations: the whole history)
        bad = _first(np.maximum(self.prompt_tokens, self.output_tokens) > MAX_TOKENS_PER_REQUEST)
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: {max(self.prompt_tokens[bad], self.output_tokens[bad]):,} tokens is over "
                f"the limit of {MAX_TOKENS_PER_REQUEST:,} tokens per request"
            )

    def _validate_dependencies(self, origin: str) -> None:
        ptr, idx, delay = self.after_ptr, self.after_idx, self.delay_s
        n = len(self)
        if delay is None or idx is None or len(ptr) != n + 1 or len(delay) != n or ptr[-1] != len(idx):
            raise UserError(f"{origin}: the request dependencies do not match the {n:,} requests")
        owner = np.repeat(np.arange(n), np.diff(ptr))
        bad = _first((idx < 0) | (idx >= owner))
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(owner[bad])}: waits for request {idx[bad]}, which must be an earlier request"
            )
        bad = _first(~np.isfinite(delay) | (delay < 0))
        if bad is not None:
            raise UserError(
                f"{origin}: {self._request(bad)}: delay after the answers must be >= 0 seconds, got {delay[bad]}"
            )

    def _request(self, i: int) -> str:
        """Request ``i`` for a message: its index from 0, and the trace it came from."""
        return f"request {int(i)} (counting from 0{', of ' + self.source if self.source else ''})"

    @property
    def has_dependencies(self) -> bool:
        return self.after_ptr is not None and bool(self.after_ptr[-1])

    @cached_property
    def latest_send_s(self) -> float:
        """The latest instant a request can be sent if every answer took no time: the last arrival,
        or with dependencies a root's arrival plus the delays along its chain (a lower bound of the
        real last send: the default horizon's and the progress bar's end)."""
        if not len(self):
            return 0.0
        if not self.has_dependencies:
            return float(self.arrival_s[-1])
        assert self.after_ptr is not None and self.after_idx is not None and self.delay_s is not None
        t = self.arrival_s.tolist()
        ptr, idx, delay = self.after_ptr.tolist(), self.after_idx.tolist(), self.delay_s.tolist()
        for i in range(len(t)):  # dependencies come before their dependents (validate)
            if ptr[i] < ptr[i + 1]:
                t[i] = max(t[j] for j in idx[ptr[i] : ptr[i + 1]]) + delay[i]
        return max(t)

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd  # a table for notebooks; the simulation itself reads the arrays

        df = pd.DataFrame(
            {"arrival_s": self.arrival_s, "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens}
        )
        if self.klass is not None:
            df["class"] = self.klass
        return df

    def stats(self) -> dict:
        """Summary statistics for reports. With dependencies, the arrival figures are the sessions'
        starts (the calls that wait on answers are sent when the simulation says)."""
        starts = self.arrival_s
        if self.has_dependencies:
            assert self.after_ptr is not None
            starts = self.arrival_s[np.diff(self.after_ptr) == 0]
        span = float(starts[-1] - starts[0]) if len(starts) > 1 else 0.0
        gaps = np.diff(starts)
        cv = float(gaps.std() / gaps.mean()) if len(gaps) > 1 and gaps.mean() > 0 else 0.0
        out = {
            "source": self.source,
            "requests": len(self),
            "span_s": span,
            "mean_rate_rps": (len(starts) - 1) / span if span > 0 else float("inf"),
            "interarrival_cv": cv,
            "prompt_mean": float(self.prompt_tokens.mean()),
            "prompt_p50": float(np.median(self.prompt_tokens)),
            "prompt_p99": float(np.percentile(self.prompt_tokens, 99)),
            "output_mean": float(self.output_tokens.mean()),
            "output_p50": float(np.median(self.output_tokens)),
            "output_p99": float(np.percentile(self.output_tokens, 99)),
        }
        if self.has_dependencies:
            out["requests_sent_after_answers"] = len(self) - len(starts)
        return out


def _first(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if len(idx) else None


def window_rows(
    arrival_s: np.ndarray, start_s: float = 0.0, duration_s: float | None = None, max_requests: int | None = None
) -> np.ndarray:
    """The rows ``slice_and_scale`` keeps: arrivals in [start_s, start_s + duration_s) of the
    trace's own clock (from its first arrival), the first ``max_requests`` of them."""
    t = arrival_s - (arrival_s[0] if len(arrival_s) else 0.0)
    keep = t >= start_s
    if duration_s is not None:
        keep &= t < start_s + duration_s
    idx = np.flatnonzero(keep)
    return idx if max_requests is None else idx[:max_requests]


def slice_and_scale(
    w: Workload,
    start_s: float = 0.0,
    duration_s: float | None = None,
    max_requests: int | None = None,
    speedup: float = 1.0,
) -> Workload:
    """Keep arrivals in [start_s, start_s + duration_s) of the trace's own clock, at most
    ``max_requests``, re-based to start at 0 and compressed by ``speedup`` (2 = twice the rate)."""
    t = w.arrival_s - (w.arrival_s[0] if len(w) else 0.0)
    idx = window_rows(w.arrival_s, start_s, duration_s, max_requests)
    if len(idx) == 0:
        raise UserError(f"{w.source}: no requests left after slicing (start_s={start_s}, duration_s={duration_s})")
    arr = (t[idx] - t[idx[0]]) / speedup
    return Workload(
        arrival_s=arr,
        prompt_tokens=w.prompt_tokens[idx],
        output_tokens=w.output_tokens[idx],
        klass=None if w.klass is None else w.klass[idx],
        block_hashes=None if w.block_hashes is None else [w.block_hashes[i] for i in idx],
        output_hashes=None if w.output_hashes is None else [w.output_hashes[i] for i in idx],
        hash_block_tokens=w.hash_block_tokens,
        source=w.source,
        meta=dict(w.meta, start_s=start_s, duration_s=duration_s, speedup=speedup),
        lora=None if w.lora is None else w.lora[idx],
    )
