"""The ABID pipeline under kfp.local: generated data on a local S3 endpoint, MLflow on sqlite."""

from __future__ import annotations

import json
import re
import shlex

import pytest

from vsbench.abid.synth import generate_abid
from vsbench.io.storage import upload_tree
from vsbench.tracking.command import TIMEOUT_ENV
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
from vsbench.tracking.provenance import KFP_RUN_TAG, PARENT_TAG, STEP_TAG

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STEPS = ("abid-download", "abid-prepare", "abid-resize", "abid-train-counting", "abid-train-siamese",
         "abid-quantity", "abid-score")


def test_unreachable_tracking_server_does_not_fail_the_step(tmp_path, monkeypatch, capsys):
    from vsbench.platform.local_s3 import free_port
    from vsbench.steps.abid import abid_prepare_step
    from vsbench.tracking.runs import open_parent_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    assert open_parent_run("x", "run-1", "abid", {}) == ""
    generate_abid(tmp_path / "synth", 30, seed=2, progress=False)
    manifest = tmp_path / "manifest.json"
    result = abid_prepare_step(str(tmp_path / "synth"), str(tmp_path / "tasks"), parent_run_id="deadbeef",
                               manifest_path=str(manifest), progress=False)
    assert result.metrics["eligible"] > 0
    assert json.loads(manifest.read_text())["metrics"]["eligible"] == result.metrics["eligible"]
    assert "MLflow tracking unavailable" in capsys.readouterr().err


