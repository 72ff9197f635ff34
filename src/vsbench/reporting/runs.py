"""Pipeline runs from MLflow as one shape: every parent run (tag ``vsbench.step`` = ``pipeline``) and
its evaluation runs as :class:`RunRecord` s, one per (model, benchmark), and what each says of where it ran.

Parent runs (tag ``vsbench.step`` = ``pipeline``) pick what counts: ``last`` and ``pipeline`` select
them, and step-level noise (throughput, per-epoch curves) stays out of the leaderboard.

Two layouts are read
--------------------
* Since issue 38 a similarity score is an *evaluation run* nested under its parent (tag
  ``vsbench.step`` = ``evaluation``, :mod:`vsbench.tracking.evaluations`): plain metric names, the
  model, its options and the variant in tags. Its record's model is ``<model> [<options>] · <variant>``
  (``efficientnet_lite0 {"bins":4} · Flat · none``): options and variants never share a column, and
  a metric's direction is the run's own ``vsbench.lower_is_better`` tag, not the installed registry.
* Runs logged before keep every number on the parent under a long name, split as below; their
  directions come from the registry the caller hands over and the words (rmse, loss, ...).

Which (model, benchmark) a parent-run metric belongs to
-------------------------------------------------------
* ``<benchmark>__<model>__<metric>`` (at least three ``__``-separated parts) belongs to that pair;
  ``<metric>`` may itself hold ``__`` (a variant: ``Flat__1.00_0_2__uap``). Every evaluate step logs
  this shape on its parent, so a nightly run, which scores many pairs under one parent, and a
  similarity run, which scores one, read the same way. Benchmark and model names must therefore not
  contain ``__`` themselves (single underscores are fine: ``abid_embeddings``, ``dino_vits16``).
* Any other metric name belongs to the run's own pair: its ``model`` and ``benchmark`` params when
  it has them (``open_parent_run(params)``), else ``baselines`` on ``abid`` for the ABID pipeline
  (its parent carries ``counting_accuracy``, ``counting_rmse``, ...), else ``-`` on the pipeline's name.
* Metrics about the run rather than a model (``regression_drops``) are left out.

Baselines beside the scores
---------------------------
A score means little without its trivial answer: the ABID pipeline logs the majority-class, always-yes
and asin-prior accuracies beside its scores (:data:`BASELINES`), and a similarity run with untrained
weights is tagged ``vsbench.baseline`` = ``random-features`` (its model shows as ``<model> (random
features)``). The report draws both as dashed reference lines in the panels of the scores they explain.

:func:`collect_runs` splits every parent run into one :class:`RunRecord` per pair, so the leaderboard
and the report see a single shape whatever pipeline produced the run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from vsbench.reporting.significance import ABID_SCORE_STEP
from vsbench.tracking.evaluations import (
    BENCHMARK_TAG,
    EVALUATION_STEP,
    LOWER_TAG,
    MODEL_OPTIONS_TAG,
    MODEL_TAG,
    NAME_JOIN,
    SPLIT_TAG,
    VARIANT_TAG,
    model_label,
    readable_label,
)
from vsbench.tracking.failures import SheetFiles, sheets_on_run
from vsbench.tracking.names import (
    LOWER_IS_BETTER_WORDS,
    interval_name,
    is_summary_metric,
    lower_is_better,
    split_run_metric,
)
from vsbench.tracking.provenance import (
    BASELINE_TAG,
    DATA_DIGEST_TAG,
    DATA_FILES_TAG,
    DATA_ROOT_TAG,
    GIT_COMMIT_TAG,
    HOST_TAG,
    IMAGE_ID_TAG,
    IMAGE_TAG,
    KFP_RUN_TAG,
    MACHINE_TAG,
    PARENT_TAG,
    PIPELINE_TAG,
    PROFILE_TAG,
    SOURCE_TAG,
    STEP_TAG,
    VERSION_TAG,
)
from vsbench.tracking.units import UNITS_TAG

ABID_PIPELINE = "vsbench-abid"


# Logged on a parent run by the regression check: it describes the run, not a model.
BOOKKEEPING_METRICS = frozenset({"regression_drops"})


LOWER_IS_BETTER = LOWER_IS_BETTER_WORDS


# score -> its trivial baselines (metric name -> label), as the ABID pipeline logs them on its parent run.
BASELINES: dict[str, dict[str, str]] = {
    "counting_accuracy": {"counting_majority_accuracy": "majority class"},
    "verification_accuracy": {"verification_always_yes_accuracy": "always yes"},
    "quantity_accuracy": {"quantity_always_yes_accuracy": "always yes", "quantity_prior_only_accuracy": "asin prior"},
}


BASELINE_OF = {baseline: score for score, names in BASELINES.items() for baseline in names}


RANDOM_FEATURES = " (random features)"


LEADERBOARD_COLUMNS = ["benchmark", "metric", "model", "value", "best", "higher_is_better", "runs", "run_id",
                       "start_time", "experiment_id",
                       # issue 45: the value's 95% interval (NaN: none logged), the run holding its unit files
                       # ("" : none), and the test against the best (leaderboard.mark_indistinguishable)
                       "low", "high", "units_run_id", "p_value", "test", "indistinguishable", "diff_low", "diff_high",
                       # issue 55: the interval's edge note (the run's tag interval_note.<metric>; "" : none), and
                       # the difference's from the best (few draws, zero width, resamples left out; "" : none)
                       "note", "diff_note"]


# benchmark -> the metrics its spec declares lower-is-better (benchmarks.registry.lower_is_better_metrics():
# the registry sits above reporting, so whoever calls a report hands it over; a plugin's included)
LowerIsBetter = Mapping[str, Collection[str]]


def higher_is_better(metric: str, lower: Collection[str] = ()) -> bool:
    """Accuracies, mAPs, recalls: higher is better; errors, losses and timings: lower, and so is a
    metric its benchmark declares lower-is-better (``lower``: ``mean_rank`` names ``l2__mean_rank`` too)."""
    return not lower_is_better(metric, lower)


@dataclass(frozen=True)
class RunRecord:
    """The metrics of one (model, benchmark) pair in one pipeline run (a parent run may yield several)."""

    run_id: str
    start_time: datetime
    pipeline: str
    model: str
    benchmark: str
    metrics: dict[str, float]
    tags: dict[str, str]
    params: dict[str, str] = field(default_factory=dict)
    experiment_id: str = ""
    # An evaluation run's (issue 38): the metrics its tag says are lower-is-better (None: an older run,
    # its directions come from the benchmark registry and the words), and the run it is nested under.
    lower_is_better: frozenset[str] | None = None
    parent_run_id: str = ""
    # The run whose unit files (tag vsbench.units) recompute these metrics: an evaluation run itself,
    # the ABID pipeline's score step for its parent's scores; "" when none (issue 45).
    units_run_id: str = ""

    def higher_is_better(self, metric: str, lower: LowerIsBetter | None = None) -> bool:
        """The metric's direction: the run's own tag when it has one, else its benchmark's declaration
        (``lower``) and the words."""
        if self.lower_is_better is not None:
            return metric not in self.lower_is_better
        return higher_is_better(metric, (lower or {}).get(self.benchmark, ()))


def split_metrics(metrics: Mapping[str, float], params: Mapping[str, str],
                  pipeline: str) -> dict[tuple[str, str], dict[str, float]]:
    """(model, benchmark) -> {metric: value} for one parent run's metrics (see the module docstring)."""
    if "model" in params or "benchmark" in params:
        own = (params.get("model", "-"), params.get("benchmark", pipeline))
    elif pipeline == ABID_PIPELINE:
        own = ("baselines", "abid")
    else:
        own = ("-", pipeline)
    pairs: dict[tuple[str, str], dict[str, float]] = {}
    for name, value in metrics.items():
        if name in BOOKKEEPING_METRICS or is_summary_metric(name):
            continue
        split = split_run_metric(name)
        if split is not None:
            benchmark, model, metric = split
            pairs.setdefault((model, benchmark), {})[metric] = value
        else:
            pairs.setdefault(own, {})[name] = value
    return pairs


