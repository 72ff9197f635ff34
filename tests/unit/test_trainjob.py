"""TrainJobs (vsbench.platform.trainjob) without a container engine: the manifests validate against
Kubeflow Trainer v2's typed API, the SDK's runtime loader reads our runtimes, the job's command is
the one `vsbench abid train` takes, the engine is chosen as documented, every expected failure is
one line (no Trainer v2, no runtime, a node that fails, a job that never starts, an unreachable
MLflow), and the process engine really trains 2 nodes.
"""

from __future__ import annotations

import copy
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import yaml
from kubeflow_trainer_api import models

from tests.abid_data import tiny_abid
from vsbench.platform import trainjob
from vsbench.platform.trainjob import (
    CPU_RUNTIME,
    CUDA_RUNTIME,
    RUNTIME_FOLDER,
    TrainJobError,
    TrainJobRequest,
    choose_engine,
    run_trainjob,
    vsbench_train_node,
)
from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE

ROOT = Path(__file__).resolve().parents[2]
TRAINJOB_DIR = ROOT / "k8s" / "training" / "trainjob"
MODELS = {"TrainJob": models.TrainerV1alpha1TrainJob, "TrainingRuntime": models.TrainerV1alpha1TrainingRuntime,
          "ClusterTrainingRuntime": models.TrainerV1alpha1ClusterTrainingRuntime}


def dropped(given: Any, kept: Any, path: str = "") -> list[str]:
    """Keys of ``given`` that the typed model did not keep (an unknown or misplaced field)."""
    if isinstance(given, dict):
        if not isinstance(kept, dict):
            return [path or "/"]
        return [found for key, value in given.items()
                for found in ([f"{path}/{key}"] if key not in kept else dropped(value, kept[key], f"{path}/{key}"))]
    if isinstance(given, list):
        if not isinstance(kept, list) or len(given) != len(kept):
            return [path]
        return [found for i, (a, b) in enumerate(zip(given, kept)) for found in dropped(a, b, f"{path}[{i}]")]
    return [] if given == kept else [f"{path}: {given!r} became {kept!r}"]


def validate(document: dict[str, Any]) -> list[str]:
    """What Trainer v2's API (kubeflow-trainer-api 2.3.0, the SDK's pin) would not take of a document."""
    model = MODELS[document["kind"]].from_dict(document)
    return dropped(document, model.to_dict())


def trainer_documents() -> list[dict[str, Any]]:
    return [doc for path in sorted(TRAINJOB_DIR.rglob("*.yaml")) if path.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(path.read_text()) if doc and doc["kind"] in MODELS]


# ---- manifests --------------------------------------------------------------------------------

