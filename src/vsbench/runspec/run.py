"""What a similarity run is, checked once at the edge (the CLI, a component, the nightly suite) and
passed down whole, so that no step re-assembles it from loose values.

:class:`BenchmarkRun` is the benchmark's side (its data, options, how it is searched and split);
:class:`SimilarityRun` adds the model. Both are frozen pydantic models that refuse unknown fields;
the benchmark's name is made the one registered name (``patch-pairs`` -> ``patch_pairs``), so every
spelling lands on the same MLflow param, metric names and folders.
"""

from __future__ import annotations

import json
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.registry import canonical

MAX_SEED = 2**63 - 1


def json_object(value: Any, name: str) -> dict[str, Any]:
    """A JSON object given as text (a pipeline parameter, a CLI option) or as a dict already."""
    if isinstance(value, dict):
        return value
    try:
        parsed = json.loads(value or "{}")
    except (TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{name} is not valid JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(parsed).__name__}")
    return parsed


class BenchmarkRun(BaseModel):
    """One benchmark as a run searches and splits it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    benchmark: str = Field(description="a registered benchmark, any of its spellings (vsbench benchmarks)")
    root: str = Field(description="the benchmark's data, in its native layout")
    benchmark_options: dict[str, Any] = Field(default_factory=dict, description="the benchmark loader's options")
    codecs: str = Field(default="Flat", description="FAISS index_factory strings separated by ';'")
    k: int = Field(default=10, ge=1, description="neighbours per query")
    global_cap: int = Field(default=0, ge=0, description="keep at most this many predictions in total (0: off)")
    score_norm: str = Field(default="1.00[0,2]", description="beta[first,last]; '' for none")
    search_params: str = Field(default="", description="FAISS search-time settings, e.g. nprobe=16")
    num_shards: int = Field(default=1, ge=1, description="embedding shards (a ParallelFor)")
    search_shards: int = Field(default=1, ge=1, description="query shards of the search fan-out")
    reference_shards: int = Field(default=1, ge=1, description="gallery shards: one index each")
    merge_ondisk: bool = Field(default=False, description="IVF codecs: merge the reference shards into one on-disk "
                               "index, searched once per query shard")

    @field_validator("benchmark")
    @classmethod
    def _registered(cls, name: str) -> str:
        return canonical(name)

    @field_validator("benchmark_options", mode="before")
    @classmethod
    def _benchmark_options(cls, value: Any) -> dict[str, Any]:
        return json_object(value, "benchmark_options")

    @field_validator("merge_ondisk")
    @classmethod
    def _merge_ondisk_needs_ivf(cls, merge: bool, info: ValidationInfo) -> bool:
        """Refused here, before any step runs: only IVF codecs have inverted lists to merge (the
        index step checks the trained index itself too)."""
        codecs = info.data.get("codecs")
        if merge and isinstance(codecs, str):
            others = [codec for codec in codecs.split(";")
                      if not any(part.strip().startswith("IVF") for part in codec.split(","))]
            if others:
                raise ValueError(f"applies to IVF codecs only: {', '.join(map(repr, others))} is not one; drop "
                                 "--merge-ondisk, or index with IVF codecs (e.g. IVF1024,Flat)")
        return merge

    @classmethod
    def parse(cls, **fields: Any) -> Self:
        """The run from loose values, or a ValueError of one line naming each bad field and why."""
        run, problems = cls.parse_all(**fields)
        if run is None:
            raise ValueError("; ".join(problems))
        return run

    @classmethod
    def parse_all(cls, **fields: Any) -> tuple[Self | None, list[str]]:
        """(the run, []) or (None, one line per bad field): for a caller that reports every problem at once."""
        try:
            return cls(**fields), []
        except ValidationError as exc:
            return None, ["{}: {}".format(".".join(map(str, error["loc"])) or cls.__name__,
                                          str(error["msg"]).removeprefix("Value error, ")) for error in exc.errors()]

    @property
    def search_tasks(self) -> int:
        """Search task t takes query shard t // reference_shards and reference shard t % reference_shards;
        with ``merge_ondisk``, query shard t in the merged index (one task per query shard)."""
        return self.search_shards * (1 if self.merge_ondisk else self.reference_shards)

    def settings(self) -> EvalSettings:
        return EvalSettings(codecs=self.codecs, k=self.k, global_cap=self.global_cap or None,
                            score_norm=self.score_norm, search_params=self.search_params)


class SimilarityRun(BenchmarkRun):
    """One benchmark x one model: everything that decides a similarity run's numbers, plus its shards."""

    model: str = Field(default="efficientnet_lite0", description="a registered model (vsbench similarity models)")
    model_options: dict[str, Any] = Field(default_factory=dict, description="the model's options")
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description='draws {"weights": "random"} networks')

    @field_validator("model_options", mode="before")
    @classmethod
    def _model_options(cls, value: Any) -> dict[str, Any]:
        options = json_object(value, "model_options")
        if "seed" in options:
            raise ValueError("the seed is the run's seed (--seed), not a key of the model options")
        return options

    def params(self) -> dict[str, Any]:
        """The run's MLflow params: what decides its numbers (not shards, batch or device)."""
        return {"benchmark": self.benchmark, "model": self.model,
                "model_options": json.dumps(self.model_options, sort_keys=True),
                "benchmark_options": json.dumps(self.benchmark_options, sort_keys=True),
                "codecs": self.codecs, "k": self.k, "score_norm": self.score_norm, "global_cap": self.global_cap,
                "search_params": self.search_params or "-", "seed": self.seed}

    def is_random_baseline(self) -> bool:
        """Untrained weights make a random-features baseline, which reports draw beside trained models."""
        return str(self.model_options.get("weights", "")) == "random"