def test_run_local_runs_the_pipeline_end_to_end_tracks_it_and_ends_like_the_demo(
        local_s3, public_bucket, no_aws_credentials, tmp_path, monkeypatch):
    """The one end-to-end run of the ABID pipeline on kfp.local (subprocess runner), through ``vsbench abid
    run-local`` as a user runs it (issue 39, deliver 7): every step ran and is tracked under one parent, and
    the command ends with the scores, where each task's answers are, the MLflow store and the ``mlflow ui``
    command (the demo's ending, one function for both).

    Two tests ran this pipeline before (one through ``run_abid_pipeline_locally``, one through the command):
    one run now proves both. The command has no --num-shards (a cluster run passes the pipeline's
    ``num_shards``), so the spy below adds ``num_shards=2`` to the arguments the command passes, as a
    cluster run would, so that the shards of download and resize fan out and fold in; it also keeps the
    report the command printed, to read its steps."""
    import sys
    from pathlib import Path

    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from vsbench.cli import abid as abid_cli
    from vsbench.cli.app import app

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    # The store is a local file: up. A loaded machine must not make the command's probe (and the steps'
    # calls) give up on it at the default 30 s (seen with 12 processes on 2 cores: the run went untracked).
    monkeypatch.setenv(TIMEOUT_ENV, "600")
    generate_abid(tmp_path / "synth", 120, seed=1, progress=False)
    upload_tree(tmp_path / "synth", f"s3://{public_bucket}", local_s3.admin_client())
    data = tmp_path / "data"
    reports = []
    real_run = abid_cli.run_abid_pipeline_locally

    def two_shards(*args, arguments, **kwargs):
        reports.append(real_run(*args, arguments={**arguments, "num_shards": 2}, **kwargs))
        return reports[-1]

    monkeypatch.setattr(abid_cli, "run_abid_pipeline_locally", two_shards)

    result = CliRunner().invoke(app, [
        "abid", "run-local", "--data-root", str(data), "--source", f"s3://{public_bucket}",
        "--endpoint-url", local_s3.endpoint_url, "--seed", "3", "--size", "32", "--train-profile", "demo",
        "--experiment", "pipeline-test",
        "--train-overrides", json.dumps({"epochs": 1, "image_size": 32, "batch_size": 8, "workers": 0})])

    assert result.exit_code == 0, result.output
    [report] = reports
    assert report.succeeded, report.render()
    assert set(report.steps) == set(STEPS)
    # One terminal line per step: shard lists, tracking and the two shards of download and resize fold in.
    shown = [line for line in result.stdout.splitlines() if line.startswith("  [")]
    assert sorted(line.split()[2] for line in shown) == sorted(STEPS), shown
    assert [line.split()[1] for line in shown] == [f"{i}/7]" for i in range(1, 8)], shown
    assert all("(2 tasks)" in line for line in shown if line.split()[2] in ("abid-download", "abid-resize")), "\n".join(shown)
    assert report.steps["abid-download"]["metrics"]["failed"] == 0
    tasks = data / "tasks"
    for name in ["random_train.txt", "random_val.txt", "counting_val.json", "obj_verification_val.json",
                 "obj_num_verification_val.json"]:
        assert (tasks / name).stat().st_size > 0, name
    resized = list((data / "bin-images-resize").glob("*.jpg"))
    assert len(resized) == report.steps["abid-resize"]["metrics"]["resized"] > 0
    assert "MLflow run" in report.render()
    choice = report.steps["abid-train-siamese"]["epoch_choice"]
    assert choice == "epoch 1 of 1, best on the validation questions (optimistic: chosen on what it reports)"
    assert choice in report.render()

    client = MlflowClient()
    experiment = client.get_experiment_by_name("pipeline-test")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(STEP_TAG) == "pipeline"]
    assert parent.info.run_id == report.parent_run_id
    assert parent.info.status == "FINISHED"  # closed by the exit handler
    children = {r.data.tags[STEP_TAG]: r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id}
    sharded = {f"{step}-shard-{i}-of-2" for step in ("abid-download", "abid-resize") for i in (0, 1)}
    assert set(children) == set(STEPS) - {"abid-download", "abid-resize"} | sharded
    assert all(c.data.tags[KFP_RUN_TAG] == parent.data.tags[KFP_RUN_TAG] for c in children.values())
    assert children["abid-prepare"].data.params["seed"] == "3"
    assert sum(children[f"abid-resize-shard-{i}-of-2"].data.metrics["resized"] for i in (0, 1)) == len(resized)
    assert {children[f"abid-resize-shard-{i}-of-2"].data.params["decode"] for i in (0, 1)} == {"full"}
    assert all(c.info.status == "FINISHED" for c in children.values())
    scores = report.scores()
    assert 0 <= scores["counting_accuracy"] <= 1 and 0 <= scores["verification_accuracy"] <= 1
    assert parent.data.metrics["counting_accuracy"] == scores["counting_accuracy"]
    assert parent.data.metrics["quantity_accuracy"] == scores["quantity_accuracy"]
    assert children["abid-train-counting"].data.params["image_size"] == "32"
    epochs_logged = client.get_metric_history(children["abid-train-counting"].info.run_id, "val_accuracy")
    assert [m.step for m in epochs_logged] == [1]
    artifacts = {a.path for a in client.list_artifacts(children["abid-score"].info.run_id, "plots")}
    assert artifacts == {"plots/counting_per_class.png", "plots/counting_confusion.png"}
    # Issue 45: each score with its interval, and the per-question outcomes on the score run.
    assert (parent.data.metrics["counting_accuracy_ci95_low"] <= scores["counting_accuracy"]
            <= parent.data.metrics["counting_accuracy_ci95_high"])
    units_tag = json.loads(children["abid-score"].data.tags["vsbench.units"])
    assert set(units_tag) == {f"units/abid_{t}_units.parquet" for t in ("counting", "verification", "quantity")}
    assert (data / "runs" / "score" / "abid_counting_units.parquet").is_file()
    models = {a.path for a in client.list_artifacts(children["abid-train-siamese"].info.run_id)}
    assert {"siamese_model_weights", "obj_verification_result.txt"} <= models
    # The trivial baselines ride beside the scores on the parent run (the report draws them there).
    assert {"counting_majority_accuracy", "quantity_always_yes_accuracy", "quantity_prior_only_accuracy",
            "verification_always_yes_accuracy"} <= set(parent.data.metrics)
    assert parent.data.tags["vsbench.source"] == "kfp" and parent.data.tags["vsbench.version"]
    # The trained baselines are registered models, named by aliases (no deprecated stages).
    from vsbench.tracking.models import aliases

    for task in ("counting", "siamese"):
        assert aliases(client, f"vsbench-abid-{task}") == {"newest": "1", "best": "1"}, task
    # Each baseline's scores are linked to its logged model and the task files' dataset (issue 38):
    # the Models tab ranks them per dataset, as it ranks the similarity evaluations.
    [scored_data] = children["abid-score"].inputs.dataset_inputs
    # The quantity step reads the task files too: the same dataset input (issue 39).
    [quantity_data] = children["abid-quantity"].inputs.dataset_inputs
    assert (quantity_data.dataset.name, quantity_data.dataset.digest) == ("abid-tasks", scored_data.dataset.digest)
    dataset = {"dataset_name": scored_data.dataset.name, "dataset_digest": scored_data.dataset.digest}
    linked = {m.name: {x.key: x.value for x in m.metrics} for m in client.search_logged_models(
        experiment_ids=[experiment.experiment_id], datasets=[dataset])}
    assert linked["counting_model"]["counting_accuracy"] == scores["counting_accuracy"]
    assert linked["counting_model"]["quantity_accuracy"] == scores["quantity_accuracy"]
    assert linked["siamese_model"]["verification_accuracy"] == scores["verification_accuracy"]
    assert "verification_always_yes_accuracy" not in linked["siamese_model"]  # a baseline of no model
    for shard in (0, 1):
        downloaded = json.loads((data / "raw" / "_manifests" / f"download.shard-{shard}-of-2.json").read_text())
        assert children[f"abid-download-shard-{shard}-of-2"].data.metrics["fetched"] == downloaded["fetched"] > 0

    # How the command ends (the demo's ending).
    ending = result.stdout[result.stdout.index("ABID scores (moderate validation set)"):].splitlines()
    assert ending[0].endswith("[95% interval over the questions]:")
    assert re.match(r"  counting accuracy +\d\.\d{4} \[\d\.\d{4}, \d\.\d{4}\] +RMSE \d+\.\d{4} \[", ending[1]), ending[1]
    assert ending[2].startswith("  object verification") and ending[3].startswith("  quantity verification")
    # Within 100 columns (issue 57): a path too long for its label's line stands alone on the next.
    def labelled(label: str) -> str:
        [i] = [i for i, line in enumerate(ending) if line.strip().startswith(label)]
        return ending[i].strip()[len(label):].strip() or ending[i + 1].strip()

    answers = {task: Path(labelled(f"{task} answers:")) for task in ("counting", "verification", "quantity")}
    assert answers["counting"].name == "counting_result.txt" and answers["quantity"].is_file()
    assert all(path.is_file() for path in answers.values())
    assert labelled("task files:") == str(data.resolve() / "tasks")
    assert f"MLflow store: {store} (experiment pipeline-test)" in " ".join(" ".join(ending).split())
    assert all(len(line) <= 100 or len(line.split()) == 1 for line in ending), ending
    command = ending[ending.index("Open the MLflow UI with:") + 1:]  # continued with \ past 100 columns
    assert shlex.split(" ".join(line.removesuffix(" \\") for line in command)) == [
        str(Path(sys.executable).parent / "mlflow"), "ui", "--backend-store-uri", store, "--host", "127.0.0.1",
        "--port", "5000"]
