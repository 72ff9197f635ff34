"""The leaderboard: model x benchmark x metric from run records, the best value marked (in the
direction its benchmark declares), as a table for the terminal."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from vsbench.io import terminal
from vsbench.reporting.runs import (
    LEADERBOARD_COLUMNS,
    LowerIsBetter,
    RunRecord,
    display_name,
    ran_in,
    runs_by_id,
)
from vsbench.reporting.significance import UnitsReader, format_p, split_intervals
from vsbench.stats.names import NOTE_TAG
from vsbench.stats.resample import Resampling


def leaderboard(runs: Iterable[RunRecord], lower_is_better: LowerIsBetter | None = None) -> pd.DataFrame:
    """One row per (benchmark, metric, model): the model's latest value and whether it is the best.

    "Best" compares the models' latest values for the same benchmark and metric (the highest, or the
    lowest where the newest run's ``vsbench.lower_is_better`` tag says so; for runs without it, errors,
    losses, timings and the metrics ``lower_is_better`` names for the benchmark; ties are all best).
    ``runs`` counts the runs with a value. A metric's ``<metric>_ci95_low`` / ``_high`` are its
    row's ``low`` and ``high`` (NaN when the run logged none), never rows of their own; the test
    against the best is :func:`mark_indistinguishable`'s.
    """
    lower = lower_is_better or {}
    latest: dict[tuple[str, str, str], dict[str, Any]] = {}
    for record in sorted(runs, key=lambda r: r.start_time, reverse=True):
        metrics, bounds = split_intervals(record.metrics)
        for metric, value in metrics.items():
            if not math.isfinite(value):
                continue
            key = (record.benchmark, metric, record.model)
            if key in latest:
                latest[key]["runs"] += 1
            else:
                low, high = bounds.get(metric, (math.nan, math.nan))
                latest[key] = {"benchmark": record.benchmark, "metric": metric, "model": record.model,
                               "value": float(value), "best": False,
                               "higher_is_better": record.higher_is_better(metric, lower),
                               "runs": 1, "run_id": record.run_id, "start_time": record.start_time,
                               "experiment_id": record.experiment_id, "low": float(low), "high": float(high),
                               "units_run_id": record.units_run_id, "p_value": math.nan, "test": "",
                               "indistinguishable": False, "diff_low": math.nan, "diff_high": math.nan,
                               "note": record.tags.get(f"{NOTE_TAG}{metric}", ""), "diff_note": ""}
    frame = pd.DataFrame(list(latest.values()), columns=LEADERBOARD_COLUMNS)
    if frame.empty:
        return frame
    for _, group in frame.groupby(["benchmark", "metric"]):
        values = group["value"]
        target = values.max() if group["higher_is_better"].iloc[0] else values.min()
        frame.loc[group.index, "best"] = [math.isclose(v, target, rel_tol=1e-12, abs_tol=1e-15) for v in values]
    return frame.sort_values(["benchmark", "metric", "model"], ignore_index=True)


def mark_indistinguishable(frame: pd.DataFrame, reader: UnitsReader, resampling: Resampling | None = None,
                           ) -> pd.DataFrame:
    """Each model's latest run tested against the best's, per (benchmark, metric): ``p_value``,
    ``test`` and ``indistinguishable`` (the 95% interval of its difference from the best holds 0: the
    one decision rule, :attr:`~vsbench.stats.compare.Difference.distinguishable`), and that interval
    (``diff_low``, ``diff_high``: this model minus the best).

    Paired when both runs' unit files hold the same units of the same data, else unpaired
    (:meth:`UnitsReader.difference`). Unit files are read only for the cells that need them: a
    metric with two or more models, a best run and another run that both name unit files; each run's
    files are downloaded once. Disjoint intervals of the two values are no shortcut: the verdict is
    the difference's own interval's, as on every other page. Cells without unit files keep no test
    (``test`` empty)."""
    frame = frame.copy()
    for _, group in frame.groupby(["benchmark", "metric"], sort=False):
        if len(group) < 2:
            continue
        best = group[group["best"]].sort_values("start_time", ascending=False).iloc[0]
        if not best.units_run_id:
            continue
        for index, row in group.iterrows():
            if row.best or not row.units_run_id:
                continue
            difference = reader.difference(best.units_run_id, row.units_run_id, str(row.metric), resampling)
            if difference is None:
                continue
            frame.loc[index, ["p_value", "test", "indistinguishable", "diff_low", "diff_high", "diff_note"]] = [
                difference.p_value, difference.test, not difference.distinguishable, difference.low,
                difference.high, difference.note]
    return frame


def format_value(value: float) -> str:
    return f"{value:.4g}"


BEST_MARK = "*"
SAME_MARK = "≈"
FOOTER = ("* best latest value among the models (higher is better unless the column says lower); "
          "≈ not distinguishable from the best (the 95% interval of the difference holds 0; paired on the "
          "same units, else unpaired)")
INTERVALS_NOTE = "[low, high]: 95% bootstrap interval"
HIDDEN_NOTE = "each value's 95% interval and the full names in place: vsbench compare --details"
WIDTH = terminal.WIDTH  # the terminal columns the leaderboard fits, --details or not (issues 48, 57)


@dataclass(frozen=True)
class Cell:
    text: str
    best: bool
    run_id: str = ""
    experiment_id: str = ""
    value: float = math.nan
    low: float = math.nan
    high: float = math.nan
    indistinguishable: bool = False
    p_value: float = math.nan
    test: str = ""
    note: str = ""  # the interval's edge note (few units, zero width, resamples left out), "" for none

    @property
    def mark(self) -> str:
        return BEST_MARK if self.best else SAME_MARK if self.indistinguishable else ""

    @property
    def interval(self) -> str:
        """``[0.41, 0.49]`` or "" when the run logged no interval."""
        if not (math.isfinite(self.low) and math.isfinite(self.high)):
            return ""
        return f"[{format_value(self.low)}, {format_value(self.high)}]"


def table_cells(frame: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, list[Cell | None]]]]:
    """One benchmark's rows as (models, [(metric, "higher"/"lower", a cell per model or None)])."""
    models = sorted(frame["model"].unique())
    rows = []
    for metric, group in frame.groupby("metric", sort=True):
        by_model = {row.model: _cell(row) for row in group.itertuples()}
        better = "higher" if group["higher_is_better"].iloc[0] else "lower"
        rows.append((str(metric), better, [by_model.get(model) for model in models]))
    return models, rows


