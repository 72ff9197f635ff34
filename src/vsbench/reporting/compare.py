"""Compare pipeline runs from MLflow: a leaderboard for the terminal and a self-contained HTML report.

Only parent runs count (tag ``vsbench.step`` = ``pipeline``): they carry each pipeline run's
headline metrics, so one search per experiment finds everything to compare, and step-level noise
(throughput, per-epoch curves) stays out of the leaderboard.

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

import base64
import html
import io
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from vsbench.io.storage import atomic_write_text
from vsbench.tracking import IMAGE_ID_TAG, IMAGE_TAG, KFP_RUN_TAG, PIPELINE_TAG, STEP_TAG, tracking_uri
from vsbench.tracking.names import SEPARATOR, split_run_metric
from vsbench.tracking.provenance import (
    BASELINE_TAG,
    DATA_DIGEST_TAG,
    DATA_FILES_TAG,
    DATA_ROOT_TAG,
    GIT_COMMIT_TAG,
    HOST_TAG,
    PROFILE_TAG,
    SOURCE_TAG,
    VERSION_TAG,
)

ABID_PIPELINE = "vsbench-abid"
# Logged on a parent run by the regression check: it describes the run, not a model.
BOOKKEEPING_METRICS = frozenset({"regression_drops"})
LOWER_IS_BETTER = ("rmse", "loss", "error", "seconds")
# score -> its trivial baselines (metric name -> label), as the ABID pipeline logs them on its parent run.
BASELINES: dict[str, dict[str, str]] = {
    "counting_accuracy": {"counting_majority_accuracy": "majority class"},
    "verification_accuracy": {"verification_always_yes_accuracy": "always yes"},
    "quantity_accuracy": {"quantity_always_yes_accuracy": "always yes", "quantity_prior_only_accuracy": "asin prior"},
}
BASELINE_OF = {baseline: score for score, names in BASELINES.items() for baseline in names}
RANDOM_FEATURES = " (random features)"
UI_ENV = "VSBENCH_MLFLOW_UI"  # where the report's run links point when the store is not a server
DEFAULT_UI = "http://127.0.0.1:5000"  # what `mlflow ui` serves
LEADERBOARD_COLUMNS = ["benchmark", "metric", "model", "value", "best", "higher_is_better", "runs", "run_id",
                       "start_time", "experiment_id"]


# benchmark -> the metrics its spec declares lower-is-better (benchmarks.registry.lower_is_better_metrics():
# the registry sits above reporting, so whoever calls a report hands it over; a plugin's included)
LowerIsBetter = Mapping[str, Collection[str]]


def higher_is_better(metric: str, lower: Collection[str] = ()) -> bool:
    """Accuracies, mAPs, recalls: higher is better; errors, losses and timings: lower, and so is a
    metric its benchmark declares lower-is-better (``lower``: ``mean_rank`` names ``l2__mean_rank`` too)."""
    name = metric.lower()
    return not (name in lower or name.rsplit(SEPARATOR, 1)[-1] in lower or any(word in name for word in LOWER_IS_BETTER))


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
        if name in BOOKKEEPING_METRICS:
            continue
        split = split_run_metric(name)
        if split is not None:
            benchmark, model, metric = split
            pairs.setdefault((model, benchmark), {})[metric] = value
        else:
            pairs.setdefault(own, {})[name] = value
    return pairs


def _client():
    from mlflow.tracking import MlflowClient

    return MlflowClient()


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
    start = datetime.fromtimestamp(run.info.start_time / 1000, tz=UTC)
    tags = dict(run.data.tags)
    pipeline = tags.get(PIPELINE_TAG, "")
    pairs = split_metrics(run.data.metrics, run.data.params, pipeline)
    suffix = RANDOM_FEATURES if tags.get(BASELINE_TAG) == "random-features" else ""
    return [RunRecord(run.info.run_id, start, pipeline, model + suffix, benchmark, metrics, tags,
                      dict(run.data.params), str(run.info.experiment_id))
            for (model, benchmark), metrics in sorted(pairs.items())]


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
    return [record for run in runs for record in _records(run)]


def leaderboard(runs: Iterable[RunRecord], lower_is_better: LowerIsBetter | None = None) -> pd.DataFrame:
    """One row per (benchmark, metric, model): the model's latest value and whether it is the best.

    "Best" compares the models' latest values for the same benchmark and metric (the highest, or the
    lowest for errors, losses, timings and the metrics ``lower_is_better`` names for the benchmark;
    ties are all best). ``runs`` counts the runs with a value.
    """
    lower = lower_is_better or {}
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in sorted(runs, key=lambda r: r.start_time, reverse=True):
        for metric, value in record.metrics.items():
            if not math.isfinite(value):
                continue
            key = (record.benchmark, metric, record.model)
            if key in latest:
                latest[key]["runs"] += 1
            else:
                latest[key] = {"benchmark": record.benchmark, "metric": metric, "model": record.model,
                               "value": float(value), "best": False,
                               "higher_is_better": higher_is_better(metric, lower.get(record.benchmark, ())),
                               "runs": 1, "run_id": record.run_id, "start_time": record.start_time,
                               "experiment_id": record.experiment_id}
    frame = pd.DataFrame(list(latest.values()), columns=LEADERBOARD_COLUMNS)
    if frame.empty:
        return frame
    for _, group in frame.groupby(["benchmark", "metric"]):
        values = group["value"]
        target = values.max() if group["higher_is_better"].iloc[0] else values.min()
        frame.loc[group.index, "best"] = [math.isclose(v, target, rel_tol=1e-12, abs_tol=1e-15) for v in values]
    return frame.sort_values(["benchmark", "metric", "model"], ignore_index=True)


def _format(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True)
class _Cell:
    text: str
    best: bool
    run_id: str = ""
    experiment_id: str = ""


def _table(frame: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, list[_Cell | None]]]]:
    """One benchmark's rows as (models, [(metric, "higher"/"lower", a cell per model or None)])."""
    models = sorted(frame["model"].unique())
    rows = []
    for metric, group in frame.groupby("metric", sort=True):
        by_model = {row.model: _Cell(_format(row.value), bool(row.best), row.run_id, row.experiment_id)
                    for row in group.itertuples()}
        better = "higher" if group["higher_is_better"].iloc[0] else "lower"
        rows.append((str(metric), better, [by_model.get(model) for model in models]))
    return models, rows


