"""Run a pipeline on this machine with ``kfp.local`` and summarize what each step did.

``SubprocessRunner(use_venv=False)`` executes exactly the lightweight components a cluster runs,
each in a subprocess of this Python environment (which holds vsbench). kfp.local keeps every
task's outputs under ``<pipeline_root>/<pipeline>-<timestamp>/<task>/``; the report reads the
step manifests from there.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ABID_STEPS = ("abid-download", "abid-prepare", "abid-resize", "abid-train-counting", "abid-train-siamese",
              "abid-quantity", "abid-score")
STEP_COUNTS = {
    "abid-download": ["planned", "fetched", "skipped", "failed"],
    "abid-prepare": ["eligible", "train", "val", "instances", "problems"],
    "abid-resize": ["inputs", "resized", "kept", "failed"],
    "abid-train-counting": ["best_epoch"],
    "abid-train-siamese": ["best_epoch"],
}
STEP_SCORES = {
    "abid-train-counting": ["best_val_accuracy", "val_majority_rate"],
    "abid-train-siamese": ["best_val_accuracy"],
    "abid-quantity": ["baseline_accuracy", "prior_only_accuracy", "always_yes_accuracy", "always_no_accuracy"],
    "abid-score": ["counting_accuracy", "counting_rmse", "verification_accuracy", "quantity_accuracy"],
}


@dataclass
class LocalRunReport:
    succeeded: bool
    seconds: float
    run_dir: Path | None
    data_root: Path
    parent_run_id: str
    steps: dict[str, dict[str, Any]] = field(default_factory=dict)
    error: str = ""

    def scores(self) -> dict[str, float]:
        return {k: v for k, v in self.steps.get("abid-score", {}).get("metrics", {}).items()
                if k in STEP_SCORES["abid-score"]}

    def render(self) -> str:
        lines = [f"pipeline {'succeeded' if self.succeeded else 'FAILED'} in {self.seconds:.1f} s"]
        if self.error:
            lines.append(f"  error: {self.error}")
        for step, manifest in self.steps.items():
            metrics = manifest.get("metrics", {})
            counts = ", ".join([f"{k} {int(metrics[k])}" for k in STEP_COUNTS.get(step, []) if k in metrics]
                               + [f"{k} {metrics[k]:.4f}" for k in STEP_SCORES.get(step, []) if k in metrics])
            lines.append(f"  {step:<20} {metrics.get('step_seconds', float('nan')):7.1f} s   {counts}")
        lines.append(f"  data root:      {self.data_root}")
        lines.append(f"  step outputs:   {self.run_dir}")
        lines.append(f"  MLflow run:     {self.parent_run_id or '(tracking offline)'}")
        return "\n".join(lines)


def _latest_run_dir(pipeline_root: Path, before: set[Path]) -> Path | None:
    runs = [p for p in pipeline_root.iterdir() if p.is_dir() and p not in before] if pipeline_root.exists() else []
    return max(runs, key=lambda p: p.stat().st_mtime) if runs else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def step_manifests(run_dir: Path, step: str) -> list[Path]:
    """A step's manifest files; steps inside a ParallelFor sit under ``for-loop-N-iteration-I/``."""
    return sorted(run_dir.glob(f"**/{step}/manifest"))


def merge_shard_manifests(manifests: list[dict[str, Any]]) -> dict[str, Any]:
    """One manifest for a sharded step: counts and rates add up, wall time is the slowest shard."""
    if len(manifests) == 1:
        return manifests[0]
    metrics: dict[str, float] = {}
    for manifest in manifests:
        for key, value in manifest.get("metrics", {}).items():
            if key.endswith("seconds") and not key.endswith("per_second"):
                metrics[key] = max(metrics.get(key, 0.0), value)
            else:
                metrics[key] = metrics.get(key, 0.0) + value
    return {"metrics": metrics, "shards": manifests}


def run_pipeline_locally(pipeline_name: str, pipeline_root: Path, arguments: dict[str, Any],
                         steps: tuple[str, ...], suite_path: Path | None = None) -> tuple[bool, float, Path | None, str]:
    from kfp import local

    from vsbench.platform.compile import load_pipeline

    # The components name the production image; locally this environment is that image's twin.
    warnings.filterwarnings("ignore", message=".*custom or non-Python base image.*")
    pipeline_root.mkdir(parents=True, exist_ok=True)
    before = set(pipeline_root.iterdir())
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(pipeline_root),
               raise_on_error=True)  # a failed task fails the run, after the exit handler ran
    started = time.perf_counter()
    error = ""
    try:
        load_pipeline(pipeline_name, suite_path=suite_path)(**arguments)
    except Exception as exc:  # noqa: BLE001 - reported, the caller decides the exit code
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    run_dir = _latest_run_dir(pipeline_root, before)
    succeeded = not error and run_dir is not None and all(step_manifests(run_dir, s) for s in steps)
    if not succeeded and not error:
        missing = [s for s in steps if run_dir is None or not step_manifests(run_dir, s)]
        error = f"steps without output: {', '.join(missing)} (see the log above)"
    return succeeded, seconds, run_dir, error


def run_abid_pipeline_locally(data_root: Path, pipeline_root: Path, arguments: dict[str, Any]) -> LocalRunReport:
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    succeeded, seconds, run_dir, error = run_pipeline_locally(
        "abid", pipeline_root, {"data_root": str(data_root), **arguments}, ABID_STEPS)
    report = LocalRunReport(succeeded, seconds, run_dir, data_root, "", error=error)
    if run_dir is not None:
        output = _read_json(run_dir / "open-tracking" / "executor_output.json")
        report.parent_run_id = str(output.get("parameterValues", {}).get("Output", ""))
        for step in ABID_STEPS:
            manifests = [_read_json(path) for path in step_manifests(run_dir, step)]
            if manifests:
                report.steps[step] = merge_shard_manifests(manifests)
    return report
