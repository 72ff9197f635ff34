"""`vsbench abid train --backend trainjob --engine process` for real, as a user types it: 2 torchrun
nodes on this machine, given relative paths and no --parent-run-id, with the local default MLflow
store. The job trains and logs under a parent run the command made; a job whose nodes fail ends
naming the first failing node's own error and where each node's log is, with its parent FAILED;
bad paths stop before any node starts, one line each, with no MLflow run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.abid_data import images_missing_first_rows, tiny_abid

pytestmark = [pytest.mark.integration, pytest.mark.slow]
OVERRIDES = {"epochs": 1, "batch_size": 8, "image_size": 32, "workers": 0, "optimizer": "sgd", "lr": 0.01}
TIMEOUT_S = 600


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tasks/ and images/ of 80 generated bins, 8 training and 8 validation rows for counting."""
    root = tmp_path_factory.mktemp("trainjob-process")
    tiny_abid(root, 80)
    for name in ("counting_train.json", "counting_val.json"):
        rows = json.loads((root / "tasks" / name).read_text())
        (root / "tasks" / name).write_text(json.dumps(rows[:8]))
    return root


def _train(root: Path, home: Path, out: str, overrides: dict[str, Any], *extra: str,
           images: str = "images") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MLFLOW_TRACKING_URI", "VSBENCH_DEFAULT_STORE",
                        "VSBENCH_NO_TRACK", "VSBENCH_MLFLOW_ARTIFACT_LOCATION")}
    env.update({"VSBENCH_HOME": str(home), "OMP_NUM_THREADS": "1", "VSBENCH_DIST_TIMEOUT_S": "120"})
    return subprocess.run([sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks", "tasks", "--images",
                           images, "--out", out, "--device", "cpu", "--overrides", json.dumps(overrides),
                           "--backend", "trainjob", "--engine", "process", *extra], cwd=root, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT_S, check=False)


def _runs(home: Path) -> list[Any]:
    from mlflow.tracking import MlflowClient

    database = home / "mlflow.db"
    if not database.exists():
        return []
    client = MlflowClient(f"sqlite:///{database}")
    return [run for experiment in client.search_experiments() for run in client.search_runs([experiment.experiment_id])]


def test_relative_paths_train_and_log_under_a_parent_run_the_command_made(root, tmp_path) -> None:
    ran = _train(root, tmp_path / "home", "runs/ok", OVERRIDES)
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-4000:]
    manifest = json.loads((root / "runs" / "ok" / "train_counting.json").read_text())
    assert manifest["world_size"] == 2 and manifest["result"] == str(root / "runs" / "ok" / "counting_result.txt")
    logs = root / "runs" / "ok" / "logs" / manifest["trainjob"]
    assert sorted(p.name for p in logs.iterdir()) == ["node-0.log", "node-1.log"]
    runs = _runs(tmp_path / "home")
    (parent,) = [r for r in runs if r.data.tags.get("vsbench.step") == "pipeline"]
    (child,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == child.info.status == "FINISHED" and child.data.params["world_size"] == "2"
    assert parent.data.tags["vsbench.source"] == "cli" and "chosen_val_accuracy" in parent.data.metrics


def test_a_failed_job_names_the_first_failing_nodes_own_error_and_where_the_logs_are(root, tmp_path) -> None:
    # 8 training rows pass the check before submitting (batch 8), but 3 of their images are missing:
    # only the nodes find that the 5 left cannot fill the global batch.
    images_missing_first_rows(root / "tasks", root / "images", root / "images-partial")
    ran = _train(root, tmp_path / "home", "runs/too-big", OVERRIDES, images="images-partial")
    assert ran.returncode == 2, (ran.stdout + ran.stderr)[-4000:]
    last = ran.stderr.strip().splitlines()[-1]
    out = root / "runs" / "too-big"
    assert re.fullmatch(
        r"error: TrainJob (vsbench-counting-\w+) failed: node-[01] \(exit code 1\) failed first: the training set has "
        r"5 samples, fewer than the global batch \(batch_size 8\).*; then node-[01] \(exit code 1\); each node's log "
        rf"is in {re.escape(str(out))}/logs/\1/; no epoch had finished, so a re-run starts from the beginning", last), last
    runs = _runs(tmp_path / "home")
    assert "pipeline" in {r.data.tags.get("vsbench.step") for r in runs}, "the command made a parent run"
    assert all(r.info.status == "FAILED" for r in runs), "the parent and rank 0's child both ended FAILED"


def test_bad_paths_stop_before_any_node_starts_one_line_each_and_no_run(root, tmp_path) -> None:
    (root / "a-file").write_text("not a folder")
    env_home = tmp_path / "home"
    ran = subprocess.run([sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks", "no-such-tasks",
                          "--images", "a-file", "--out", "a-file/counting", "--backend", "trainjob", "--engine", "process"],
                         cwd=root, env={**{k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"},
                                        "VSBENCH_HOME": str(env_home), "VSBENCH_DEFAULT_STORE": ""},
                         capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    assert ran.returncode == 2 and ran.stdout == "", ran.stdout + ran.stderr
    assert ran.stderr.strip().splitlines() == [
        f"error: --tasks {root / 'no-such-tasks'}: no such folder; it is what `vsbench abid prepare` writes",
        f"error: --images {root / 'a-file'}: not a folder; it is what `vsbench abid resize` writes",
        f"error: --out {root / 'a-file' / 'counting'}: {root / 'a-file'} is a file, not a folder: choose a folder path",
    ]
    assert not env_home.exists() and _runs(env_home) == [], "no store opened, no run made"
