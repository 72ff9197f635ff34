"""``vsbench.reporting.runs`` against a real ``mlflow server`` on 127.0.0.1 holding pipeline runs of every shape."""

from __future__ import annotations

import base64
import re
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from vsbench.reporting.html_report import write_report
from vsbench.reporting.leaderboard import leaderboard, render_leaderboard
from vsbench.reporting.runs import RunRecord, collect_runs, split_metrics

from .mlflow_server import record_pipeline_run

pytestmark = pytest.mark.integration


@pytest.fixture
def runs(mlflow_tracking: str, fresh_experiment: str) -> dict[str, str]:
    """Oldest first: two similarity runs (one model each, on disc), an ABID run, a nightly run
    covering three pairs, then a night still running and a failed one. Returns name -> run id."""
    exp = fresh_experiment
    made = {
        # The params shape: plain metric names belong to the run's model and benchmark params.
        "effnet": record_pipeline_run(exp, "vsbench-similarity", {"uap": 0.30, "accuracy_at_1": 0.50},
                                      params={"model": "efficientnet_lite0", "benchmark": "disc"}),
        "dino": record_pipeline_run(exp, "vsbench-similarity",
                                    {"disc__dino_vits16__uap": 0.45, "disc__dino_vits16__accuracy_at_1": 0.48},
                                    params={"model": "dino_vits16", "benchmark": "disc"}),
        "abid": record_pipeline_run(exp, "vsbench-abid", {"counting_accuracy": 0.55, "counting_rmse": 1.1},
                                    params={"profile": "demo"}),
        "nightly": record_pipeline_run(exp, "vsbench-nightly", {
            "disc__efficientnet_lite0__uap": 0.35, "disc__efficientnet_lite0__accuracy_at_1": 0.52,
            "abid__baselines__counting_accuracy": 0.60, "abid__baselines__counting_rmse": 1.3,
            "abid__resnet50__counting_accuracy": 0.58, "abid__resnet50__counting_rmse": 0.9,
            "regression_drops": 0.0}, params={"suite": "disc-efficientnet_lite0,abid-baselines,abid-resnet50"}),
        "running": record_pipeline_run(exp, "vsbench-nightly", {"disc__efficientnet_lite0__uap": 0.99}, status=None),
        "failed": record_pipeline_run(exp, "vsbench-nightly", {"disc__efficientnet_lite0__uap": 0.98},
                                      status="FAILED"),
    }
    return made


def _row(frame: pd.DataFrame, benchmark: str, metric: str, model: str) -> pd.Series:
    rows = frame[(frame.benchmark == benchmark) & (frame.metric == metric) & (frame.model == model)]
    assert len(rows) == 1, rows
    return rows.iloc[0]


def test_collect_runs_splits_every_shape_and_keeps_finished_parents(runs, fresh_experiment):
    records = collect_runs(fresh_experiment)

    ids = list(dict.fromkeys(r.run_id for r in records))
    assert ids == [runs["nightly"], runs["abid"], runs["dino"], runs["effnet"]]  # newest first; no running/failed
    assert all(isinstance(r.start_time, datetime) and r.start_time.tzinfo for r in records)
    nightly = {(r.model, r.benchmark): r.metrics for r in records if r.run_id == runs["nightly"]}
    assert nightly == {
        ("efficientnet_lite0", "disc"): {"uap": 0.35, "accuracy_at_1": 0.52},
        ("baselines", "abid"): {"counting_accuracy": 0.60, "counting_rmse": 1.3},
        ("resnet50", "abid"): {"counting_accuracy": 0.58, "counting_rmse": 0.9},
    }  # regression_drops describes the run, not a model
    by_run = {r.run_id: r for r in records}
    assert (by_run[runs["abid"]].model, by_run[runs["abid"]].benchmark) == ("baselines", "abid")
    assert (by_run[runs["effnet"]].model, by_run[runs["effnet"]].metrics) == (
        "efficientnet_lite0", {"uap": 0.30, "accuracy_at_1": 0.50})
    assert by_run[runs["dino"]].metrics == {"uap": 0.45, "accuracy_at_1": 0.48}
    assert by_run[runs["nightly"]].pipeline == "vsbench-nightly"
    assert by_run[runs["nightly"]].tags["vsbench.step"] == "pipeline"

    assert {r.run_id for r in collect_runs(fresh_experiment, last=2)} == {runs["nightly"], runs["abid"]}
    assert {r.run_id for r in collect_runs(fresh_experiment, pipeline="vsbench-similarity")} == {
        runs["dino"], runs["effnet"]}
    # The nightly writes its report before its exit handler closes it: it includes itself.
    with_current = collect_runs(fresh_experiment, last=2, include_run_id=runs["running"])
    assert list(dict.fromkeys(r.run_id for r in with_current)) == [runs["running"], runs["nightly"]]

    with pytest.raises(LookupError, match="no MLflow experiment"):
        collect_runs(f"{fresh_experiment}-missing")


