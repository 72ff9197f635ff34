"""Trained baselines as registered MLflow models, named by aliases rather than registry stages.

MLflow deprecated the Staging/Production stages; an alias is a movable name for one version
(``models:/vsbench-abid-counting@best``). Each training step registers its exported model as a new
version and moves:

- ``newest``: always (the newest trained version, whatever produced it; ``latest`` is reserved);
- ``nightly``: when the step ran inside the nightly pipeline;
- ``best``: when its validation score is at least that of the version holding ``best`` now.

The score rides on the version as the tag ``vsbench.score``, so ``best`` compares without
reading runs. Tracking errors propagate: the caller's :class:`~vsbench.tracking.runs.Tracker` turns
them into "offline".
"""

from __future__ import annotations

import math
from typing import Any

NEWEST, NIGHTLY, BEST = "newest", "nightly", "best"
SCORE_TAG = "vsbench.score"
NIGHTLY_PIPELINE = "vsbench-nightly"


def _current_best(client: Any, name: str) -> float | None:
    try:
        version = client.get_model_version_by_alias(name, BEST)
    except Exception:  # noqa: BLE001 - no such alias yet
        return None
    try:
        return float(version.tags.get(SCORE_TAG, "nan"))
    except ValueError:
        return None


def register_version(client: Any, run_id: str, model_uri: str, name: str, score: float | None) -> str:
    """A new version of ``name`` from ``model_uri`` (logged by ``run_id``), with its aliases; returns
    the version number. ``score`` (higher is better) decides ``best``; None never takes it."""
    from mlflow.exceptions import MlflowException

    from vsbench.tracking.provenance import PIPELINE_TAG

    try:
        client.create_registered_model(name, description="vsbench ABID baseline, trained by a vsbench step.")
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
            raise
    run = client.get_run(run_id)
    version = client.create_model_version(name, model_uri, run_id=run_id,
                                          tags={SCORE_TAG: "" if score is None else repr(float(score))})
    number = str(version.version)
    client.set_registered_model_alias(name, NEWEST, number)
    if run.data.tags.get(PIPELINE_TAG) == NIGHTLY_PIPELINE:
        client.set_registered_model_alias(name, NIGHTLY, number)
    if score is not None and math.isfinite(score):
        best = _current_best(client, name)
        if best is None or not math.isfinite(best) or score >= best:
            client.set_registered_model_alias(name, BEST, number)
    return number


def aliases(client: Any, name: str) -> dict[str, str]:
    """alias -> version of a registered model (for the CLI and tests)."""
    return {alias: str(version) for alias, version in client.get_registered_model(name).aliases.items()}
