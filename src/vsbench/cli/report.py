"""``vsbench compare``: the leaderboard and HTML report of pipeline runs in MLflow, or two runs compared."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    user_errors,
)

DEFAULT_REPORT = "vsbench-report.html"


def compare(
    experiment: Annotated[str | None, typer.Option(help="MLflow experiment (from MLFLOW_TRACKING_URI): its "
                                                        "leaderboard (default: none, with --runs).")] = None,
    last: Annotated[int | None, typer.Option(min=1, help="Only the newest N pipeline runs (default: all).")] = None,
    report: Annotated[Path | None, typer.Option(
        help="Where to write the HTML report (default: ./vsbench-report.html with --experiment; with --runs "
             "alone no page: the terminal and the compare sheet say it all).")] = None,
    runs: Annotated[tuple[str, str] | None, typer.Option(
        "--runs", metavar="FIRST SECOND",
        help="Two MLflow run ids (evaluation runs, or an ABID pipeline run) compared metric by metric: "
             "second minus first, its 95% interval and p-value, paired when both scored the same units "
             "(default: none).")] = None,
    metric: Annotated[list[str] | None, typer.Option(help="With --runs: only this metric (repeatable; default: every metric "
                                                              "both hold).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="With --runs: one JSON object instead of text; "
                                                         "no report.")] = False,
    details: Annotated[bool, typer.Option(
        "--details", help="The leaderboard with every value's 95% interval and the models' full names in place "
                          "(default: within 100 columns, long names as m1, m2... with a legend).")] = False,
    tests: Annotated[bool, typer.Option(help="Test each model against the best from the runs' unit files "
                                             "(marks ≈); --no-tests reads no unit file.")] = True,
    sheet: Annotated[Path | None, typer.Option(
        help="With --runs: the folder for the compare sheet (the units right in one run only, with their "
             "photos; a PNG and an HTML page; VSBENCH_FAILURE_ROWS=0: none) (default: ./compare-<FIRST8>-<SECOND8>).")
    ] = None,
    root: Annotated[str | None, typer.Option(
        help="With --runs: the dataset folder the sheet's photos come from (default: the runs' "
             "vsbench.data.root tag).")] = None,
) -> None:
    """Leaderboard of pipeline runs (model x benchmark x metric, each value with its 95% interval, the best
    marked * and the models indistinguishable from it ≈) and an HTML report; or, with --runs, two runs
    compared."""
    from mlflow.exceptions import MlflowException

    from vsbench.benchmarks.registry import lower_is_better_metrics
    from vsbench.io.store import store_client
    from vsbench.reporting.changes import count_words
    from vsbench.reporting.html_report import write_report
    from vsbench.reporting.leaderboard import leaderboard, mark_indistinguishable, render_leaderboard, render_runs
    from vsbench.reporting.pairs import compare_runs, render_pair
    from vsbench.reporting.runs import FailureSheets, collect_runs
    from vsbench.reporting.significance import UnitsReader

    # MLflow's download bars would interleave with the tables (and with --json); a unit file is small.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if experiment is None and runs is None:
        raise typer.BadParameter("name an --experiment (its leaderboard) or --runs FIRST SECOND (two runs compared)")
    reader = UnitsReader(store_client(), strict=runs is not None) if tests or runs else None
    pairs = []
    if runs is not None:
        with user_errors(LookupError, MlflowException):  # an unknown run id; a refused unit file (UnitsError)
            pair = compare_runs(reader, runs[0], runs[1], metric or None)
        made = _compare_sheet(reader, runs, sheet, root, metric or None, report or Path("."))
        if made:
            pair = replace(pair, sheet=made)
        if as_json:
            typer.echo(json.dumps(pair.as_dict(), indent=2))
            return
        typer.echo(render_pair(pair))
        if made:
            typer.echo(f"compare sheet: {count_words(made)}")
            typer.echo(f"  {made['png']}\n  {made['html']}")
        pairs.append(pair)
    records = []
    if experiment is not None:
        with user_errors(LookupError):  # a missing experiment; a broken benchmark plugin
            records = collect_runs(experiment, last=last)
            lower = lower_is_better_metrics()  # the benchmarks' own directions, a plugin's included
        if not records:
            typer.echo(f"no finished pipeline runs in experiment {experiment!r}", err=True)
            raise typer.Exit(1)
        frame = leaderboard(records, lower)
        if tests and reader is not None:
            frame = mark_indistinguishable(frame, reader)
        typer.echo(render_leaderboard(frame, details=details))
        typer.echo("")
        typer.echo(render_runs(records))
        for why in (reader.refused.values() if reader is not None else ()):
            typer.echo(f"unit files refused (no test for their cells): {why}", err=True)
    else:
        lower = None
    if report is None and experiment is None:  # --runs alone: nothing written into the current folder
        return
    report = report or Path(DEFAULT_REPORT)
    title = (f"{experiment}" + (f": last {last} runs" if last else "")) if experiment else "runs compared"
    sheets = FailureSheets(store_client())  # each model's failure sheet linked (one listing per table column)
    write_report(records, report, title=title, lower_is_better=lower, reader=reader if tests else None,
                 pairs=pairs, sheets=sheets)
    for why in sheets.refused.values():
        typer.echo(f"failure sheets not linked: {why}", err=True)
    typer.echo(f"report: {report}")


def _compare_sheet(reader: object, runs: tuple[str, str], folder: Path | None, root: str | None,
                   metrics: list[str] | None, report: Path) -> dict[str, object]:
    """Write the compare sheet of ``runs`` into ``folder`` (default ``./compare-<first8>-<second8>``);
    returns the paths, the counts and the report's links, or {} when sheets are off. A sheet that
    cannot be made is one warning line, never a failed comparison."""
    from urllib.parse import quote

    from vsbench.steps.compare import compare_runs_sheet

    folder = folder or Path(f"compare-{runs[0][:8]}-{runs[1][:8]}")
    try:
        written = compare_runs_sheet(reader, runs[0], runs[1], folder, root=root, metrics=metrics)
    except (OSError, ValueError, LookupError) as exc:
        typer.echo(f"warning: no compare sheet: {type(exc).__name__}: {exc}", err=True)
        return {}
    if written is None:
        return {}
    files = written["files"]
    base = report.resolve().parent
    return {"png": files["png"]["path"], "html": files["html"]["path"], **{
        k: written["counts"].get(k, 0) for k in ("first_only", "second_only", "by_rank", "by_ap")},
        "png_href": quote(os.path.relpath(Path(files["png"]["path"]).resolve(), base)),
        "html_href": quote(os.path.relpath(Path(files["html"]["path"]).resolve(), base))}