def _cell(row: Any) -> Cell:
    get = row._asdict().get
    return Cell(format_value(row.value), bool(row.best), row.run_id, row.experiment_id, float(row.value),
                float(get("low", math.nan)), float(get("high", math.nan)), bool(get("indistinguishable", False)),
                float(get("p_value", math.nan)), str(get("test", "") or ""), str(get("note", "") or ""))


def _text_table(rows: list[list[str]], left: tuple[int, ...] = (0,)) -> str:
    """Columns padded to their widest cell: those in ``left`` (metric names) left-aligned, the rest right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in
                               enumerate(zip(row, widths))).rstrip() for row in rows)


def _cell_text(cell: Cell | None, intervals: bool = True) -> str:
    if cell is None:
        return "- "
    interval = f" {cell.interval}" if intervals and cell.interval else ""
    return f"{cell.text}{interval}{cell.mark or ' '}"


def _wide(models: list[str], rows: list[tuple[str, str, list[Cell | None]]], intervals: bool = True) -> str:
    """Metrics as rows, a column per model: the table as it always was."""
    lines = [["metric", "better", *models]] + [[metric, better, *(_cell_text(cell, intervals) for cell in cells)]
                                               for metric, better, cells in rows]
    return _text_table(lines)


def _long(models: list[str], rows: list[tuple[str, str, list[Cell | None]]], width: int = WIDTH,
          intervals: bool = True) -> str:
    """A block per metric, a row per model (what fits the width when the models are many or their
    names long): ``  model  value [low, high] mark  p=... paired``; names too long for that get the
    value on the line below them, and a name longer than the width wrapped at its words, continued
    deeper than its value (issue 57: ``compare --details`` printed a 115-column name)."""
    blocks = []
    for metric, better, cells in rows:
        lines = [[f"  {model}", _cell_text(cell, intervals), _versus(cell)] for model, cell in zip(models, cells)
                 if cell is not None]
        table = _text_table(lines, left=(0, 2))
        if _widest(table) > width:
            values = _text_table([["", *line[1:]] for line in lines], left=(0, 2)).splitlines()
            table = "\n".join(line for (name, *_), value in zip(lines, values)
                              for line in [*terminal.wrap(name.strip(), "  ", "      ", width), f"    {value.strip()}"])
        blocks.append(f"{metric} ({better} is better)\n{table}")
    return "\n".join(blocks)


def _widest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


def _legend(labels: list[str], models: list[str], width: int) -> str:
    """``m1  <the model's full name>``, one per model, a long name wrapped under itself."""
    pad = max(len(label) for label in labels) + 4
    return "\n".join("\n".join(terminal.wrap(model, f"  {label}".ljust(pad), " " * pad, width))
                     for label, model in zip(labels, models))


