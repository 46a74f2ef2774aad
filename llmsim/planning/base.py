"""What a plan starts from: the scenario as plain data (``Base``) and its ``plan:`` section (``PlanConfig``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from llmsim.errors import UserError, pydantic_message
from llmsim.scenario import Scenario, scenario_from_dict, set_path, with_overrides

# a positive whole number, not YAML's true (which pydantic would read as 1)
WholeCount = Annotated[int, Field(gt=0, strict=True)]


class PlanConfig(BaseModel):
    """The ``plan:`` section of a scenario: the search space and what to report."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    target_rps: float | None = Field(None, gt=0)  # default: the workload's own mean rate
    # each list, when given, holds at least one value (an empty one would plan nothing, or fall
    # back to the scenario's value unannounced) and no value twice (duplicate candidates)
    hardware: list[str] | None = Field(None, min_length=1)  # default: the scenario's hardware
    # default: the scenario's cluster.tp (a disaggregated one's: its pools' tp)
    tp: list[WholeCount] | None = Field(None, min_length=1)
    # tried in increasing order until the SLOs are met
    replicas: list[WholeCount] = Field([1, 2, 4, 8], min_length=1)
    # engine presets (or engine profile files) to compare; default: the scenario's engine. A
    # TensorRT-LLM engine is paired with NVIDIA GPUs only (the other pairs are left out, and said)
    engines: list[str] | None = Field(None, min_length=1)
    policies: list[str] | None = Field(None, min_length=1)  # default: the scenario's policy.kind (per engine)
    chunk_tokens: list[WholeCount] | None = Field(None, min_length=1)  # chunked policy only; default: the scenario's
    pd_ratios: list[str] = Field(["1:1"], min_length=1)  # disaggregated only: prefill:decode replicas per unit
    top: int = Field(5, gt=0, strict=True)  # winners listed (strict: YAML true is not 1)
    sensitivity: float = Field(0.15, ge=0, lt=1)  # efficiencies scaled by 1 ± this for the winners
    goodput_search: bool = True  # search the winner's SLO capacity (also gives the load curves)

    @field_validator("sensitivity", mode="before")
    @classmethod
    def _a_fraction(cls, v: object) -> object:
        # 15 meant as ±15%: say which unit the key takes (pydantic alone says "less than 1")
        if isinstance(v, int | float) and not isinstance(v, bool) and v >= 1:
            raise ValueError("a fraction, e.g. 0.15 for efficiencies ±15%, not a percentage")
        return v

    @field_validator("hardware", "engines", "tp", "replicas", "policies", "chunk_tokens", "pd_ratios")
    @classmethod
    def _once_each(cls, v: list | None) -> list | None:
        seen: set = set()  # (a set: a search list of thousands is checked in linear time)
        for x in v or []:
            if x in seen:
                raise ValueError(f"{x!r} is given twice")
            seen.add(x)
        return v

    @field_validator("engines")
    @classmethod
    def _named(cls, v: list[str] | None) -> list[str] | None:
        # an empty name is no engine: it would quietly run the scenario's own beside the listed ones
        for x in v or []:
            if not x.strip():
                raise ValueError(
                    f"{x!r} names no engine; give a preset (vllm-v1, trtllm, ...) or an engine profile file"
                )
        return v

    @field_validator("pd_ratios", mode="before")
    @classmethod
    def _quoted_ratios(cls, v: object) -> object:
        # a bare number is not a ratio (llmsim's YAML reads an unquoted 2:1 as the text it is, not
        # YAML 1.1's base-60 121: errors.safe_yaml)
        for r in v if isinstance(v, list) else []:
            if isinstance(r, int | float) and not isinstance(r, bool):
                raise ValueError(f"got the number {r}: a ratio is prefill:decode replicas, such as 2:1")
        return v


@dataclass
class Base:
    """A scenario as plain data (what worker processes receive), its folder and its name for errors."""

    data: dict
    base_dir: str
    origin: str

    @classmethod
    def from_path(cls, path: str | Path, overrides: dict[str, object] | None = None) -> Base:
        from llmsim.sweep import scenario_data

        path = Path(path)
        data = scenario_data(path)  # a scenario, not a plan.json or summary.json given by mistake
        for key, value in (overrides or {}).items():
            set_path(data, key, value)
        return cls(data, str(path.resolve().parent), str(path))

    @classmethod
    def from_scenario(cls, sc: Scenario) -> Base:
        data = sc.model_dump(exclude={"base_dir"})
        for section, keys in sc._engine_filled.items():  # the engine's defaults follow the hardware of each point
            for k in keys:
                data[section].pop(k, None)
        return cls(data, sc.base_dir, sc.name)

    def scenario(self, overrides: dict[str, object] | None = None) -> Scenario:
        return scenario_from_dict(with_overrides(self.data, overrides), self.origin, Path(self.base_dir))

    def plan_config(self) -> PlanConfig:
        if (self.data.get("cluster") or {}).get("autoscaling"):
            raise UserError(
                f"{self.origin}: cluster.autoscaling: llmsim plan searches fixed replica counts and prices them "
                "by the hour; remove the autoscaler to plan, or compare autoscalers with llmsim sweep"
            )
        try:
            return PlanConfig.model_validate(self.data.get("plan") or {})
        except ValidationError as exc:
            keys = {"": list(PlanConfig.model_fields)}  # "did you mean 'replicas'?"
            raise UserError(pydantic_message(exc, f"{self.origin}: plan", keys)) from None  # one line, all problems


def as_base(x: Base | Scenario | str | Path) -> Base:
    """Accept what users hold: a ``Base``, a loaded ``Scenario`` or a path to its YAML."""
    if isinstance(x, Base):
        return x
    if isinstance(x, Scenario):
        return Base.from_scenario(x)
    return Base.from_path(x)