def _text_table(rows: list[list[str]]) -> str:
    """Columns padded to their widest cell: the first (metric names) left-aligned, the rest right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths))).rstrip() for row in rows)


def render_leaderboard(frame: pd.DataFrame) -> str:
    """Plain text for the terminal: per benchmark, metrics x models, the best value marked with ``*``."""
    if frame.empty:
        return "no finished pipeline runs with metrics"
    blocks = []
    for benchmark, group in frame.groupby("benchmark", sort=True):
        models, rows = _table(group)
        lines = [["metric", "better", *models]] + [
            [metric, better, *(cell.text + ("*" if cell.best else " ") if cell else "- " for cell in cells)]
            for metric, better, cells in rows]
        blocks.append(f"== {benchmark} ==\n{_text_table(lines)}")
    blocks.append("* best latest value among the models (higher is better unless the column says lower)")
    return "\n\n".join(blocks)


# ---------------------------------------------------------------------------------------------------------
# HTML report: every figure is an inline PNG, every style inline: the cluster has no internet (no CDN),
# and the file must read the same from a KFP HTML artifact, an MLflow artifact or a laptop.

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; font-family: monospace; }
td.best { background: #d8f0d8; font-weight: bold; }
td.missing { color: #999; }
td a.run-link { color: inherit; text-decoration: none; border-bottom: 1px dotted #888; }
td.provenance { text-align: left; font-size: 0.85em; color: #444; }
tr[data-baseline-for] td { color: #666; font-style: italic; }
img.plot { max-width: 100%; display: block; margin: 0.5em 0 1.5em; border: 1px solid #eee; }
.note { color: #555; font-size: 0.9em; }
#plot-warning { display: none; background: #fdd; padding: 0.5em; }
"""

