"""The one MLflow wrapper: a parent run per pipeline run, a child run per step.

Configuration comes only from the environment (``MLFLOW_TRACKING_URI`` and MLflow's own
variables; on a cluster a Secret or ConfigMap sets them), never from pipeline arguments, so
credentials never appear in a pipeline spec. We use ``MlflowClient`` calls rather than
``mlflow.start_run`` because a ``with start_run(run_id=parent)`` block ends the parent on exit.

Tracking must never fail a step: if the server is unreachable or errors part-way, the tracker
goes offline, says so once on stderr, and the step finishes with its metrics kept in its own
outputs (KFP Metrics and manifest files). Every call goes through the bounded client of
:mod:`vsbench.io.store` (issue 54): a store that refuses or hangs costs a call at most
``VSBENCH_TRACKING_TIMEOUT`` seconds (an artifact's upload included: raise it for large models over a
slow link), and the line that says the tracker went offline names the store's URI; MLflow's own
client waited up to its timeout times its retries, about a minute, for each call on a hanging store.
``VSBENCH_NO_TRACK=1`` (``--no-track``) turns every call here into a no-op.

The package's other rooms: :mod:`~vsbench.tracking.command` (runs of commands, bounded against a
store that is down or hangs, and their later upload), :mod:`~vsbench.tracking.provenance` (the tags
for data, code and machine every run carries), :mod:`~vsbench.tracking.models` (trained baselines
as registered models with aliases).
"""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from vsbench.io.store import StoreError, store_client
from vsbench.io.terminal import wrap_lines
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV, tracking_disabled
from vsbench.tracking.provenance import (
    IMAGE_ID_TAG,
    IMAGE_TAG,
    KFP_RUN_TAG,
    PARENT_TAG,
    PIPELINE_TAG,
    RUN_KEY_TAG,
    SOURCE_TAG,
    STEP_TAG,
    code_tags,
    machine_tags,
)

# MLflow 3's UI opens an experiment in the view its kind names; without the tag it guesses, and a run
# with no traces or models of its own lands under "Evaluation runs" in the GenAI view.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING_KIND = "custom_model_development"
DATASET_CONTEXT_TAG = "mlflow.data.context"  # "training" or "evaluation", as MLflow's own dataset inputs say

# MLflow's own retries are kept few (2, backoff 1 s, 20 s a request) where vsbench.io.store is
# imported, above: a dead server fails in seconds, and every call is bounded there besides.


def _image_tags() -> dict[str, str]:
    """Where the step runs (image name and id, or "host venv"): compare and the report show it."""
    from vsbench.runtime.images import running_image

    ran_in = running_image()
    return {IMAGE_TAG: ran_in["image"], **({IMAGE_ID_TAG: ran_in["image_id"]} if ran_in["image_id"] else {})}


def _param_tags(params: Mapping[str, Any]) -> dict[str, str]:
    """The data and profile a pipeline names in its params (``data_tags`` / ``profile``), as the tags a
    command run carries; the report's line per run reads them."""
    from vsbench.tracking.provenance import DATA_ROOT_TAG, PROFILE_TAG

    tags = {}
    if params.get("profile") or params.get("train_profile"):
        tags[PROFILE_TAG] = str(params.get("profile") or params.get("train_profile"))
    if params.get("data"):
        tags[DATA_ROOT_TAG] = str(params["data"])[:4000]
    extra = params.get("data_tags")
    if isinstance(extra, Mapping):
        tags.update({str(k): str(v) for k, v in extra.items()})
    return tags


def _flat(values: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k): v for k, v in values.items()}


