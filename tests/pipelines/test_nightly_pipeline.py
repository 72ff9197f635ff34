"""The nightly pipeline under kfp.local: a one-entry suite run twice, the second night regressing."""

from __future__ import annotations

import json

import pytest
import yaml

from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.platform.local_run import run_pipeline_locally
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
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
    generate_disc(tmp_path / "disc", references=16, queries=10, train=10, seed=4)
    arguments = {"experiment": "nightly-test", "batch_size": 8, "report_last": 5}

    good, _, first_dir, error = run_pipeline_locally("nightly", tmp_path / "kfp", arguments,
                                                     ("score",), _suite(tmp_path, {}))
    assert good, error
    # The planted drop: the same entry with random weights scores far lower on the same metric names.
    bad, _, second_dir, _ = run_pipeline_locally("nightly", tmp_path / "kfp", arguments, ("score",),
                                                 _suite(tmp_path, {"weights": "random"}))
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
    # Which metrics a random network loses on 10 queries depends on the draw (its seed): every drop
    # recorded is a real one, on the run's own metrics, past the threshold.
    assert len(drops["drops"]) == second.data.metrics["regression_drops"]
    for drop in drops["drops"]:
        metric = drop["metric"]
        assert metric.startswith("disc__efficientnet_lite0__Flat__none__")
        previous, current = first.data.metrics[metric], second.data.metrics[metric]
        assert (drop["previous"], drop["current"]) == (pytest.approx(previous), pytest.approx(current))
        assert (previous - current if drop["higher_is_better"] else current - previous) > 0.02