# Says on the page when a plot did not decode, and leaves the count where a headless browser can read it.
_CHECK_IMAGES = """
window.addEventListener("load", function () {
  var images = Array.prototype.slice.call(document.images);
  var decoded = images.filter(function (img) { return img.complete && img.naturalWidth > 0; }).length;
  document.body.setAttribute("data-plots-decoded", decoded + "/" + images.length);
  if (decoded < images.length) { document.getElementById("plot-warning").style.display = "block"; }
});
"""


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _wrap(name: str, width: int = 34) -> str:
    """A long metric name over several title lines, broken at its ``__`` separators."""
    lines: list[str] = []
    for part in name.split(SEPARATOR):
        if lines and len(lines[-1]) + len(SEPARATOR) + len(part) <= width:
            lines[-1] += SEPARATOR + part
        else:
            lines.append(part if not lines else SEPARATOR + part)
    return "\n".join(lines)


def _grid(count: int) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    columns = min(3, count)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(3.9 * columns, 2.7 * rows + 0.5), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False).ravel().tolist()
    for extra in axes[count:]:
        extra.set_visible(False)
    return figure, axes[:count]


def _colors(models: list[str]) -> dict[str, Any]:
    from matplotlib import colormaps

    palette = colormaps["tab10" if len(models) <= 10 else "tab20"]
    return {model: palette(i % palette.N) for i, model in enumerate(models)}


def time_limits(times: list[datetime]) -> tuple[datetime, datetime]:
    """The x range of a trend: the runs' span padded by 5% on each side, and at least an hour wide, so
    one run (or several within minutes) gets a readable axis instead of AutoDateLocator's years."""
    from datetime import timedelta

    first, last = min(times), max(times)
    pad = max((last - first) * 0.05, (timedelta(hours=1) - (last - first)) / 2, timedelta(minutes=5))
    return first - pad, last + pad


