"""Which kind of llmsim file a mapping was read from, so a file given where another is expected
(a summary.json as a scenario, a scenario as a hardware profile) is named for what it is."""

from __future__ import annotations

from llmsim.errors import UserError

# The files llmsim writes and reads, told apart by top-level keys each always has, so a file given
# where another kind is expected (a summary.json as a scenario, a scenario as a hardware profile)
# is named for what it is instead of as a list of every key it lacks. First match wins: a run
# summary also has vLLM-bench keys, a run's scenario.json a scenario's.
FILE_KINDS = (
    (("saturation", "pools", "requests"), "the summary of a run (summary.json of `llmsim run`)"),
    (("target_rps", "recommendation"), "the result of a plan (plan.json of `llmsim plan`)"),
    (("grid", "fixed", "slo"), "the description of a sweep (sweep.json of `llmsim sweep`)"),
    (("error_raw", "engine_steps"), "the summary of a twin run (twin_summary.json of `llmsim twin`)"),
    (("peak_flops", "memory_bandwidth_bytes_per_s"), "a hardware profile"),
    (("run_id", "workload", "model"), "the resolved scenario of a run (scenario.json of `llmsim run`)"),
    (("workload", "model"), "a scenario"),
    (("request_throughput", "mean_ttft_ms"), "a `vllm bench serve` result"),
)


def file_kind(data: object) -> str | None:
    """What kind of llmsim (or vLLM) file ``data`` was read from (``FILE_KINDS``), or None."""
    if isinstance(data, dict):
        for keys, kind in FILE_KINDS:
            if all(k in data for k in keys):
                return kind
    return None


def refuse_kind(data: object, origin: str, expected: str, hint: str) -> None:
    """UserError when ``data`` is recognisably another kind of file than ``expected`` (a FILE_KINDS name)."""
    kind = file_kind(data)
    if kind is not None and kind != expected:
        raise UserError(f"{origin}: this is {kind}, not {expected}; {hint}")