class Tracker:
    """A handle on one MLflow run (or none, when offline). All methods swallow tracking errors."""

    def __init__(self, run_id: str | None, client: Any | None) -> None:
        self.run_id = run_id
        self._client = client
        self.error: str = ""

    @property
    def online(self) -> bool:
        return self._client is not None and self.run_id is not None

    def _call(self, what: str, fn, *args, **kwargs) -> Any:
        if not self.online:
            return None
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any tracking failure degrades to offline
            self._go_offline(f"{what}: {type(exc).__name__}: {exc}")
            return None

    def _go_offline(self, reason: str) -> None:
        self.error = reason
        self._client = None
        print(wrap_lines(f"[vsbench] MLflow tracking unavailable ({reason[:300]}); the step goes on and keeps "
                         "its metrics in its own outputs."), file=sys.stderr)

    def log_params(self, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:6000]) for k, v in _flat(params).items()]
        self._call("log_params", lambda: self._client.log_batch(self.run_id, params=items))

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, step or 0) for k, v in _flat(metrics).items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))]
        self._call("log_metrics", lambda: self._client.log_batch(self.run_id, metrics=items))

    def set_tags(self, tags: Mapping[str, Any]) -> None:
        for key, value in _flat(tags).items():
            self._call("set_tag", lambda k=key, v=value: self._client.set_tag(self.run_id, k, str(v)))

    def log_dict(self, data: Any, artifact_file: str) -> None:
        self._call("log_dict", lambda: self._client.log_dict(self.run_id, data, artifact_file))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._call("log_artifact", lambda: self._client.log_artifact(self.run_id, str(path), artifact_path))

    def log_unit_files(self, files: Mapping[str, str]) -> None:
        """Per-unit outcome files ``{local path: sha256}`` under ``units/`` and in the ``vsbench.units``
        tag (:mod:`vsbench.tracking.units`); a store that fails them costs the step nothing."""
        if not files:
            return
        from vsbench.tracking.units import log_unit_files

        self._call("log_unit_files", lambda: log_unit_files(self._client, self.run_id, files))

    def log_dataset(self, name: str, digest: str, source: str, context: str,
                    profile: Mapping[str, Any] | None = None) -> None:
        """The data this run read as an MLflow dataset input (the run page's Datasets section, and
        ``dataset.digest`` / ``dataset.name`` in run searches). Nothing is uploaded: name, digest
        and where it lies only."""
        self._call("log_inputs", lambda: self._client.log_inputs(
            self.run_id, datasets=[dataset_input(name, digest, source, context, profile)]))

    def link_models(self, model_ids: list[str]) -> None:
        """Show logged models (made by other runs, e.g. a pipeline's training steps) as this run's outputs."""
        from mlflow.entities import LoggedModelOutput

        if model_ids:
            self._call("log_outputs", lambda: self._client.log_outputs(
                self.run_id, [LoggedModelOutput(model_id, 0) for model_id in model_ids]))

    def log_model_metrics(self, metrics: Mapping[str, float], model_id: str, dataset: tuple[str, str]) -> None:
        """Metrics of a logged model on the data it was scored on (``dataset``: name and digest), so the
        experiment's Models tab and ``search_logged_models(datasets=...)`` rank the models per dataset."""
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k, float(v), now, 0, model_id=model_id, dataset_name=dataset[0], dataset_digest=dataset[1][:36])
                 for k, v in _flat(metrics).items() if math.isfinite(float(v))]
        self._call("log_model_metrics", lambda: self._client.log_batch(self.run_id, metrics=items))

    def linked_models(self) -> dict[str, str]:
        """name -> id of the logged models this run shows as outputs (a pipeline's parent: its training
        steps' models); {} offline."""
        def read() -> dict[str, str]:
            outputs = self._client.get_run(self.run_id).outputs
            ids = [output.model_id for output in (outputs.model_outputs if outputs else [])]
            return {self._client.get_logged_model(model_id).name: model_id for model_id in ids}

        return self._call("linked models", read) or {}

    def child_param(self, step: str, key: str) -> str:
        """Param ``key`` of this run's newest child run named ``step`` (a pipeline parent's training
        step, say), "" when none or offline. Read back from the store, so only a short plain word is
        believed (letters, digits, ``-``, ``_``, ``.``; at most 40): anything else is "" too."""
        def read() -> str:
            found = self._client.search_runs(
                [self._client.get_run(self.run_id).info.experiment_id],
                filter_string=f"tags.`{PARENT_TAG}` = '{self.run_id}' and attributes.run_name = '{step}'",
                order_by=["attributes.start_time DESC"], max_results=1)
            value = found[0].data.params.get(key, "") if found else ""
            return value if isinstance(value, str) and re.fullmatch(r"[A-Za-z0-9._-]{1,40}", value) else ""

        return self._call("child run param", read) or ""

    def log_figure(self, figure: Any, artifact_file: str) -> None:
        self._call("log_figure", lambda: self._client.log_figure(self.run_id, figure, artifact_file))

    def register_model(self, model_uri: str, name: str, score: float | None, weights_sha256: str) -> str:
        """Register ``model_uri`` as a new version of ``name`` with its aliases (see
        :func:`vsbench.tracking.models.register_version`); returns the version ("" offline)."""
        from vsbench.tracking.models import register_version

        return self._call("register_model", lambda: register_version(self._client, self.run_id, model_uri, name,
                                                                      score, weights_sha256)) or ""

    def registered_version(self, name: str, weights_sha256: str, score: float | None) -> str:
        """The version of ``name`` that already holds these weights, its aliases moved as a new
        registration would move them; "" when none does (or offline)."""
        from vsbench.tracking.models import reuse_version

        return self._call("find model version", lambda: reuse_version(self._client, self.run_id, name,
                                                                       weights_sha256, score)) or ""

    def log_torch_model(self, model: Any, name: str, input_example: Any) -> tuple[str, str]:
        """The model through ``mlflow.pytorch`` in the pt2 format (a traced graph: loading it runs no
        pickled code) and, beside it, its ``state_dict``, which vsbench loads with
        ``weights_only=True``. A model that fails to export is reported and skipped; unlike a
        connection error it does not take the tracker offline. Returns the model's URI and its MLflow 3
        logged-model id (both "" if none)."""
        if not self.online:
            return "", ""
        import io

        import mlflow
        import mlflow.pytorch
        import torch

        from vsbench import __version__

        model_uri = model_id = ""
        try:
            with mlflow.start_run(run_id=self.run_id):
                info = mlflow.pytorch.log_model(model, name=name, input_example=input_example,
                                                serialization_format="pt2",
                                                pip_requirements=[f"vsbench=={__version__}", "torch"])
                model_uri, model_id = str(info.model_uri), str(getattr(info, "model_id", "") or "")
        except Exception as exc:  # noqa: BLE001 - an export problem is not a tracking outage
            print(f"[vsbench] could not log {name} to MLflow: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "state_dict.pt"
            path.write_bytes(buffer.getvalue())
            self.log_artifact(path, f"{name}_weights")
        return model_uri, model_id

    def end(self, status: str = "FINISHED") -> None:
        self._call("end_run", lambda: self._client.set_terminated(self.run_id, status))


def _client() -> Any:
    """The steps' MLflow client: :func:`vsbench.io.store.store_client`'s, every call bounded by
    ``VSBENCH_TRACKING_TIMEOUT`` (issue 54); a store that does not answer is a
    :class:`~vsbench.io.store.StoreError` naming its URI, which takes the tracker offline."""
    return store_client()


def ensure_experiment(client: Any, name: str) -> str:
    """The experiment's id, created if needed; marked as model training unless it already has a kind."""
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        location = os.environ.get(ARTIFACT_LOCATION_ENV) or None
        try:
            return client.create_experiment(name, artifact_location=location,
                                            tags={EXPERIMENT_KIND_TAG: MODEL_TRAINING_KIND})
        except StoreError:  # the store did not answer: asking again would cost the bound again
            raise
        except Exception:  # made meanwhile by another step: found below
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                raise
    if EXPERIMENT_KIND_TAG not in (experiment.tags or {}):  # one made before, or by hand: a kind a user set stays
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING_KIND)
    return experiment.experiment_id


