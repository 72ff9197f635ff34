"""Command runs in MLflow (vsbench.tracking.command): what a run holds, the default store, --no-track,
and the bound against a store that is down or hangs (a closed port, a listener that never answers),
with the numbers kept and uploaded later by `vsbench track upload`."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.platform.local_s3 import free_port
from vsbench.tracking.command import BUNDLE_NAME, read_bundle, upload_bundle, write_bundle

BOUND_S = 3.0  # VSBENCH_TRACKING_TIMEOUT in the fault tests
SLACK_S = 4.0  # process start, imports, the benchmark itself on a loaded 2-core machine


@pytest.fixture(scope="module")
def pairs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from vsbench.benchmarks.registry import generate

    root = tmp_path_factory.mktemp("patch-pairs")
    generate("patch-pairs", root, seed=0)
    return root


@pytest.fixture
def hanging_server() -> Iterator[str]:
    """A socket that accepts connections and never answers: the worst a tracking server can do."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def _score(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """`vsbench score abid-verification` in a fresh process (as a user runs it), timed by the caller."""
    pred, gt = tmp_path / "pred.txt", tmp_path / "gt.json"
    pred.write_text("1\n0\n1\n1\n")
    gt.write_text(json.dumps([[i, "B00ASIN", label, []] for i, label in enumerate((1, 0, 0, 1))]))
    return subprocess.run([sys.executable, "-m", "vsbench", "score", "abid-verification", "--pred", str(pred),
                           "--gt", str(gt), "--output", str(tmp_path / "m.json"), "--model", "resnet34", *extra],
                          capture_output=True, text=True, timeout=120)


def test_similarity_run_records_params_metrics_artifacts_and_tags(pairs_root, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'm.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["similarity", "run", "--benchmark", "patch_pairs", "--root", str(pairs_root),
                                      "--out", str(out), "--model-options", '{"weights": "random"}', "--seed", "7"])
    assert result.exit_code == 0, result.output
    bundle = read_bundle(out / BUNDLE_NAME)
    run_id = bundle["uploaded"]["run_id"]
    assert f"MLflow run {run_id} in\n  {uri}" in result.output or f"MLflow run {run_id} in {uri}\n" in result.output
    run = MlflowClient(uri).get_run(run_id)
    # Where to look: the run's page, the experiment's evaluations view, and how to serve a local store.
    experiment = run.info.experiment_id
    # Each a short label, then the URL alone on its line (issue 57: whole and clickable in 100 columns).
    assert f"run page:\n    http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run_id}?workflowType=" in result.output
    assert (f"evaluations (patch_pairs, every night, a line per evaluation):\n    http://127.0.0.1:5000/#/experiments/"
            f"{experiment}/runs?viewStateShareKey=vsbench-evaluations-patch_pairs&compareRunsMode=CHART"
            "&workflowType=machine_learning\n") in result.output
    serve = result.output.split("serve the store first:\n", 1)[1]  # one command, continued with \ when long
    assert shlex.split(serve.replace(" \\\n", " ")) == [str(Path(sys.executable).with_name("mlflow")), "ui",
                                                         "--backend-store-uri", uri]
    view = json.loads(MlflowClient(uri).get_experiment(experiment).tags[
        "mlflow.sharedViewState.vsbench-evaluations-patch_pairs"])
    assert view["groupBy"]["groupByKeys"] == [{"mode": "tag", "groupByData": "vsbench.line"}]
    assert view["globalLineChartConfig"]["xAxisKey"] == "time"  # dates, not day numbers (issue 48)
    assert (f"leaderboard (patch_pairs, best first):\n    http://127.0.0.1:5000/#/experiments/{experiment}/runs?"
            "viewStateShareKey=vsbench-leaderboard-patch_pairs") in result.output
    board = json.loads(MlflowClient(uri).get_experiment(experiment).tags[
        "mlflow.sharedViewState.vsbench-leaderboard-patch_pairs"])
    # patch_pairs (issue 57): a row per model, its headline split's; the model's name whole; the headline as read.
    assert board["orderByKey"] == "metrics.`mean_pr_ap`" and board["searchFilter"].endswith("tags.`vsbench.split` = 'mean'")
    assert board["selectedColumns"][0] == "params.`headline`"
    assert {"params.`model_name`", "params.`distance`"} <= set(board["selectedColumns"])
    assert run.info.status == "FINISHED"
    # The model as read first, then the benchmark, then the command's run key (issue 57).
    assert run.info.run_name.startswith('efficientnet_lite0-random · patch_pairs · vsbench-similarity-cli-')
    assert {k: run.data.params[k] for k in ("benchmark", "codecs", "seed")} == {
        "benchmark": "patch_pairs", "codecs": "Flat", "seed": "7"}
    assert "model" not in run.data.params  # in its name and its evaluations' params: a search finds those
    # the seed recorded is the one the random weights were drawn with (it was always "0" before --seed)
    shard = json.loads(next((out / "features").glob("*.shard-0-of-1.json")).read_text())
    assert shard["seed"] == 7 and shard["weights_source"] == "random initialization (seed 7)"
    # The parent keeps no per-model number (each record is an evaluation run under it, plain names)
    # but its best's headline and interval, so its page opens on numbers (issue 57).
    assert set(run.data.metrics) == {"best.patch_pairs.mean_pr_ap", "best.patch_pairs.mean_pr_ap_ci95_low",
                                     "best.patch_pairs.mean_pr_ap_ci95_high"}
    children = MlflowClient(uri).search_runs([run.info.experiment_id],
                                             f"tags.`mlflow.parentRunId` = '{run_id}' and tags.`vsbench.step` = 'evaluation'")
    by_variant = {child.data.tags["vsbench.variant"]: child for child in children}
    assert len(children) == len(by_variant) > 1 and "mean · l2" in by_variant
    mean = by_variant["mean · l2"]
    assert mean.data.metrics["mean_pr_ap"] == json.loads((out / "metrics.json").read_text())["records"][-1]["mean_pr_ap"]
    assert mean.info.run_name == 'efficientnet_lite0-random · l2 · mean'  # model, variant, split (issue 57)
    assert run.data.metrics["best.patch_pairs.mean_pr_ap"] == mean.data.metrics["mean_pr_ap"]
    assert mean.info.end_time > mean.info.start_time  # a real duration, not 0ms
    # The splits are rows of one model, with counts as params, never ranked as metrics (issue 57).
    split = by_variant["easy_diffseq · l2"]
    assert split.data.tags["vsbench.split"] == "easy_diffseq" and int(split.data.params["num_positives"]) > 0
    assert not any(name.startswith("num_") for child in children for name in child.data.metrics)
    assert len(MlflowClient(uri).search_logged_models(experiment_ids=[run.info.experiment_id])) == 1
    assert (mean.data.params["seed"], mean.data.tags["vsbench.baseline"]) == ("7", "random-features")
    assert json.loads(mean.data.params["model_options"]) == {"weights": "random"}
    assert run.data.tags["vsbench.evaluations"] == str(len(children))
    tags = run.data.tags
    assert tags["vsbench.step"] == "pipeline" and tags["vsbench.pipeline"] == "vsbench-similarity"
    assert tags["vsbench.source"] == "cli" and tags["vsbench.baseline"] == "random-features"
    assert len(tags["vsbench.data.digest"]) == 64 and tags["vsbench.data.root"] == str(pairs_root.resolve())
    assert tags["vsbench.version"] and tags["vsbench.host"] and tags["vsbench.image"] == "host venv"
    # The data it scored, as MLflow's own dataset input (the run page's Datasets section), filterable.
    [data] = run.inputs.dataset_inputs
    assert (data.dataset.name, data.dataset.digest) == ("patch_pairs", tags["vsbench.data.digest"][:36])
    assert str(pairs_root.resolve()) in data.dataset.source and data.dataset.source_type == "local"
    assert {t.key: t.value for t in data.tags} == {"mlflow.data.context": "evaluation"}
    experiment = MlflowClient(uri).get_experiment(run.info.experiment_id)
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert {r.info.run_id for r in MlflowClient(uri).search_runs(  # the command's run and its evaluations
        [run.info.experiment_id], filter_string=f"dataset.digest = '{data.dataset.digest}'")} == {
        run_id, *(child.info.run_id for child in children)}
    artifacts = {a.path for a in MlflowClient(uri).list_artifacts(run_id)}
    assert {"metrics.json", "patch_pairs_pr.png", "patch_pairs_roc.png"} <= artifacts

    # `vsbench compare` lists it beside pipeline runs, under its model (marked as a random-features baseline).
    from vsbench.reporting.runs import collect_runs

    records = collect_runs("vsbench-similarity")
    assert {r.benchmark for r in records} == {f"patch_pairs · {s}" for s in ("easy_diffseq", "easy_sameseq",
                                                                             "hard_diffseq", "hard_sameseq", "mean")}
    assert {r.model for r in records} == {'efficientnet_lite0 {"weights":"random"} · l2 (random features)'}


def test_default_store_is_printed_and_no_track_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("VSBENCH_DEFAULT_STORE")
    home = tmp_path / "home"
    monkeypatch.setenv("VSBENCH_HOME", str(home))
    untracked = _score(tmp_path, "--no-track")
    assert untracked.returncode == 0, untracked.stderr
    assert not (home / "mlflow.db").exists()  # --no-track: no store, no bundle
    assert not (tmp_path / "m.mlflow-run.json").exists()

    result = _score(tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"tracking in the local store\n  sqlite:///{home / 'mlflow.db'}\n" in result.stdout
    assert (home / "mlflow.db").exists()
    assert read_bundle(tmp_path / "m.mlflow-run.json")["uploaded"]["run_id"] in result.stdout


@pytest.mark.parametrize("store", ["closed port", "hanging server"])
def test_a_store_down_or_hanging_costs_at_most_the_bound(store, tmp_path, monkeypatch, request):
    uri = f"http://127.0.0.1:{free_port()}" if store == "closed port" else request.getfixturevalue("hanging_server")
    monkeypatch.setenv("VSBENCH_TRACKING_TIMEOUT", str(BOUND_S))
    started = time.monotonic()
    baseline = _score(tmp_path, "--no-track")
    untracked = time.monotonic() - started
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    result = _score(tmp_path)
    tracked = time.monotonic() - started
    assert baseline.returncode == result.returncode == 0, result.stderr
    assert tracked < untracked + BOUND_S + SLACK_S, (tracked, untracked)
    assert f"MLflow unavailable at {uri}" in result.stdout
    assert f"vsbench track upload {tmp_path / 'm.mlflow-run.json'}" in result.stdout.replace(" \\\n      ", " ")
    assert json.loads((tmp_path / "m.json").read_text())["accuracy"] == 0.75  # the numbers are kept
    assert read_bundle(tmp_path / "m.mlflow-run.json")["uploaded"] is None


def test_track_upload_sends_a_kept_run_once(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    (tmp_path / "metrics.json").write_text('{"uap": 0.5}\n')
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{free_port()}")  # where it was meant to go
    bundle = write_bundle(tmp_path / BUNDLE_NAME, experiment="exp", pipeline="vsbench-similarity",
                          params={"model": "m", "benchmark": "disc"}, metrics={"uap": 0.5, "bad": float("nan")},
                          artifacts={str(tmp_path / "metrics.json"): ""})
    uri = f"sqlite:///{tmp_path / 'later.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    runner = CliRunner()
    first = runner.invoke(app, ["track", "upload", str(tmp_path)])
    assert first.exit_code == 0, first.output
    run_id = read_bundle(bundle)["uploaded"]["run_id"]
    again = runner.invoke(app, ["track", "upload", str(tmp_path)])
    assert "already uploaded" in again.output
    forced = runner.invoke(app, ["track", "upload", str(bundle), "--force"])
    assert forced.exit_code == 0 and run_id in forced.output  # found again by its key: still one run
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("exp").experiment_id])
    assert [r.info.run_id for r in runs] == [run_id]
    assert runs[0].data.metrics == {"uap": 0.5} and runs[0].info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(run_id)] == ["metrics.json"]


def test_upload_bundle_raises_on_a_closed_port_quickly(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    bundle = write_bundle(tmp_path / BUNDLE_NAME, experiment="exp", pipeline="p", params={}, metrics={})
    with pytest.raises(Exception):  # noqa: B017 - whatever MLflow raises; the command turns it into a message
        upload_bundle(bundle, f"http://127.0.0.1:{free_port()}")


def test_trained_models_get_aliases_not_stages(tmp_path):
    """newest always, best only when at least as good, nightly only from the nightly pipeline."""
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.models import aliases, register_version
    from vsbench.tracking.provenance import PIPELINE_TAG

    client = MlflowClient(f"sqlite:///{tmp_path / 'm.db'}")
    experiment = client.create_experiment("e", artifact_location=str(tmp_path / "a"))

    def version(score: float, pipeline: str) -> str:
        run = client.create_run(experiment, tags={PIPELINE_TAG: pipeline})
        return register_version(client, run.info.run_id, f"runs:/{run.info.run_id}/model", "vsbench-abid-counting",
                                score, f"weights-{score}-{pipeline}")

    assert version(0.5, "vsbench-abid") == "1"
    assert aliases(client, "vsbench-abid-counting") == {"newest": "1", "best": "1"}
    assert version(0.4, "vsbench-nightly") == "2"
    assert aliases(client, "vsbench-abid-counting") == {"newest": "2", "best": "1", "nightly": "2"}
    assert version(0.6, "vsbench-abid") == "3"
    assert aliases(client, "vsbench-abid-counting") == {"newest": "3", "best": "3", "nightly": "2"}
    assert all(v.current_stage in ("None", None) for v in client.search_model_versions("name='vsbench-abid-counting'"))
