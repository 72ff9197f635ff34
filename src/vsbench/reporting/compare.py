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

:func:`collect_runs` splits every parent run into one :class:`RunRecord` per pair, so the leaderboard
and the report see a single shape whatever pipeline produced the run.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from vsbench.storage import atomic_write_text
from vsbench.tracking import IMAGE_ID_TAG, IMAGE_TAG, KFP_RUN_TAG, PIPELINE_TAG, STEP_TAG

ABID_PIPELINE = "vsbench-abid"
SEPARATOR = "__"
# Logged on a parent run by the regression check: it describes the run, not a model.
BOOKKEEPING_METRICS = frozenset({"regression_drops"})
LOWER_IS_BETTER = ("rmse", "loss", "error", "seconds")
LEADERBOARD_COLUMNS = ["benchmark", "metric", "model", "value", "best", "higher_is_better", "runs", "run_id",
                       "start_time"]


def higher_is_better(metric: str) -> bool:
    """Accuracies, mAPs, recalls: higher is better; errors, losses and timings: lower."""
    name = metric.lower()
    return not any(word in name for word in LOWER_IS_BETTER)


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
        parts = name.split(SEPARATOR, 2)
        if len(parts) == 3 and all(parts):
            benchmark, model, metric = parts
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
    return [RunRecord(run.info.run_id, start, pipeline, model, benchmark, metrics, tags)
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


def leaderboard(runs: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per (benchmark, metric, model): the model's latest value and whether it is the best.

    "Best" compares the models' latest values for the same benchmark and metric (the highest, or the
    lowest for errors, losses and timings; ties are all best). ``runs`` counts the runs with a value.
    """
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
                               "value": float(value), "best": False, "higher_is_better": higher_is_better(metric),
                               "runs": 1, "run_id": record.run_id, "start_time": record.start_time}
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


def _table(frame: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, list[_Cell | None]]]]:
    """One benchmark's rows as (models, [(metric, "higher"/"lower", a cell per model or None)])."""
    models = sorted(frame["model"].unique())
    rows = []
    for metric, group in frame.groupby("metric", sort=True):
        by_model = {row.model: _Cell(_format(row.value), bool(row.best)) for row in group.itertuples()}
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


def _trend_figure(records: list[RunRecord], metrics: list[str], colors: Mapping[str, Any]) -> Any:
    """One panel per metric, one line per model over the runs' start times."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    figure, axes = _grid(len(metrics))
    ordered = sorted(records, key=lambda r: r.start_time)
    for axis, metric in zip(axes, metrics):
        for model, color in colors.items():
            points = [(r.start_time, r.metrics[metric]) for r in ordered if r.model == model and metric in r.metrics]
            if points:
                axis.plot(*zip(*points), marker="o", color=color)
        locator = AutoDateLocator(maxticks=5)
        axis.xaxis.set_major_locator(locator)
        axis.xaxis.set_major_formatter(ConciseDateFormatter(locator))
        axis.set_title(_wrap(metric) + ("" if higher_is_better(metric) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(labelsize=8)
        axis.grid(alpha=0.3)
    figure.legend(handles=_legend_handles(colors), loc="outside upper center", ncols=min(len(colors), 5),
                  fontsize=9)
    return figure


def _legend_handles(colors: Mapping[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=color, marker="o", label=model) for model, color in colors.items()]


def _bars_figure(frame: pd.DataFrame, metrics: list[str], colors: Mapping[str, Any]) -> Any:
    """One panel per metric: each model's latest value, the best bar outlined in black."""
    figure, axes = _grid(len(metrics))
    for axis, metric in zip(axes, metrics):
        rows = frame[frame["metric"] == metric].sort_values("model")
        bars = axis.bar(range(len(rows)), rows["value"], width=0.6, color=[colors[m] for m in rows["model"]],
                        edgecolor=["black" if b else "none" for b in rows["best"]], linewidth=2)
        center, half = (len(rows) - 1) / 2, max(len(rows), 3) / 2  # one or two models: bars, not walls
        axis.set_xlim(center - half, center + half)
        axis.bar_label(bars, labels=[_format(v) for v in rows["value"]], fontsize=8)
        axis.set_xticks(range(len(rows)), rows["model"], rotation=20, ha="right", fontsize=8)
        axis.margins(y=0.15)
        axis.set_title(_wrap(metric) + ("" if higher_is_better(metric) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(axis="y", labelsize=8)
    return figure


def _html_table(frame: pd.DataFrame, benchmark: str) -> str:
    models, rows = _table(frame)
    head = "".join(f"<th>{html.escape(name)}</th>" for name in ["metric", "better", *models])
    body = []
    for metric, better, cells in rows:
        tds = "".join('<td class="missing">-</td>' if cell is None else
                      f'<td class="best">{cell.text} *</td>' if cell.best else f"<td>{cell.text}</td>"
                      for cell in cells)
        body.append(f'<tr data-metric="{html.escape(metric)}"><td>{html.escape(metric)}</td><td>{better}</td>'
                    f"{tds}</tr>")
    return (f'<table class="leaderboard" data-benchmark="{html.escape(benchmark)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _benchmark_section(benchmark: str, records: list[RunRecord], frame: pd.DataFrame,
                       colors: Mapping[str, Any]) -> str:
    metrics = sorted(frame["metric"].unique())
    models = sorted(frame["model"].unique())
    used = {model: colors[model] for model in models}
    trend = _png(_trend_figure(records, metrics, used))
    bars = _png(_bars_figure(frame, metrics, used))
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


def _runs_table(records: list[RunRecord]) -> str:
    rows = "".join(
        f"<tr><td>{html.escape(run_id)}</td><td>{group[0].start_time:%Y-%m-%d %H:%M:%S} UTC</td>"
        f"<td>{html.escape(group[0].pipeline)}</td><td>{html.escape(group[0].tags.get(KFP_RUN_TAG, ''))}</td>"
        f'<td class="ran-in">{html.escape(ran_in(group[0]))}</td>'
        f"<td>{html.escape(', '.join(f'{r.model} on {r.benchmark}' for r in group))}</td></tr>"
        for run_id, group in _runs_by_id(records).items())
    return ('<table class="runs"><thead><tr><th>MLflow run</th><th>started</th><th>pipeline</th><th>KFP run</th>'
            f"<th>ran in</th><th>model on benchmark</th></tr></thead><tbody>{rows}</tbody></table>")


def write_report(runs: list[RunRecord], path: Path, *, title: str) -> Path:
    """One self-contained HTML file: per benchmark the leaderboard table, each metric over time per
    model and the latest values as bars; then the runs it covers. Returns ``path``."""
    frame = leaderboard(runs)
    colors = _colors(sorted(frame["model"].unique()) if not frame.empty else [])
    generated = datetime.now(UTC)
    sections = [_benchmark_section(benchmark, [r for r in runs if r.benchmark == benchmark], group, colors)
                for benchmark, group in frame.groupby("benchmark", sort=True)] if not frame.empty else [
        '<p class="note">No finished pipeline runs with metrics yet.</p>']
    run_count = len({r.run_id for r in runs})
    document = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="note">{run_count} pipeline runs; generated {generated:%Y-%m-%d %H:%M} UTC. In each table the highlighted
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