def dataset_input(name: str, digest: str, source: str, context: str, profile: Mapping[str, Any] | None = None) -> Any:
    """An MLflow ``DatasetInput`` naming data by its digest and location (``s3://`` or a local path)."""
    import json

    from mlflow.entities import Dataset, DatasetInput, InputTag

    source_type = "s3" if source.startswith("s3://") else "local"
    dataset = Dataset(name=name, digest=digest[:36], source_type=source_type, source=json.dumps({"uri": source}),
                      profile=json.dumps(dict(profile)) if profile else None)
    return DatasetInput(dataset, tags=[InputTag(DATASET_CONTEXT_TAG, context)])


def tracking_uri() -> str:
    import mlflow

    return mlflow.get_tracking_uri()


def open_parent_run(experiment: str, kfp_run_id: str, pipeline: str, params: Mapping[str, Any],
                    source: str = "kfp") -> str:
    """Find or create the parent run of a pipeline run; returns its id, or "" when offline.

    Looking the run up by its KFP run id makes a retried first step reuse the same parent. The run is
    named and tagged like a command's run (:mod:`vsbench.tracking.command`), so both compare side by side.
    A command whose steps log as they go (``abid train --backend trainjob``) opens its parent here too,
    with its run key for ``kfp_run_id`` and ``source`` "cli".
    """
    if tracking_disabled():
        return ""
    try:
        client = _client()
        experiment_id = ensure_experiment(client, experiment)
        existing = find_parent_run(client, experiment, kfp_run_id)
        if existing:
            return existing
        run = client.create_run(experiment_id, run_name=f"{pipeline}-{kfp_run_id}",
                                tags={KFP_RUN_TAG: kfp_run_id, PIPELINE_TAG: pipeline, STEP_TAG: "pipeline",
                                      SOURCE_TAG: source, RUN_KEY_TAG: kfp_run_id, **code_tags(),
                                      **_image_tags(), **_param_tags(params)})
    except Exception as exc:  # noqa: BLE001
        Tracker(None, None)._go_offline(f"open parent run: {type(exc).__name__}: {exc}")
        return ""
    tracker = Tracker(run.info.run_id, client)
    tracker.log_params({k: v for k, v in params.items() if k != "data_tags"})
    data = data_of_tags(_param_tags(params), str(params.get("benchmark") or ""))
    if data is not None:
        tracker.log_dataset(*data, context="evaluation")
    return run.info.run_id