def _client():
    from vsbench.io.store import store_client

    return store_client()  # every call bounded by VSBENCH_TRACKING_TIMEOUT (issue 54)


def experiment_id(client: Any, experiment: str) -> str:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no MLflow experiment named {experiment!r} at {client.tracking_uri}")
    return found.experiment_id


def parent_run_filter(pipeline: str | None = None, *, finished: bool = True) -> str:
    """The search filter for pipeline parent runs (optionally of one pipeline, only FINISHED ones)."""
    clauses = [f"tags.`{STEP_TAG}` = 'pipeline'"]
    if finished:
        clauses.append("attributes.status = 'FINISHED'")
    if pipeline:
        if "'" in pipeline:
            raise ValueError(f"pipeline name may not contain a quote: {pipeline!r}")
        clauses.append(f"tags.`{PIPELINE_TAG}` = '{pipeline}'")
    return " and ".join(clauses)


def _records(run: Any) -> list[RunRecord]:
    """A parent run's own metrics as records: all of a run logged before issue 38, the ABID
    pipeline's headline scores, nothing of a similarity run's since (its evaluations hold them)."""
    start = datetime.fromtimestamp(run.info.start_time / 1000, tz=UTC)
    tags = dict(run.data.tags)
    pipeline = tags.get(PIPELINE_TAG, "")
    params = dict(run.data.params)
    pairs = split_metrics(run.data.metrics, params, pipeline)
    suffix = RANDOM_FEATURES if tags.get(BASELINE_TAG) == "random-features" else ""
    return [RunRecord(run.info.run_id, start, pipeline, _with_options(model, params) + suffix, benchmark, metrics,
                      tags, params, str(run.info.experiment_id))
            for (model, benchmark), metrics in sorted(pairs.items())]


