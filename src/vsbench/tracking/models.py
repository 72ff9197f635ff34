"""Trained baselines as registered MLflow models, named by aliases rather than registry stages.

MLflow deprecated the Staging/Production stages; an alias is a movable name for one version
(``models:/vsbench-abid-counting@best``). Each training step registers its exported model as a new
version and moves:

- ``newest``: always (the newest trained version, whatever produced it; ``latest`` is reserved);
- ``nightly``: when the step ran inside the nightly pipeline;
- ``best``: when its validation score is at least that of the version holding ``best`` now.

The score rides on the version as the tag ``vsbench.score``, so ``best`` compares without
reading runs. The weights' digest rides as ``vsbench.weights_sha256``: a step re-run on a finished
training (same checkpoint, same weights) finds the version that holds them and moves its aliases
instead of registering the same weights again. Tracking errors propagate: the caller's :class:`~vsbench.tracking.runs.Tracker` turns
them into "offline".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

NEWEST, NIGHTLY, BEST = "newest", "nightly", "best"
SCORE_TAG = "vsbench.score"
WEIGHTS_TAG = "vsbench.weights_sha256"
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


def state_dict_sha256(state_dict: Mapping[str, Any]) -> str:
    """A digest of a model's weights: every tensor's name, dtype, shape and bytes, in name order.

    Not the bytes of a saved file: ``torch.save`` output need not be the same for the same weights."""
    import torch

    digest = hashlib.sha256()
    for key in sorted(state_dict):
        tensor = state_dict[key]
        if not isinstance(tensor, torch.Tensor):
            digest.update(f"{key}\0{tensor!r}\n".encode())
            continue
        flat = tensor.detach().cpu().contiguous().reshape(-1)
        digest.update(f"{key}\0{flat.dtype}\0{tuple(tensor.shape)}\n".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b"")
    return digest.hexdigest()


def find_version(client: Any, name: str, weights_sha256: str) -> str:
    """The newest version of ``name`` tagged with these weights, or ""."""
    try:
        versions = client.search_model_versions(f"name = '{name}'")
    except Exception:  # noqa: BLE001 - no such model yet
        return ""
    matching = [int(v.version) for v in versions if (v.tags or {}).get(WEIGHTS_TAG) == weights_sha256]
    return str(max(matching)) if matching else ""


def reuse_version(client: Any, run_id: str, name: str, weights_sha256: str, score: float | None) -> str:
    """Move the aliases to the version that holds these weights, as registering them would; "" if none."""
    number = find_version(client, name, weights_sha256)
    if number:
        _move_aliases(client, run_id, name, number, score)
    return number


def register_version(client: Any, run_id: str, model_uri: str, name: str, score: float | None,
                     weights_sha256: str) -> str:
    """A new version of ``name`` from ``model_uri`` (logged by ``run_id``), with its aliases; returns
    the version number. ``score`` (higher is better) decides ``best``; None never takes it."""
    from mlflow.exceptions import MlflowException

    try:
        client.create_registered_model(name, description="vsbench ABID baseline, trained by a vsbench step.")
    except MlflowException as exc:
        if "RESOURCE_ALREADY_EXISTS" not in str(exc.error_code):
            raise
    version = client.create_model_version(name, model_uri, run_id=run_id,
                                          tags={SCORE_TAG: "" if score is None else repr(float(score)),
                                                WEIGHTS_TAG: weights_sha256})
    number = str(version.version)
    _move_aliases(client, run_id, name, number, score)
    return number


def _move_aliases(client: Any, run_id: str, name: str, number: str, score: float | None) -> None:
    from vsbench.tracking.provenance import PIPELINE_TAG

    run = client.get_run(run_id)
    client.set_registered_model_alias(name, NEWEST, number)
    if run.data.tags.get(PIPELINE_TAG) == NIGHTLY_PIPELINE:
        client.set_registered_model_alias(name, NIGHTLY, number)
    if score is not None and math.isfinite(score):
        best = _current_best(client, name)
        if best is None or not math.isfinite(best) or score >= best:
            client.set_registered_model_alias(name, BEST, number)


def aliases(client: Any, name: str) -> dict[str, str]:
    """alias -> version of a registered model (for the CLI and tests)."""
    return {alias: str(version) for alias, version in client.get_registered_model(name).aliases.items()}