def test_the_runtimes_and_trainjobs_validate_against_trainer_v2s_api() -> None:
    documents = trainer_documents()
    assert sorted(d["kind"] for d in documents) == ["TrainJob", "TrainJob", "TrainingRuntime", "TrainingRuntime"]
    for document in documents:
        assert document["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
        assert validate(document) == [], document["metadata"]["name"]


def test_the_validation_catches_a_field_the_api_does_not_have() -> None:
    job = next(d for d in trainer_documents() if d["kind"] == "TrainJob")
    broken = copy.deepcopy(job)
    broken["spec"]["trainer"]["numProcsPerNode"] = 1  # a typo of numProcPerNode
    assert validate(broken) == ["/spec/trainer/numProcsPerNode"]
    moved = copy.deepcopy(next(d for d in trainer_documents() if d["kind"] == "TrainingRuntime"))
    moved["spec"]["mlPolicy"]["torch"]["numProcPerNode"] = "auto"  # Trainer 2.2's place; 2.3 moved it to the TrainJob
    assert validate(moved) == ["/spec/mlPolicy/torch/numProcPerNode"]


def test_the_sdk_reads_our_runtimes_with_the_images_of_images_py() -> None:
    from kubeflow.trainer.backends.container.runtime_loader import list_training_runtimes_from_sources

    found = {r.name: r for r in list_training_runtimes_from_sources([f"file://{RUNTIME_FOLDER}"])}
    assert found[CPU_RUNTIME].trainer.image == CPU_IMAGE and found[CUDA_RUNTIME].trainer.image == GPU_IMAGE
    assert found[CPU_RUNTIME].trainer.framework == "torch"


def test_the_runtime_pods_are_locked_down_and_mount_the_data_volume() -> None:
    for runtime in (d for d in trainer_documents() if d["kind"] == "TrainingRuntime"):
        (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        pod = job["template"]["spec"]["template"]["spec"]
        (node,) = pod["containers"]
        assert node["name"] == "node" and pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] == 10001 and pod["automountServiceAccountToken"] is False
        assert node["securityContext"] == {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
                                           "capabilities": {"drop": ["ALL"]}}
        assert {m["mountPath"] for m in node["volumeMounts"]} == {"/data", "/tmp", "/dev/shm"}
        assert node["envFrom"] == [{"configMapRef": {"name": "vsbench-config"}}]
        assert job["template"]["spec"]["backoffLimit"] == 0, "a failed node fails the job; a new one resumes"


def test_each_trainjob_runs_vsbench_abid_train_as_the_sdk_submission_does() -> None:
    for job in (d for d in trainer_documents() if d["kind"] == "TrainJob"):
        trainer = job["spec"]["trainer"]
        task = job["metadata"]["name"].removeprefix("vsbench-abid-")
        assert trainer["command"] == ["torchrun"] and job["spec"]["runtimeRef"]["name"] == CUDA_RUNTIME
        assert trainer["numProcPerNode"] == trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"]
        arguments = trainer["args"][trainer["args"].index("-m") + 2:]
        request = TrainJobRequest(task=task, tasks=Path("/data/tasks"), images=Path("/data/bin-images-resize"),
                                  out=Path(f"/data/runs/{task}"), profile="full", gpus_per_node=1)
        expected = request.node_argv()
        flags = {a.split("=")[0]: a.split("=", 1)[1] for a in arguments if a.startswith("--")}
        for flag in ("--tasks", "--images", "--out", "--profile", "--device"):
            assert flags[flag] == expected[expected.index(flag) + 1], (task, flag)


def test_the_kustomization_renders_every_object_in_the_namespace() -> None:
    kubectl = subprocess.run(["which", "kubectl"], capture_output=True, text=True, check=False).stdout.strip()
    if not kubectl:
        pytest.skip("kubectl is not installed")
    rendered = subprocess.run([kubectl, "kustomize", str(TRAINJOB_DIR)], capture_output=True, text=True, check=True)
    documents = list(yaml.safe_load_all(rendered.stdout))
    assert {d["kind"] for d in documents} == {"ServiceAccount", "Role", "RoleBinding", "NetworkPolicy",
                                              "TrainingRuntime", "TrainJob"}
    assert all(d["metadata"]["namespace"] == "vsbench" for d in documents)
    for document in documents:
        if document["kind"] in MODELS:
            assert validate(document) == [], document["metadata"]["name"]


# ---- the node function, the request, the engine -------------------------------------------------

def test_the_node_function_runs_from_its_source_alone_both_ways_the_sdk_calls_it(tmp_path) -> None:
    """The SDK ships the function's source to /tmp/train.py and calls it with keywords (container,
    Kubernetes) or with one dict (local process): both must work with nothing else defined."""
    source = textwrap.dedent(inspect.getsource(vsbench_train_node))
    for call in (f"vsbench_train_node(**{{'argv': ['--help'], 'python': {sys.executable!r}}})",
                 f"vsbench_train_node({{'argv': ['--help'], 'python': {sys.executable!r}}})"):
        script = tmp_path / "train.py"
        script.write_text(f"{source}\n{call}\n")
        ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
        assert ran.returncode == 0 and "abid" in ran.stdout, ran.stderr[-2000:]
    script.write_text(f"{source}\nvsbench_train_node(argv=['no-such-command'], python={sys.executable!r})\n")
    failed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False)
    assert failed.returncode == 2, "the node's exit status is vsbench's"


def test_the_request_picks_runtime_image_and_device_from_the_gpus() -> None:
    cpu = TrainJobRequest(task="counting", tasks=Path("t"), images=Path("i"), out=Path("o"))
    gpu = TrainJobRequest(task="siamese", tasks=Path("t"), images=Path("i"), out=Path("o"), nodes=4, gpus_per_node=8)
    assert (cpu.runtime, cpu.node_image, cpu.processes) == (CPU_RUNTIME, CPU_IMAGE, 2)
    assert (gpu.runtime, gpu.node_image, gpu.processes) == (CUDA_RUNTIME, GPU_IMAGE, 32)
    assert cpu.node_argv()[cpu.node_argv().index("--device") + 1] == "cpu"
    assert gpu.node_argv()[gpu.node_argv().index("--device") + 1] == "cuda"
    with pytest.raises(TrainJobError, match="counting or siamese"):
        TrainJobRequest(task="quantity", tasks=Path("t"), images=Path("i"), out=Path("o"))
    with pytest.raises(TrainJobError, match="nodes must be >= 1"):
        TrainJobRequest(task="counting", tasks=Path("t"), images=Path("i"), out=Path("o"), nodes=0)


