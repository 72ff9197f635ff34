"""The similarity pipeline under kfp.local: sharded embedding, FAISS codecs, DISC metrics, MLflow."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.tracking.command import TIMEOUT_ENV
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
from vsbench.tracking.provenance import PARENT_TAG, STEP_TAG

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_similarity_run_with_the_subprocess_runner_on_generated_disc(tmp_path, monkeypatch):
    """The one end-to-end run of the similarity pipeline on kfp.local (subprocess runner), through
    ``vsbench similarity run --runner subprocess`` as a user runs it: sharded embedding, FAISS codecs
    trained once and filled per shard, DISC metrics, MLflow; it prints the table the inline run prints
    (the container runner's twin is in tests/containers/), one line per step.

    Two tests ran this pipeline before (one through ``run_pipeline_locally``, one through the command,
    unsharded): one sharded run through the command now proves both."""
    from mlflow.tracking import MlflowClient
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    # The store is a local file: up. A loaded machine must not make the command's probe (and the steps'
    # calls) give up on it at the default 30 s (seen with 12 processes on 2 cores: the run went untracked).
    monkeypatch.setenv(TIMEOUT_ENV, "600")
    generate_disc(tmp_path / "disc", references=20, queries=12, train=24, seed=2)
    out = tmp_path / "run"
    common = ["similarity", "run", "--benchmark", "disc", "--root", str(tmp_path / "disc"), "--model",
              "efficientnet_lite0", "--batch-size", "8"]
    result = CliRunner().invoke(app, [*common, "--out", str(out), "--codecs", "Flat;PCAW8,L2norm,Flat",
                                      "--num-shards", "2", "--search-shards", "2", "--reference-shards", "2",
                                      "--experiment", "similarity-test", "--runner", "subprocess"])
    assert result.exit_code == 0, result.output[-3000:]

    for set_name in ("query", "reference", "train"):
        assert not (out / "features" / f"{set_name}.npz").exists()  # read in place: no merged copy
        assert len(list((out / "features").glob(f"{set_name}.shard-*-of-2.npz"))) == 2
    for search in ("l2", "ip"):  # trained once, two fill tasks, index.json from the finish task
        for codec in ("Flat", "PCAW8_L2norm_Flat"):
            folder = out / "index" / search / codec
            assert {p.name for p in folder.glob("[!.]*.json")} == {"train.json", "reference-0-of-2.json",
                                                               "reference-1-of-2.json", "index.json"}
    rows = list(csv.DictReader((out / "disc_metrics.csv").open()))
    assert [(r["codec"], r["score_norm"]) for r in rows] == [
        ("Flat", "None"), ("PCAW8,L2norm,Flat", "None"), ("Flat", "1.00[0,2]"), ("PCAW8,L2norm,Flat", "1.00[0,2]")]
    assert all(0.0 <= float(r["uAP"]) <= 1.0 for r in rows)
    records = json.loads((out / "metrics.json").read_text())["records"]
    assert len(records) == 4

    client = MlflowClient()
    experiment = client.get_experiment_by_name("similarity-test")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(STEP_TAG) == "pipeline"]
    assert parent.info.status == "FINISHED"
    # One evaluation run per record, plain metric names; the parent keeps the best, not the numbers.
    evaluations = {r.info.run_name: r for r in runs if r.data.tags.get(STEP_TAG) == "evaluation"}
    assert set(evaluations) == {f"efficientnet_lite0 · {codec} · {norm}"
                                for codec in ("Flat", "PCAW8,L2norm,Flat") for norm in ("none", "1.00[0,2]")}
    flat = evaluations["efficientnet_lite0 · Flat · none"]
    assert flat.data.metrics["uap"] == pytest.approx(float(rows[0]["uAP"]))
    assert {r.data.tags[PARENT_TAG] for r in evaluations.values()} == {parent.info.run_id}
    assert not any("__" in name for name in parent.data.metrics)
    assert parent.data.tags["vsbench.evaluations"] == "4" and parent.data.tags["vsbench.best.disc.run"] in {
        r.info.run_id for r in evaluations.values()}
    children = {r.data.tags[STEP_TAG] for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id}
    assert children == {"embed-shard-0-of-2", "embed-shard-1-of-2", "index-disc-train", "index-disc-fill-0",
                        "index-disc-fill-1", "index-disc-finish", "score-disc", "evaluation",
                        *(f"search-disc-task-{task}-of-4" for task in range(4))}
    embedded = [r for r in runs if r.data.tags.get(STEP_TAG) == "embed-shard-0-of-2"][0]
    assert len(embedded.data.params["embedding_cache_key"]) == 64  # the key's sha256, also in each shard manifest
    assert embedded.data.params["weights_sha256"]
    scored = [r for r in runs if r.data.tags.get(STEP_TAG) == "score-disc"][0]
    artifacts = {a.path for a in client.list_artifacts(scored.info.run_id)}
    assert "disc_metrics.csv" in artifacts
    assert set(scored.data.metrics) == {"step_seconds"}  # its numbers are the evaluations', not a second copy

    # The table the inline run prints (on one shard, and on 3 x 2 search shards), and one line per step.
    assert "codec,score_norm,uAP" in result.output
    printed = {"subprocess": [line for line in result.output.splitlines() if line.startswith("Flat,")]}
    for shards in ([], ["--search-shards", "3", "--reference-shards", "2"]):
        ran = CliRunner().invoke(app, [*common, "--out", str(tmp_path / f"inline{len(shards)}"), "--codecs", "Flat",
                                       "--no-track", *shards])
        assert ran.exit_code == 0, ran.output[-3000:]
        assert "codec,score_norm,uAP" in ran.output
        printed["inline" + "".join(shards)] = [line for line in ran.output.splitlines() if line.startswith("Flat,")]
    inline = printed["inline"]
    assert len(inline) == 2 and printed["subprocess"] == inline
    assert printed["inline--search-shards3--reference-shards2"] == inline
    assert "ran in: host venv" in result.output
    # kfp.local's executor output went to a file; the terminal got one line per step.
    assert "kfp.local executor logs: " in result.output and "Executing task" not in result.output
    log = Path(result.output.split("kfp.local executor logs: ")[1].split()[0])
    assert "Executing task" in log.read_text()
    steps = [line for line in result.output.splitlines() if line.startswith("  [")]
    assert [line.split()[2] for line in steps] == ["embed-shard", "index", "index-fill", "search", "score"], result.output
    assert all(" s  ok" in line for line in steps) and "search-tasks " in steps[2], result.output  # a helper, named
    # Each step's tasks counted once: 2 embed shards, 2 fills, 2 x 2 search tasks, one of the rest.
    assert ["(2 tasks)" in steps[0], "tasks)" in steps[1], "(2 tasks)" in steps[2], "(4 tasks)" in steps[3],
            "tasks)" in steps[4]] == [True, False, True, True, False], result.output
    # Tens of lines, not kfp.local's executor logs (hundreds): the bound the unsharded one-codec run had
    # (40, for 2 records), plus each further record's table row and three intervals of two lines each.
    assert len(result.output.splitlines()) < 40 + 7 * (len(records) - 2), result.output


def test_a_failing_step_prints_the_last_lines_of_its_log(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    generate_disc(tmp_path / "disc", references=12, queries=8, train=12, seed=3)
    command = ["similarity", "run", "--benchmark", "disc", "--root", str(tmp_path / "disc"), "--out",
               str(tmp_path / "out"), "--runner", "subprocess", "--no-track"]
    # An unknown model is refused before the pipeline starts (issue 39), so the step fails on an image
    # that cannot be read, which only the embed step can find.
    refused = CliRunner().invoke(app, [*command, "--model", "no_such_model"])
    assert refused.exit_code == 2 and "unknown model 'no_such_model'" in refused.output
    assert "similarity pipeline" not in refused.output and not (tmp_path / "out").exists()
    broken = sorted((tmp_path / "disc" / "val_ref").glob("*.jpg"))[0]
    broken.write_bytes(b"not a jpeg")
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 1
    assert "similarity pipeline failed" in result.output
    assert "last lines of embed-shard" in result.output and broken.name in result.output
    assert "FAILURE" in result.output  # the step's own line