def data_of_tags(tags: Mapping[str, str], name: str = "") -> tuple[str, str, str] | None:
    """(name, digest, location) of the data a run's provenance tags describe, for its dataset input."""
    from vsbench.tracking.provenance import DATA_DIGEST_TAG, DATA_ROOT_TAG

    digest = tags.get(DATA_DIGEST_TAG, "")
    if not digest:
        return None
    root = tags.get(DATA_ROOT_TAG, "")
    return name or (Path(root.split(", ")[0]).name if root else "data"), digest, root


@contextmanager
def child_run(parent_run_id: str, step: str, params: Mapping[str, Any] | None = None) -> Iterator[Tracker]:
    """A child run of ``parent_run_id`` in the parent's experiment (not the Default one).

    Marked FAILED when the body raises, FINISHED otherwise. With no parent (offline pipeline or
    a plain CLI call) the tracker is offline and every logging call is a no-op.
    """
    tracker = Tracker(None, None)
    if parent_run_id and not tracking_disabled():
        try:
            client = _client()
            parent = client.get_run(parent_run_id)
            run = client.create_run(
                parent.info.experiment_id, run_name=step,
                tags={PARENT_TAG: parent_run_id, STEP_TAG: step,
                      KFP_RUN_TAG: parent.data.tags.get(KFP_RUN_TAG, ""),
                      PIPELINE_TAG: parent.data.tags.get(PIPELINE_TAG, ""), **_image_tags(),
                      # a step may run on another node than the parent's (a GPU node): its own machine
                      **machine_tags()},
            )
            tracker = Tracker(run.info.run_id, client)
        except Exception as exc:  # noqa: BLE001
            tracker._go_offline(f"open child run {step}: {type(exc).__name__}: {exc}")
    if params:
        tracker.log_params(params)
    try:
        yield tracker
    except BaseException:
        tracker.end("FAILED")
        raise
    tracker.end("FINISHED")