def _with_options(model: str, params: Mapping[str, str]) -> str:
    """A run's own model with the options its params name (an older run's ``model_options``), so two
    option sets of one model stay two columns."""
    import json

    if model != params.get("model") or params.get("model_options", "{}") in ("", "{}"):
        return model
    try:
        options = json.loads(params["model_options"])
    except ValueError:
        return f"{model} {params['model_options']}"
    return model_label(model, options) if isinstance(options, dict) else model

def display_name(model: str) -> str:
    """A model's column as MLflow names it: ``resnet34-random · Flat · none`` for the record's
    ``resnet34 {"weights":"random"} · Flat · none`` (the options JSON read as data, then
    :func:`~vsbench.tracking.evaluations.readable_label`). Why: the raw JSON is what a person cannot
    match with the run names they see in MLflow (issue 57); the full label stays in the cell's tooltip."""
    name, space, rest = model.partition(" ")
    if not space or not rest.startswith("{"):
        return model
    try:
        options, end = json.JSONDecoder().raw_decode(rest)
    except ValueError:
        return model
    if not isinstance(options, dict):
        return model
    return readable_label(name, options) + rest[end:]


def evaluation_record(run: Any, parent: Any | None = None) -> RunRecord:
    """An evaluation run (issue 38) as a record: its plain metrics under its model, options and
    variant (``efficientnet_lite0 · Flat · none``), its directions from its own tag."""
    tags = {**(dict(parent.data.tags) if parent is not None else {}), **dict(run.data.tags)}
    options = tags.get(MODEL_OPTIONS_TAG, "{}")
    label = tags.get(MODEL_TAG, "-") + ("" if options in ("", "{}") else f" {options}")
    variant, benchmark = tags.get(VARIANT_TAG, "-"), tags.get(BENCHMARK_TAG, "-")
    split = run.data.tags.get(SPLIT_TAG, "")
    if split:  # a split is other data of the same model (issue 57): the benchmark's, not the model's
        parts = variant.split(NAME_JOIN)
        if split in parts:
            parts.remove(split)
        variant, benchmark = NAME_JOIN.join(parts) or "-", f"{benchmark}{NAME_JOIN}{split}"
    suffix = RANDOM_FEATURES if tags.get(BASELINE_TAG) == "random-features" else ""
    return RunRecord(run.info.run_id, datetime.fromtimestamp(run.info.start_time / 1000, tz=UTC),
                     tags.get(PIPELINE_TAG, ""), f"{label}{NAME_JOIN}{variant}{suffix}" if variant != "-" else label + suffix,
                     benchmark, dict(run.data.metrics), tags, dict(run.data.params),
                     str(run.info.experiment_id),
                     frozenset(filter(None, tags.get(LOWER_TAG, "").split(","))),
                     tags.get(PARENT_TAG, ""), run.info.run_id if run.data.tags.get(UNITS_TAG) else "")


