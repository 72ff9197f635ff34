"""User mistakes end in one line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

from typer.testing import CliRunner

from vsbench.cli import app


def test_compare_names_a_missing_experiment(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = CliRunner().invoke(app, ["compare", "--experiment", "no-such-experiment"])
    assert result.exit_code == 2
    assert "no-such-experiment" in result.output and "Traceback" not in result.output


def test_submit_names_a_bad_cluster_config(tmp_path):
    config = tmp_path / "cluster.yaml"
    config.write_text("gpu_node_selektor: {}\n")
    result = CliRunner().invoke(app, ["submit", "--host", "http://127.0.0.1:9", "--cluster-config", str(config)])
    assert result.exit_code == 2 and "gpu_node_selektor" in result.output


def test_similarity_run_takes_the_seed_as_an_option_not_a_model_option(tmp_path):
    """The MLflow 'seed' param was once read from --model-options, which no builder accepts: every
    run recorded seed 0. The seed is --seed; a 'seed' key is refused before any work."""
    common = ["similarity", "run", "--benchmark", "patch_pairs", "--root", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*common, "--model-options", '{"weights": "random", "seed": 3}'])
    assert result.exit_code == 2 and "--seed" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(app, [*common, "--seed", "-1"])
    assert result.exit_code == 2 and "--seed" in result.output