def test_the_schedule_timeout_comes_from_the_settings(monkeypatch) -> None:
    monkeypatch.setenv(trainjob.SCHEDULE_TIMEOUT_ENV, "60")
    assert TrainJobRequest(task="counting", tasks=Path("t"), images=Path("i"), out=Path("o")).schedule_timeout_s == 60
    monkeypatch.setenv(trainjob.SCHEDULE_TIMEOUT_ENV, "soon")
    with pytest.raises(TrainJobError, match="is not a number of seconds"):
        TrainJobRequest(task="counting", tasks=Path("t"), images=Path("i"), out=Path("o"))


def test_a_local_image_that_is_not_built_is_one_line_naming_it(monkeypatch, request_) -> None:
    import kubeflow.trainer

    class Backend:
        _adapter = SimpleNamespace(image_exists=lambda image: False)

    monkeypatch.setattr(trainjob, "existing_docker_api", lambda: "unix:///nowhere.sock")
    monkeypatch.setattr(kubeflow.trainer, "TrainerClient", lambda backend_config: SimpleNamespace(backend=Backend()))
    with pytest.raises(TrainJobError, match=rf"image {CPU_IMAGE} is not on this machine .*pulls nothing.*make image-cpu"):
        run_trainjob(request_, "podman", lambda _: None)


def test_the_engine_is_the_cluster_in_a_pod_else_podman_else_processes(monkeypatch) -> None:
    assert choose_engine("auto", {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}) == "kubernetes"
    monkeypatch.setattr(trainjob.shutil, "which", lambda name: None)
    monkeypatch.setattr(trainjob, "existing_docker_api", lambda: None)
    assert choose_engine("auto", {}) == "process"
    monkeypatch.setattr(trainjob.shutil, "which", lambda name: "/usr/bin/podman" if name == "podman" else None)
    assert choose_engine("auto", {}) == "podman"
    assert choose_engine("process", {"KUBERNETES_SERVICE_HOST": "x"}) == "process"
    with pytest.raises(TrainJobError, match="one of auto, kubernetes, podman, process"):
        choose_engine("slurm")


def test_mlflow_stores_are_mounted_and_a_loopback_server_is_refused_with_the_fix(tmp_path) -> None:
    database = tmp_path / "db" / "mlflow.db"
    assert trainjob._mlflow_mounts({"MLFLOW_TRACKING_URI": f"sqlite:///{database}"}) == ([database.parent], [database])
    assert trainjob._mlflow_mounts({"MLFLOW_TRACKING_URI": f"file://{tmp_path}/runs"}) == ([tmp_path / "runs"], [])
    assert trainjob._mlflow_mounts({"MLFLOW_TRACKING_URI": "http://mlflow.vsbench:5000"}) == ([], [])
    with pytest.raises(TrainJobError, match="loopback.*sqlite"):
        trainjob._mlflow_mounts({"MLFLOW_TRACKING_URI": "http://127.0.0.1:5000"})


# ---- the cluster's answers, through a stand-in for the SDK's client ------------------------------

class FakeClient:
    """The TrainerClient calls vsbench makes, scripted: job states in turn, logs, events."""

    def __init__(self, states: list[tuple[str, dict[str, str]]], *, train_error: Exception | None = None,
                 events: list[Any] = ()) -> None:
        self.states = list(states)
        self.train_error = train_error
        self.events = list(events)
        self.submitted: dict[str, Any] = {}

    def get_runtime(self, name: str) -> str:
        return name

    def train(self, runtime: Any, trainer: Any, options: list[Any]) -> str:
        if self.train_error is not None:
            raise self.train_error
        spec: dict[str, Any] = {}
        for option in options:
            option(spec, trainer, SimpleNamespace(__class__=object))
        self.submitted = {"runtime": runtime, "trainer": trainer, "name": spec["metadata"]["name"]}
        return self.submitted["name"]

    def get_job(self, name: str) -> Any:
        status, nodes = self.states[0] if len(self.states) == 1 else self.states.pop(0)
        steps = [SimpleNamespace(name=n, status=s, pod_name=f"{name}-{n}") for n, s in nodes.items()]
        return SimpleNamespace(status=status, steps=steps)

    def get_job_logs(self, name: str, follow: bool, step: str):
        yield f"hello from {step}\n"

    def get_job_events(self, name: str) -> list[Any]:
        return self.events


