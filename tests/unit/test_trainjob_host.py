"""`vsbench abid train --backend trainjob` on this machine's files, driven through the CLI with a
stand-in for the Kubeflow SDK's client (tests/unit/test_trainjob.py's, and one for its podman
backend that records what each node container is started with):

* paths are made absolute and checked before anything is submitted, one line per problem, and a
  check that fails submits nothing and leaves no MLflow run;
* the podman nodes run as this machine's user (keep-id when rootless), read their inputs
  read-only and drop every capability, and no host folder changes mode or group;
* a failed job ends naming the node that failed first with its own error, and where the logs are;
* with no --parent-run-id a parent run is made (FINISHED, or FAILED with the job), none with --no-track.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from tests.unit.test_trainjob import FakeClient
from vsbench.cli.app import app
from vsbench.platform import trainjob


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder with tasks/ and images/ (no node really runs: only the number of training rows
    matters, which the check before submitting holds against the global batch)."""
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "counting_train.json").write_text(json.dumps([[i, 1] for i in range(256)]))
    (tmp_path / "images").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(trainjob.time, "sleep", lambda seconds: None)
    return tmp_path


def _train(*extra: str) -> Any:
    return CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", "tasks", "--images", "images", "--out",
                                    "runs/counting", "--backend", "trainjob", *extra])


def _store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    (tmp_path / "store").mkdir(exist_ok=True)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_NO_TRACK", "0")  # restored after the test: --no-track sets it for the nodes
    return uri


def _runs(uri: str) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    return [run for experiment in client.search_experiments() for run in client.search_runs([experiment.experiment_id])]


def _completing(client: FakeClient, out: Path) -> FakeClient:
    """``client`` whose job completes, rank 0's manifest written as the job would."""
    def train(runtime: Any, trainer: Any, options: list[Any]) -> str:
        name = FakeClient.train(client, runtime, trainer, options)
        (out / "train_counting.json").write_text(json.dumps({"trainjob": name, "result": "r", "metrics": {"chosen_epoch": 1.0}}))
        return name

    client.train = train  # type: ignore[method-assign]
    return client


def _argv(client: FakeClient) -> list[str]:
    return client.submitted["trainer"].func_args["argv"]


# ---- paths ----------------------------------------------------------------------------------------

def test_relative_paths_reach_the_nodes_absolute(data, monkeypatch) -> None:
    client = _completing(FakeClient([("Complete", {"node-0": "Succeeded", "node-1": "Succeeded"})]),
                         data / "runs" / "counting")
    monkeypatch.setattr(trainjob, "_kubernetes_client", lambda: client)
    result = _train("--engine", "kubernetes")
    assert result.exit_code == 0, result.output
    argv = _argv(client)
    for flag, path in (("--tasks", data / "tasks"), ("--images", data / "images"), ("--out", data / "runs" / "counting")):
        assert argv[argv.index(flag) + 1] == str(path)


def test_every_bad_path_is_one_line_and_nothing_is_submitted_or_tracked(data, monkeypatch) -> None:
    uri = _store(data, monkeypatch)
    client = FakeClient([])
    monkeypatch.setattr(trainjob, "_kubernetes_client", lambda: client)
    (data / "runs").write_text("a file where the runs folder should be")
    result = CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", "no-tasks", "--images", "tasks/counting_train.json",
                                      "--out", "runs/counting", "--backend", "trainjob", "--engine", "kubernetes"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    lines = result.output.strip().splitlines()
    assert lines == [
        f"error: --tasks {data / 'no-tasks'}: no such folder; it is what `vsbench abid prepare` writes",
        f"error: --images {data / 'tasks' / 'counting_train.json'}: not a folder; it is what `vsbench abid resize` writes",
        f"error: --out {data / 'runs' / 'counting'}: {data / 'runs'} is a file, not a folder: choose a folder path",
    ]
    assert client.submitted == {} and uri.endswith("store/mlflow.db")
    assert not (data / "store" / "mlflow.db").exists(), "the store was not even opened: no run"


@pytest.mark.skipif(os.getuid() != 0, reason="the mode bits of a root-owned folder are what root-without-capabilities has")
def test_a_run_folder_the_podman_nodes_cannot_write_is_refused_before_the_engine_starts(data, monkeypatch) -> None:
    out = data / "runs" / "counting"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints").chmod(0o555)
    monkeypatch.setattr(trainjob, "existing_docker_api", lambda: pytest.fail("the engine was asked before the check"))
    try:
        result = _train("--engine", "podman")
    finally:
        (out / "checkpoints").chmod(0o755)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: --out {out}: {out / 'checkpoints'} is not writable by the nodes (uid 0 "
                                     f"gid 0, no capabilities); an earlier run may have made it another user's: "
                                     f"`chown -R 0:0 {out}` or choose a new --out")


