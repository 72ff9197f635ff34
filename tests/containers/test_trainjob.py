"""TrainJobs for real, through the Kubeflow SDK's container backend: 2 podman containers of the CPU
image as nodes on a private network, gloo, nothing pulled. A job given relative paths and no parent
run trains, logs under a parent run of its own, and leaves the host's folders' modes, owners and
groups as they were (the nodes write as this machine's user). The job computes what `--nproc 2`
computes (within the rounding spread tests/unit/test_distributed.py measures: the image's torch is
another build than the development venv's), a node killed mid-run fails the job naming it and the
next submission resumes to the uninterrupted job's very weights, and the kfp.local ABID pipeline
trains both baselines as TrainJobs that log under its MLflow parent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.abid_data import tiny_abid
from tests.unit.test_distributed import LOSS_RTOL, WEIGHT_FLOOR
from vsbench.abid.trainer import LAST, load_state
from vsbench.platform.containers import podman_environment

pytestmark = [pytest.mark.container, pytest.mark.integration, pytest.mark.slow]
# 8 training rows, global batch 8: one SGD step per epoch; 4 epochs leave time to kill a node.
OVERRIDES = {"epochs": 4, "batch_size": 8, "image_size": 32, "workers": 0, "optimizer": "sgd", "lr": 0.01,
             "lr_step_epochs": 1, "lr_gamma": 1.0}
TIMEOUT_S = 600


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    # the artifacts beside the store: without a location MLflow writes ./mlruns in the caller's folder
    return {**env, "OMP_NUM_THREADS": "1", "VSBENCH_DIST_TIMEOUT_S": "60",
            "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
            "VSBENCH_MLFLOW_ARTIFACT_LOCATION": str(tmp_path / "artifacts")}


def _train(tiny: tuple[Path, Path], out: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    tasks, images = tiny
    return subprocess.Popen([sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks", str(tasks),
                             "--images", str(images), "--out", str(out), "--device", "cpu", "--overrides",
                             json.dumps(OVERRIDES), *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _finish(process: subprocess.Popen[str]) -> tuple[int, str]:
    output, _ = process.communicate(timeout=TIMEOUT_S)
    return process.returncode, output


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("trainjob")
    tiny_abid(root, 80)
    for name in ("counting_train.json", "counting_val.json"):
        rows = json.loads((root / "tasks" / name).read_text())
        (root / "tasks" / name).write_text(json.dumps(rows[:8]))
    return root / "tasks", root / "images"


def _modes(*folders: Path) -> dict[str, tuple[int, int, int]]:
    """Mode, owner and group of each folder and everything in it."""
    return {str(path): (path.stat().st_mode, path.stat().st_uid, path.stat().st_gid)
            for folder in folders for path in (folder, *folder.rglob("*"))}


@pytest.fixture(scope="module")
def uninterrupted(cpu_image, tiny, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict, str]:
    """A 2-node TrainJob that nobody disturbs, given relative paths (from the data's folder) and no
    --parent-run-id: (its run folder, the modes before and after, its output)."""
    tmp = tmp_path_factory.mktemp("job")
    tasks, images = tiny
    env = _env(tmp)
    (tmp / "runs").mkdir()
    before = _modes(tasks, images, tmp / "runs")
    job = subprocess.Popen([sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks",
                            os.path.relpath(tasks, tmp), "--images", os.path.relpath(images, tmp), "--out", "runs/counting",
                            "--device", "cpu", "--overrides", json.dumps(OVERRIDES), "--backend", "trainjob", "--engine",
                            "podman", "--nodes", "2"], env=env, cwd=tmp, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    code, output = _finish(job)
    assert code == 0, output[-4000:]
    return tmp / "runs" / "counting", before, _modes(tasks, images, tmp / "runs"), output


def _job_containers() -> list[str]:
    engine = shutil.which("podman") or "podman"
    listed = subprocess.run([engine, "ps", "--all", "--format", "{{.Names}}", "--filter",
                             "label=trainer.kubeflow.org/trainjob-name"], capture_output=True, text=True,
                            env=podman_environment(), timeout=60, check=True)
    return listed.stdout.split()


def test_a_two_node_trainjob_from_relative_paths_logs_under_its_own_parent_and_leaves_the_hosts_modes(
        uninterrupted) -> None:
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.provenance import PARENT_TAG, STEP_TAG

    out, before, after, output = uninterrupted
    assert {path: after[path] for path in before} == before, "no host folder or file changed mode, owner or group"
    made = {path: (uid, gid) for path, (_mode, uid, gid) in after.items() if path not in before}
    assert set(made.values()) == {(os.getuid(), os.getgid())}, "the nodes wrote as this machine's user"
    client = MlflowClient(_env(out.parents[1])["MLFLOW_TRACKING_URI"])
    runs = client.search_runs([client.get_experiment_by_name("vsbench-abid").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(STEP_TAG) == "pipeline"]
    (child,) = [r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id]
    assert parent.info.status == child.info.status == "FINISHED" and child.data.params["world_size"] == "2"
    assert f"MLflow: parent run {parent.info.run_id}" in output


def test_a_two_node_trainjob_computes_what_torchrun_computes(uninterrupted, tiny, tmp_path) -> None:
    uninterrupted = uninterrupted[0]
    manifest = json.loads((uninterrupted / "train_counting.json").read_text())
    assert manifest["world_size"] == 2 and manifest["trainjob_engine"] == "podman" and manifest["trainjob_nodes"] == 2
    assert manifest["trainjob"].startswith("vsbench-counting-") and manifest["trainjob_startup_seconds"] > 0
    assert manifest["ran_in"]["image"], "rank 0 ran in the image"
    code, output = _finish(_train(tiny, tmp_path / "torchrun", _env(tmp_path), "--nproc", "2"))
    assert code == 0, output[-4000:]
    job, local = load_state(uninterrupted / "checkpoints" / "counting" / LAST), load_state(tmp_path / "torchrun" / "checkpoints" / "counting" / LAST)
    assert [h["train_loss"] for h in job["history"]] == pytest.approx([h["train_loss"] for h in local["history"]],
                                                                       rel=LOSS_RTOL)
    worst = max(float((job["model"][k] - local["model"][k]).abs().max()) for k in local["model"]
                if local["model"][k].is_floating_point())
    print(f"TrainJob vs torchrun after {OVERRIDES['epochs']} steps: largest weight difference {worst:.3g}")
    assert worst <= WEIGHT_FLOOR
    assert not _job_containers(), "the job's containers and network are removed once it is over"


def test_a_killed_node_fails_the_job_naming_it_and_a_rerun_resumes_to_the_same_weights(
        uninterrupted, tiny, tmp_path) -> None:
    uninterrupted = uninterrupted[0]
    out = tmp_path / "counting"
    env = _env(tmp_path)
    job = _train(tiny, out, env, "--backend", "trainjob", "--engine", "podman", "--nodes", "2")
    deadline = time.monotonic() + TIMEOUT_S
    killed = ""
    while time.monotonic() < deadline and job.poll() is None:  # kill node 1 once epoch 1 is on disk
        last = out / "checkpoints" / "counting" / LAST
        if last.exists() and load_state(last)["epoch"] >= 1:
            names = [n for n in _job_containers() if n.endswith("-node-1")]
            if names:
                subprocess.run([shutil.which("podman") or "podman", "kill", names[0]], env=podman_environment(),
                               capture_output=True, timeout=60, check=False)
                killed = names[0]
                break
        time.sleep(0.2)
    code, output = _finish(job)
    assert killed and code == 2, output[-4000:]
    line = output.strip().splitlines()[-1]
    assert "failed: node-1 (exit code 137, killed) failed first" in line and "resumes from the last finished epoch" in line, line
    assert f"each node's log is in {out / 'logs'}/vsbench-counting-" in line, line
    stopped_at = load_state(out / "checkpoints" / "counting" / LAST)["epoch"]
    assert 1 <= stopped_at < OVERRIDES["epochs"], "killed mid-run, after epoch 1"
    assert not _job_containers(), "a failed job's containers are removed too"

    code, output = _finish(_train(tiny, out, env, "--backend", "trainjob", "--engine", "podman", "--nodes", "2"))
    assert code == 0, output[-4000:]
    assert json.loads((out / "train_counting.json").read_text())["resumed_from_epoch"] == stopped_at
    straight, again = load_state(uninterrupted / "checkpoints" / "counting" / LAST), load_state(out / "checkpoints" / "counting" / LAST)
    for key, tensor in straight["model"].items():  # the same image on both runs: bit for bit
        assert torch.equal(again["model"][key], tensor), key
    assert (out / "counting_result.txt").read_text() == (uninterrupted / "counting_result.txt").read_text()


def test_the_abid_pipeline_trains_its_baselines_as_trainjobs_under_its_mlflow_parent(
        cpu_image, local_s3, public_bucket, no_aws_credentials, tmp_path, monkeypatch) -> None:
    from mlflow.tracking import MlflowClient

    from vsbench.abid.synth import generate_abid
    from vsbench.io.storage import upload_tree
    from vsbench.platform.local_run import run_abid_pipeline_locally
    from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
    from vsbench.tracking.provenance import PARENT_TAG, STEP_TAG

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    generate_abid(tmp_path / "synth", 120, seed=1, progress=False)
    upload_tree(tmp_path / "synth", f"s3://{public_bucket}", local_s3.admin_client())
    report = run_abid_pipeline_locally(
        data_root=tmp_path / "data", pipeline_root=tmp_path / "kfp",
        arguments={"source": f"s3://{public_bucket}", "endpoint_url": local_s3.endpoint_url, "seed": 3, "size": 32,
                   "experiment": "trainjob-test", "train_profile": "demo", "train_backend": "trainjob",
                   "train_nodes": 2, "train_gpus_per_node": 0,
                   "train_overrides": json.dumps({"epochs": 1, "image_size": 32, "batch_size": 8, "workers": 0})})
    assert report.succeeded, report.render()
    for task in ("counting", "siamese"):
        step = report.steps[f"abid-train-{task}"]
        assert step["trainjob"].startswith(f"vsbench-{task}-") and step["world_size"] == 2, step
    client = MlflowClient()
    experiment = client.get_experiment_by_name("trainjob-test")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get(STEP_TAG) == "pipeline"]
    children = {r.data.tags[STEP_TAG]: r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id}
    for task in ("counting", "siamese"):  # logged by the job's rank 0, in its container
        child = children[f"abid-train-{task}"]
        assert child.data.params["world_size"] == "2" and child.info.status == "FINISHED"
        assert child.data.tags.get("vsbench.image"), "rank 0 ran in the image"
    assert 0 <= report.scores()["counting_accuracy"] <= 1