def _trend_figure(records: list[RunRecord], metrics: list[str], colors: Mapping[str, Any],
                  lower: Collection[str] = ()) -> Any:
    """One panel per metric, one line per model over the runs' start times; a score's trivial
    baselines and random-features runs as dashed grey lines."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    figure, axes = _grid(len(metrics))
    ordered = sorted(records, key=lambda r: r.start_time)
    limits = time_limits([r.start_time for r in ordered]) if ordered else None
    for axis, metric in zip(axes, metrics):
        for model, color in colors.items():
            points = [(r.start_time, r.metrics[metric]) for r in ordered if r.model == model and metric in r.metrics]
            if points:
                axis.plot(*zip(*points), marker="o", color=color,
                          linestyle="--" if model.endswith(RANDOM_FEATURES) else "-")
        for shade, (baseline, label) in enumerate(BASELINES.get(metric, {}).items()):
            points = [(r.start_time, r.metrics[baseline]) for r in ordered if baseline in r.metrics]
            if points:
                axis.plot(*zip(*points), linestyle="--", marker=".", color=str(0.35 + 0.25 * shade), label=label)
                axis.annotate(label, points[-1], textcoords="offset points", xytext=(3, 3), fontsize=7,
                              color="0.3")
        if limits:
            axis.set_xlim(*limits)
        locator = AutoDateLocator(minticks=2, maxticks=5)
        axis.xaxis.set_major_locator(locator)
        axis.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        axis.set_title(_wrap(metric) + ("" if higher_is_better(metric, lower) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(labelsize=8)
        axis.grid(alpha=0.3)
    figure.legend(handles=_legend_handles(colors), loc="outside upper center", ncols=min(len(colors), 5),
                  fontsize=9)
    return figure


def _legend_handles(colors: Mapping[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=color, marker="o", label=model) for model, color in colors.items()]


def _bars_figure(frame: pd.DataFrame, metrics: list[str], colors: Mapping[str, Any],
                 lower: Collection[str] = ()) -> Any:
    """One panel per metric: each model's latest value, the best bar outlined in black."""
    figure, axes = _grid(len(metrics))
    for axis, metric in zip(axes, metrics):
        rows = frame[frame["metric"] == metric].sort_values("model")
        bars = axis.bar(range(len(rows)), rows["value"], width=0.6, color=[colors[m] for m in rows["model"]],
                        edgecolor=["black" if b else "none" for b in rows["best"]], linewidth=2)
        center, half = (len(rows) - 1) / 2, max(len(rows), 3) / 2  # one or two models: bars, not walls
        axis.set_xlim(center - half, center + half)
        for bar, model in zip(bars, rows["model"]):
            if model.endswith(RANDOM_FEATURES):
                bar.set_hatch("//")
        axis.bar_label(bars, labels=[_format(v) for v in rows["value"]], fontsize=8)
        for shade, (value, label) in enumerate(_reference_lines(frame, metric)):
            axis.axhline(value, linestyle="--", color=str(0.3 + 0.2 * shade), linewidth=1.2)
            axis.annotate(f"{label} {_format(value)}", (1.0, value), xycoords=("axes fraction", "data"),
                          xytext=(-2, 2), textcoords="offset points", ha="right", fontsize=7, color="0.25")
        axis.set_xticks(range(len(rows)), rows["model"], rotation=20, ha="right", fontsize=8)
        axis.margins(y=0.15)
        axis.set_title(_wrap(metric) + ("" if higher_is_better(metric, lower) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(axis="y", labelsize=8)
    return figure


def _reference_lines(frame: pd.DataFrame, metric: str) -> list[tuple[float, str]]:
    """(value, label) of what a metric's score should beat: its trivial baselines (the newest value
    of each) and, for a similarity score, each random-features model's value."""
    lines = []
    for baseline, label in BASELINES.get(metric, {}).items():
        rows = frame[frame["metric"] == baseline].sort_values("start_time")
        if not rows.empty:
            lines.append((float(rows["value"].iloc[-1]), label))
    rows = frame[(frame["metric"] == metric) & frame["model"].str.endswith(RANDOM_FEATURES)]
    lines.extend((float(row.value), "random features") for row in rows.itertuples())
    return lines


def plotted_metrics(frame: pd.DataFrame) -> list[str]:
    """The metrics that get a panel: every metric except the baselines drawn inside their score's panel."""
    metrics = set(frame["metric"].unique())
    return sorted(m for m in metrics if not (m in BASELINE_OF and BASELINE_OF[m] in metrics))


def run_url(run_id: str, experiment_id: str) -> str:
    """The run's page in the MLflow UI: the tracking server itself, or (a local store) VSBENCH_MLFLOW_UI,
    default what ``mlflow ui`` serves on 127.0.0.1:5000."""
    import os

    uri = tracking_uri()
    base = os.environ.get(UI_ENV) or (uri if uri.startswith(("http://", "https://")) else DEFAULT_UI)
    return f"{base.rstrip('/')}/#/experiments/{experiment_id or '0'}/runs/{run_id}"


def _link(text: str, run_id: str, experiment_id: str) -> str:
    if not run_id:
        return text
    return (f'<a class="run-link" href="{html.escape(run_url(run_id, experiment_id))}" '
            f'title="MLflow run {html.escape(run_id)}">{text}</a>')


def _html_table(frame: pd.DataFrame, benchmark: str) -> str:
    models, rows = _table(frame)
    head = "".join(f"<th>{html.escape(name)}</th>" for name in ["metric", "better", *models])
    body = []
    for metric, better, cells in rows:
        tds = "".join('<td class="missing">-</td>' if cell is None else
                      f'<td class="best">{_link(cell.text + " *", cell.run_id, cell.experiment_id)}</td>' if cell.best
                      else f"<td>{_link(cell.text, cell.run_id, cell.experiment_id)}</td>"
                      for cell in cells)
        score = BASELINE_OF.get(metric)
        marker = f' data-baseline-for="{html.escape(score)}"' if score else ""
        note = f" (baseline of {html.escape(score)})" if score else ""
        body.append(f'<tr data-metric="{html.escape(metric)}"{marker}><td>{html.escape(metric)}{note}</td>'
                    f"<td>{better}</td>{tds}</tr>")
    return (f'<table class="leaderboard" data-benchmark="{html.escape(benchmark)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _benchmark_section(benchmark: str, records: list[RunRecord], frame: pd.DataFrame,
                       colors: Mapping[str, Any], lower: Collection[str] = ()) -> str:
    metrics = plotted_metrics(frame)
    models = sorted(frame["model"].unique())
    used = {model: colors[model] for model in models}
    trend = _png(_trend_figure(records, metrics, used, lower))
    bars = _png(_bars_figure(frame, metrics, used, lower))
    name = html.escape(benchmark)
    return (f'<section class="benchmark" id="benchmark-{name}"><h2>{name}</h2>'
            f"{_html_table(frame, benchmark)}"
            f"<h3>Over time</h3>"
            f'<img class="plot trend" alt="{name}: each metric over time per model" '
            f'src="data:image/png;base64,{trend}">'
            f"<h3>Latest value per model</h3>"
            f'<img class="plot bars" alt="{name}: latest value per model" src="data:image/png;base64,{bars}">'
            f"</section>")


def ran_in(record: RunRecord) -> str:
    """The image a run's steps ran in ("name (id)"), "host venv", or "-" for runs from before the tag."""
    image = record.tags.get(IMAGE_TAG, "-")
    image_id = record.tags.get(IMAGE_ID_TAG, "")
    return f"{image} ({image_id.removeprefix('sha256:')[:12]})" if image_id else image


def _runs_by_id(records: list[RunRecord]) -> dict[str, list[RunRecord]]:
    runs: dict[str, list[RunRecord]] = {}
    for record in sorted(records, key=lambda r: r.start_time, reverse=True):
        runs.setdefault(record.run_id, []).append(record)
    return runs


def render_runs(records: list[RunRecord]) -> str:
    """The runs behind the leaderboard, newest first, with where their steps ran."""
    rows = [["MLflow run", "started (UTC)", "pipeline", "ran in"]] + [
        [run_id, f"{group[0].start_time:%Y-%m-%d %H:%M:%S}", group[0].pipeline, ran_in(group[0])]
        for run_id, group in _runs_by_id(records).items()]
    return _text_table(rows)


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
    return f"data: {data}; profile: {profile}; code: {code}"


def _runs_table(records: list[RunRecord]) -> str:
    rows = "".join(
        f'<tr data-run="{html.escape(run_id)}"><td>{_link(html.escape(run_id), run_id, group[0].experiment_id)}</td>'
        f"<td>{group[0].start_time:%Y-%m-%d %H:%M:%S} UTC</td>"
        f"<td>{html.escape(group[0].pipeline)}</td><td>{html.escape(source(group[0]))}</td>"
        f'<td class="ran-in">{html.escape(ran_in(group[0]))}</td>'
        f"<td>{html.escape(', '.join(f'{r.model} on {r.benchmark}' for r in group))}</td>"
        f'<td class="provenance">{html.escape(provenance(group[0]))}</td></tr>'
        for run_id, group in _runs_by_id(records).items())
    return ('<table class="runs"><thead><tr><th>MLflow run</th><th>started</th><th>pipeline</th><th>source</th>'
            f"<th>ran in</th><th>model on benchmark</th><th>data, profile, code</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def write_report(runs: list[RunRecord], path: Path, *, title: str, lower_is_better: LowerIsBetter | None = None) -> Path:
    """One self-contained HTML file: per benchmark the leaderboard table, each metric over time per
    model and the latest values as bars; then the runs it covers. Returns ``path``."""
    frame = leaderboard(runs, lower_is_better)
    colors = _colors(sorted(frame["model"].unique()) if not frame.empty else [])
    generated = datetime.now(UTC)
    lower = lower_is_better or {}
    sections = [_benchmark_section(benchmark, [r for r in runs if r.benchmark == benchmark], group, colors,
                                   lower.get(str(benchmark), ()))
                for benchmark, group in frame.groupby("benchmark", sort=True)] if not frame.empty else [
        '<p class="note">No finished pipeline runs with metrics yet.</p>']
    run_count = len({r.run_id for r in runs})
    document = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="note">{run_count} runs (pipelines and commands); generated {generated:%Y-%m-%d %H:%M} UTC. In each table the highlighted
value marked * is the best latest value among the models (higher is better unless the column says lower).</p>
<p id="plot-warning">Some plots did not load.</p>
{"".join(sections)}
<h2>Runs</h2>
{_runs_table(runs)}
<script>{_CHECK_IMAGES}</script>
</body></html>
"""
    atomic_write_text(path, document)
    return path