def test_leaderboard_marks_the_best_latest_value(runs, fresh_experiment):
    frame = leaderboard(collect_runs(fresh_experiment))

    assert len(frame) == 8  # disc: 2 metrics x 2 models; abid: 2 metrics x 2 models
    effnet_uap = _row(frame, "disc", "uap", "efficientnet_lite0")
    assert (effnet_uap.value, effnet_uap.runs, effnet_uap.run_id) == (0.35, 2, runs["nightly"])  # latest of two
    assert _row(frame, "disc", "uap", "dino_vits16").best and not effnet_uap.best
    assert _row(frame, "disc", "accuracy_at_1", "efficientnet_lite0").best
    assert not _row(frame, "disc", "accuracy_at_1", "dino_vits16").best
    rmse_best, rmse_worst = _row(frame, "abid", "counting_rmse", "resnet50"), _row(frame, "abid", "counting_rmse",
                                                                                  "baselines")
    assert rmse_best.best and not rmse_best.higher_is_better and not rmse_worst.best  # lower is better
    baselines_accuracy = _row(frame, "abid", "counting_accuracy", "baselines")
    assert baselines_accuracy.value == 0.60 and baselines_accuracy.best and baselines_accuracy.runs == 2

    text = render_leaderboard(frame)
    print(text)
    assert "== abid ==" in text and "== disc ==" in text
    rmse_line = next(line for line in text.splitlines() if line.startswith("counting_rmse"))
    assert re.search(r"\blower\s+1\.3\s+0\.9\*$", rmse_line), rmse_line  # columns: baselines, resnet50
    uap_line = next(line for line in text.splitlines() if line.startswith("uap"))
    assert re.search(r"\bhigher\s+0\.45\*\s+0\.35$", uap_line), uap_line  # dino_vits16, efficientnet_lite0


def test_report_holds_tables_and_inline_plots(runs, fresh_experiment, tmp_path):
    path = write_report(collect_runs(fresh_experiment), tmp_path / "report" / "index.html", title="nightly <test>")
    page = path.read_text()

    assert "<title>nightly &lt;test&gt;</title>" in page
    assert page.count('<table class="leaderboard"') == 2
    for benchmark, metrics in (("abid", ("counting_accuracy", "counting_rmse")), ("disc", ("accuracy_at_1", "uap"))):
        table = re.search(rf'<table class="leaderboard" data-benchmark="{benchmark}">.*?</table>', page).group(0)
        assert re.findall(r'<tr data-metric="([^"]+)">', table) == list(metrics)
    # Every value links to the MLflow run it came from.
    assert re.search(r'<td class="best"><a class="run-link" href="[^"]+/runs/\w+\?workflowType=machine_learning"'
                     r'[^>]*>0\.9 \*</a></td>', page)  # in MLflow's model-training view (docs/tracking.md)
    assert re.search(r'<td><a class="run-link" href="[^"]+"[^>]*>1\.3</a></td>', page)
    images = re.findall(r'<img class="plot (trend|bars)"[^>]*src="data:image/png;base64,([^"]+)"', page)
    assert sorted(kind for kind, _ in images) == ["bars", "bars", "trend", "trend"]
    assert all(base64.b64decode(data).startswith(b"\x89PNG\r\n\x1a\n") for _, data in images)
    assert not re.search(r'src="(https?:)?//', page)  # self-contained: the cluster has no internet
    assert not re.search(r'<(?!a class="run-link")[^>]*href="(https?:)?//', page)  # only links to MLflow runs
    runs_table = re.search(r'<table class="runs">.*?</table>', page).group(0)
    assert runs_table.count("<tr>") == 1 and runs_table.count("<tr data-run=") == 4


def test_split_metrics_and_empty_inputs(tmp_path):
    assert split_metrics({"disc__dino_vits16__Flat__1.00_0_2__uap": 0.4, "counting_accuracy": 0.5},
                         {}, "vsbench-abid") == {("dino_vits16", "disc"): {"Flat__1.00_0_2__uap": 0.4},
                                                 ("baselines", "abid"): {"counting_accuracy": 0.5}}
    assert split_metrics({"x__y": 1.0}, {}, "custom") == {("-", "custom"): {"x__y": 1.0}}

    empty = leaderboard([])
    assert empty.empty and render_leaderboard(empty) == "no finished pipeline runs with metrics"
    page = write_report([], tmp_path / "empty.html", title="empty").read_text()
    assert "No finished pipeline runs" in page and "<img" not in page


def test_ties_are_all_best_and_nan_is_ignored():
    start = datetime(2026, 1, 1, tzinfo=UTC)
    records = [RunRecord("r1", start, "p", "a", "b", {"uap": 0.5, "loss": float("nan")}, {}),
               RunRecord("r1", start, "p", "c", "b", {"uap": 0.5, "loss": 0.2}, {}),
               RunRecord("r0", start - timedelta(days=1), "p", "a", "b", {"loss": 0.1}, {})]
    frame = leaderboard(records)
    assert frame[frame.metric == "uap"].best.tolist() == [True, True]
    loss = frame[frame.metric == "loss"].set_index("model")
    assert loss.loc["a", "value"] == 0.1 and loss.loc["a", "best"] and not loss.loc["c", "best"]
