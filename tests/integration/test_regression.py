"""The nightly regression check against a real ``mlflow server``: planted drops fail, the rest pass,
and the outcome is read back from the run through the server."""

from __future__ import annotations

import math

import mlflow
import pytest
from mlflow.tracking import MlflowClient

from vsbench.reporting.regression import (
    ARTIFACT,
    BASELINE_TAG,
    DROPS_METRIC,
    REGRESSION_TAG,
    RegressionError,
    check_regression,
    compare_metrics,
)

from .mlflow_server import record_pipeline_run

pytestmark = pytest.mark.integration

NIGHTLY = "vsbench-nightly"
UAP = "disc__efficientnet_lite0__Flat__1.00_0_2__uap"
ACCURACY = "disc__efficientnet_lite0__Flat__1.00_0_2__accuracy_at_1"
RMSE = "abid__baselines__counting_rmse"
GOOD_NIGHT = {UAP: 0.50, ACCURACY: 0.60, RMSE: 1.00}


def _recorded(run_id: str) -> tuple[dict[str, str], dict[str, float], dict]:
    """Tags, metrics and regression.json of a run, as anyone reading the server sees them."""
    run = MlflowClient().get_run(run_id)
    return run.data.tags, run.data.metrics, mlflow.artifacts.load_dict(f"{run.info.artifact_uri}/{ARTIFACT}")


def _nightly_step(experiment: str, run_id: str, **rule) -> None:
    """What the nightly's regression step does: check, then raise when the check did not pass."""
    report = check_regression(experiment, run_id, **rule)
    if not report.passed:
        raise RegressionError(f"{len(report.drops)} metrics dropped: {report.drops}")


def test_first_night_passes_without_baseline(mlflow_tracking, fresh_experiment):
    # Another pipeline's finished run in the same experiment is no baseline for the nightly.
    record_pipeline_run(fresh_experiment, "vsbench-similarity", {UAP: 0.9})
    night = record_pipeline_run(fresh_experiment, NIGHTLY, GOOD_NIGHT, status=None)

    report = check_regression(fresh_experiment, night)

    assert report.passed and report.previous_run_id is None and report.status == "no-baseline"
    tags, metrics, saved = _recorded(night)
    assert tags[REGRESSION_TAG] == "no-baseline" and BASELINE_TAG not in tags
    assert metrics[DROPS_METRIC] == 0
    assert saved["status"] == "no-baseline" and saved["drops"] == []


def test_planted_drop_fails_the_night_and_the_next_good_night_passes(mlflow_tracking, fresh_experiment):
    exp = fresh_experiment
    first = record_pipeline_run(exp, NIGHTLY, GOOD_NIGHT)
    record_pipeline_run(exp, "vsbench-similarity", {UAP: 0.10})  # other pipelines never serve as the baseline
    # Planted: uap falls by 0.10 and the rmse (lower is better) rises by 0.20; accuracy improves.
    bad = record_pipeline_run(exp, NIGHTLY, {UAP: 0.40, ACCURACY: 0.61, RMSE: 1.20}, status=None)

    with pytest.raises(RegressionError, match="2 metrics dropped"):
        _nightly_step(exp, bad)

    tags, metrics, saved = _recorded(bad)
    assert tags[REGRESSION_TAG] == "failed" and tags[BASELINE_TAG] == first
    assert tags["vsbench.regression.rule"] == "0.02 absolute"
    assert metrics[DROPS_METRIC] == 2
    drops = {d["metric"]: d for d in saved["drops"]}
    assert set(drops) == {UAP, RMSE} and saved["passed"] is False and saved["compared"] == 3
    assert math.isclose(drops[UAP]["change"], -0.10) and drops[UAP]["higher_is_better"]
    assert math.isclose(drops[RMSE]["change"], 0.20) and not drops[RMSE]["higher_is_better"]
    MlflowClient().set_terminated(bad, "FAILED")  # the exit handler marks the failed night

    # The failed night is not tomorrow's baseline: the next night compares with the last good one.
    good = record_pipeline_run(exp, NIGHTLY, {UAP: 0.49, ACCURACY: 0.60, RMSE: 1.01}, status=None)
    _nightly_step(exp, good)
    tags, metrics, saved = _recorded(good)
    assert tags[REGRESSION_TAG] == "passed" and tags[BASELINE_TAG] == first
    assert metrics[DROPS_METRIC] == 0 and saved["drops"] == [] and saved["previous_run_id"] == first


def test_threshold_boundary_relative_rule_and_named_metrics(mlflow_tracking, fresh_experiment):
    exp = fresh_experiment
    record_pipeline_run(exp, NIGHTLY, {"a": 0.80, "b": 0.80, "c_rmse": 1.00, "d_rmse": 1.00})
    # a and c worsen by exactly 0.02; b and d by 0.0201.
    night = record_pipeline_run(exp, NIGHTLY, {"a": 0.78, "b": 0.7799, "c_rmse": 1.02, "d_rmse": 1.0201},
                                status=None)

    def dropped(**rule) -> list[str]:
        report = check_regression(exp, night, **rule)
        assert report.passed == (not report.drops and not report.missing)
        return sorted(d["metric"] for d in report.drops)

    assert dropped(threshold=0.02) == ["b", "d_rmse"]  # exactly the threshold passes
    assert dropped(threshold=0.0201) == []
    # Relative: a fell by 0.02 / 0.80 = 2.5 % exactly, b by 2.5125 %; c and d rose by about 2 %.
    assert dropped(threshold=0.025, relative=True) == ["b"]
    assert dropped(threshold=0.02, metrics=["a", "c_*"]) == []
    assert dropped(threshold=0.02, metrics=["?_rmse"]) == ["d_rmse"]

    report = check_regression(exp, night, threshold=0.5, metrics=["a", "uap_typo"])
    assert not report.passed and report.drops == [] and report.missing == ["uap_typo"]
    assert _recorded(night)[0][REGRESSION_TAG] == "failed"


def test_compare_metrics_missing_and_non_finite():
    previous = {"uap": 0.5, "recall": 0.4, "rmse": 1.0, "regression_drops": 0.0}
    current = {"uap": float("nan"), "rmse": 1.0, "new_metric": 0.1, "regression_drops": 3.0}

    drops, missing, compared = compare_metrics(previous, current, threshold=0.0)
    assert (drops, missing, compared) == ([], ["recall"], 2)  # reported, not failing: nobody named it
    drops, missing, _ = compare_metrics(previous, current, threshold=0.0, metrics=["recall"])
    assert missing == ["recall"] and drops == [{"metric": "recall", "previous": 0.4, "current": None,
                                                "change": None, "higher_is_better": True}]
    assert compare_metrics({"x": 0.0}, {"x": -1e-6}, threshold=0.5, relative=True)[0][0]["metric"] == "x"
    with pytest.raises(ValueError, match="threshold"):
        compare_metrics(previous, current, threshold=-0.1)
