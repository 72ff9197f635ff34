"""The container runner's plumbing, without an engine: what a step gets and what is cleaned up.

The runs inside the image itself are in tests/containers/ (they need podman or docker and the
CPU image).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest

from vsbench.platform import containers
from vsbench.platform.containers import (
    OWNER_LABEL,
    RUN_LABEL,
    ContainerPlan,
    ContainerRunError,
    access_note,
    covering,
    grant_step_access,
    image_identity,
    remove_containers,
    step_access_changes,
    step_environment,
)
from vsbench.runtime.images import HOST_VENV, running_image


def test_a_step_gets_the_settings_a_pod_gets_and_nothing_else_of_the_host() -> None:
    host = {"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000", "MLFLOW_TRACKING_TOKEN": "t",
            "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "s", "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
            "VSBENCH_MLFLOW_ARTIFACT_LOCATION": "/data/art", "HTTPS_PROXY": "http://proxy:3128",
            "HOME": "/root", "PATH": "/usr/bin", "GITHUB_TOKEN": "x", "PYTHONPATH": "/src",
            "AWS_PROFILE": "dev", "AWS_CONFIG_FILE": "/root/.aws/config", "VSBENCH_IMAGE": "stale",
            "VSBENCH_RUNNER": "subprocess"}
    passed = step_environment(host)
    assert passed == {key: host[key] for key in (
        "MLFLOW_TRACKING_URI", "MLFLOW_TRACKING_TOKEN", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
        "AWS_ENDPOINT_URL", "VSBENCH_MLFLOW_ARTIFACT_LOCATION", "HTTPS_PROXY")}


def test_ca_bundles_named_by_the_settings_are_mounted(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    env = {"AWS_CA_BUNDLE": str(bundle), "REQUESTS_CA_BUNDLE": str(tmp_path / "missing.pem")}
    assert containers.ca_bundles(env) == [bundle]


def test_covering_mounts_a_folder_once_with_what_is_inside_it(tmp_path: Path) -> None:
    out, data, other = tmp_path / "out", tmp_path / "out" / "data", tmp_path / "other"
    assert covering([data, out, other, out / "kfp"]) == [other.resolve(), out.resolve()]
    plan = ContainerPlan(image="i", folders=(data, out / "kfp"), files=(tmp_path / "store" / "mlflow.db",),
                         read_only=(data / "inputs", tmp_path / "bench"))
    assert plan.mounts() == sorted([data.resolve(), (out / "kfp").resolve(), (tmp_path / "store").resolve()])
    assert plan.read_only_mounts() == [(tmp_path / "bench").resolve()], "inputs inside a writable mount go with it"


def _data_with_a_private_file(tmp_path: Path) -> Path:
    """A data folder holding ``raw/1.jpg``, readable by its owner only (as a camera's export may be)."""
    data = tmp_path / "data"
    (data / "raw").mkdir(parents=True)
    (data / "raw" / "1.jpg").write_bytes(b"x")
    os.chmod(data / "raw" / "1.jpg", 0o600)
    return data


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's group to 10001 needs root")
def test_step_access_is_what_fsgroup_gives_a_pod_volume(tmp_path: Path) -> None:
    data = _data_with_a_private_file(tmp_path)
    store = tmp_path / "store" / "mlflow.db"
    store.parent.mkdir()
    store.write_bytes(b"")
    (store.parent / "unrelated.txt").write_text("left alone")
    grant_step_access([data, tmp_path / "new"], [store], gid=10001)
    for path in (data, data / "raw", tmp_path / "new", store.parent):
        info = path.stat()
        assert info.st_gid == 10001 and info.st_mode & stat.S_IWGRP and info.st_mode & stat.S_ISGID, path
    for path in (data / "raw" / "1.jpg", store):
        info = path.stat()
        assert info.st_gid == 10001 and info.st_mode & stat.S_IRGRP and info.st_mode & stat.S_IWGRP, path
    assert (store.parent / "unrelated.txt").stat().st_gid == 0, "only the store itself, not its neighbours"


def test_step_access_that_cannot_be_granted_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    def refuse(path, uid, gid):
        raise PermissionError(1, "Operation not permitted", str(path))

    monkeypatch.setattr(os, "chown", refuse)
    (tmp_path / "data").mkdir()
    with pytest.raises(ContainerRunError, match=r"write access to .*data.*chgrp -R 10001"):
        grant_step_access([tmp_path / "data"], gid=10001)


def test_a_missing_image_names_the_command_that_builds_it() -> None:
    import docker

    class Images:
        def get(self, name):
            raise docker.errors.ImageNotFound(name)

    with pytest.raises(ContainerRunError, match=r"image registry\.test/vsbench-cpu:9 is not on this machine.*make images"):
        image_identity(SimpleNamespace(images=Images()), "registry.test/vsbench-cpu:9")


def test_no_engine_names_the_packages(monkeypatch) -> None:
    monkeypatch.setattr(containers.shutil, "which", lambda name: None)
    with pytest.raises(ContainerRunError, match=r"podman is not installed.*apt-get install podman uidmap runc"):
        with containers.podman_service():
            pass


def test_no_answering_api_is_found_on_a_dead_socket(tmp_path: Path, monkeypatch) -> None:
    dead = tmp_path / "dead.sock"
    dead.touch()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{dead}")
    monkeypatch.setattr(containers, "_answers", lambda url: url == "unix:///never")
    assert containers.existing_docker_api() is None


class _Container:
    def __init__(self, labels: dict[str, str], log: list[str]) -> None:
        self.labels, self._log = labels, log

    def remove(self, force: bool = False) -> None:
        assert force
        self._log.append(self.labels[RUN_LABEL])


def test_clean_up_removes_this_runs_containers_and_those_of_dead_runs_only() -> None:
    removed: list[str] = []
    dead_pid = 2 ** 22 + 12345  # above pid_max's default: no such process
    found = [_Container({OWNER_LABEL: str(os.getpid()), RUN_LABEL: "mine"}, removed),
             _Container({OWNER_LABEL: str(os.getpid()), RUN_LABEL: "mine-too-but-other-run"}, removed),
             _Container({OWNER_LABEL: str(dead_pid), RUN_LABEL: "killed"}, removed),
             _Container({OWNER_LABEL: "1", RUN_LABEL: "alive-elsewhere"}, removed)]
    client = SimpleNamespace(containers=SimpleNamespace(list=lambda all, filters: found))
    assert remove_containers(client, stale_only=True) == 1
    assert removed == ["killed"]
    assert remove_containers(client, run="mine") == 1
    assert removed == ["killed", "mine"]


def test_every_step_runs_in_the_one_image_and_kfp_is_restored_after() -> None:
    from kfp.local import docker_task_handler

    original = docker_task_handler.DockerTaskHandler
    with containers.every_step_in("registry.test/vsbench-cpu:1"):
        handler = docker_task_handler.DockerTaskHandler(
            image="registry.test/vsbench-cuda:1", full_command=["true"], pipeline_root="/tmp/p", runner=None)
        assert handler.image == "registry.test/vsbench-cpu:1"
    assert docker_task_handler.DockerTaskHandler is original


def test_sigterm_unwinds_like_ctrl_c() -> None:
    import signal

    with pytest.raises(KeyboardInterrupt):
        with containers.sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            signal.sigtimedwait([], 0.1) if hasattr(signal, "sigtimedwait") else None
    assert signal.getsignal(signal.SIGTERM) is not None


def test_steps_say_which_image_they_ran_in(monkeypatch) -> None:
    monkeypatch.delenv("VSBENCH_IMAGE", raising=False)
    monkeypatch.delenv("VSBENCH_IMAGE_ID", raising=False)
    assert running_image() == {"image": HOST_VENV, "image_id": ""}
    monkeypatch.setenv("VSBENCH_IMAGE", "registry.test/vsbench-cpu:1")
    assert running_image() == {"image": "registry.test/vsbench-cpu:1", "image_id": ""}
    monkeypatch.setenv("VSBENCH_IMAGE_ID", "sha256:abc")
    assert running_image() == {"image": "registry.test/vsbench-cpu:1", "image_id": "sha256:abc"}


def test_step_manifest_and_mlflow_tags_record_the_image(tmp_path: Path, monkeypatch) -> None:
    import json
    import time

    from mlflow.tracking import MlflowClient

    from vsbench.reporting.leaderboard import render_runs
    from vsbench.reporting.runs import collect_runs, ran_in
    from vsbench.steps.base import StepResult, finish
    from vsbench.tracking.provenance import IMAGE_ID_TAG, IMAGE_TAG
    from vsbench.tracking.runs import child_run, log_to_parent, open_parent_run

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("VSBENCH_IMAGE", "registry.test/vsbench-cpu:1")
    monkeypatch.setenv("VSBENCH_IMAGE_ID", "sha256:0123456789abcdef0123")
    parent = open_parent_run("image-tags", "kfp-1", "vsbench-abid", {})
    manifest = tmp_path / "manifest.json"
    with child_run(parent, "abid-score") as tracker:
        finish(tracker, StepResult("out", {"counting_accuracy": 0.5}), str(manifest), "score.json",
                time.perf_counter())
    log_to_parent(parent, {"counting_accuracy": 0.5})
    assert json.loads(manifest.read_text())["ran_in"] == {"image": "registry.test/vsbench-cpu:1",
                                                          "image_id": "sha256:0123456789abcdef0123"}
    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("image-tags").experiment_id])
    assert len(runs) == 2
    assert {r.data.tags[IMAGE_TAG] for r in runs} == {"registry.test/vsbench-cpu:1"}
    assert {r.data.tags[IMAGE_ID_TAG] for r in runs} == {"sha256:0123456789abcdef0123"}
    client.set_terminated(parent)
    (record,) = collect_runs("image-tags")
    assert ran_in(record) == "registry.test/vsbench-cpu:1 (0123456789ab)"
    assert "registry.test/vsbench-cpu:1 (0123456789ab)" in render_runs([record])