@pytest.mark.skipif(os.getuid() != 0, reason="needs to give a file to another user")
def test_a_task_file_the_podman_nodes_cannot_read_is_named_though_you_can(data, monkeypatch) -> None:
    secret = data / "tasks" / "counting_train.json"
    os.chown(secret, 12345, 12345)
    secret.chmod(0o600)
    monkeypatch.setattr(trainjob, "existing_docker_api", lambda: pytest.fail("the engine was asked before the check"))
    result = _train("--engine", "podman")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (f"error: --tasks {secret}: the nodes (uid 0 gid 0, no capabilities) cannot read "
                                     f"it: make it readable (chmod -R a+rX {data / 'tasks'})")


def test_podman_mounts_that_would_hide_the_images_folders_are_refused(data, monkeypatch) -> None:
    monkeypatch.setattr(trainjob, "existing_docker_api", lambda: pytest.fail("the engine was asked before the check"))
    result = CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", "tasks", "--images", "images", "--out",
                                      "/counting", "--backend", "trainjob", "--engine", "podman"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == ("error: --out /counting: its runs folder / would be mounted at its own path on each "
                                     "node, over the image's root: keep data, runs and the MLflow store in a folder of "
                                     "their own (e.g. /data/runs/counting, or under your home)")


# ---- podman: the nodes' user, mounts and rights; the host's folders as they were ------------------

class FakePodman:
    """The SDK's podman adapter and podman-py's client, as far as vsbench uses them; each node's exit
    code, end time and log are given by node ("node-1"), its container being "<job>-node-1"."""

    def __init__(self, rootless: bool, codes: dict[str, int] | None = None, finished: dict[str, str] | None = None,
                 logs: dict[str, str] | None = None) -> None:
        self.started: dict[str, dict[str, Any]] = {}
        self.codes, self.finished, self.logs = codes or {}, finished or {}, logs or {}
        self.client = SimpleNamespace(info=lambda: {"host": {"security": {"rootless": rootless}}},
                                      containers=SimpleNamespace(run=self._run, get=self._get))

    @staticmethod
    def node(container: str) -> str:
        return "node-" + container.rsplit("-", 1)[-1]

    def image_exists(self, image: str) -> bool:
        return True

    def _run(self, **kwargs: Any) -> Any:
        self.started[self.node(kwargs["name"])] = kwargs
        return SimpleNamespace(id=kwargs["name"])

    def _get(self, name: str) -> Any:
        return SimpleNamespace(attrs={"State": {"FinishedAt": self.finished.get(self.node(name), "")}})

    def container_status(self, name: str) -> tuple[str, int]:
        return "exited", self.codes[self.node(name)]

    def container_logs(self, name: str, follow: bool):
        yield self.logs.get(self.node(name), "")


def _use_podman(monkeypatch, data: Path, podman: FakePodman, states: list[tuple[str, dict[str, str]]],
                manifest: bool) -> FakeClient:
    import kubeflow.trainer

    client = FakeClient(states)
    client.backend = SimpleNamespace(_adapter=podman)

    def train(runtime: Any, trainer: Any, options: list[Any]) -> str:  # what the SDK's container backend does
        name = FakeClient.train(client, runtime, trainer, options)
        for rank in range(trainer.num_nodes):
            client.backend._adapter.create_and_start_container(
                image="img", command=["bash", "-lc", "torchrun ..."], name=f"{name}-node-{rank}", network_id="net",
                environment={}, labels={}, volumes={"/sdk/work": {"bind": "/workspace", "mode": "rw"}},
                working_dir="/workspace")
        if manifest:
            (data / "runs" / "counting" / "train_counting.json").write_text(json.dumps({"trainjob": name, "result": "r", "metrics": {}}))
        return name

    client.train = train  # type: ignore[method-assign]
    client.delete_job = lambda name: None  # type: ignore[attr-defined]
    monkeypatch.setattr(trainjob, "existing_docker_api", lambda: "unix:///fake.sock")
    monkeypatch.setattr(kubeflow.trainer, "TrainerClient", lambda backend_config: client)
    return client


def _modes(*paths: Path) -> dict[str, tuple[int, int, int]]:
    """Mode, owner and group of each path and everything in it."""
    found = {}
    for top in paths:
        for current, _folders, files in os.walk(top):
            for path in (Path(current), *(Path(current) / f for f in files)):
                info = path.stat()
                found[str(path)] = (stat.S_IMODE(info.st_mode), info.st_uid, info.st_gid)
    return found