@pytest.fixture
def request_(tmp_path) -> TrainJobRequest:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "images").mkdir()
    return TrainJobRequest(task="counting", tasks=tmp_path / "tasks", images=tmp_path / "images",
                           out=tmp_path / "runs" / "counting", parent_run_id="abc", schedule_timeout_s=0)


def _use(monkeypatch, client: FakeClient) -> None:
    monkeypatch.setattr(trainjob, "_kubernetes_client", lambda: client)
    monkeypatch.setattr(trainjob.time, "sleep", lambda seconds: None)


def test_a_completed_job_returns_rank_0s_manifest_and_streams_each_node(monkeypatch, request_) -> None:
    client = FakeClient([("Running", {"node-0": "Running", "node-1": "Running"}),
                         ("Complete", {"node-0": "Succeeded", "node-1": "Succeeded"})])
    _use(monkeypatch, client)
    lines: list[str] = []

    def train(runtime: Any, trainer: Any, options: list[Any]) -> str:
        name = FakeClient.train(client, runtime, trainer, options)
        request_.out.mkdir(parents=True, exist_ok=True)
        (request_.out / "train_counting.json").write_text(json.dumps({"trainjob": name, "metrics": {"x": 1.0}}))
        return name

    client.train = train  # type: ignore[method-assign]
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")  # a step's credentials never go into a TrainJob spec
    request = TrainJobRequest(**{**request_.__dict__, "schedule_timeout_s": 60})
    outcome = run_trainjob(request, "kubernetes", lines.append)
    assert outcome.manifest["metrics"] == {"x": 1.0} and outcome.engine == "kubernetes" and outcome.nodes == 2
    trainer = client.submitted["trainer"]
    assert client.submitted["runtime"] == CPU_RUNTIME and trainer.num_nodes == 2
    assert trainer.func is vsbench_train_node and trainer.func_args["argv"] == request.node_argv()
    assert trainer.env == {trainjob.JOB_ENV: outcome.name} and "--parent-run-id" in trainer.func_args["argv"]
    assert {"[node-0] hello from node-0", "[node-1] hello from node-1"} <= set(lines)


def test_a_failed_job_names_the_node_and_says_a_rerun_resumes(monkeypatch, request_) -> None:
    _use(monkeypatch, FakeClient([("Failed", {"node-0": "Succeeded", "node-1": "Failed"})]))
    request = TrainJobRequest(**{**request_.__dict__, "schedule_timeout_s": 60})
    with pytest.raises(TrainJobError, match=r"failed: node-1 failed first; each node's log is in .*/logs/vsbench-counting-"
                                            r"\w+/; no epoch had finished, so a re-run starts from the beginning$"):
        run_trainjob(request, "kubernetes", lambda _: None)
    (request.out / "checkpoints" / "counting").mkdir(parents=True)
    (request.out / "checkpoints" / "counting" / "last.pt").write_bytes(b"an epoch finished")
    with pytest.raises(TrainJobError, match=r"failed: node-1 failed first; .*; its checkpoints stay in .*resumes from the last"):
        run_trainjob(request, "kubernetes", lambda _: None)


