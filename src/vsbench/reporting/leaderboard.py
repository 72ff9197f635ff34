"""The leaderboard: model x benchmark x metric from run records, the best value marked (in the
direction its benchmark declares), as a table for the terminal."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from vsbench.reporting.runs import (
    LEADERBOARD_COLUMNS,
    LowerIsBetter,
    RunRecord,
    ran_in,
    runs_by_id,
)


def leaderboard(runs: Iterable[RunRecord], lower_is_better: LowerIsBetter | None = None) -> pd.DataFrame:
    """One row per (benchmark, metric, model): the model's latest value and whether it is the best.

    "Best" compares the models' latest values for the same benchmark and metric (the highest, or the
    lowest where the newest run's ``vsbench.lower_is_better`` tag says so; for runs without it, errors,
    losses, timings and the metrics ``lower_is_better`` names for the benchmark; ties are all best).
    ``runs`` counts the runs with a value.
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
                               "higher_is_better": record.higher_is_better(metric, lower),
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


def format_value(value: float) -> str:
    return f"{value:.4g}"


@dataclass(frozen=True)
class Cell:
    text: str
    best: bool
    run_id: str = ""
    experiment_id: str = ""


def table_cells(frame: pd.DataFrame) -> tuple[list[str], list[tuple[str, str, list[Cell | None]]]]:
    """One benchmark's rows as (models, [(metric, "higher"/"lower", a cell per model or None)])."""
    models = sorted(frame["model"].unique())
    rows = []
    for metric, group in frame.groupby("metric", sort=True):
        by_model = {row.model: Cell(format_value(row.value), bool(row.best), row.run_id, row.experiment_id)
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
        models, rows = table_cells(group)
        lines = [["metric", "better", *models]] + [
            [metric, better, *(cell.text + ("*" if cell.best else " ") if cell else "- " for cell in cells)]
            for metric, better, cells in rows]
        blocks.append(f"== {benchmark} ==\n{_text_table(lines)}")
    blocks.append("* best latest value among the models (higher is better unless the column says lower)")
    return "\n\n".join(blocks)


def render_runs(records: list[RunRecord]) -> str:
    """The runs behind the leaderboard, newest first, with where their steps ran."""
    rows = [["MLflow run", "started (UTC)", "pipeline", "ran in"]] + [
        [run_id, f"{group[0].start_time:%Y-%m-%d %H:%M:%S}", group[0].pipeline, ran_in(group[0])]
        for run_id, group in runs_by_id(records).items()]
    return _text_table(rows)
