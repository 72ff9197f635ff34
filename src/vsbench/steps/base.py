"""What every pipeline step shares: one library call, wrapped with tracking and a manifest.

A Kubeflow component body is one call into a step (:mod:`vsbench.steps.abid`,
:mod:`vsbench.steps.similarity`), so every step can also run (and be tested) without Kubeflow.
Each step returns a :class:`StepResult` whose ``metrics`` is the flat, MLflow-safe dict that goes
both to MLflow and to the KFP ``Metrics`` output, and whose ``manifest`` is what the step's small
output artifact holds (large data stays under the data root and travels by reference).
"""

from __future__ import annotations

import io
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vsbench.io.storage import atomic_write_bytes, atomic_write_json
from vsbench.runtime.images import running_image


@dataclass(frozen=True)
class StepResult:
    output: str  # the location the next step reads (a folder under the data root)
    metrics: dict[str, float]
    manifest: dict[str, Any] = field(default_factory=dict)


def numbers(data: dict[str, Any], keys: list[str]) -> dict[str, float]:
    return {key: float(data[key]) for key in keys if isinstance(data.get(key), (int, float))}


def finish(tracker, result: StepResult, manifest_path: str | None, artifact_name: str, started: float,
           tracked: Collection[str] | None = None) -> StepResult:
    """Time the step, write its manifest, log its metrics and manifest on its MLflow run. ``tracked``
    limits the metrics its run gets (the score step's numbers go to evaluation runs of their own, not
    a second time under long names); the manifest and the KFP output keep them all."""
    result.metrics["step_seconds"] = round(time.perf_counter() - started, 3)
    result.manifest["metrics"] = result.metrics
    result.manifest["ran_in"] = running_image()
    if manifest_path:
        atomic_write_json(Path(manifest_path), result.manifest)
    tracker.log_metrics(result.metrics if tracked is None else {k: v for k, v in result.metrics.items() if k in tracked})
    tracker.log_dict(result.manifest, artifact_name)
    return result


def sharded(step: str, shard: int, num_shards: int) -> str:
    return step if num_shards == 1 else f"{step}-shard-{shard}-of-{num_shards}"


def save_figure(figure: Any, path: Path) -> None:
    """A figure as a PNG file, written atomically (a reader never sees half a file)."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    atomic_write_bytes(path, buffer.getvalue())
