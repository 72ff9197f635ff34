"""The nightly pipeline under kfp.local: a one-entry suite run twice, the second night regressing."""

from __future__ import annotations

import json

import pytest
import yaml

from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.platform.local_run import run_pipeline_locally
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
from vsbench.tracking.evaluations import evaluation_children
from vsbench.tracking.provenance import STEP_TAG

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _suite(tmp_path, model_options: dict) -> object:
    path = tmp_path / f"suite-{len(model_options)}.yaml"
    path.write_text(yaml.safe_dump({
        "experiment": "nightly-test", "out_root": str(tmp_path / f"runs-{len(model_options)}"),
        "regression": {"threshold": 0.02},
        "entries": [{"benchmark": "disc", "root": str(tmp_path / "disc"), "model": "efficientnet_lite0",
                     "model_options": model_options, "codecs": "Flat", "score_norm": "", "num_shards": 1}],
    }))
    return path


def test_second_night_with_a_planted_drop_fails_and_is_recorded(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    # 30 queries: a drop on 10 (4 of them with a copy) is not beyond chance (exact p 0.07, issue 45)
    generate_disc(tmp_path / "disc", references=16, queries=30, train=10, seed=4)
    arguments = {"experiment": "nightly-test", "batch_size": 8, "report_last": 5}

    good, _, first_dir, error = run_pipeline_locally("nightly", tmp_path / "kfp", arguments,
                                                     ("score",), _suite(tmp_path, {}))
    assert good, error
    # The planted drop: the same entry (same model and options: the same evaluation, issue 38) scored
    # against ground truth that pairs every query with the wrong reference.
    truth = tmp_path / "disc" / "val_groundtruth_matches.csv"
    header, *rows = truth.read_text().splitlines()
    references = [row.split(",")[1] for row in rows]
    truth.write_text("\n".join([header, *(f"{row.split(',')[0]},{references[(i + 1) % len(rows)]}"
                                         for i, row in enumerate(rows))]) + "\n")
    bad, _, second_dir, _ = run_pipeline_locally("nightly", tmp_path / "kfp", arguments, ("score",),
                                                 _suite(tmp_path, {}))
    assert not bad

    client = MlflowClient()
    experiment = client.get_experiment_by_name("nightly-test")
    parents = client.search_runs([experiment.experiment_id], filter_string=f"tags.`{STEP_TAG}` = 'pipeline'",
                                 order_by=["attributes.start_time ASC"])
    assert [p.info.status for p in parents] == ["FINISHED", "FAILED"]
    first, second = parents
    assert first.data.tags["vsbench.regression"] == "no-baseline"
    assert second.data.tags["vsbench.regression"] == "failed"
    assert second.data.tags["vsbench.regression.baseline"] == first.info.run_id
    assert second.data.metrics["regression_drops"] >= 1

    # The report is written even on the failing night, as a KFP HTML artifact and on the MLflow run.
    for run_dir, parent in ((first_dir, first), (second_dir, second)):
        html = next(run_dir.glob("**/comparison-report/report")).read_text()
        assert "<table" in html and "disc" in html
        assert "report.html" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    drops = json.loads(open(client.download_artifacts(second.info.run_id, "regression.json", str(tmp_path))).read())
    # Every drop recorded is a real one, past the threshold, between the two nights' evaluation runs of
    # the one evaluation (its series), named as a parent held it before issue 38.
    evaluations = [{run.data.tags["vsbench.variant"]: run for run in evaluation_children(client, parent.info.run_id,
                                                                                            experiment.experiment_id)}
                   for parent in (first, second)]
    assert set(evaluations[0]) == set(evaluations[1]) == {"Flat · none"}
    before, after = evaluations[0]["Flat · none"], evaluations[1]["Flat · none"]
    assert before.data.tags["vsbench.series"] == after.data.tags["vsbench.series"]
    assert before.info.run_name == "efficientnet_lite0 · Flat · none"  # the model first (issue 57)
    assert len(drops["drops"]) == second.data.metrics["regression_drops"] >= 1
    for drop in drops["drops"]:
        metric = drop["metric"].removeprefix("disc__efficientnet_lite0__Flat__none__")
        previous, current = before.data.metrics[metric], after.data.metrics[metric]
        assert (drop["previous"], drop["current"]) == (pytest.approx(previous), pytest.approx(current))
        assert (previous - current if drop["higher_is_better"] else current - previous) > 0.02
    assert "disc__efficientnet_lite0__Flat__none__uap" in {drop["metric"] for drop in drops["drops"]}