def log_to_parent(parent_run_id: str, metrics: Mapping[str, float]) -> None:
    """Headline metrics on the parent run too, so pipeline runs compare side by side in MLflow."""
    tracker = _tracker_of(parent_run_id, "parent metrics")
    if tracker is not None:
        tracker.log_metrics(metrics)


def parent_tracker(parent_run_id: str) -> Tracker:
    """A tracker on the pipeline's parent run (offline when there is none), for datasets and models the
    whole run should show, not only the step that made them."""
    return _tracker_of(parent_run_id, "parent run") or Tracker(None, None)


def _tracker_of(run_id: str, what: str) -> Tracker | None:
    """A tracker on an existing run, or None (no run, tracking off, or the store unreachable: said once)."""
    if not run_id or tracking_disabled():
        return None
    try:
        return Tracker(run_id, _client())
    except Exception as exc:  # noqa: BLE001 - any tracking failure degrades to offline
        Tracker(None, None)._go_offline(f"{what}: {type(exc).__name__}: {exc}")
        return None


def log_artifact_to_run(run_id: str, path: Path, artifact_file: str) -> None:
    """One file onto an existing run under the name ``artifact_file`` (e.g. ``report.html``: KFP
    names its output files after the output, without an extension); never raises."""
    tracker = _tracker_of(run_id, "artifact")
    if tracker is None:
        return
    directory, _, name = artifact_file.rpartition("/")
    with tempfile.TemporaryDirectory() as tmp:
        renamed = Path(tmp) / name
        renamed.write_bytes(path.read_bytes())
        tracker.log_artifact(renamed, directory or None)


def find_parent_run(client: Any, experiment: str, kfp_run_id: str) -> str | None:
    experiment_obj = client.get_experiment_by_name(experiment)
    if experiment_obj is None:
        return None
    runs = client.search_runs(
        [experiment_obj.experiment_id],
        filter_string=f"tags.`{KFP_RUN_TAG}` = '{kfp_run_id}' and tags.`{STEP_TAG}` = 'pipeline'",
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


def parent_run_for(experiment: str, kfp_run_id: str) -> str:
    """The parent run of a pipeline run, found by its KFP run id ("" when offline or not found).

    Steps inside a ParallelFor use this instead of taking the parent id from the opening task:
    kfp.local (2.17) hands such steps the loop item in place of an upstream task's output."""
    if tracking_disabled():
        return ""
    try:
        return find_parent_run(_client(), experiment, kfp_run_id) or ""
    except Exception as exc:  # noqa: BLE001
        Tracker(None, None)._go_offline(f"find parent run: {type(exc).__name__}: {exc}")
        return ""


def close_parent_run(experiment: str, kfp_run_id: str, succeeded: bool) -> str:
    """Mark the parent run of ``kfp_run_id`` FINISHED or FAILED; returns its id ("" if none/offline)."""
    if tracking_disabled():
        return ""
    try:
        client = _client()
        run_id = find_parent_run(client, experiment, kfp_run_id)
    except Exception as exc:  # noqa: BLE001
        Tracker(None, None)._go_offline(f"close parent run: {type(exc).__name__}: {exc}")
        return ""
    if run_id is None:
        return ""
    Tracker(run_id, client).end("FINISHED" if succeeded else "FAILED")
    return run_id