def evaluation_runs(client: Any, experiment_ids: list[str]) -> dict[str, list[Any]]:
    """parent run id -> its FINISHED evaluation runs, in ``experiment_ids``."""
    return _finished_step_runs(client, experiment_ids, EVALUATION_STEP)


def _finished_step_runs(client: Any, experiment_ids: list[str], step: str) -> dict[str, list[Any]]:
    """parent run id -> its FINISHED runs tagged ``vsbench.step = step``, every page read."""
    found: dict[str, list[Any]] = {}
    token = None
    while True:
        page = client.search_runs(experiment_ids, filter_string=f"tags.`{STEP_TAG}` = '{step}' and "
                                  "attributes.status = 'FINISHED'", max_results=1000, page_token=token)
        for run in page:
            found.setdefault(run.data.tags.get(PARENT_TAG, ""), []).append(run)
        token = page.token
        if not token:
            return found


def collect_runs(experiment: str, *, last: int | None = None, pipeline: str | None = None,
                 include_run_id: str | None = None) -> list[RunRecord]:
    """The FINISHED parent runs of ``experiment`` (newest first), one record per (model, benchmark).

    ``last`` keeps the ``last`` newest parent runs; ``pipeline`` keeps one pipeline's runs.
    ``include_run_id`` adds a run that has not finished yet, such as the nightly run writing its
    own report before its exit handler closes it; it counts towards ``last``.
    """
    if last is not None and last < 1:
        raise ValueError(f"last must be at least 1, got {last}")
    client = _client()
    ids = [experiment_id(client, experiment)]
    runs: list[Any] = []
    token = None
    while last is None or len(runs) < last:
        page = client.search_runs(ids, filter_string=parent_run_filter(pipeline),
                                  order_by=["attributes.start_time DESC"],
                                  max_results=min(last - len(runs), 1000) if last else 1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            break
    if include_run_id and all(run.info.run_id != include_run_id for run in runs):
        runs.append(client.get_run(include_run_id))
        runs.sort(key=lambda run: run.info.start_time, reverse=True)
        runs = runs[:last] if last else runs
    children = evaluation_runs(client, ids)
    scored = score_runs(client, ids)
    records: list[RunRecord] = []
    for run in runs:
        own = _records(run)
        if sum(r.benchmark == "abid" for r in own) == 1:  # several ABID models on one parent: whose units?
            own = [with_score_run(r, scored.get(run.info.run_id, [])) for r in own]
        records += [*own, *(evaluation_record(child, run) for child in children.get(run.info.run_id, []))]
    return records


def score_runs(client: Any, experiment_ids: list[str]) -> dict[str, list[Any]]:
    """parent run id -> its FINISHED ``abid-score`` step runs that name unit files (issue 45): the ABID
    pipeline keeps its scores on the parent and their per-question outcomes on this step."""
    return {parent: kept for parent, runs in _finished_step_runs(client, experiment_ids, ABID_SCORE_STEP).items()
            if (kept := [run for run in runs if run.data.tags.get(UNITS_TAG)])}


def with_score_run(record: RunRecord, scored: list[Any]) -> RunRecord:
    """An ABID parent's record with its score step's unit files and the intervals the step logged
    beside each score (when the parent lacks them). Only when the parent has exactly one such step and
    the record is ABID's: a night scoring several ABID models leaves them unattributed."""
    if record.benchmark != "abid" or len(scored) != 1 or record.units_run_id:
        return record
    step = scored[0]
    bounds = {name: value for name, value in step.data.metrics.items()
              if (split := interval_name(name)) is not None and split[0] in record.metrics and name not in record.metrics}
    return replace(record, units_run_id=step.info.run_id, metrics={**record.metrics, **bounds})


def sheet_run_id(record: RunRecord) -> str:
    """The run whose ``failures/`` holds a record's failure sheet (issue 47): the run of its unit files
    (an evaluation run itself, the ABID pipeline's score step), else an evaluation run itself; "" for
    the pairs a parent run holds itself (several pairs share that run: whose sheet would it be?)."""
    return record.units_run_id or (record.run_id if record.parent_run_id else "")


# A record -> its failure sheets (FailureSheets; a test hands over a plain function).
SheetFinder = Callable[[RunRecord], Sequence[SheetFiles]]


@dataclass
class FailureSheets:
    """Each record's failure sheets in MLflow (:func:`~vsbench.tracking.failures.sheets_on_run`), each
    run listed at most once. A run whose listing fails shows no sheet and keeps why in ``refused``
    (a report is not lost for a link)."""

    client: Any

    def __post_init__(self) -> None:
        self._found: dict[str, list[SheetFiles]] = {}
        self.refused: dict[str, str] = {}

    def __call__(self, record: RunRecord) -> list[SheetFiles]:
        run_id = sheet_run_id(record)
        if not run_id:
            return []
        if run_id not in self._found:
            try:
                self._found[run_id] = sheets_on_run(self.client, run_id)
            except Exception as exc:  # noqa: BLE001 - MLflow raises several types for an unreadable store
                self._found[run_id] = []
                self.refused[run_id] = f"run {run_id}: its failure sheets cannot be listed ({type(exc).__name__}: {exc})"
        return self._found[run_id]


def ran_in(record: RunRecord) -> str:
    """The image a run's steps ran in ("name (id)"), "host venv", or "-" for runs from before the tag."""
    image = record.tags.get(IMAGE_TAG, "-")
    image_id = record.tags.get(IMAGE_ID_TAG, "")
    return f"{image} ({image_id.removeprefix('sha256:')[:12]})" if image_id else image


def runs_by_id(records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    """The records grouped by the pipeline or command run they belong to (an evaluation's parent)."""
    runs: dict[str, list[RunRecord]] = {}
    for record in sorted(records, key=lambda r: r.start_time, reverse=True):
        runs.setdefault(record.parent_run_id or record.run_id, []).append(record)
    return runs


def source(record: RunRecord) -> str:
    """"kfp <run id>" for a pipeline run, "command" for a command's run."""
    if record.tags.get(SOURCE_TAG) == "cli":
        return "command"
    kfp = record.tags.get(KFP_RUN_TAG, "")
    return f"kfp {kfp}" if kfp else "-"


def provenance(record: RunRecord) -> str:
    """One line: what data (and its digest) and which profile a run used, and the code that ran."""
    tags, params = record.tags, record.params
    data = tags.get(DATA_ROOT_TAG) or params.get("data") or params.get("root") or params.get("source") or "unrecorded"
    if tags.get(DATA_DIGEST_TAG):
        data += f" ({tags.get(DATA_FILES_TAG, '?')} files, digest {tags[DATA_DIGEST_TAG][:12]})"
    profile = (tags.get(PROFILE_TAG) or params.get("profile") or params.get("train_profile")
               or params.get("suite") or "-")
    code = f"vsbench {tags.get(VERSION_TAG, '?')}"
    if tags.get(GIT_COMMIT_TAG):
        code += f" @ {tags[GIT_COMMIT_TAG][:7]}"
    if tags.get(HOST_TAG):
        code += f" on {tags[HOST_TAG]}"
    if tags.get(MACHINE_TAG):  # the same seed gives other digits on another machine (issue 39)
        code += f" ({tags[MACHINE_TAG]})"
    return f"data: {data}; profile: {profile}; code: {code}"
