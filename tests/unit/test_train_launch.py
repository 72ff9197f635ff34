"""Issue 39: ``vsbench abid train --nproc 2`` with a batch larger than the training set printed 43 lines of
torchrun output around the real error. What can be checked before launching is refused in one line
before any process starts; a worker's failure ends in its one-line error and the name of the log that
holds torchrun's whole output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.abid_data import images_missing_first_rows, tiny_abid
from vsbench.abid.launch import JobOutput
from vsbench.abid.profiles import get_profile
from vsbench.cli.app import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """8 counting training rows (and 8 validation rows) with their 32-pixel images."""
    root = tmp_path_factory.mktemp("launch")
    tiny_abid(root, 80)
    for name in ("counting_train.json", "counting_val.json"):
        rows = json.loads((root / "tasks" / name).read_text())
        (root / "tasks" / name).write_text(json.dumps(rows[:8]))
    return root / "tasks", root / "images"


def _train(tasks: Path, images: Path, out: Path, *extra: str, task: str = "counting", batch: int = 16):
    overrides = json.dumps({"epochs": 1, "batch_size": batch, "image_size": 32, "workers": 0})
    return CliRunner().invoke(app, ["abid", "train", task, "--tasks", str(tasks), "--images", str(images),
                                    "--out", str(out), "--device", "cpu", "--overrides", overrides, *extra])


def test_a_batch_larger_than_the_training_set_is_refused_before_torchrun_starts(tiny, tmp_path):
    tasks, images = tiny
    result = _train(tasks, images, tmp_path / "out", "--nproc", "2", batch=16)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        f"error: the training set has at most 8 samples (the rows of {tasks / 'counting_train.json'}), fewer than "
        "the global batch (batch_size 16); with 2 processes every rank needs a full share: lower batch_size or "
        "train in one process"]
    assert not (tmp_path / "out").exists()  # nothing started, nothing written


def test_the_siamese_batch_and_a_batch_the_processes_cannot_split_are_refused_first(tiny, tmp_path):
    tasks, images = tiny
    rows = len(json.loads((tasks / "obj_verification_train.json").read_text()))
    pairs_per_row = get_profile("demo").pairs_per_row  # a siamese batch holds whole rows of pairs
    result = _train(tasks, images, tmp_path / "out", "--nproc", "2", task="siamese",
                    batch=pairs_per_row * 2 * (rows + 1))
    assert result.exit_code == 2 and result.output.count("\n") == 1, result.output
    assert f"at most {rows} samples (the rows of {tasks / 'obj_verification_train.json'})" in result.output
    odd = _train(tasks, images, tmp_path / "out", "--nproc", "3", batch=8)
    assert odd.exit_code == 2 and odd.output.count("\n") == 1, odd.output
    assert "batch_size 8 (the global batch) is not divisible by the world size 3" in odd.output
    typo = CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", str(tasks), "--images", str(images),
                                    "--out", str(tmp_path / "out"), "--nproc", "2", "--overrides", '{"nosuch": 1}'])
    assert typo.exit_code == 2 and typo.output.count("\n") == 1 and "nosuch" in typo.output, typo.output
    missing = _train(tmp_path / "no-tasks", images, tmp_path / "out", "--nproc", "2", batch=8)
    assert missing.exit_code == 2 and missing.output.count("\n") == 1, missing.output
    assert f"--tasks {tmp_path / 'no-tasks'}: no such folder; write the task files with `vsbench abid prepare" \
        in missing.output  # what makes them (issue 46)
    assert not (tmp_path / "out").exists()


def test_a_worker_failure_is_its_one_line_and_the_log_of_torchrun(tiny, tmp_path):
    """Images missing on disk make the training set smaller than its rows: only the workers can know,
    so torchrun starts; its failure ends in the workers' one line, naming the log."""
    tasks, images = tiny
    partial = images_missing_first_rows(tasks, images, tmp_path / "images")
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MLFLOW_TRACKING_URI")}
    overrides = json.dumps({"epochs": 1, "batch_size": 8, "image_size": 32, "workers": 0})
    job = subprocess.run([sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks", str(tasks),
                          "--images", str(partial), "--out", str(out), "--device", "cpu", "--nproc", "2",
                          "--overrides", overrides], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**env, "OMP_NUM_THREADS": "1", "VSBENCH_DIST_TIMEOUT_S": "120"})
    assert job.returncode == 2, job.stderr
    log = out / "torchrun_counting.log"
    lines = job.stderr.splitlines()
    assert lines[0].startswith("-m torch.distributed.run --standalone --nproc-per-node=2 -m vsbench abid train")
    assert lines[1:] == [f"error: the training set has 5 samples, fewer than the global batch (batch_size 8); with 2 "
                         "processes every rank needs a full share: lower batch_size or train in one process "
                         f"(torchrun's whole output: {log})"], job.stderr
    assert "torch" not in job.stdout and "*****" not in job.stdout, job.stdout
    assert "ChildFailedError" in log.read_text()  # all of torchrun's output is kept there


TRANSCRIPT = """
*****************************************
Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid overload.
*****************************************
epoch 1/1  loss 1.2
error: the training set has 16 samples, fewer than the global batch (batch_size 20)
error: the training set has 16 samples, fewer than the global batch (batch_size 20)
W1126 23:38:23.062000 15318 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 15650 closing signal SIGTERM
E1126 23:38:23.287000 15318 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: 2) local_rank: 1
Traceback (most recent call last):
  File "/x/torch/distributed/run.py", line 1142, in <module>
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Failures:
[1]:
  exitcode  : -15 (pid: 15650)  (SIGTERM)
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  exitcode  : 2 (pid: 15651)
============================================================
"""