@pytest.mark.parametrize("rootless", [False, True])
def test_podman_nodes_run_as_this_user_read_only_inputs_and_the_hosts_folders_stay_as_they_were(
        data, monkeypatch, rootless: bool) -> None:
    _store(data, monkeypatch)
    (data / "runs" / "counting").mkdir(parents=True)
    before = _modes(data / "tasks", data / "images", data / "runs", data / "store")
    podman = FakePodman(rootless)
    _use_podman(monkeypatch, data, podman, [("Complete", {"node-0": "Succeeded", "node-1": "Succeeded"})], manifest=True)
    result = _train("--engine", "podman")
    assert result.exit_code == 0, result.output
    assert sorted(podman.started) == ["node-0", "node-1"]
    for started in podman.started.values():
        assert started["user"] == f"{os.getuid()}:{os.getgid()}"
        assert started.get("userns_mode") == ("keep-id" if rootless else None)
        assert started["cap_drop"] == ["ALL"] and started["no_new_privileges"] is True and started["read_only"] is True
        volumes = started["volumes"]
        assert volumes["/sdk/work"] == {"bind": "/workspace", "mode": "rw"}, "the SDK's own mount is kept"
        for folder, mode in (("tasks", "ro"), ("images", "ro"), ("runs", "rw"), ("store", "rw")):
            assert volumes[str(data / folder)] == {"bind": str(data / folder), "mode": mode}, folder
    after = _modes(data / "tasks", data / "images", data / "runs", data / "store")
    assert {path: after[path] for path in before} == before, "no host folder or file changed mode, owner or group"


def test_a_failed_job_names_the_first_failing_nodes_own_error_and_where_the_logs_are(data, monkeypatch) -> None:
    uri = _store(data, monkeypatch)
    (data / "runs" / "counting").mkdir(parents=True)
    logs = {"node-0": "epoch 1\nRuntimeError: Connection closed by peer [10.88.0.3]:29500\nerror: unexpected "
                      "DistBackendError: Connection closed by peer\n",
            "node-1": "error: /data/tasks/counting_train.json: no such file; it is what `vsbench abid prepare` writes\n"}
    podman = FakePodman(False, codes={"node-0": 1, "node-1": 2}, logs=logs,
                        finished={"node-0": "2026-11-26T23:00:05.1Z", "node-1": "2026-11-26T23:00:04.123456789Z"})
    client = _use_podman(monkeypatch, data, podman, [("Failed", {"node-0": "Failed", "node-1": "Failed"})],
                         manifest=False)
    result = _train("--engine", "podman")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    name = client.submitted["name"]
    folder = data / "runs" / "counting" / "logs" / name
    assert result.output.strip().splitlines()[-1] == (
        f"error: TrainJob {name} failed: node-1 (exit code 2) failed first: /data/tasks/counting_train.json: no such "
        "file; it is what `vsbench abid prepare` writes; then node-0 (exit code 1); each node's log is in "
        f"{folder}/; no epoch had finished, so a re-run starts from the beginning")
    assert (folder / "node-0.log").read_text() == logs["node-0"]
    assert (folder / "node-1.log").read_text() == logs["node-1"]
    (parent,) = [r for r in _runs(uri) if r.data.tags.get("vsbench.step") == "pipeline"]
    assert parent.info.status == "FAILED" and parent.data.tags["vsbench.source"] == "cli"
    assert _argv(client)[_argv(client).index("--parent-run-id") + 1] == parent.info.run_id


def test_the_first_failure_is_the_earliest_end_whatever_the_clocks_digits() -> None:
    assert trainjob._finished_at("2026-11-26T23:00:04.123456789Z") < trainjob._finished_at("2026-11-26T23:00:04.5Z")
    assert trainjob._finished_at("0001-01-01T00:00:00Z") is None and trainjob._finished_at("") is None


# ---- the parent run --------------------------------------------------------------------------------

def test_without_a_parent_run_id_the_job_logs_under_a_new_parent_run(data, monkeypatch) -> None:
    uri = _store(data, monkeypatch)
    client = _completing(FakeClient([("Complete", {"node-0": "Succeeded", "node-1": "Succeeded"})]),
                         data / "runs" / "counting")
    monkeypatch.setattr(trainjob, "_kubernetes_client", lambda: client)
    result = _train("--engine", "kubernetes")
    assert result.exit_code == 0, result.output
    (parent,) = _runs(uri)
    assert parent.info.status == "FINISHED" and parent.data.tags["vsbench.step"] == "pipeline"
    assert parent.data.params["nodes"] == "2" and parent.data.metrics["chosen_epoch"] == 1.0
    assert _argv(client)[_argv(client).index("--parent-run-id") + 1] == parent.info.run_id
    assert f"MLflow: parent run {parent.info.run_id}" in result.output


def test_no_track_makes_no_run_and_turns_the_nodes_tracking_off(data, monkeypatch) -> None:
    uri = _store(data, monkeypatch)
    client = _completing(FakeClient([("Complete", {"node-0": "Succeeded", "node-1": "Succeeded"})]),
                         data / "runs" / "counting")
    monkeypatch.setattr(trainjob, "_kubernetes_client", lambda: client)
    result = _train("--engine", "kubernetes", "--no-track")
    assert result.exit_code == 0, result.output
    assert _runs(uri) == [] and _argv(client)[_argv(client).index("--parent-run-id") + 1] == ""
    assert os.environ["VSBENCH_NO_TRACK"] == "1", "the nodes inherit it (process, podman) and track nothing"
