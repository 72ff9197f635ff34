"""The nightly suite: which (benchmark, model) pairs run every night, and the regression rule.

YAML in (``pipelines/suites/nightly.yaml``), validated once by pydantic (frozen, extra="forbid"):
a typo in a field name is an error at compile time, not a silently ignored setting at 02:00.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vsbench.io.inputs import read_yaml
from vsbench.runspec.run import BenchmarkRun, SimilarityRun


def default_suite_path() -> Path:
    """The suite shipped with vsbench (package data of ``vsbench.pipelines``)."""
    import vsbench.pipelines

    return Path(vsbench.pipelines.__file__).parent / "suites" / "nightly.yaml"


SuiteBenchmark = BenchmarkRun  # one line of ``benchmarks:``: a run without its model


class SuiteEntry(SimilarityRun):
    """One (benchmark, model) pair of the nightly suite: a similarity run and its label."""

    label: str = Field(default="", description="names the model in the entry's name instead of `model`")

    @property
    def name(self) -> str:
        """Task-name-safe ``<benchmark>-<model or label>``."""
        return re.sub(r"[^a-z0-9-]+", "-", f"{self.benchmark}-{self.label or self.model}".lower()).strip("-")

    def options_json(self) -> tuple[str, str]:
        return json.dumps(self.benchmark_options, sort_keys=True), json.dumps(self.model_options, sort_keys=True)


class SuiteModel(BaseModel):
    """One line of ``models:``: a model name, its options, and a label where one model runs with
    two sets of options (two weights files, say)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    model_options: dict = Field(default_factory=dict)
    label: str = ""


class RegressionRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold: float = Field(default=0.02, ge=0)
    relative: bool = False
    metrics: list[str] | None = None  # None: every metric both nights share
    # Name or pattern -> the metric's measured spread over seeds and machines (absolute, the metric's
    # units; docs/fidelity.md): a metric fails only when worse by more than the threshold and by more
    # than this, so a move to another node is not a regression.
    spread: dict[str, float] = Field(default_factory=dict)

    @field_validator("spread")
    @classmethod
    def _spread_not_negative(cls, spread: dict[str, float]) -> dict[str, float]:
        negative = sorted(name for name, value in spread.items() if not value >= 0)
        if negative:
            raise ValueError(f"regression.spread: {negative} must be >= 0 (the measured max - min of the metric)")
        return spread


class Suite(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    experiment: str = "vsbench-nightly"
    out_root: str = "/data/runs/nightly"
    entries: list[SuiteEntry] = Field(default_factory=list)
    models: list[SuiteModel] = Field(default_factory=list)
    benchmarks: list[SuiteBenchmark] = Field(default_factory=list)
    regression: RegressionRule = Field(default_factory=RegressionRule)

    @model_validator(mode="before")
    @classmethod
    def _models_times_benchmarks(cls, data: Any) -> Any:
        """``models`` x ``benchmarks`` become entries (after the explicit ``entries``), so adding
        a model to the nightly suite is one line under ``models:``."""
        if not isinstance(data, dict) or not (data.get("models") or data.get("benchmarks")):
            return data
        if not (data.get("models") and data.get("benchmarks")):
            raise ValueError("'models' and 'benchmarks' go together: each model runs on each benchmark")
        models = [SuiteModel(**m) if isinstance(m, dict) else m for m in data["models"]]
        benchmarks = [SuiteBenchmark(**b) if isinstance(b, dict) else b for b in data["benchmarks"]]
        crossed = [{**b.model_dump(), **m.model_dump()} for m in models for b in benchmarks]
        return {**data, "entries": [*(data.get("entries") or []), *crossed]}

    @field_validator("entries")
    @classmethod
    def _unique_entries(cls, entries: list[SuiteEntry]) -> list[SuiteEntry]:
        if not entries:
            raise ValueError("a suite needs at least one entry")
        names = [entry.name for entry in entries]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"entries repeat the same benchmark and model: {duplicates}")
        return entries

    @classmethod
    def load(cls, path: Path | None = None) -> Suite:

        path = path or default_suite_path()
        data = read_yaml(path)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a suite is a mapping with 'entries', got {type(data).__name__}")
        try:
            return cls(**data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None