@pytest.mark.parametrize("prefix", ["", "node-1"])
def test_the_job_output_keeps_the_workers_lines_and_logs_torchruns(tmp_path, prefix):
    shown: list[str] = []
    output = JobOutput(tmp_path / "logs" / "torchrun.log", shown.append)
    for line in TRANSCRIPT.splitlines(keepends=True):
        output.feed(line, prefix)
    output.close()
    assert shown == [f"[{prefix}] epoch 1/1  loss 1.2" if prefix else "epoch 1/1  loss 1.2"]
    assert output.worker_exit == 2 and output.exit_code == 2  # the root cause's, not the SIGTERMed rank's
    assert output.failure("the job") == ["error: the training set has 16 samples, fewer than the global batch "
                                         f"(batch_size 20) (torchrun's whole output: {tmp_path / 'logs' / 'torchrun.log'})"]
    assert len((tmp_path / "logs" / "torchrun.log").read_text().splitlines()) == len(TRANSCRIPT.splitlines())


def test_a_job_that_failed_without_an_error_line_says_so_with_the_exit_code(tmp_path):
    output = JobOutput(tmp_path / "torchrun.log", lambda line: None)
    for line in ["E1126 23:38:23.287000 1 torch/x.py:1] failed (exitcode: -11) local_rank: 0",
                 "Root Cause (first observed failure):", "  exitcode  : -11 (pid: 1)"]:
        output.feed(line)
    assert output.exit_code == 1
    assert output.failure("abid train counting --nproc 2") == [
        f"error: abid train counting --nproc 2 failed (a worker exited with -11) (torchrun's whole output: "
        f"{tmp_path / 'torchrun.log'})"]


def test_a_trainjob_of_processes_refuses_the_batch_before_any_node_starts(tiny, tmp_path):
    tasks, images = tiny
    result = _train(tasks, images, tmp_path / "out", "--backend", "trainjob", "--engine", "process", "--nodes", "2",
                    batch=16)
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        f"error: the training set has at most 8 samples (the rows of {tasks / 'counting_train.json'}), fewer than "
        "the global batch (batch_size 16); with 2 processes every rank needs a full share: lower batch_size or "
        "train in one process"]


@pytest.mark.slow
def test_a_trainjob_of_processes_that_fails_says_the_workers_error_once(tiny, tmp_path, monkeypatch):
    """The nodes' torchrun bookkeeping stays in their logs: the last line says the first node's error,
    once, and where the logs are."""
    tasks, images = tiny
    partial = images_missing_first_rows(tasks, images, tmp_path / "images")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("VSBENCH_DIST_TIMEOUT_S", "120")
    result = _train(tasks, partial, tmp_path / "out", "--backend", "trainjob", "--engine", "process", "--nodes", "2",
                    batch=8)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, result.output
    assert errors[0].startswith("error: TrainJob ") and (
        "failed first: the training set has 5 samples, fewer than the global batch (batch_size 8); with 2 processes "
        "every rank needs a full share: lower batch_size or train in one process") in errors[0]
    assert f"each node's log is in {tmp_path / 'out' / 'logs'}" in errors[0]  # torchrun's lines are there
    assert not [line for line in result.output.splitlines() if "ChildFailedError" in line or "exitcode" in line]
    assert "torch/distributed" not in result.output and "ChildFailedError" not in result.output


def test_training_here_makes_a_parent_run_as_every_command_does(tiny, tmp_path, monkeypatch):
    """Issue 39: `abid train` (the pod backend) tracked nothing without --parent-run-id, though
    --track is its default. Now it opens a parent run in experiment vsbench-abid once its checks pass,
    the training's child run under it, closed FINISHED; --no-track makes none."""
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.provenance import PARENT_TAG

    tasks, images = tiny
    unused = tmp_path / "unused.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{unused}")
    untracked = _train(tasks, images, tmp_path / "untracked", "--no-track", batch=4)
    assert untracked.exit_code == 0, untracked.output
    assert not unused.exists() and "MLflow: parent run" not in untracked.output
    monkeypatch.delenv("VSBENCH_NO_TRACK")  # what --no-track set for the steps it would start
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    result = _train(tasks, images, tmp_path / "out", batch=4)
    assert result.exit_code == 0, result.output
    client = MlflowClient()
    experiment = client.get_experiment_by_name("vsbench-abid")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [run for run in runs if PARENT_TAG not in run.data.tags]
    children = [run for run in runs if run.data.tags.get(PARENT_TAG) == parent.info.run_id]
    assert parent.info.status == "FINISHED" and parent.data.params["backend"] == "pod"
    assert [child.info.run_name for child in children] == ["abid-train-counting"], [c.info.run_name for c in children]
    assert f"MLflow: parent run {parent.info.run_id} (experiment vsbench-abid)" in result.output
    refused = _train(tasks, images, tmp_path / "refused", "--nproc", "2", batch=16)  # a batch over the 8 rows
    assert refused.exit_code == 2
    assert len(client.search_runs([experiment.experiment_id])) == len(runs), "a refused launch leaves no run"