def test_a_step_that_fails_fast_fails_and_its_container_is_removed(capsys) -> None:
    """kfp 2.17's own runner reads an auto-removed container as a success; ours reads the status."""
    events: list[str] = []

    class Container:
        def logs(self, stream: bool, follow: bool):
            return iter([b"step output\n"])

        def wait(self):
            events.append("wait")
            return {"StatusCode": 3}

        def remove(self, force: bool):
            events.append("remove")

    def run(**kwargs):
        assert "auto_remove" not in kwargs and kwargs["detach"] is True and kwargs["user"] == "10001:10001"
        return Container()

    client = SimpleNamespace(containers=SimpleNamespace(run=run))
    assert containers.run_step_container(client, "img", ["false"], {}, user="10001:10001") == 3
    assert events == ["wait", "remove"]
    assert "step output" in capsys.readouterr().out


@pytest.mark.skipif(os.getuid() != 0, reason="changing a file's group to 10001 needs root")
def test_the_access_a_container_run_grants_is_said_in_one_line_before_anything_changes(tmp_path: Path) -> None:
    data = _data_with_a_private_file(tmp_path)
    before = {path: (path.stat().st_gid, stat.S_IMODE(path.stat().st_mode)) for path in (data, data / "raw", data / "raw" / "1.jpg")}
    changes = step_access_changes([data], gid=10001)
    assert sorted(changes) == sorted(before), "every path that would change, and nothing changed yet"
    assert {path: (path.stat().st_gid, stat.S_IMODE(path.stat().st_mode)) for path in before} == before
    line = access_note(changes, [data, tmp_path / "out"], gid=10001)
    assert line.startswith("note: the steps run as user and group 10001") and "\n" not in line
    assert f"3 file(s) and folder(s) under {data} get group 10001" in line and str(tmp_path / "out") not in line
    assert sorted(grant_step_access([data], gid=10001)) == sorted(before)
    assert step_access_changes([data], gid=10001) == [] and grant_step_access([data], gid=10001) == []
    assert (data / "raw" / "1.jpg").stat().st_mode & 0o777 == 0o660, "the owner's bits stay, the group's are added"
