"""One MLflow run per evaluation, with plain metric names, and every evaluated embedder a LoggedModel.

Why: MLflow's compare, chart and parallel-coordinates views line runs up by metric *key*. When the
key carries the benchmark, the model and the variant (``disc__efficientnet_lite0__Flat__1.00_0_2__uap``,
the layout before issue 38) two models share no key and every view pairs a value with NaN. So each
record a benchmark scores (one per codec and score normalization, or per protocol) becomes its own
run, an *evaluation*:

* nested under the command's or the pipeline's parent run (``mlflow.parentRunId``), tag
  ``vsbench.step`` = ``evaluation``;
* metrics under the benchmark's own names (``uap``, ``accuracy_at_1``, ``recall_at_p90``, ...), the
  same for every model; what varies is in params (``benchmark``, ``model``, ``model_options``,
  ``codec``, ``score_norm``, ``k``, ``seed``, the search parameters) and tags (``vsbench.benchmark``,
  ``vsbench.model``, ``vsbench.variant``, ``vsbench.series``, ``vsbench.lower_is_better``);
* named for a person: ``disc · resnet34-random · PCAW64,L2norm,Flat · none`` (:func:`readable_label`:
  the options' values, not their JSON, which MLflow's narrow name column cut to ``resnet34 {"we…``);
  the options themselves are params (``model_options``) and in the series' identity;
* its metrics logged with the ``model_id`` of the embedder's LoggedModel and the benchmark's
  dataset (name = benchmark, digest = the data's digest), so the experiment's Models tab and
  ``search_logged_models(datasets=..., order_by=...)`` rank models per dataset;
* each metric at step = the UTC day it was scored (days since 1970-01-01) and at the night's own
  timestamp, so runs of one series grouped in MLflow's chart view draw one line over the nights, on
  a date axis (the evaluations view plots wall time; the step keeps the nights apart for readers that
  go by step). Lines are grouped by ``vsbench.line`` (``resnet34-random · Flat · none``), the legend's
  label; ``vsbench.series`` (the name as logged before issue 48 and a digest) stays the identity
  the regression check pairs nights by, unchanged so older nights keep pairing.

A LoggedModel is one (embedder, variant): model name, canonical options, seed, weights digest and
the record's variant (codec and score normalization). The variant belongs to it because MLflow
ranks a model by its *latest* value of a metric per dataset: two codecs logged on one model would
overwrite each other. It is found again by the tag ``vsbench.model_key`` and reused, so a week of
nightly runs updates one model's values rather than making seven. Its name is the readable label and
the variant (``resnet34-random · Flat · none``); a second model of another identity that would take a
name already used in the experiment gets a short digest of its key appended. It is an external model (its
weights live in a library or a file, not in MLflow): family, weights source, weights digest,
preprocessing, dimension as params; a file the user named in the options is its artifact when
uploaded live (a later ``vsbench track upload`` records its digest only).

The parent summarizes (:func:`summarize_parent`): per benchmark the best evaluation under it
(tags ``vsbench.best.<benchmark>`` and ``vsbench.best.<benchmark>.run``), the count, and the
evaluated models as its inputs. It holds no per-model metric: the numbers live in the children.

Errors propagate: callers (the score step, the bundle upload) turn them into "offline" or
"not uploaded", never into a failed benchmark.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from vsbench.tracking.names import NOTE_TAG, SEPARATOR, interval_name, lower_is_better, safe_part, summary_metric
from vsbench.tracking.provenance import KFP_RUN_TAG, PARENT_TAG, PIPELINE_TAG, RUN_KEY_TAG, SOURCE_TAG, STEP_TAG
from vsbench.tracking.views import column, evaluations_key, leaderboard_key, save_shared_view

EVALUATION_STEP = "evaluation"  # the value of vsbench.step on an evaluation run
BENCHMARK_TAG = "vsbench.benchmark"
MODEL_TAG = "vsbench.model"
MODEL_OPTIONS_TAG = "vsbench.model_options"
VARIANT_TAG = "vsbench.variant"
SERIES_TAG = "vsbench.series"
LINE_TAG = "vsbench.line"  # the readable label a chart groups an evaluation's nights under
LOWER_TAG = "vsbench.lower_is_better"
HEADLINE_TAG = "vsbench.headline"
SPLIT_TAG = "vsbench.split"  # the record's split of the data (patch_pairs' easy_diffseq): a row, not a model
HEADLINE_SPLIT_TAG = "vsbench.split.headline"  # the split whose headline ranks models (patch_pairs: mean)
HEADLINE_VALUE_TAG = "vsbench.headline.value"  # the headline as read: ``0.8695 [0.7714, 0.9531]`` (issue 57)
EVALUATION_KEY_TAG = "vsbench.evaluation"  # this evaluation's key under its parent: an upload finds it again
MODEL_KEY_TAG = "vsbench.model_key"  # on the LoggedModel: found again and reused
BEST_TAG = "vsbench.best"  # on the parent: vsbench.best.<benchmark> and vsbench.best.<benchmark>.run
COUNT_TAG = "vsbench.evaluations"
EXTERNAL_MODEL_TAG = "mlflow.model.isExternal"
NAME_JOIN = " · "
MAX_RUN_NAME = 90  # MLflow's runs table shows about this much before it cuts
MODEL_TYPE = "embedder"
MAX_MODEL_FILE_ENV = "VSBENCH_MODEL_ARTIFACT_MAX_MB"
DEFAULT_MAX_MODEL_FILE_MB = 2048
_BAD_MODEL_NAME = str.maketrans({c: "_" for c in "/:.%\"'"})  # MLflow refuses these in a LoggedModel's name
_DAY_MS = 86_400_000
# Params that name, not decide: left out of the series' identity so nights logged before they existed pair.
_NOT_IDENTITY = frozenset({"model", "benchmark", "model_name", "headline"})
# A parent's tags its children must not copy: the run key finds the command's run (a child with it
# would make a second upload see "several runs"), the bundle digest vouches for that run only.
_PARENT_ONLY = frozenset({RUN_KEY_TAG, "vsbench.bundle.digest"})

Text = Annotated[str, StringConstraints(max_length=6000)]
Short = Annotated[str, StringConstraints(min_length=1, max_length=250)]


def _digest(value: Any, length: int = 32) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def canonical_options(options: Mapping[str, Any]) -> str:
    """Model options as one canonical JSON text: bins=4 and bins=8 are two models, {} and {} one."""
    return json.dumps(dict(options), sort_keys=True, separators=(",", ":"), default=str)


def model_label(model: str, options: Mapping[str, Any]) -> str:
    """The model as people read it: its name, then its options when it has any
    (``efficientnet_lite0 {"bins":4}``): two option sets of one model never share a column."""
    return model if not options else f"{model} {canonical_options(options)}"


def _option_word(key: str, value: Any) -> str:
    """One option as a name part: a word value as itself (``random``), a file by its stem, a number or
    flag with its key (``bins4``, ``pretrained``), anything else by its key and a short digest."""
    if isinstance(value, bool):
        return key if value else f"no_{key}"
    if isinstance(value, (int, float)):
        return f"{key}{value:g}" if isinstance(value, float) else f"{key}{value}"
    if isinstance(value, str) and value:
        if "/" in value or "\\" in value:
            return Path(value).stem or key
        if len(value) <= 24 and all(c.isalnum() or c in "._-" for c in value):
            return value
    return f"{key}_{_digest(value, 6)}"


def readable_label(model: str, options: Mapping[str, Any]) -> str:
    """The model as a person reads it in MLflow's names: ``resnet34-random`` for
    ``{"weights": "random"}``, ``histogram-bins4``; the options themselves are kept in params. Two
    option sets could read alike (two files of one stem): run names need not be unique, and the
    LoggedModel's name is made unique where it is created (:func:`ensure_logged_model`)."""
    return "-".join([model, *(_option_word(str(k), v) for k, v in sorted(options.items()))])


