"""The self-contained HTML report: a leaderboard table per benchmark, trends over time and the latest
values as embedded PNG figures, baselines as dashed lines, every value linked to its MLflow run."""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from vsbench.io.storage import atomic_write_text
from vsbench.reporting.leaderboard import format_value, leaderboard, table_cells
from vsbench.reporting.runs import (
    BASELINE_OF,
    BASELINES,
    RANDOM_FEATURES,
    LowerIsBetter,
    RunRecord,
    provenance,
    ran_in,
    runs_by_id,
    source,
)
from vsbench.tracking.names import SEPARATOR
from vsbench.tracking.views import run_page

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
                  higher: Mapping[str, bool]) -> Any:
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
        axis.set_title(_wrap(metric) + ("" if higher.get(metric, True) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(labelsize=8)
        axis.grid(alpha=0.3)
    figure.legend(handles=_legend_handles(colors), loc="outside upper center", ncols=min(len(colors), 5),
                  fontsize=9)
    return figure


def _legend_handles(colors: Mapping[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=color, marker="o", label=model) for model, color in colors.items()]


def _bars_figure(frame: pd.DataFrame, metrics: list[str], colors: Mapping[str, Any],
                 higher: Mapping[str, bool]) -> Any:
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
        axis.bar_label(bars, labels=[format_value(v) for v in rows["value"]], fontsize=8)
        for shade, (value, label) in enumerate(_reference_lines(frame, metric)):
            axis.axhline(value, linestyle="--", color=str(0.3 + 0.2 * shade), linewidth=1.2)
            axis.annotate(f"{label} {format_value(value)}", (1.0, value), xycoords=("axes fraction", "data"),
                          xytext=(-2, 2), textcoords="offset points", ha="right", fontsize=7, color="0.25")
        axis.set_xticks(range(len(rows)), rows["model"], rotation=20, ha="right", fontsize=8)
        axis.margins(y=0.15)
        axis.set_title(_wrap(metric) + ("" if higher.get(metric, True) else "\n(lower is better)"), fontsize=9)
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


def _link(text: str, run_id: str, experiment_id: str) -> str:
    if not run_id:
        return text
    return (f'<a class="run-link" href="{html.escape(run_page(run_id, experiment_id))}" '
            f'title="MLflow run {html.escape(run_id)}">{text}</a>')


def _html_table(frame: pd.DataFrame, benchmark: str) -> str:
    models, rows = table_cells(frame)
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
                       colors: Mapping[str, Any]) -> str:
    metrics = plotted_metrics(frame)
    models = sorted(frame["model"].unique())
    used = {model: colors[model] for model in models}
    higher = {str(metric): bool(value) for metric, value in frame.groupby("metric")["higher_is_better"].first().items()}
    trend = _png(_trend_figure(records, metrics, used, higher))
    bars = _png(_bars_figure(frame, metrics, used, higher))
    name = html.escape(benchmark)
    return (f'<section class="benchmark" id="benchmark-{name}"><h2>{name}</h2>'
            f"{_html_table(frame, benchmark)}"
            f"<h3>Over time</h3>"
            f'<img class="plot trend" alt="{name}: each metric over time per model" '
            f'src="data:image/png;base64,{trend}">'
            f"<h3>Latest value per model</h3>"
            f'<img class="plot bars" alt="{name}: latest value per model" src="data:image/png;base64,{bars}">'
            f"</section>")


def _runs_table(records: list[RunRecord]) -> str:
    rows = "".join(
        f'<tr data-run="{html.escape(run_id)}"><td>{_link(html.escape(run_id), run_id, group[0].experiment_id)}</td>'
        f"<td>{group[0].start_time:%Y-%m-%d %H:%M:%S} UTC</td>"
        f"<td>{html.escape(group[0].pipeline)}</td><td>{html.escape(source(group[0]))}</td>"
        f'<td class="ran-in">{html.escape(ran_in(group[0]))}</td>'
        f"<td>{html.escape(', '.join(f'{r.model} on {r.benchmark}' for r in group))}</td>"
        f'<td class="provenance">{html.escape(provenance(group[0]))}</td></tr>'
        for run_id, group in runs_by_id(records).items())
    return ('<table class="runs"><thead><tr><th>MLflow run</th><th>started</th><th>pipeline</th><th>source</th>'
            f"<th>ran in</th><th>model on benchmark</th><th>data, profile, code</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


def write_report(runs: list[RunRecord], path: Path, *, title: str, lower_is_better: LowerIsBetter | None = None) -> Path:
    """One self-contained HTML file: per benchmark the leaderboard table, each metric over time per
    model and the latest values as bars; then the runs it covers. Returns ``path``."""
    frame = leaderboard(runs, lower_is_better)
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
