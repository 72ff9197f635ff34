"""The self-contained HTML report: a leaderboard table per benchmark, trends over time and the latest
values as embedded PNG figures, baselines as dashed lines, every value linked to its MLflow run and
every model to its failure sheet in MLflow's artifact view."""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from vsbench.io.storage import atomic_write_text
from vsbench.reporting.leaderboard import (
    SAME_MARK,
    Cell,
    format_value,
    leaderboard,
    mark_indistinguishable,
    table_cells,
)
from vsbench.reporting.pairs import RunPair, pair_table
from vsbench.reporting.runs import (
    BASELINE_OF,
    BASELINES,
    RANDOM_FEATURES,
    LowerIsBetter,
    RunRecord,
    SheetFinder,
    display_name,
    provenance,
    ran_in,
    runs_by_id,
    source,
)
from vsbench.reporting.significance import UnitsReader, format_p, split_intervals
from vsbench.tracking.failures import SheetFiles
from vsbench.tracking.names import SEPARATOR
from vsbench.tracking.views import artifact_page, run_page

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; color: #222; padding: 0 1em; }
h1 { margin-bottom: 0.2em; } h2 { border-bottom: 2px solid #ddd; padding-bottom: 0.2em; margin-top: 2em; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
table.dense th, table.dense td { overflow-wrap: anywhere; }
th { font-weight: 600; vertical-align: bottom; }
th { background: #f2f2f2; } td:first-child, th:first-child { text-align: left; font-family: monospace; }
td.best { background: #d8f0d8; font-weight: bold; }
td.same { background: #eef7ee; }
span.ci { display: block; color: #555; font-size: 0.85em; white-space: nowrap; }
span.ci-note { display: block; color: #8a5a00; font-size: 0.8em; }
td.missing { color: #999; }
td a.run-link { color: inherit; text-decoration: none; border-bottom: 1px dotted #888; }
td.provenance { text-align: left; font-size: 0.85em; color: #444; }
tr[data-baseline-for] td { color: #666; font-style: italic; }
tr.failures td { background: #fafafa; font-size: 0.85em; } a.failure-link { color: #a02020; }
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
  document.body.setAttribute("data-overflow-px",
    String(Math.max(0, document.documentElement.scrollWidth - document.documentElement.clientWidth)));
  if (decoded < images.length) { document.getElementById("plot-warning").style.display = "block"; }
});
"""


def _png(figure: Any) -> str:
    import warnings

    buffer = io.BytesIO()
    with warnings.catch_warnings():  # many models' long names can crowd a panel: the plot is still drawn,
        warnings.filterwarnings("ignore", message="constrained_layout not applied")  # and stderr stays clean
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


def _grid(count: int, panel: tuple[float, float] = (3.9, 2.7)) -> tuple[Any, list[Any]]:
    from matplotlib.figure import Figure

    columns = min(3, count)
    rows = math.ceil(count / columns)
    figure = Figure(figsize=(panel[0] * columns, panel[1] * rows + 0.5), layout="constrained")
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


def run_dates(times: list[datetime]) -> str:
    """``2026-Dec-06`` (or ``2026-Dec-06 to Dec-07``): the dates the runs of a trend started on, the
    words under its time axis. Why not matplotlib's own: its offset names the *last tick's* date, and
    the padded range of runs at 23:33 ends on a 00:00 tick, so runs of Dec 06 read as Dec 07 (seen in
    docs/img/compare-report-wide.png, issue 57)."""
    first, last = min(times), max(times)
    if first.date() == last.date():
        return f"{first:%Y-%b-%d}"
    return f"{first:%Y-%b-%d} to {last:%b-%d}" if first.year == last.year else f"{first:%Y-%b-%d} to {last:%Y-%b-%d}"


def _trend_figure(records: list[RunRecord], metrics: list[str], colors: Mapping[str, Any],
                  higher: Mapping[str, bool]) -> Any:
    """One panel per metric, one line per model over the runs' start times, each point's 95% interval
    as an error bar; a score's trivial baselines and random-features runs as dashed grey lines."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    figure, axes = _grid(len(metrics))
    ordered = sorted(records, key=lambda r: r.start_time)
    limits = time_limits([r.start_time for r in ordered]) if ordered else None
    drawn: set[str] = set()  # the legend names only the models drawn somewhere in the figure
    for axis, metric in zip(axes, metrics):
        for model, color in colors.items():
            points = [(r.start_time, r.metrics[metric]) for r in ordered if r.model == model and metric in r.metrics]
            if points:
                drawn.add(model)
                axis.plot(*zip(*points), marker="o", color=color,
                          linestyle="--" if model.endswith(RANDOM_FEATURES) else "-")
            spans = [(r.start_time, r.metrics[metric], *bounds[metric]) for r in ordered if r.model == model
                     and metric in (bounds := split_intervals(r.metrics)[1])]
            if spans:  # each night's 95% interval as an error bar on its point
                times, values, lows, highs = zip(*spans)
                axis.errorbar(times, values, yerr=[[max(v - lo, 0) for v, lo in zip(values, lows)],
                                                   [max(hi - v, 0) for v, hi in zip(values, highs)]],
                              fmt="none", ecolor=color, elinewidth=1, capsize=2, alpha=0.6)
        references = []
        for shade, (baseline, label) in enumerate(BASELINES.get(metric, {}).items()):
            points = [(r.start_time, r.metrics[baseline]) for r in ordered if baseline in r.metrics]
            if points:
                references += axis.plot(*zip(*points), linestyle="--", marker=".", color=str(0.35 + 0.25 * shade),
                                        label=label)
        if references:  # in a small legend where the lines leave room: labels at their ends overprinted
            axis.legend(handles=references, fontsize=7, loc="best", framealpha=0.85)
        if limits:
            axis.set_xlim(*limits)
        locator = AutoDateLocator(minticks=2, maxticks=5)
        axis.xaxis.set_major_locator(locator)
        formatter = ConciseDateFormatter(locator)
        if ordered:  # the date under the axis is the runs', not the last tick's (see run_dates)
            span = run_dates([r.start_time for r in ordered])
            formatter.get_offset = lambda span=span: span
        axis.xaxis.set_major_formatter(formatter)
        axis.set_title(_wrap(metric) + ("" if higher.get(metric, True) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(labelsize=8)
        axis.grid(alpha=0.3)
    shown = {model: color for model, color in colors.items() if model in drawn}
    if shown:
        figure.legend(handles=_legend_handles(shown), loc="outside upper center",
                      ncols=legend_columns(list(shown), figure.get_figwidth() * 100), fontsize=9)
    return figure


def legend_columns(models: list[str], width_px: float, char_px: float = 6.0, handle_px: float = 48.0) -> int:
    """How many legend entries fit side by side in ``width_px``: a row of long names wider than the
    figure is cut at both edges (issue 57, "Over time" legends clipped), so the columns are as many as
    the longest name allows (a 9 pt character is at most ~6 px at 100 dpi), at least one."""
    longest = max((len(display_name(m)) for m in models), default=1)
    return max(1, min(len(models), int(width_px // (longest * char_px + handle_px))))


def _legend_handles(colors: Mapping[str, Any]) -> list[Any]:
    from matplotlib.lines import Line2D

    return [Line2D([], [], color=color, marker="o", label=display_name(model)) for model, color in colors.items()]


def _bars_figure(frame: pd.DataFrame, metrics: list[str], colors: Mapping[str, Any],
                 higher: Mapping[str, bool]) -> Any:
    """One panel per metric: each model's latest value as a horizontal bar with its 95% interval as an
    error bar, the best bar outlined in black, those indistinguishable from it labelled ``≈``. The bars
    lie down so that long model names (options, codec, score normalization) read as the axis' labels,
    wrapped, instead of being rotated into each other."""
    shown = frame[frame["metric"].isin(metrics)]
    most = int(shown.groupby("metric").size().max()) if not shown.empty else 1
    figure, axes = _grid(len(metrics), panel=(4.6, 0.5 * most + 1.2))
    for axis, metric in zip(axes, metrics):
        rows = frame[frame["metric"] == metric].sort_values("model")
        places = list(range(len(rows)))
        bars = axis.barh(places, rows["value"], height=0.6, color=[colors[m] for m in rows["model"]],
                         edgecolor=["black" if b else "none" for b in rows["best"]], linewidth=2)
        known = rows["low"].notna() & rows["high"].notna()
        if known.any():  # the 95% intervals as error bars
            below = (rows["value"] - rows["low"]).where(known, 0).clip(lower=0)
            above = (rows["high"] - rows["value"]).where(known, 0).clip(lower=0)
            axis.errorbar(rows["value"], places, xerr=[below.to_numpy(), above.to_numpy()], fmt="none",
                          ecolor="0.2", elinewidth=1, capsize=3)
        for bar, model in zip(bars, rows["model"]):
            if model.endswith(RANDOM_FEATURES):
                bar.set_hatch("//")
        # Each value label starts past its whisker's end, so the error bar never strikes through it.
        ends = rows[["value", "high"]].max(axis=1, skipna=True).where(known, rows["value"])
        for place, end, value, same in zip(places, ends, rows["value"], rows["indistinguishable"]):
            axis.annotate(format_value(value) + (f" {SAME_MARK}" if same else ""), (float(end), place),
                          xytext=(5, 0), textcoords="offset points", ha="left", va="center", fontsize=8,
                          gid="value-label")
        references = _reference_lines(frame, metric)
        for shade, (value, _label) in enumerate(references):
            axis.axvline(value, linestyle="--", color=str(0.3 + 0.2 * min(shade, 2)), linewidth=1.2)
        if references:  # named under the axis, one per line: labels beside close lines overprint each other
            axis.set_xlabel("\n".join(f"dashed: {label} {format_value(value)}" for value, label in references),
                            fontsize=7, color="0.25")
        axis.set_yticks(places, [textwrap.fill(display_name(str(m)), 26, break_long_words=False) for m in rows["model"]], fontsize=7)
        axis.set_ylim(len(rows) - 0.5, -0.5)  # the first model on top, as in the tables
        axis.margins(x=0.3)
        axis.set_title(_wrap(metric) + ("" if higher.get(metric, True) else "\n(lower is better)"), fontsize=9)
        axis.tick_params(axis="x", labelsize=8)
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


def _html_cell(cell: Cell | None) -> str:
    """A value linked to its run, its interval beside it; best ``*``, indistinguishable from it ``≈``
    (the test and its p-value in the cell's tooltip)."""
    if cell is None:
        return '<td class="missing">-</td>'
    interval = f' <span class="ci">{html.escape(cell.interval)}</span>' if cell.interval else ""
    if cell.interval and cell.note:  # issue 55: a weak interval says so beside itself
        interval += f' <span class="ci-note">({html.escape(cell.note)})</span>'

    if cell.best:
        return f'<td class="best">{_link(cell.text + " *", cell.run_id, cell.experiment_id)}{interval}</td>'
    title = f' title="{html.escape(_test_words(cell))}"' if cell.test else ""
    if cell.indistinguishable:
        return (f'<td class="same"{title}>{_link(cell.text + " " + SAME_MARK, cell.run_id, cell.experiment_id)}'
                f"{interval}</td>")
    return f"<td{title}>{_link(cell.text, cell.run_id, cell.experiment_id)}{interval}</td>"


def _test_words(cell: Cell) -> str:
    return f"vs the best: {format_p(cell.p_value)}, {cell.test}"


def _failure_cell(model: str, sheets: Sequence[SheetFiles], experiment_id: str) -> str:
    """A model's failure sheets as links into MLflow's artifact view (the HTML page, and its PNG);
    an empty cell when it has none."""
    links = []
    for sheet in sheets:
        label = "failures" if len(sheets) == 1 else f"failures: {sheet.stem}"
        title = f"failure sheet of {model} (MLflow run {sheet.run_id}, {sheet.page})"
        links.append(f'<a class="failure-link" href="{html.escape(artifact_page(sheet.run_id, experiment_id, sheet.page))}" '
                     f'title="{html.escape(title)}">{html.escape(label)}</a>')
        if sheet.html and sheet.png:
            links.append(f'<a class="failure-png" href="{html.escape(artifact_page(sheet.run_id, experiment_id, sheet.png))}" '
                         f'title="{html.escape(sheet.png)}">png</a>')
    return f'<td class="failures">{" ".join(links)}</td>'


def _failures_row(models: list[str], newest: Mapping[str, RunRecord], sheets: SheetFinder | None) -> str:
    """The table's last row: each model's failure sheet (its newest run's), "" when no model has one."""
    if sheets is None:
        return ""
    found = {model: (sheets(newest[model]), newest[model].experiment_id) for model in models if model in newest}
    if not any(files for files, _ in found.values()):
        return ""
    cells = "".join(_failure_cell(model, *found[model]) if model in found else '<td class="failures"></td>'
                    for model in models)
    return f'<tr class="failures"><td>failure sheet</td><td></td>{cells}</tr>'


def _newest(records: Sequence[RunRecord]) -> dict[str, RunRecord]:
    """model -> its newest record (the run whose values the table shows)."""
    newest: dict[str, RunRecord] = {}
    for record in sorted(records, key=lambda r: r.start_time, reverse=True):
        newest.setdefault(record.model, record)
    return newest


DENSE_COLUMNS = 12  # model columns a 1400 px page holds with names broken only at their separators


def breakable(name: str) -> str:
    """``name`` escaped, with a line-break opportunity (``<wbr>``) after each ``_ - , ·``: a wide
    table wraps its long model and metric names at their parts, never inside a word (issue 57: the DISC
    table ran past the page's right edge)."""
    out = []
    for char in name:
        out.append(html.escape(char))
        if char in "_-,·":
            out.append("<wbr>")
    return "".join(out)


def _html_table(frame: pd.DataFrame, benchmark: str, records: Sequence[RunRecord] = (),
                sheets: SheetFinder | None = None) -> str:
    models, rows = table_cells(frame)
    head = "<th>metric</th><th>better</th>" + "".join(
        f'<th title="{html.escape(model)}">{breakable(display_name(model))}</th>' for model in models)
    body = []
    for metric, better, cells in rows:
        tds = "".join(_html_cell(cell) for cell in cells)
        score = BASELINE_OF.get(metric)
        marker = f' data-baseline-for="{html.escape(score)}"' if score else ""
        note = f" (baseline of {html.escape(score)})" if score else ""
        body.append(f'<tr data-metric="{html.escape(metric)}"{marker}><td>{breakable(metric)}{note}</td>'
                    f"<td>{better}</td>{tds}</tr>")
    body.append(_failures_row(models, _newest(records), sheets))
    dense = ' dense' if len(models) > DENSE_COLUMNS else ""  # past this many, break inside words too
    return (f'<table class="leaderboard{dense}" data-benchmark="{html.escape(benchmark)}"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _versus_best_table(frame: pd.DataFrame) -> str:
    """Each model tested against the best (:func:`~vsbench.reporting.leaderboard.mark_indistinguishable`):
    the difference from the best, its 95% interval, the p-value and the test; "" when none was made."""
    tested = frame[frame["test"].astype(bool)].sort_values(["metric", "model"])
    if tested.empty:
        return ""
    best = {metric: group[group["best"]].iloc[0] for metric, group in frame.groupby("metric") if group["best"].any()}
    rows = []
    for row in tested.itertuples():
        top = best[row.metric]
        interval = (f"[{row.diff_low:+.4g}, {row.diff_high:+.4g}]" if math.isfinite(row.diff_low) else "-")
        if isinstance(row.diff_note, str) and row.diff_note:  # issue 55: the difference's interval says when it is weak, as a value's does
            interval += f' <span class="ci-note">({html.escape(row.diff_note)})</span>'
        verdict = "indistinguishable (≈)" if row.indistinguishable else "different"
        rows.append(f'<tr data-metric="{html.escape(str(row.metric))}" data-model="{html.escape(row.model)}">'
                    f"<td>{html.escape(str(row.metric))}</td><td>{html.escape(display_name(row.model))}</td>"
                    f"<td>{html.escape(display_name(top.model))}</td><td>{row.value - top.value:+.4g}</td><td>{interval}</td>"
                    f"<td>{html.escape(format_p(row.p_value))}</td><td>{html.escape(row.test)}</td>"
                    f"<td>{verdict}</td></tr>")
    return ('<h3>Compared with the best</h3><table class="versus-best"><thead><tr><th>metric</th><th>model</th>'
            "<th>best</th><th>model - best</th><th>95% interval</th><th>p</th><th>test</th><th></th></tr></thead>"
            f"<tbody>{''.join(rows)}</tbody></table>")


def _benchmark_section(benchmark: str, records: list[RunRecord], frame: pd.DataFrame,
                       colors: Mapping[str, Any], sheets: SheetFinder | None = None) -> str:
    metrics = plotted_metrics(frame)
    models = sorted(frame["model"].unique())
    used = {model: colors[model] for model in models}
    higher = {str(metric): bool(value) for metric, value in frame.groupby("metric")["higher_is_better"].first().items()}
    trend = _png(_trend_figure(records, metrics, used, higher))
    bars = _png(_bars_figure(frame, metrics, used, higher))
    name = html.escape(benchmark)
    return (f'<section class="benchmark" id="benchmark-{name}"><h2>{name}</h2>'
            f"{_html_table(frame, benchmark, records, sheets)}{_versus_best_table(frame)}"
            f"<h3>Over time</h3>"
            f'<img class="plot trend" alt="{name}: each metric over time per model" '
            f'src="data:image/png;base64,{trend}">'
            f"<h3>Latest value per model</h3>"
            f'<img class="plot bars" alt="{name}: latest value per model" src="data:image/png;base64,{bars}">'
            f"</section>")


def _pairs_section(pairs: Sequence[RunPair]) -> str:
    if not pairs:
        return ""
    return '<h2>Runs compared</h2><section class="pairs">' + "".join(pair_table(p) for p in pairs) + "</section>"


def _runs_table(records: list[RunRecord]) -> str:
    rows = "".join(
        f'<tr data-run="{html.escape(run_id)}"><td>{_link(html.escape(run_id), run_id, group[0].experiment_id)}</td>'
        f"<td>{group[0].start_time:%Y-%m-%d %H:%M:%S} UTC</td>"
        f"<td>{html.escape(group[0].pipeline)}</td><td>{html.escape(source(group[0]))}</td>"
        f'<td class="ran-in">{html.escape(ran_in(group[0]))}</td>'
        f"<td>{html.escape(', '.join(f'{display_name(r.model)} on {r.benchmark}' for r in group))}</td>"
        f'<td class="provenance">{html.escape(provenance(group[0]))}</td></tr>'
        for run_id, group in runs_by_id(records).items())
    return ('<table class="runs"><thead><tr><th>MLflow run</th><th>started</th><th>pipeline</th><th>source</th>'
            f"<th>ran in</th><th>model on benchmark</th><th>data, profile, code</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>")


_LEGEND = """ In each table the highlighted
value marked * is the best latest value among the models (higher is better unless the column says lower);
≈ marks a value the runs' per-unit outcomes cannot tell from the best (the 95% interval of the difference holds 0:
paired when both runs scored the same units, else unpaired; the test's p-value is shown beside it); [low, high] is
a value's 95% bootstrap interval."""


def run_counts(records: Sequence[RunRecord]) -> str:
    """What the page shows, counted as a person counts it: ``5 commands, 18 evaluations`` (a command
    or pipeline run is an evaluation's parent; an evaluation is a run of one model on one benchmark
    variant), not every run id as one "run" (issue 57)."""
    groups = runs_by_id(list(records))
    commands = sum(source(group[0]) == "command" for group in groups.values())
    pipelines = len(groups) - commands
    evaluations = sum(bool(r.parent_run_id) for r in records)
    parts = [f"{pipelines} pipeline run{'s' if pipelines != 1 else ''}" if pipelines else "",
             f"{commands} command{'s' if commands != 1 else ''}" if commands else "",
             f"{evaluations} evaluation{'s' if evaluations != 1 else ''}" if evaluations else ""]
    return ", ".join(p for p in parts if p) or "no runs"


def write_report(runs: list[RunRecord], path: Path, *, title: str, lower_is_better: LowerIsBetter | None = None,
                 reader: UnitsReader | None = None, pairs: Sequence[RunPair] = (),
                 sheets: SheetFinder | None = None) -> Path:
    """One self-contained HTML file: per benchmark the leaderboard table (values with their 95%
    intervals), each metric over time per model and the latest values as bars (intervals as error
    bars); then the runs it covers. With ``reader``, each model is tested against the best from the
    runs' unit files (marked ``≈`` where indistinguishable, and a table of the tests); ``pairs``
    (``vsbench compare --runs``) add a table of paired differences each. With ``sheets``
    (:class:`~vsbench.reporting.runs.FailureSheets`), each table's last row links every model's failure
    sheet (its newest run's) in MLflow's artifact view. Returns ``path``."""
    frame = leaderboard(runs, lower_is_better)
    if reader is not None and not frame.empty:
        frame = mark_indistinguishable(frame, reader)
    colors = _colors(sorted(frame["model"].unique()) if not frame.empty else [])
    generated = datetime.now(UTC)
    sections = [_benchmark_section(benchmark, [r for r in runs if r.benchmark == benchmark], group, colors, sheets)
                for benchmark, group in frame.groupby("benchmark", sort=True)] if not frame.empty else [] if pairs else [
        '<p class="note">No finished pipeline runs with metrics yet.</p>']
    counted = run_counts(runs) if runs or not pairs else (
        f"{len(pairs)} comparison{'s' if len(pairs) != 1 else ''} of two runs: "
        + "; ".join(f"{p.first_label} ({p.first_run_id}) and {p.second_label} ({p.second_run_id})" for p in pairs))
    legend = "" if frame.empty else _LEGEND
    runs_part = f"<h2>Runs</h2>\n{_runs_table(runs)}" if runs or not pairs else ""
    document = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{_CSS}</style></head>
<body>
<h1>{html.escape(title)}</h1>
<p class="note">{html.escape(counted)}; generated {generated:%Y-%m-%d %H:%M} UTC.{legend}</p>
<p id="plot-warning">Some plots did not load.</p>
{"".join(sections)}
{_pairs_section(pairs)}
{runs_part}
<script>{_CHECK_IMAGES}</script>
</body></html>
"""
    atomic_write_text(path, document)
    return path