def day_of(timestamp_ms: int) -> int:
    """The UTC day (days since 1970-01-01) an evaluation's metrics are logged at, as their step."""
    return int(timestamp_ms // _DAY_MS)


class Embedder(BaseModel):
    """What the features were made with, read from the embed step's manifests (the score step of a
    pipeline knows only the model's name; the manifests know its options, seed, weights and preprocessing)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    model: Short
    options: dict[str, Any] = Field(default_factory=dict)
    seed: int = 0
    weights: Text = ""  # where the weights came from (a hub tag, a file, "random initialization (seed 7)")
    weights_sha256: Text = ""  # digest of the file an option names, else of the loaded weights ("" unknown)
    preprocessing: dict[str, Any] | None = None
    dim: int = 0
    output: Text = ""
    files: dict[str, str] = Field(default_factory=dict)  # option -> a file the user named (the model's artifact)

    @property
    def family(self) -> str:
        """``timm`` for ``timm:resnet50``; a registered model's own name otherwise."""
        return self.model.partition(":")[0] if ":" in self.model else self.model

    def params(self) -> dict[str, str]:
        """The LoggedModel's params: all that says which network this is."""
        return {"family": self.family, "model": self.model, "model_options": canonical_options(self.options),
                "seed": str(self.seed), "weights": self.weights or "-", "weights_sha256": self.weights_sha256 or "-",
                "preprocessing": json.dumps(self.preprocessing, sort_keys=True) if self.preprocessing else "-",
                "dim": str(self.dim), "output": self.output or "-"}

    @classmethod
    def from_features(cls, features: Path, model: str, options: Mapping[str, Any] | None = None,
                      seed: int = 0) -> Embedder:
        """The embedder of the shard manifests under ``features`` (the first complete one: the embed and
        index steps already refused mixed ones); ``model``, ``options`` and ``seed`` when none is there."""
        for path in sorted(Path(features).glob("*.shard-*-of-*.json")):
            try:
                manifest = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(manifest, dict) and manifest.get("complete") is True:
                return cls._of_manifest(manifest)
        return cls(model=model or "model", options=dict(options or {}), seed=seed)

    @classmethod
    def _of_manifest(cls, manifest: Mapping[str, Any]) -> Embedder:
        options = manifest.get("options") if isinstance(manifest.get("options"), dict) else {}
        key = manifest.get("key") if isinstance(manifest.get("key"), dict) else {}
        inputs = key.get("inputs") if isinstance(key.get("inputs"), dict) else {}
        option_files = inputs.get("option_files") if isinstance(inputs.get("option_files"), dict) else {}
        cache = manifest.get("cache") if isinstance(manifest.get("cache"), dict) else {}
        cache_key = cache.get("key") if isinstance(cache.get("key"), dict) else {}
        file_digests = {name: str(digest) for name, digest in sorted(option_files.items()) if digest}
        weights_sha256 = (",".join(f"{name}:{digest}" for name, digest in file_digests.items())
                          or str(cache_key.get("weights_sha256") or ""))
        files = {name: str(options[name]) for name in file_digests
                 if isinstance(options.get(name), str) and Path(options[name]).is_file()}
        preprocessing = manifest.get("preprocessing") if isinstance(manifest.get("preprocessing"), dict) else None
        return cls(model=str(manifest.get("model") or "model"), options=options, seed=int(manifest.get("seed") or 0),
                   weights=str(manifest.get("weights_source") or "")[:6000], weights_sha256=weights_sha256[:6000],
                   preprocessing=preprocessing, dim=int(manifest.get("dim") or 0),
                   output=str(manifest.get("output") or "")[:6000], files=files)


class Evaluation(BaseModel):
    """One (benchmark, data, model, options, variant): what its MLflow run and LoggedModel hold.

    Built by :func:`evaluations_of`; kept in a run bundle as data (checked whole when read back)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    benchmark: Short
    data_digest: Annotated[str, StringConstraints(max_length=64)] = ""
    data_root: Text = ""
    embedder: Embedder
    variant: dict[Short, Text] = Field(default_factory=dict)  # the record's text fields: codec, score_norm, ...
    params: dict[Short, Text]
    metrics: dict[Short, Annotated[float, Field(allow_inf_nan=False)]]
    lower_is_better: list[Short] = Field(default_factory=list)
    baseline: Annotated[str, StringConstraints(max_length=100)] = ""  # "random-features" for untrained weights
    # The record's per-unit outcomes (issue 45): the Parquet file the score wrote and its sha256, logged
    # under the run's units/ (vsbench.tracking.units); empty when the benchmark gives none.
    units_file: Text = ""
    units_sha256: Annotated[str, StringConstraints(max_length=64)] = ""
    # The record's failure sheet (issue 47): its PNG and HTML page (local path -> sha256), logged under
    # the run's failures/; empty when the benchmark draws none or the sheets are off.
    failures: dict[Text, Annotated[str, StringConstraints(max_length=64)]] = Field(default_factory=dict)
    # The variant's field that names a split of the data, and the split that ranks models (issue 57:
    # patch_pairs' easy_diffseq ... are rows of one model's evaluation, "mean" its headline).
    split_field: Annotated[str, StringConstraints(max_length=100)] = ""
    headline_split: Annotated[str, StringConstraints(max_length=100)] = ""
    # metric -> its interval's edge note (issue 55: few units, zero width, replicates left out), the
    # run's plain tag ``interval_note.<metric>``; empty when every interval is sound.
    interval_notes: dict[Short, Text] = Field(default_factory=dict)

    @property
    def split(self) -> str:
        """The split of the data this record scored (``easy_diffseq``); "" for a benchmark without splits."""
        return self.variant.get(self.split_field, "") if self.split_field else ""

    @property
    def model_variant(self) -> dict[str, str]:
        """The variant but the split: what makes another model (codec, score normalization, distance)."""
        return {k: v for k, v in self.variant.items() if not self.split_field or k != self.split_field}

    @property
    def ranks(self) -> bool:
        """Whether this evaluation's headline ranks models: every one of a benchmark without splits, the
        headline split's of one with (a split's ``roc_auc`` is not comparable with another's ``mean_pr_ap``)."""
        return not self.split or self.split == self.headline_split

    @property
    def model(self) -> str:
        return self.embedder.model

    @property
    def variant_text(self) -> str:
        return NAME_JOIN.join(self.variant.values())

    @property
    def label(self) -> str:
        """The model with its options (see :func:`model_label`)."""
        return model_label(self.embedder.model, self.embedder.options)

    @property
    def readable(self) -> str:
        """The model as MLflow's names show it (see :func:`readable_label`)."""
        return readable_label(self.embedder.model, self.embedder.options)

    @property
    def run_name(self) -> str:
        """``resnet34-random · PCAW64,L2norm,Flat · 1.00[0,2]``: what differs first, the model then the
        variant (issue 57), since MLflow's name column cuts a name at about 30 characters; the benchmark
        is the leaderboard's filter, a tag and a param, and would only push the model out of sight."""
        return _cut(NAME_JOIN.join(part for part in (self.readable, *self.model_variant.values(), self.split) if part))

    @property
    def line(self) -> str:
        """The ``vsbench.line`` tag: the chart's label of this evaluation's nights,
        ``resnet34-random · Flat · none`` (the chart is of one metric, so of one benchmark's runs)."""
        seed = f"seed {self.embedder.seed}" if self.embedder.seed else ""
        return _cut(NAME_JOIN.join(part for part in (self.readable, seed, self.variant_text) if part))

    @property
    def series(self) -> str:
        """The ``vsbench.series`` tag: nightly runs of one evaluation share it (the regression check
        pairs nights by it). The run name as logged before issue 48 (options as JSON) and a short
        :attr:`series_digest`: unchanged, so nights logged before and after pair."""
        name = _cut(NAME_JOIN.join(part for part in (self.benchmark, self.label, self.variant_text) if part))
        return f"{name}{NAME_JOIN}{self.series_digest[:10]}"

    @property
    def series_digest(self) -> str:
        """Everything that decides the numbers but the date."""
        identity = {"benchmark": self.benchmark, "data": self.data_digest, "model": self.embedder.model,
                    "options": self.embedder.options, "seed": self.embedder.seed,
                    "weights": self.embedder.weights_sha256, "variant": self.variant,
                    "params": {k: v for k, v in self.params.items() if k not in _NOT_IDENTITY}}
        return _digest(identity, 24)

    @property
    def model_key(self) -> str:
        """The LoggedModel's identity: the embedder and the variant (see the module docstring)."""
        embedder = self.embedder
        return _digest([embedder.model, embedder.options, embedder.seed, embedder.weights_sha256, self.model_variant,
                        self.params.get("k"), self.params.get("search_params"), self.params.get("global_cap")])

    @property
    def model_name(self) -> str:
        """The LoggedModel's name (MLflow refuses ``/ : . % " '``): ``resnet34-random · Flat · 1_00[0,2]``."""
        name = NAME_JOIN.join(part for part in (self.readable, *self.model_variant.values()) if part)
        name = name.translate(_BAD_MODEL_NAME)
        return name[:200]

    @property
    def headlines(self) -> list[str]:
        """The metrics a leaderboard shows: the record's first three, intervals left out (DISC: ``uap``,
        ``accuracy_at_1``, ``recall_at_p90``); the first is :attr:`headline`."""
        return [m for m in self.metrics if interval_name(m) is None][:3]

    @property
    def headline(self) -> str:
        """The metric the parent's "best" compares: the benchmark's first (``uap`` for DISC)."""
        return next(iter(self.metrics), "")

    def tags(self) -> dict[str, str]:
        return {STEP_TAG: EVALUATION_STEP, BENCHMARK_TAG: self.benchmark, MODEL_TAG: self.embedder.model,
                MODEL_OPTIONS_TAG: canonical_options(self.embedder.options)[:5000],
                VARIANT_TAG: self.variant_text or "-", SERIES_TAG: self.series, LINE_TAG: self.line,
                LOWER_TAG: ",".join(self.lower_is_better), HEADLINE_TAG: self.headline,
                HEADLINE_VALUE_TAG: headline_text(self.metrics, self.headline),
                **({SPLIT_TAG: self.split, HEADLINE_SPLIT_TAG: self.headline_split} if self.split else {}),
                **({"vsbench.baseline": self.baseline} if self.baseline else {}),
                **{f"{NOTE_TAG}{metric}": note for metric, note in self.interval_notes.items()}}

    def key(self) -> str:
        """Its key under one parent run (a re-upload completes the run it made, never a second one)."""
        return _digest([self.series_digest, self.model_key], 32)

    def flat_names(self) -> dict[str, str]:
        """metric -> the name it had on a parent run before issue 38 (``disc__dino__Flat__none__uap``):
        the nightly regression check's rules (``disc__*__uap``) keep matching."""
        prefix = SEPARATOR.join([self.benchmark, safe_part(self.label), *(safe_part(v) for v in self.variant.values())])
        return {metric: f"{prefix}{SEPARATOR}{metric}" for metric in self.metrics}


def headline_text(metrics: Mapping[str, float], headline: str) -> str:
    """The headline as a person reads it, ``0.8695 [0.7714, 0.9531]``: the value and its interval,
    low then high (issue 57: MLflow shows a metric as a 16-digit float, and lists ``_ci95_high``
    before ``_ci95_low``). A display only: the metrics keep the exact values. ``0.8695`` alone when
    the run logged no interval; "" when it has no such metric."""
    if headline not in metrics:
        return ""
    bounds = {interval_name(name)[1]: value for name, value in metrics.items()
              if (interval_name(name) or ("", ""))[0] == headline}
    text = _number(metrics[headline])
    return f"{text} [{_number(bounds['low'])}, {_number(bounds['high'])}]" if {"low", "high"} <= set(bounds) else text


def _number(value: float) -> str:
    """Four decimals for a score in [0, 1] (``0.8695``), four significant digits for anything larger."""
    return f"{value:.4f}" if abs(value) < 10 else f"{value:.4g}"


def _cut(name: str) -> str:
    """``name`` cut to what MLflow's runs table shows."""
    return name if len(name) <= MAX_RUN_NAME else name[:MAX_RUN_NAME - 1] + "…"


def _is_count(name: str) -> bool:
    """A record's count of its units (``num_positives``, ``num_tagged_pairs``): a param, never ranked."""
    return name.startswith("num_")


def _metric_name(name: str) -> str:
    """A record's field as an MLflow metric key (they are MLflow-safe by design; anything else is made so)."""
    return name if name and all(c.isalnum() or c in "_-./ " for c in name) else safe_part(name)


def evaluations_of(benchmark: str, records: Sequence[Mapping[str, Any]], embedder: Embedder, *,
                   run_params: Mapping[str, Any], data_digest: str = "", data_root: str = "",
                   declared_lower: Collection[str] = (), baseline: str = "",
                   units: Sequence[Mapping[str, Any] | None] = (),
                   failures: Sequence[Mapping[str, str]] = (), split_field: str = "",
                   headline_split: str = "") -> list[Evaluation]:
    """One evaluation per record: its text fields are the variant, its numbers the metrics (values as
    scored: never changed, only named). ``run_params`` are the run's (``k``, ``codecs``, ``score_norm``,
    ``search_params``, ``global_cap``, ``benchmark_options``); a record's own ``codec`` and
    ``score_norm`` win (DISC scores each codec unnormalized and normalized). ``declared_lower``: the
    metrics the benchmark declares lower-is-better (plus the usual words: rmse, loss, error, seconds).
    ``units``: per record, its unit file entry (``path``, ``sha256``, ``ci``: the interval's params) or None;
    ``failures``: per record, its failure sheet's files (local path -> sha256), empty for none.
    ``split_field`` / ``headline_split``: the record's field naming a split of the data and the split
    that ranks models (the benchmark's spec: patch_pairs' ``variant`` and ``mean``). A count
    (``num_positives``: a field named ``num_*``) is a param, not a metric: a metric is ranked, and more
    pairs is not a better model (issue 57)."""
    evaluations = []
    for index, record in enumerate(records):
        unit = units[index] if index < len(units) else None
        variant = {str(k): str(v) for k, v in record.items() if isinstance(v, str)}
        numbers = {str(k): v for k, v in record.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        counts = {k: str(v) for k, v in numbers.items() if _is_count(k)}
        metrics = {_metric_name(k): float(v) for k, v in numbers.items() if k not in counts and math.isfinite(float(v))}
        if not metrics:
            continue
        codecs = str(run_params.get("codecs") or "")
        params = {"benchmark": benchmark, "model": embedder.model, "model_options": canonical_options(embedder.options),
                  "model_name": readable_label(embedder.model, embedder.options),
                  "codec": variant.get("codec") or (codecs if codecs and ";" not in codecs else "-"),
                  "score_norm": variant.get("score_norm") or str(run_params.get("score_norm") or "none"),
                  "k": str(run_params.get("k", "-")), "seed": str(embedder.seed),
                  "search_params": str(run_params.get("search_params") or "-"),
                  "global_cap": str(run_params.get("global_cap") or 0),
                  "benchmark_options": str(run_params.get("benchmark_options") or "{}")}
        params.update({key: value for key, value in {**variant, **counts}.items() if key not in params})
        # The headline as read, a param too: MLflow 3.17's runs table shows no column of a tag a view names.
        params["headline"] = headline_text(metrics, next(iter(metrics)))
        params.update({str(k): str(v) for k, v in ((unit or {}).get("ci") or {"ci_method": "none"}).items()})
        lower = [m for m in metrics if lower_is_better((interval_name(m) or (m,))[0], declared_lower)]
        evaluations.append(Evaluation(
            benchmark=benchmark, data_digest=data_digest[:64], data_root=data_root[:6000], embedder=embedder,
            variant=variant, params={k: str(v)[:6000] for k, v in params.items()}, metrics=metrics,
            lower_is_better=lower, baseline=baseline,
            units_file=str((unit or {}).get("path") or "")[:6000], units_sha256=str((unit or {}).get("sha256") or ""),
            split_field=split_field if split_field in variant else "", headline_split=headline_split,
            failures={str(path)[:6000]: str(sha)[:64] for path, sha in
                      (failures[index] if index < len(failures) else {}).items()},
            interval_notes={_metric_name(str(m)): str(note)[:5000] for m, note in ((unit or {}).get("notes") or {}).items()
                            if _metric_name(str(m)) in metrics}))
    return evaluations


# --- MLflow -------------------------------------------------------------------------------------------------


def _dataset_input(evaluation: Evaluation) -> Any:
    from vsbench.tracking.runs import dataset_input

    return dataset_input(_dataset_name(evaluation), _dataset_digest(evaluation), evaluation.data_root or "-", "evaluation")


def _dataset_name(evaluation: Evaluation) -> str:
    """The dataset the metrics are linked under: the benchmark (``disc``), or its split
    (``patch_pairs/easy_diffseq``): one model's splits are other data, and MLflow keeps a model's
    latest value of a metric per dataset, so they never overwrite one another."""
    return f"{evaluation.benchmark}/{evaluation.split}" if evaluation.split else evaluation.benchmark


def _dataset_digest(evaluation: Evaluation) -> str:
    """The digest the metrics are linked under: the data's (as the run's dataset input), or one of its
    location when the data was not digested (a path given as text)."""
    return (evaluation.data_digest or _digest(evaluation.data_root or evaluation.benchmark, 64))[:36]


def evaluation_children(client: Any, parent_run_id: str, experiment_id: str) -> list[Any]:
    """The evaluation runs under ``parent_run_id``."""
    runs: list[Any] = []
    token = None
    while True:
        page = client.search_runs([experiment_id], filter_string=f"tags.`{PARENT_TAG}` = '{parent_run_id}' and "
                                  f"tags.`{STEP_TAG}` = '{EVALUATION_STEP}'", max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _model_file_limit() -> int:
    try:
        return int(float(os.environ.get(MAX_MODEL_FILE_ENV, DEFAULT_MAX_MODEL_FILE_MB)) * (1 << 20))
    except ValueError:
        return DEFAULT_MAX_MODEL_FILE_MB << 20


def ensure_logged_model(client: Any, experiment_id: str, evaluation: Evaluation, source_run_id: str,
                        upload_files: bool = True) -> str:
    """The id of the LoggedModel of this (embedder, variant) in the experiment: found by its key, else
    made as an external model (an ``MLmodel`` that says so, and the user's model file when named)."""
    from mlflow.models.utils import get_external_mlflow_model_spec

    key = evaluation.model_key
    found = client.search_logged_models(experiment_ids=[experiment_id], filter_string=f"tags.`{MODEL_KEY_TAG}` = '{key}'",
                                        max_results=1)
    if found:
        return found[0].model_id
    name = evaluation.model_name
    quoted = name.replace("\\", "\\\\").replace("'", "\\'")
    if client.search_logged_models(experiment_ids=[experiment_id], filter_string=f"name = '{quoted}'", max_results=1):
        name = f"{name[:190]}{NAME_JOIN}{key[:8]}"  # another identity reads alike: its key keeps them apart
    model = client.create_logged_model(
        experiment_id, name=name, source_run_id=source_run_id, model_type=MODEL_TYPE,
        tags={MODEL_KEY_TAG: key, EXTERNAL_MODEL_TAG: "true", MODEL_TAG: evaluation.model,
              VARIANT_TAG: evaluation.variant_text or "-", BENCHMARK_TAG: evaluation.benchmark},
        params={**evaluation.embedder.params(), **{f"variant.{k}": v for k, v in evaluation.variant.items()}})
    with tempfile.TemporaryDirectory() as tmp:
        get_external_mlflow_model_spec(model).save(str(Path(tmp) / "MLmodel"))
        for option, file in (evaluation.embedder.files.items() if upload_files else ()):
            path = Path(file)
            if not path.is_file():
                continue
            if path.stat().st_size > _model_file_limit():
                print(f"[vsbench] {path} is larger than {MAX_MODEL_FILE_ENV} MiB: recorded by its digest, not uploaded",
                      file=sys.stderr)
                continue
            (Path(tmp) / "files" / option).mkdir(parents=True, exist_ok=True)
            (Path(tmp) / "files" / option / path.name).symlink_to(path.resolve())
        client.log_model_artifacts(model.model_id, tmp)
    client.finalize_logged_model(model.model_id, "READY")
    return model.model_id


@contextlib.contextmanager
def failed_on_error(client: Any, run_id: str) -> Iterator[None]:
    """End ``run_id`` FAILED when the block raises (then re-raise): a run left RUNNING after an
    upload broke reads as one still in progress. A failure to mark it is not reported over the
    first error, which is the one that says what went wrong."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(Exception):
            client.set_terminated(run_id, "FAILED")
        raise


def log_evaluations(client: Any, parent_run_id: str, evaluations: Sequence[Evaluation], *,
                    tags: Mapping[str, str] | None = None, timestamp_ms: int | None = None,
                    started_ms: int | None = None, upload_files: bool = True) -> list[str]:
    """Each evaluation as a FINISHED child run of ``parent_run_id`` with its LoggedModel; returns the run ids.

    Idempotent: a child with the same key under this parent is completed, not made again (only the
    params and metrics it lacks are logged), so a retried step or a second upload leaves one run and
    one value per metric. ``tags``: provenance every child carries (code, image, data).
    ``timestamp_ms`` / ``started_ms``: when the work that made the numbers ended and began (the
    score step, or the whole command): the run's end and start times, so MLflow's Duration says how
    long it took (issue 57: every evaluation read ``0ms``); the metrics are logged at the end.
    Then the parent's summary (:func:`summarize_parent`)."""
    from mlflow.entities import LoggedModelInput, Metric, Param

    if not evaluations:
        return []
    parent = client.get_run(parent_run_id)
    experiment_id = parent.info.experiment_id
    existing = {run.data.tags.get(EVALUATION_KEY_TAG): run for run in
                evaluation_children(client, parent_run_id, experiment_id)}
    now = int(timestamp_ms if timestamp_ms is not None else time.time() * 1000)
    start = min(int(started_ms), now) if started_ms is not None else now
    inherited = {name: parent.data.tags[name] for name in (PIPELINE_TAG, SOURCE_TAG, KFP_RUN_TAG)
                 if name in parent.data.tags}
    run_ids, model_ids = [], []
    for evaluation in evaluations:
        key = evaluation.key()
        run = existing.get(key)
        if run is None:
            run = client.create_run(experiment_id, start_time=start, run_name=evaluation.run_name, tags={
                **{k: v for k, v in (tags or {}).items()
                   if (k.startswith("vsbench.") or k.startswith("mlflow.source.")) and k not in _PARENT_ONLY},
                **inherited, **evaluation.tags(), PARENT_TAG: parent_run_id, EVALUATION_KEY_TAG: key})
            have_params: set[str] = set()
            have_metrics: set[str] = set()
        else:
            have_params, have_metrics = set(run.data.params), set(run.data.metrics)
        run_id = run.info.run_id
        with failed_on_error(client, run_id):
            model_id = ensure_logged_model(client, experiment_id, evaluation, run_id, upload_files)
            if not have_params:  # a new run: the data and the model it evaluated, as MLflow's own inputs
                client.log_inputs(run_id, datasets=[_dataset_input(evaluation)], models=[LoggedModelInput(model_id)])
            params = [Param(k, v) for k, v in evaluation.params.items() if k not in have_params]
            metrics = [Metric(name, value, now, day_of(now), model_id=model_id, dataset_name=_dataset_name(evaluation),
                              dataset_digest=_dataset_digest(evaluation))
                       for name, value in evaluation.metrics.items() if name not in have_metrics]
            if params or metrics:
                client.log_batch(run_id, params=params, metrics=metrics)
            _log_units(client, run_id, evaluation)
            _log_failures(client, run_id, evaluation)
            client.set_terminated(run_id, "FINISHED", end_time=now)
        run_ids.append(run_id)
        model_ids.append(model_id)
    summarize_parent(client, parent_run_id, experiment_id, model_ids)
    for benchmark, evaluation in {e.benchmark: e for e in evaluations if e.ranks}.items():
        save_shared_view(client, experiment_id, evaluations_key(benchmark), evaluations_view_state(evaluation))
        save_shared_view(client, experiment_id, leaderboard_key(benchmark), leaderboard_view_state(evaluation))
    return run_ids


def _log_units(client: Any, run_id: str, evaluation: Evaluation) -> None:
    """The evaluation's unit file under the run's ``units/`` (verified first: a file changed since the
    score wrote it is not logged, and one line says so; the metrics stand, without a paired comparison)."""
    from vsbench.stats.units import digest_of
    from vsbench.tracking.units import log_unit_files

    if not evaluation.units_file:
        return
    path = Path(evaluation.units_file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"vsbench: {evaluation.run_name}: unit file {path} not logged ({exc.strerror or exc}); its run "
              "keeps its intervals but cannot be compared paired", file=sys.stderr)
        return
    if digest_of(data) != evaluation.units_sha256:
        print(f"vsbench: {evaluation.run_name}: unit file {path} changed since the score wrote it; not logged "
              "(score again to compare this run paired)", file=sys.stderr)
        return
    log_unit_files(client, run_id, {str(path): evaluation.units_sha256})


FAILURES_DIR = "failures"


def _log_failures(client: Any, run_id: str, evaluation: Evaluation) -> None:
    """The evaluation's failure sheet (PNG and HTML page) under the run's ``failures/``, each file checked
    against the digest the score recorded first (a file gone or changed is one line, not logged: the
    run keeps its numbers, and a sheet is a picture of them, not a part). The logged copy names the run
    (:mod:`vsbench.tracking.sheet_stamp`): the score drew it before the run existed."""
    from vsbench.stats.units import digest_of
    from vsbench.tracking.sheet_stamp import log_stamped

    for name, sha256 in sorted(evaluation.failures.items()):
        path = Path(name)
        try:
            data = path.read_bytes()
        except OSError as exc:
            print(f"vsbench: {evaluation.run_name}: failure sheet {path} not logged ({exc.strerror or exc})",
                  file=sys.stderr)
            continue
        if not sha256 or digest_of(data) != sha256:  # no digest recorded: nothing says these are the score's
            why = "changed since the score wrote it" if sha256 else "has no digest from the score that wrote it"
            print(f"vsbench: {evaluation.run_name}: failure sheet {path} {why}; not logged", file=sys.stderr)
            continue
        log_stamped(lambda copy: client.log_artifact(run_id, copy, FAILURES_DIR), path, data, run_id,
                    evaluation.run_name)


def evaluations_view_state(evaluation: Evaluation) -> dict[str, Any]:
    """The shared view ``vsbench-evaluations-<benchmark>``: that benchmark's evaluation runs only (its
    headline split's, for one with splits: issue 57, MLflow's legend names every group of the view
    in every chart, so a view of several benchmarks named lines a chart did not draw), one group per
    ``vsbench.line`` (which MLflow's chart view draws as one line through
    the group's nights, labelled with it), every group shown, plotted against wall time (dates).
    Field names and values are MLflow 3.17 UI's (its "Share" button saves the same JSON); a UI that
    does not know a field ignores it."""
    return {
        # Only runs with a line: without the second clause MLflow's grouped view also lists the
        # evaluations' parents as an "Unassigned" line.
        "searchFilter": f"{_evaluations_of(evaluation)} and tags.`{LINE_TAG}` LIKE '%'",
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": LINE_TAG}]},
        "runsHiddenMode": "SHOW_ALL",
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "globalLineChartConfig": {"xAxisKey": "time", "lineSmoothness": 0, "selectedXAxisMetricKey": ""},
        # A chart a row: its legend (two rows high, whatever the card's height) then holds two names a
        # row, four lines named where three charts a row named two; MLflow adds a chart per metric.
        "compareRunSections": [{"uuid": "vsbench-metrics", "name": "Model metrics", "display": True,
                                "isReordered": False, "deleted": False, "isGenerated": True,
                                "columns": 1, "cardHeight": 420}],
        "compareRunCharts": [],
    }


def _evaluations_of(evaluation: Evaluation) -> str:
    """The search filter of ``evaluation``'s benchmark's evaluation runs, one per model: a benchmark with
    splits keeps its headline split's (patch_pairs: mean)."""
    benchmark, split = evaluation.benchmark.replace("'", "\\'"), evaluation.split.replace("'", "\\'")
    return (f"tags.`{STEP_TAG}` = '{EVALUATION_STEP}' and tags.`{BENCHMARK_TAG}` = '{benchmark}'"
            + (f" and tags.`{SPLIT_TAG}` = '{split}'" if split else ""))


def leaderboard_view_state(evaluation: Evaluation) -> dict[str, Any]:
    """The shared view ``vsbench-leaderboard-<benchmark>``: that benchmark's evaluation runs as the
    table's rows (their parents filtered out, so none is nested under a collapsed parent), best first
    by the headline metric in its own direction; the visible columns are the headline as read with its
    interval (``vsbench.headline.value``, ``0.8695 [0.7714, 0.9531]``: MLflow prints a metric with
    all its digits and no interval), the headline metrics, the model's readable name (``model_name``:
    ``resnet34-random``, whole, where ``model_options`` showed ``{"weights"``) and the variant
    (MLflow's default Source / Models / Dataset columns left out: they push the metrics off a
    1440-pixel screen)."""
    headline = evaluation.headline
    columns = [column("params", "headline"), column("params", "model_name"),
               column("metrics", headline),
               *(column("params", p) for p in evaluation.model_variant)]
    return {
        "searchFilter": _evaluations_of(evaluation),
        "orderByKey": column("metrics", headline),
        "orderByAsc": headline in evaluation.lower_is_better,
        # One metric column (the sort key; ``headline`` shows it with its interval): at 1440 pixels
        # each further one pushed the variant's params out of sight.
        "selectedColumns": columns,
        "runsHiddenMode": "SHOW_ALL",
        "groupBy": None,
        # MLflow 3.17 applies widths only to the columns ``columnOrder`` lists (its ``applyColumnState``
        # maps the order to the widths): without an order every column is ~95 px and cuts
        # ``resnet34-random`` and the interval. The name, the headline and the model first; MLflow's
        # Created and Duration (its own column ids) last, where the table scrolls to them.
        "columnOrder": [column("attributes", "Run Name"), *columns, "runDateAndNestInfo", "duration"],
        "columnWidths": {column("attributes", "Run Name"): 180, **dict.fromkeys(columns, 90),
                         column("params", "headline"): 180, column("params", "model_name"): 180},
    }


def _higher(metric: str, tags: Mapping[str, str]) -> bool:
    return metric not in set(filter(None, tags.get(LOWER_TAG, "").split(",")))


def summarize_parent(client: Any, parent_run_id: str, experiment_id: str, model_ids: Sequence[str] = ()) -> None:
    """What a parent keeps: per benchmark the best of its evaluations by their headline metric (in the
    metric's own direction) as ``vsbench.best.<benchmark>`` (a line) and ``.run`` (the child's id),
    how many evaluations it holds, and the models evaluated as its inputs (its Models column). Read
    from the children each time, so the last of a nightly's parallel score steps sees them all."""
    from mlflow.entities import LoggedModelInput, Metric

    best: dict[str, tuple[float, Any]] = {}
    children = evaluation_children(client, parent_run_id, experiment_id)
    for child in children:
        tags, metrics = child.data.tags, child.data.metrics
        benchmark, headline = tags.get(BENCHMARK_TAG, ""), tags.get(HEADLINE_TAG, "")
        if not benchmark or headline not in metrics or tags.get(SPLIT_TAG, "") != tags.get(HEADLINE_SPLIT_TAG, ""):
            continue  # another split's headline is not comparable
        value = metrics[headline] if _higher(headline, tags) else -metrics[headline]
        if benchmark not in best or value > best[benchmark][0]:
            best[benchmark] = (value, child)
    parent = client.get_run(parent_run_id)
    summary = []
    for benchmark, (_, child) in best.items():
        tags, headline = child.data.tags, child.data.tags[HEADLINE_TAG]
        line = (f"{child.info.run_name}: {headline} {headline_text(child.data.metrics, headline)}"
                + ("" if _higher(headline, tags) else " (lower is better)"))
        client.set_tag(parent_run_id, f"{BEST_TAG}.{benchmark}", line[:5000])
        client.set_tag(parent_run_id, f"{BEST_TAG}.{benchmark}.run", child.info.run_id)
        # The best's headline and its interval on the parent itself (best.disc.uap, ...): the run link a
        # command prints opens on numbers (issue 57). Readers skip them (names.is_summary_metric).
        for name, value in child.data.metrics.items():
            if (interval_name(name) or (name,))[0] != headline:
                continue
            summary_name = summary_metric(benchmark, name)
            if parent.data.metrics.get(summary_name) != value:
                summary.append(Metric(summary_name, value, child.info.end_time or child.info.start_time,
                                      day_of(child.info.end_time or child.info.start_time)))
    if summary:
        client.log_batch(parent_run_id, metrics=summary)
    client.set_tag(parent_run_id, COUNT_TAG, str(len(children)))
    linked = {m.model_id for m in (parent.inputs.model_inputs or [])} if model_ids else set()
    new = [m for m in dict.fromkeys(model_ids) if m not in linked]
    if new:
        client.log_inputs(parent_run_id, models=[LoggedModelInput(m) for m in new])