def _fitted(models: list[str], rows: list[tuple[str, str, list[Cell | None]]], width: int) -> tuple[str, bool]:
    """(the table within ``width`` columns, whether it left something out): the full table when it
    fits; else without the intervals; else the models as ``m1``, ``m2``... with a legend of their
    full names; else a block per metric with those labels."""
    for names, intervals in ((models, True), (models, False)):
        table = _wide(names, rows, intervals)
        if _widest(table) <= width:
            return table, not intervals
    labels = [f"m{i}" for i in range(1, len(models) + 1)]
    table = _wide(labels, rows, intervals=False)
    if _widest(table) > width:
        table = _long(labels, rows, width, intervals=False)
    return f"{table}\nmodels:\n{_legend(labels, models, width)}", True


def _versus(cell: Cell) -> str:
    """The test against the best, in a few words: ``p=0.21 paired``, ``p=0.03 unpaired``, or ""."""
    if cell.best or not cell.test:
        return ""
    kind = "unpaired" if cell.test.startswith("unpaired") else "paired"
    return f"{format_p(cell.p_value)} {kind}"


def _edge_notes(models: list[str], rows: list[tuple[str, str, list[Cell | None]]], width: int) -> str:
    """The intervals' edge notes (a run's ``interval_note.<metric>``: fewer than ~20 units, zero width,
    replicates dropped) under a benchmark's table, as the report and ``compare --runs`` show them beside
    the interval (issue 57: the terminal leaderboard showed none, so a rough interval read as a sound
    one): ``  <model> (<metrics>): <note>``, the metrics of one model that share a note on one line,
    each wrapped within ``width``; "" when no cell has a note."""
    shared: dict[tuple[str, str], list[str]] = {}
    for metric, _, cells in rows:
        for model, cell in zip(models, cells):
            if cell is not None and cell.note:
                shared.setdefault((model, cell.note), []).append(metric)
    if not shared:
        return ""
    lines = ["\n".join(terminal.wrap(f"{model} ({', '.join(metrics)}): {note}", "  ", "    ", width))
             for (model, note), metrics in sorted(shared.items())]
    return "interval notes:\n" + "\n".join(lines)


def render_leaderboard(frame: pd.DataFrame, width: int = WIDTH, details: bool = False) -> str:
    """Plain text for the terminal: per benchmark, metrics x models, the best marked ``*`` and those
    indistinguishable from it ``≈``, within ``width`` columns (issue 48: it was 233 wide). Each
    value's interval is shown where the table still fits; long model names become ``m1``, ``m2``...
    with a legend. ``details`` (``vsbench compare --details``): every interval and the full names in
    place, a block per metric with a row per model when wider than ``width``. Under each table, the
    intervals' edge notes (:func:`_edge_notes`), with or without ``details``."""
    if frame.empty:
        return "no finished pipeline runs with metrics"
    blocks = []
    hidden = False
    for benchmark, group in frame.groupby("benchmark", sort=True):
        models, rows = table_cells(group)
        # Each model as MLflow names its runs (``resnet34-random``), never the options' JSON (issue 57).
        models = [display_name(model) for model in models]
        if details:
            table = _wide(models, rows)
            if _widest(table) > width:
                table = _long(models, rows, width)
        else:
            table, left_out = _fitted(models, rows, width)
            hidden = hidden or left_out
        notes = _edge_notes(models, rows, width)
        blocks.append(f"== {benchmark} ==\n{table}" + (f"\n{notes}" if notes else ""))
    footer = f"{FOOTER}; {HIDDEN_NOTE if hidden else INTERVALS_NOTE}"
    blocks.append("\n".join(terminal.wrap(footer, width=width)))
    return "\n\n".join(blocks)


def render_runs(records: list[RunRecord], width: int = WIDTH) -> str:
    """The runs behind the leaderboard, newest first, with where their steps ran (on a line of its own
    under each run when the table would be wider than ``width``: an image's name and id are long)."""
    rows = [[run_id, f"{group[0].start_time:%Y-%m-%d %H:%M:%S}", group[0].pipeline, ran_in(group[0])]
            for run_id, group in runs_by_id(records).items()]
    table = _text_table([["MLflow run", "started (UTC)", "pipeline", "ran in"], *rows])
    if _widest(table) <= width:
        return table
    lines = _text_table([["MLflow run", "started (UTC)", "pipeline"], *(row[:3] for row in rows)]).splitlines()
    return "\n".join([lines[0], *(f"{line}\n  ran in {row[3]}" for line, row in zip(lines[1:], rows))])
