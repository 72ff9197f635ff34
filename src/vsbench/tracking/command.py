"""MLflow runs of commands (``vsbench similarity run``, ``vsbench score ...``), kept safe from the store.

A command's numbers are its product; MLflow is where they are compared. So the order is: the
command finishes its benchmark and writes its own files (metrics.json, the benchmark's CSV, plots),
then writes a *run bundle* (``mlflow-run.json``: params, metrics, tags, artifact paths) next to
them, and only then uploads the bundle, in a background thread that it waits for at most
``VSBENCH_TRACKING_TIMEOUT`` seconds (default 30). A store that is down, refuses, or accepts and
never answers therefore costs a benchmark at most that bound; the bundle stays, and
``vsbench track upload DIR`` uploads it later (idempotently: the run is found again by its key).

The upload treats a bundle as data, never as instructions (:mod:`vsbench.tracking.bundles`): it
is checked whole before the store is contacted, names artifacts only in its own folder, never
chooses the store (``MLFLOW_TRACKING_URI`` or the default does), and carries the digest of its
content, which the run it creates keeps as a tag: a bundle may complete only the run it made.

Command runs and pipeline runs share one naming scheme: run name ``<pipeline>-<run key>`` (after
``<benchmark> · <model>`` for a similarity command, whose evaluations are runs of their own under
it: :mod:`vsbench.tracking.evaluations`), tags
``vsbench.step`` = ``pipeline`` and ``vsbench.pipeline`` = ``vsbench-similarity``, ``vsbench-abid``,
``vsbench-score``..., so ``vsbench compare`` lists them side by side; ``vsbench.source`` says
``cli`` or ``kfp``. With no ``MLFLOW_TRACKING_URI`` the store is a local sqlite file under
``VSBENCH_HOME`` (default ``~/.vsbench``), and the command says where.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from vsbench.io.storage import atomic_write_json
from vsbench.io.store import TIMEOUT_ENV, tracking_timeout
from vsbench.io.terminal import command, labelled, wrap
from vsbench.tracking.config import (
    ARTIFACT_LOCATION_ENV,
    disable_tracking,
    tracking_disabled,
)
from vsbench.tracking.evaluations import Evaluation, failed_on_error, log_evaluations
from vsbench.tracking.provenance import IMAGE_TAG, PIPELINE_TAG, RUN_KEY_TAG, SOURCE_TAG, STEP_TAG, code_tags
from vsbench.tracking.runs import _image_tags, data_of_tags, dataset_input, ensure_experiment

BUNDLE_NAME = "mlflow-run.json"
BUNDLE_SUFFIX = ".mlflow-run.json"
HOME_ENV = "VSBENCH_HOME"
UPLOAD_HINT = "vsbench track upload"
_BATCH = 100  # MLflow's log_batch takes at most 100 params (and 1000 metrics) per call


def vsbench_home() -> Path:
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".vsbench").expanduser().resolve()


def resolve_store(announce: Callable[[str], None] = print) -> str:
    """The tracking URI: ``MLFLOW_TRACKING_URI`` when set; otherwise the local default store, which is
    then put in the environment (pipeline steps inherit it) and announced."""

    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if uri:
        return uri
    home = vsbench_home()
    home.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{home / 'mlflow.db'}"
    os.environ["MLFLOW_TRACKING_URI"] = uri
    os.environ.setdefault(ARTIFACT_LOCATION_ENV, str(home / "mlartifacts"))
    announce("\n".join(["MLflow: no MLFLOW_TRACKING_URI set; tracking in the local store", f"  {uri}",
                         "  see it with:", *command(["mlflow", "ui", "--backend-store-uri", uri])]))
    return uri


def new_run_key() -> str:
    """A command run's key: UTC time and a random suffix (a pipeline run's key is its KFP run id)."""
    return f"cli-{datetime.now(UTC):%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class Outcome:
    """What became of a run bundle: ``run_id`` when it reached MLflow, else ``error``."""

    bundle: Path
    run_id: str = ""
    tracking_uri: str = ""
    error: str = ""
    experiment_id: str = ""
    evaluations: int = 0  # evaluation runs under it: the evaluations view is worth a link
    benchmarks: tuple[str, ...] = ()  # the benchmarks evaluated: each has a leaderboard view

    @property
    def uploaded(self) -> bool:
        return bool(self.run_id)


def _finite(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in metrics.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))}


def write_bundle(path: Path, *, experiment: str, pipeline: str, params: Mapping[str, Any],
                 metrics: Mapping[str, Any], tags: Mapping[str, str] | None = None,
                 artifacts: Mapping[str, str] | None = None, started: float | None = None,
                 run_key: str | None = None, evaluations: Sequence[Evaluation] = (), title: str = "") -> Path:
    """Write a run bundle (atomically): everything the MLflow run will hold, and its content digest.

    ``artifacts`` maps a file to the artifact folder it goes in ("" for the run's root); each must
    lie in the bundle's folder (one outside is left out, said on stderr: the upload would refuse
    it, and tracking never fails a benchmark) and is recorded
    relative to it, with its size and sha256, so the folder can move and a file changed later is
    caught. ``started`` is the run's start (``time.time()``). The digest
    (:func:`vsbench.tracking.bundles.content_digest`) is what lets a later upload tell this bundle
    from a forged one for the same run key (:mod:`vsbench.tracking.bundles`). ``evaluations`` become
    runs of their own under this one (:mod:`vsbench.tracking.evaluations`); ``title`` starts the run's
    name (``disc · efficientnet_lite0``), so the runs list says what ran before when."""
    from vsbench.tracking.bundles import DIGEST_TAG, file_sha256, redact_uri, sealed_bundle

    key = run_key or new_run_key()
    now = time.time()
    folder = path.resolve().parent
    files = []
    for file, where in (artifacts or {}).items():
        real = Path(file).resolve()
        if not real.is_file():
            continue
        if not real.is_relative_to(folder):  # the upload would refuse it; the benchmark's numbers still go
            print(f"[vsbench] {file} is outside the run bundle's folder {folder}: not recorded as an artifact",
                  file=sys.stderr)
            continue
        files.append({"path": real.relative_to(folder).as_posix(), "folder": where,
                      "size": real.stat().st_size, "sha256": file_sha256(real)})
    tags = {STEP_TAG: "pipeline", PIPELINE_TAG: pipeline, SOURCE_TAG: "cli",
            **code_tags(), **_image_tags(), **{str(k): str(v) for k, v in (tags or {}).items()}}
    tags.setdefault(IMAGE_TAG, "host venv")
    tags[RUN_KEY_TAG] = key  # the run is found by this tag: never another value
    tags.pop(DIGEST_TAG, None)  # set by the upload from the digest below
    bundle = sealed_bundle(
        format=1, experiment=experiment, pipeline=pipeline, run_key=key,
        run_name=f"{title}{' · ' if title else ''}{pipeline}-{key}"[:250],
        start_ms=int((started or now) * 1000), end_ms=int(now * 1000),
        tracking_uri=redact_uri(os.environ.get("MLFLOW_TRACKING_URI", "")),
        params={str(k): str(v)[:6000] for k, v in params.items()}, metrics=_finite(metrics), tags=tags,
        artifacts=files, uploaded=None, evaluations=list(evaluations))
    atomic_write_json(path, bundle.as_file())
    return path


def read_bundle(path: Path) -> dict[str, Any]:
    """A bundle's fields after the checks that need only the file (size cap, counts, types);
    :class:`~vsbench.io.inputs.InputError` naming the file and field otherwise."""
    from vsbench.tracking.bundles import parse_bundle

    return parse_bundle(path).model_dump()


def find_bundles(location: Path) -> list[Path]:
    """The run bundles at ``location``: the file itself, or the bundles in a folder and in its
    kfp run folders (``_kfp/*/``, ``kfp/*/``)."""
    if location.is_file():
        return [location]
    if not location.is_dir():
        raise FileNotFoundError(f"{location}: no such file or folder")
    patterns = [BUNDLE_NAME, f"*{BUNDLE_SUFFIX}", f"*/{BUNDLE_NAME}", f"*/*/{BUNDLE_NAME}"]
    return sorted({p for pattern in patterns for p in location.glob(pattern)})


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i:i + size] for i in range(0, len(items), size)] or [[]]


class BundleRefused(ValueError):
    """A bundle whose run key names an MLflow run it did not make (see :mod:`vsbench.tracking.bundles`)."""


def upload_bundle(path: Path, tracking_uri: str | None = None, model_files: bool = False) -> str:
    """Create (or complete) the bundle's MLflow run; returns its id. Raises on any tracking error
    (see :func:`_upload`)."""
    return _upload(path, tracking_uri, model_files)[0]


def _upload(path: Path, tracking_uri: str | None = None,
            model_files: bool = False) -> tuple[str, str, int, tuple[str, ...]]:
    """:func:`upload_bundle`, returning (run id, experiment id, evaluation runs, benchmarks) for the links printed.

    The store is ``tracking_uri`` (the caller's choice: ``--tracking-uri``), else
    ``MLFLOW_TRACKING_URI``, else the local default store: never the URI the bundle names. Every
    check of the bundle (:func:`~vsbench.tracking.bundles.parse_bundle`,
    :func:`~vsbench.tracking.bundles.verify_bundle`) passes before MLflow is contacted. The run is
    looked up by its key first: a run made from this same bundle (its digest tag equal) is completed
    (what it already holds is not logged again, so uploading twice leaves one run and one value per
    metric); a run with that key and another digest, or none, is refused (:class:`BundleRefused`). A
    run this call created or completed and could not finish is ended FAILED, never left RUNNING.
    The bundle's evaluations become child runs (completed the same way); ``model_files``: upload the
    model files their options name as the LoggedModels' artifacts (only when the command that just
    wrote the bundle uploads it: a later upload never reads files outside the bundle's folder)."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.bundles import DIGEST_TAG, Uploaded, check_run_key, parse_bundle, redact_uri, verify_bundle

    bundle = parse_bundle(path)
    digest, files = verify_bundle(path, bundle)
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "").strip() or resolve_store(lambda _: None)
    client = MlflowClient(uri)
    experiment_id = ensure_experiment(client, bundle.experiment)
    key = check_run_key(bundle.run_key)
    found = client.search_runs([experiment_id], filter_string=f"tags.`{RUN_KEY_TAG}` = '{key}'", max_results=2)
    if found:
        run = found[0]
        recorded = run.data.tags.get(DIGEST_TAG, "")
        if len(found) > 1 or recorded != digest:
            why = ("several runs" if len(found) > 1 else
                   "a run not made from a bundle" if not recorded else "a run made from a different bundle")
            raise BundleRefused(f"{path}: run key {key} names {why} ({run.info.run_id}) in {uri}; refused: a bundle "
                                "may only complete the run it made (this one was edited or is not the original)")
        run_id = run.info.run_id
        have_params, have_metrics = set(run.data.params), set(run.data.metrics)
    else:
        run_id = client.create_run(experiment_id, start_time=bundle.start_ms, run_name=bundle.run_name,
                                   tags={**bundle.tags, RUN_KEY_TAG: key, DIGEST_TAG: digest}).info.run_id
        have_params, have_metrics = set(), set()
        data = data_of_tags(bundle.tags, bundle.params.get("benchmark", ""))
        if data is not None:  # the data it scored, in the run page's Datasets section
            client.log_inputs(run_id, datasets=[dataset_input(*data, context="evaluation")])
    with failed_on_error(client, run_id):
        params = [Param(k, v) for k, v in bundle.params.items() if k not in have_params]
        metrics = [Metric(k, v, bundle.end_ms, 0) for k, v in bundle.metrics.items() if k not in have_metrics]
        for chunk in _chunks(params, _BATCH):
            client.log_batch(run_id, params=chunk)
        for chunk in _chunks(metrics, 10 * _BATCH):
            client.log_batch(run_id, metrics=chunk)
        for real, folder in files:
            client.log_artifact(run_id, str(real), folder or None)
        log_evaluations(client, run_id, bundle.evaluations, tags=bundle.tags, timestamp_ms=bundle.end_ms,
                        started_ms=bundle.start_ms, upload_files=model_files)
        client.set_terminated(run_id, "FINISHED", end_time=bundle.end_ms)
    done = bundle.model_copy(update={"uploaded": Uploaded(run_id=run_id, tracking_uri=redact_uri(uri),
                                                          at=datetime.now(UTC).isoformat())})
    atomic_write_json(path, done.as_file())
    return run_id, experiment_id, len(bundle.evaluations), tuple(dict.fromkeys(e.benchmark for e in bundle.evaluations))