def test_a_job_that_never_starts_fails_after_the_stated_timeout_naming_why(monkeypatch, request_) -> None:
    event = SimpleNamespace(involved_object_name="vsbench-counting-x-node-0-0", reason="FailedScheduling",
                            message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    _use(monkeypatch, FakeClient([("Created", {"node-0": "Pending", "node-1": "Pending"})], events=[event]))
    with pytest.raises(TrainJobError, match=r"did not start within 0 s: .*FailedScheduling: 0/3 nodes .*nvidia.com/gpu"):
        run_trainjob(request_, "kubernetes", lambda _: None)
    pull = SimpleNamespace(involved_object_name="p", reason="ErrImagePull",
                           message='Failed to pull image "registry.example/vsbench-cuda:9": not found')
    _use(monkeypatch, FakeClient([("Created", {"node-0": "Pending"})], events=[pull]))
    with pytest.raises(TrainJobError, match=r'ErrImagePull: Failed to pull image "registry.example/vsbench-cuda:9"'):
        run_trainjob(request_, "kubernetes", lambda _: None)


def test_a_cluster_without_trainer_v2_or_our_runtime_gets_one_line_with_the_way_out(monkeypatch, request_) -> None:
    from kubernetes.client import ApiException

    missing_crd = ApiException(status=404, reason="Not Found")
    missing_crd.body = "the server could not find the requested resource"
    client = FakeClient([], train_error=missing_crd)
    _use(monkeypatch, client)
    with pytest.raises(TrainJobError, match=r"no CRD trainjobs.trainer.kubeflow.org.*kubectl apply -k k8s/training` \(PyTorchJob\)"):
        run_trainjob(request_, "kubernetes", lambda _: None)
    no_runtime = RuntimeError(f"Failed to get TrainingRuntime: vsbench/{CPU_RUNTIME}")
    no_runtime.__cause__ = ApiException(status=404, reason="Not Found")
    client.train_error = no_runtime
    with pytest.raises(TrainJobError, match=r"TrainingRuntime vsbench-torch-cpu is not in the namespace"):
        run_trainjob(request_, "kubernetes", lambda _: None)
    client.train_error = ApiException(status=403, reason="Forbidden")
    with pytest.raises(TrainJobError, match="may not create TrainJobs"):
        run_trainjob(request_, "kubernetes", lambda _: None)


def test_missing_inputs_are_named_before_anything_is_submitted(monkeypatch, tmp_path) -> None:
    _use(monkeypatch, FakeClient([]))
    request = TrainJobRequest(task="counting", tasks=tmp_path / "nope", images=tmp_path, out=tmp_path / "o")
    with pytest.raises(trainjob.TrainJobInputError, match=r"nope: no such folder; it is what `vsbench abid prepare` writes"):
        run_trainjob(request, "kubernetes", lambda _: None)


def test_the_cli_turns_a_trainjob_failure_into_one_line(monkeypatch, request_) -> None:
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    _use(monkeypatch, FakeClient([("Failed", {"node-0": "Failed", "node-1": "Running"})]))
    result = CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", str(request_.tasks), "--images",
                                      str(request_.images), "--out", str(request_.out), "--backend", "trainjob",
                                      "--engine", "kubernetes"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "failed: node-0" in result.output
    refused = CliRunner().invoke(app, ["abid", "train", "counting", "--tasks", "t", "--images", "i", "--out", "o",
                                       "--backend", "slurm"])
    assert refused.exit_code == 2 and "pod, trainjob" in refused.output


# ---- the process engine: 2 real nodes here -------------------------------------------------------

@pytest.mark.slow
def test_the_process_engine_trains_two_nodes_as_torchrun_does(tmp_path, monkeypatch) -> None:
    from vsbench.abid.trainer import LAST, load_state

    tiny_abid(tmp_path, 80)
    for name in ("counting_train.json", "counting_val.json"):
        rows = json.loads((tmp_path / "tasks" / name).read_text())
        (tmp_path / "tasks" / name).write_text(json.dumps(rows[:8]))
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("VSBENCH_DIST_TIMEOUT_S", "120")
    overrides = json.dumps({"epochs": 1, "batch_size": 8, "image_size": 32, "workers": 0, "optimizer": "sgd",
                            "lr": 0.01})
    request = TrainJobRequest(task="counting", tasks=tmp_path / "tasks", images=tmp_path / "images",
                              out=tmp_path / "job" / "counting", overrides=overrides, device="cpu")
    lines: list[str] = []
    outcome = run_trainjob(request, "process", lines.append)
    assert outcome.manifest["world_size"] == 2 and outcome.manifest["trainjob"] == outcome.name
    assert any(line.startswith("[node-0] ") for line in lines)
    torchrun = subprocess.run([sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks",
                               str(tmp_path / "tasks"), "--images", str(tmp_path / "images"), "--out",
                               str(tmp_path / "torchrun"), "--device", "cpu", "--nproc", "2", "--overrides", overrides],
                              capture_output=True, text=True, timeout=300, check=False, env=dict(os.environ))
    assert torchrun.returncode == 0, torchrun.stderr[-2000:]
    job = load_state(request.out / "checkpoints" / "counting" / LAST)
    local = load_state(tmp_path / "torchrun" / "checkpoints" / "counting" / LAST)
    for key, tensor in local["model"].items():  # the same processes and rendezvous, one machine: bit for bit
        assert torch.equal(job["model"][key], tensor), key
