"""``vsbench compare``: the leaderboard and HTML report of pipeline runs in MLflow."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vsbench.cli.common import (
    user_errors,
)


def compare(
    experiment: Annotated[str, typer.Option(help="MLflow experiment (from MLFLOW_TRACKING_URI).")],
    last: Annotated[int | None, typer.Option(min=1, help="Only the newest N pipeline runs (default: all).")] = None,
    report: Annotated[Path, typer.Option(help="Where to write the HTML report.")] = Path("vsbench-report.html"),
) -> None:
    """Leaderboard of pipeline runs (model x benchmark x metric, best marked) and an HTML report."""
    from vsbench.benchmarks.registry import lower_is_better_metrics
    from vsbench.reporting.html_report import write_report
    from vsbench.reporting.leaderboard import leaderboard, render_leaderboard, render_runs
    from vsbench.reporting.runs import collect_runs

    with user_errors(LookupError):  # a missing experiment; a broken benchmark plugin
        runs = collect_runs(experiment, last=last)
        lower = lower_is_better_metrics()  # the benchmarks' own directions, a plugin's included
    if not runs:
        typer.echo(f"no finished pipeline runs in experiment {experiment!r}", err=True)
        raise typer.Exit(1)
    typer.echo(render_leaderboard(leaderboard(runs, lower)))
    typer.echo("")
    typer.echo(render_runs(runs))
    write_report(runs, report, title=f"{experiment}" + (f": last {last} runs" if last else ""), lower_is_better=lower)
    typer.echo(f"report: {report}")