def upload_within(path: Path, timeout: float | None = None, tracking_uri: str | None = None,
                  model_files: bool = False) -> Outcome:
    """:func:`upload_bundle` in a daemon thread, waited for at most ``timeout`` seconds.

    A hung store leaves the thread blocked on its socket; the process does not wait for it (daemon),
    so the command ends on time and the bundle says it was not uploaded."""
    uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI", "")
    done, error = _within(lambda: _upload(path, uri or None, model_files), timeout, "vsbench-mlflow-upload")
    run_id, experiment_id, evaluations, benchmarks = done or ("", "", 0, ())
    return Outcome(path, run_id, uri, error, experiment_id, evaluations, benchmarks)


def _within(work: Callable[[], Any], timeout: float | None, name: str) -> tuple[Any, str]:
    """(``work()``'s value, "") when it returns within ``timeout`` seconds (default
    :func:`tracking_timeout`), else (None, why not). It runs in a daemon thread: a hung store
    leaves that thread blocked on its socket, and the process does not wait for it."""
    timeout = tracking_timeout() if timeout is None else timeout
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - any failure means "not now"
            result["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return None, f"no answer within {timeout:g} s ({TIMEOUT_ENV})"
    return result.get("value"), result.get("error", "")


def ui_links(outcome: Outcome) -> list[str]:
    """Where to see the run in MLflow's UI: its page and, when it holds evaluations, the experiment's
    evaluations view (one line per evaluation over the nights, :mod:`vsbench.tracking.views`). A local
    store needs ``mlflow ui`` first: the lines say how.

    Each link is a short label, then the URL alone on the next line (issue 57): the URLs run to
    110-170 characters, which a 100-column terminal wrapped mid-URL after the label; alone on its
    line a URL stays whole and clickable, and every other line fits (:mod:`vsbench.io.terminal`)."""
    from vsbench.tracking.bundles import redact_uri
    from vsbench.tracking.views import evaluations_page, leaderboard_page, run_page, served

    if not outcome.experiment_id:
        return []
    uri = redact_uri(outcome.tracking_uri)
    lines = ["  run page:", f"    {run_page(outcome.run_id, outcome.experiment_id, uri)}"]
    for benchmark in outcome.benchmarks:
        lines += [f"  leaderboard ({benchmark}, best first):",
                  f"    {leaderboard_page(outcome.experiment_id, benchmark, uri)}"]
    for benchmark in outcome.benchmarks if outcome.evaluations else ():
        lines += [f"  evaluations ({benchmark}, every night, a line per evaluation):",
                  f"    {evaluations_page(outcome.experiment_id, benchmark, uri)}"]
    if not served(uri):
        lines += ["  serve the store first:",
                  *command([str(Path(sys.executable).with_name("mlflow")), "ui", "--backend-store-uri", uri])]
    return lines


def describe(outcome: Outcome, kept: Path | None = None) -> str:
    """A few lines for the user: where the run is, or why not and how to upload it later. Within 100
    columns, but for a URL, a path or a command that stands alone on its line (issue 57)."""
    if outcome.uploaded:
        from vsbench.tracking.bundles import redact_uri

        return "\n".join([*labelled(f"MLflow run {outcome.run_id} in", redact_uri(outcome.tracking_uri), ""),
                          *ui_links(outcome)])
    where = f"{kept} and {outcome.bundle}" if kept else str(outcome.bundle)
    return "\n".join([*wrap(f"MLflow unavailable at {outcome.tracking_uri or '(default)'}: {outcome.error}", "", "  "),
                      *wrap(f"the numbers are kept in {where}; upload them later with:", "  ", "  "),
                      *command([*UPLOAD_HINT.split(), str(outcome.bundle)])])


def record_command_run(bundle: Path, *, experiment: str, pipeline: str, params: Mapping[str, Any],
                       metrics: Mapping[str, Any], tags: Mapping[str, str] | None = None,
                       artifacts: Mapping[str, str] | None = None, started: float | None = None,
                       kept: Path | None = None, announce: Callable[[str], None] = print,
                       evaluations: Sequence[Evaluation] = (), title: str = "") -> Outcome | None:
    """Write the bundle and upload it within the bound; ``None`` when tracking is off (``--no-track``).

    Never raises for tracking reasons; says what happened through ``announce``."""
    if tracking_disabled():
        return None
    resolve_store(announce)
    write_bundle(bundle, experiment=experiment, pipeline=pipeline, params=params, metrics=metrics, tags=tags,
                 artifacts=artifacts, started=started, evaluations=evaluations, title=title)
    outcome = upload_within(bundle, model_files=True)
    announce(describe(outcome, kept))
    return outcome


def probe_store(timeout: float | None = None) -> str:
    """"" when the tracking store answers (a cheap search) within the bound, else why not.

    Pipelines probe first: their steps log as they go, so a store found down is switched off for
    the whole run (the numbers stay in the step manifests) instead of costing every step a timeout."""
    def search() -> None:
        from mlflow.tracking import MlflowClient

        MlflowClient().search_experiments(max_results=1)

    return _within(search, timeout, "vsbench-mlflow-probe")[1]


def prepare_pipeline_tracking(track: bool, announce: Callable[[str], None] = print) -> bool:
    """Before a pipeline runs: off with ``--no-track``; else the store (default announced) is probed,
    and a store that is down turns tracking off for the run. Returns whether the run is tracked."""
    if not track or tracking_disabled():
        disable_tracking()
        return False
    uri = resolve_store(announce)
    error = probe_store()
    if error:
        announce(f"MLflow unavailable at {uri}: {error}\n"
                 "  the pipeline runs untracked; its numbers are kept locally (the bundle path follows)")
        disable_tracking()
        return False
    return True


def keep_for_later(bundle: Path, announce: Callable[[str], None] = print, **run: Any) -> Path:
    """Write a bundle that was not uploaded (the store was down) and say how to upload it."""
    write_bundle(bundle, **run)
    announce(f"  MLflow run kept in {bundle}; upload it later with: {UPLOAD_HINT} {bundle}")
    return bundle
