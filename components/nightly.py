"""Kubeflow components that close a nightly run: the regression check and the comparison report.

Both read runs back from MLflow through the one bounded client (``vsbench.io.store.store_client``):
a store that is down, refuses or hangs costs at most ``VSBENCH_TRACKING_TIMEOUT`` seconds and ends
the task as one ``error:`` line naming the store's URI, exit 2 (``store_down_exits``), not a
traceback (issue 54).
"""

from kfp import dsl
from kfp.dsl import HTML, Metrics, Output

from vsbench.runtime.images import CPU_IMAGE


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def regression_check(
    experiment: str, parent_run_id: str, threshold: float, relative: bool, metrics_json: str, pipeline: str,
    metrics: Output[Metrics], spread_json: str = "{}",
):
    """Compare this night with the previous one in MLflow; record the outcome there; fail on a drop."""
    import json

    from vsbench.benchmarks.registry import lower_is_better_metrics
    from vsbench.io.store import store_client, store_down_exits
    from vsbench.reporting.changes import count_words
    from vsbench.reporting.regression import RegressionError, check_regression
    from vsbench.steps.compare import night_compare_sheet

    if not parent_run_id:
        raise RuntimeError("MLflow was unreachable when the run opened: no baseline to compare against")
    with store_down_exits():  # the store down or hanging: one line naming it, exit 2
        report = check_regression(experiment, parent_run_id, threshold=threshold, relative=relative,
                                  metrics=json.loads(metrics_json) or None, pipeline=pipeline,
                                  lower_is_better=lower_is_better_metrics(), spread=json.loads(spread_json) or None)
        metrics.log_metric("regression_drops", float(len(report.drops)))
        metrics.log_metric("regression_passed", float(report.passed))
        metrics.log_metric("regression_machine_changed", float(report.machine_changed))
        print(f"regression check: {report.status}: {report.message()}", flush=True)
        if report.previous_run_id:  # the picture of what changed: failures/compare-<baseline>.png/.html on the night
            sheet = night_compare_sheet(store_client(), parent_run_id, report.previous_run_id)
            if sheet is not None:
                # in the sheet's own words: right/wrong, or ranked higher / higher AP for a ranking metric
                words = count_words(sheet["counts"], "the baseline", "tonight's run")
                print(f"compare sheet: {words}: " + ", ".join(e["artifact"] for e in sheet["files"].values()),
                      flush=True)
    if not report.passed:
        raise RegressionError(report.message())


@dsl.component(base_image=CPU_IMAGE, install_kfp_package=False)
def comparison_report(experiment: str, last: int, report: Output[HTML], parent_run_id: str = ""):
    """The leaderboard and trend plots of the experiment, as a KFP HTML artifact and on the MLflow run."""
    from pathlib import Path

    from vsbench.benchmarks.registry import lower_is_better_metrics
    from vsbench.io.store import store_client, store_down_exits
    from vsbench.reporting.html_report import write_report
    from vsbench.reporting.runs import FailureSheets, collect_runs
    from vsbench.reporting.significance import UnitsReader
    from vsbench.tracking.runs import log_artifact_to_run

    with store_down_exits():  # the store down or hanging: one line naming it, exit 2
        runs = collect_runs(experiment, last=last, include_run_id=parent_run_id or None)  # this run is not closed yet
        # each model tested against the best from the runs' unit files (marked ≈ where indistinguishable)
        write_report(runs, Path(report.path), title=f"{experiment}: last {last} runs",
                     lower_is_better=lower_is_better_metrics(), reader=UnitsReader(store_client()),
                     sheets=FailureSheets(store_client()))  # each model's failure sheet linked in MLflow
    log_artifact_to_run(parent_run_id, Path(report.path), "report.html")
