"""Data-parallel ABID training as a Kubeflow Trainer v2 TrainJob, submitted through the Kubeflow SDK.

One TrainJob trains one baseline on ``nodes`` nodes x ``gpus_per_node`` processes (one process per
node on the CPU). Every node runs :func:`vsbench_train_node`, which is ``vsbench abid train`` under
the torchrun that the runtime starts, so a TrainJob computes what ``vsbench abid train --nproc N``
computes at the same global batch (vsbench.abid.distributed): rank 0 writes the checkpoints, the
result file and the step manifest, and logs the child run under the pipeline's MLflow parent.

Where the job runs (the SDK's backends):

* ``kubernetes``: the cluster's Trainer v2 controller, with the ``vsbench-torch-*`` TrainingRuntime
  of ``k8s/training/trainjob`` (image, non-root, read-only root, /data, settings). Chosen when
  the code runs in a pod (``KUBERNETES_SERVICE_HOST``).
* ``podman``: the SDK's container backend on this machine: one container per node of the vsbench
  image on a private podman network, nothing pulled. The SDK mounts only its own work folder, so
  :class:`_PodLikeAdapter` gives each node what the TrainingRuntime gives a pod on the cluster:
  the data folders at their own paths, the settings from the environment, user 10001, a read-only
  root filesystem with a tmpfs on /tmp.
* ``process``: where no container engine exists, the nodes are torchrun processes on this machine
  with the same static rendezvous the container backend uses. (The SDK's own local-process
  backend builds a fresh virtual environment per job and pip-installs torch into it, which an
  offline machine cannot do and which would train with another torch than the one tested.)

A failed job fails the caller with one line naming the node; the checkpoints stay, and the next
submission resumes from the last finished epoch, as ``vsbench abid train`` does.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vsbench.platform.containers import (
    RUNTIME_UID,
    covering,
    existing_docker_api,
    grant_step_access,
    podman_service,
    step_environment,
)
from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE

TRAIN_BACKENDS = ("pod", "trainjob")
ENGINES = ("auto", "kubernetes", "podman", "process")
RUNTIME_FOLDER = Path(__file__).resolve().parents[3] / "k8s" / "training" / "trainjob" / "runtimes"
CPU_RUNTIME = "vsbench-torch-cpu"
CUDA_RUNTIME = "vsbench-torch-cuda"
MASTER_PORT = 29500
TRAINJOB_CRD = "trainjobs.trainer.kubeflow.org"
# A TrainJob whose nodes have not all started after this long fails the step, naming why (no GPU
# node, an image it cannot pull); the job itself may then run for as long as training takes.
DEFAULT_SCHEDULE_TIMEOUT_S = 900
SCHEDULE_TIMEOUT_ENV = "VSBENCH_TRAINJOB_SCHEDULE_TIMEOUT_S"  # set in vsbench-config to change it on a cluster
DEFAULT_TIMEOUT_S = 7 * 24 * 3600
# Events that say a pod is on its way; any other (FailedScheduling, ErrImagePull, ...) is a reason.
_PROGRESS_EVENTS = frozenset({"Scheduled", "Pulling", "Pulled", "Created", "Started", "SuccessfulCreate",
                              "SuccessfulDelete", "Completed"})
JOB_ENV = "VSBENCH_TRAINJOB"  # the job's name, recorded by rank 0 in the step manifest


class TrainJobError(RuntimeError):
    """A TrainJob could not run or failed; the message is one line that says what to do."""

    one_line = True


def vsbench_train_node(argv: list[str] | dict[str, object] | None = None, python: str = "python") -> None:
    """One node's process of a vsbench TrainJob: ``vsbench abid train`` with the job's arguments.

    The SDK ships this function's source (not its module) to every node and calls it under the
    runtime's torchrun, with the arguments as keywords (container and Kubernetes backends) or as
    one dict (local-process backend); so it uses no name from this module (its annotations are
    builtins only: they are evaluated there) and accepts both ways. The
    child inherits torchrun's RANK/WORLD_SIZE/MASTER_ADDR, so it joins the job's process group."""
    import subprocess as _subprocess
    import sys as _sys

    if isinstance(argv, dict):
        argv, python = argv["argv"], argv.get("python", python)
    completed = _subprocess.run([python, "-m", "vsbench", *argv], check=False)
    if completed.returncode:
        _sys.exit(completed.returncode)


@dataclass(frozen=True)
class TrainJobRequest:
    """Everything one baseline's TrainJob depends on (the arguments of ``vsbench abid train``)."""

    task: str
    tasks: Path
    images: Path
    out: Path
    profile: str = "demo"
    overrides: str = "{}"
    seed: int = 0
    device: str = "auto"
    parent_run_id: str = ""
    decode: str = "auto"
    nodes: int = 2
    gpus_per_node: int = 0
    image: str = ""
    schedule_timeout_s: int = field(default_factory=lambda: _schedule_timeout())
    timeout_s: int = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.task not in ("counting", "siamese"):
            raise TrainJobError(f"task must be counting or siamese, not {self.task!r}")
        if self.nodes < 1 or self.gpus_per_node < 0:
            raise TrainJobError(f"nodes must be >= 1 and gpus_per_node >= 0 (got {self.nodes} and {self.gpus_per_node})")

    @property
    def runtime(self) -> str:
        return CUDA_RUNTIME if self.gpus_per_node else CPU_RUNTIME

    @property
    def node_image(self) -> str:
        return self.image or (GPU_IMAGE if self.gpus_per_node else CPU_IMAGE)

    @property
    def processes(self) -> int:
        return self.nodes * max(1, self.gpus_per_node)

    def node_argv(self) -> list[str]:
        device = self.device if self.device != "auto" else ("cuda" if self.gpus_per_node else "cpu")
        return ["abid", "train", self.task, "--tasks", str(self.tasks), "--images", str(self.images),
                "--out", str(self.out), "--profile", self.profile, "--overrides", self.overrides,
                "--seed", str(self.seed), "--device", device, "--parent-run-id", self.parent_run_id,
                *(["--decode", self.decode] if self.decode != "auto" else [])]

    def data_folders(self) -> list[Path]:
        """What the nodes read and write: the runs folder whole, since the siamese network may start
        from the counting run beside its own (profile field siamese_trunk_init)."""
        return [self.tasks, self.images, self.out.parent]


def _schedule_timeout() -> int:
    value = os.environ.get(SCHEDULE_TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_SCHEDULE_TIMEOUT_S
    if not value.isdigit():
        raise TrainJobError(f"{SCHEDULE_TIMEOUT_ENV}={value!r} is not a number of seconds")
    return int(value)


@dataclass
class TrainJobOutcome:
    """What the caller reports: the job, where it ran, how long it took and rank 0's manifest."""

    name: str
    engine: str
    nodes: int
    processes: int
    startup_seconds: float
    seconds: float
    manifest: dict[str, Any] = field(default_factory=dict)


def choose_engine(engine: str = "auto", environ: dict[str, str] | None = None) -> str:
    """``auto``: the cluster from inside a pod, else podman where it is installed, else processes."""
    if engine not in ENGINES:
        raise TrainJobError(f"trainjob engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    if engine != "auto":
        return engine
    environ = os.environ if environ is None else environ
    if environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if shutil.which("podman") or existing_docker_api():
        return "podman"
    return "process"


def job_name(task: str) -> str:
    """A fresh DNS-1035 name per submission: a re-run after a failure is a new job that resumes."""
    return f"vsbench-{task}-{uuid.uuid4().hex[:8]}"


# ---- the container backend's nodes, made like the TrainingRuntime's pods ----------------------

class _PodLikeAdapter:
    """The SDK's podman adapter, with what the vsbench TrainingRuntime gives each node on a cluster.

    The SDK's container backend mounts only its work folder and passes only the trainer's env;
    vsbench's steps read and write the data root and log to MLflow, so every node container also
    gets the data folders at their own paths, user 10001 (group-writable volumes, as fsGroup does),
    a read-only root filesystem with /tmp in memory, and the GPUs through CDI when asked for."""

    def __init__(self, inner: Any, mounts: list[Path], gpus: int) -> None:
        self._inner = inner
        self._mounts = mounts
        self._gpus = gpus

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_and_start_container(self, image: str, command: list[str], name: str, network_id: str,
                                   environment: dict[str, str], labels: dict[str, str],
                                   volumes: dict[str, dict[str, str]], working_dir: str) -> str:
        volumes = {**volumes, **{str(path): {"bind": str(path), "mode": "rw"} for path in self._mounts}}
        extra: dict[str, Any] = {}
        if self._gpus:
            extra["devices"] = ["nvidia.com/gpu=all"]
        # network_mode "bridge": the job's own network (podman-py passes the network name alone, and
        # vsbench's containers.conf makes the host's network the default). hostname: node 0's
        # rendezvous binds its own name, and podman's CNI networks (Debian's default) have no DNS;
        # podman writes the hostname into the container's /etc/hosts. The other nodes reach node 0
        # by the IP the SDK reads from it.
        container = self._inner.client.containers.run(
            image=image, command=command, name=name, hostname=name, network=network_id, network_mode="bridge", working_dir=working_dir,
            environment=environment, labels=labels, volumes=volumes, detach=True, remove=False,
            user=f"{RUNTIME_UID}:{RUNTIME_UID}", read_only=True,
            mounts=[{"type": "tmpfs", "source": "tmpfs", "target": "/tmp", "size": "2g", "chown": True}],
            shm_size=2 * 1024 ** 3, **extra)
        return container.id


def _mlflow_mounts(environ: dict[str, str], parent_run_id: str = "") -> tuple[list[Path], list[Path]]:
    """Folders (and sqlite files) the nodes need to log under ``parent_run_id``: a file store, a
    sqlite database and the folder of the parent's experiment artifacts (where the child run and
    its logged models go). A loopback server cannot be reached from the job's private network, so
    it is refused with the fix."""
    uri = environ.get("MLFLOW_TRACKING_URI", "")
    parsed = urlparse(uri)
    folders: list[Path] = []
    files: list[Path] = []
    if parsed.scheme == "sqlite":  # sqlite:///relative.db or sqlite:////absolute.db
        database = Path(uri[len("sqlite:///"):]).resolve()
        files.append(database)
        folders.append(database.parent)
    elif parsed.scheme in ("", "file") and uri:
        folders.append(Path(parsed.path))
    elif parsed.hostname in ("127.0.0.1", "localhost", "::1"):
        raise TrainJobError(
            f"MLFLOW_TRACKING_URI={uri} is this machine's loopback, which the TrainJob's nodes (on their own "
            "podman network) cannot reach: use a sqlite:/// or file store, or serve MLflow on the host's "
            "address and name that, or train with --engine process")
    if parent_run_id and uri:
        import mlflow

        artifacts = urlparse(mlflow.MlflowClient(tracking_uri=uri).get_run(parent_run_id).info.artifact_uri or "")
        if artifacts.scheme in ("", "file"):  # <root>/<experiment id>/<run id>/artifacts
            folders.append(Path(artifacts.path).parents[1])
    return folders, files


@contextlib.contextmanager
def _podman_client(request: TrainJobRequest) -> Iterator[Any]:
    from kubeflow.trainer import ContainerBackendConfig, TrainerClient, TrainingRuntimeSource

    if not RUNTIME_FOLDER.is_dir():
        raise TrainJobError(f"the TrainingRuntime files are missing ({RUNTIME_FOLDER}): run from a vsbench checkout")
    with contextlib.ExitStack() as stack:
        url = existing_docker_api() or stack.enter_context(podman_service())
        config = ContainerBackendConfig(container_runtime="podman", container_host=url, pull_policy="Never",
                                        runtime_source=TrainingRuntimeSource(sources=[f"file://{RUNTIME_FOLDER}"]))
        try:
            client = TrainerClient(backend_config=config)
        except RuntimeError as exc:
            raise TrainJobError(f"no container engine answers at {url}: {str(exc).splitlines()[0]}; "
                                "train with --engine process instead") from None
        adapter = client.backend._adapter  # the SDK has no hook for volumes or users: see _PodLikeAdapter
        if not adapter.image_exists(request.node_image):
            raise TrainJobError(f"image {request.node_image} is not on this machine and the local TrainJob pulls "
                                "nothing: build it with `make image-cpu` (or images/build.sh --only cpu)")
        folders, files = _mlflow_mounts(dict(os.environ), request.parent_run_id)
        mounts = covering([*request.data_folders(), *folders])
        grant_step_access([p for p in mounts if not p.is_file()], files)
        client.backend._adapter = _PodLikeAdapter(adapter, mounts, request.gpus_per_node)
        yield client


def _kubernetes_client() -> Any:
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    namespace = os.environ.get("VSBENCH_NAMESPACE") or _pod_namespace()
    return TrainerClient(backend_config=KubernetesBackendConfig(namespace=namespace))


def _pod_namespace() -> str:
    path = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
    return path.read_text().strip() if path.exists() else "vsbench"


def _describe_api_error(exc: Exception, request: TrainJobRequest) -> str | None:
    """One line for the cluster's expected refusals: no Trainer v2, no runtime, no rights."""
    chain = [exc, exc.__cause__, exc.__context__]
    status = next((getattr(e, "status", None) for e in chain if getattr(e, "status", None)), None)
    text = " ".join(str(e) for e in chain if e is not None)
    if (status == 404 and "trainjobs" in text) or "the server could not find the requested resource" in text:
        return (f"Trainer v2 is not installed on this cluster (no CRD {TRAINJOB_CRD}): install Kubeflow Trainer "
                "v2.2+, or on a Training Operator v1 cluster train with `kubectl apply -k k8s/training` (PyTorchJob)")
    if status == 404 or ("not found" in text.lower() and request.runtime in text):
        return (f"TrainingRuntime {request.runtime} is not in the namespace: `kubectl apply -k k8s/training/trainjob`")
    if status == 403:
        return ("the pipeline's service account may not create TrainJobs: apply k8s/training/trainjob "
                "(its Role and RoleBinding for vsbench-pipeline-runner)")
    return None


# ---- submit, follow, wait ---------------------------------------------------------------------

def _stream(client: Any, name: str, step: str, echo: Callable[[str], None], stop: threading.Event) -> None:
    """One node's log lines, prefixed with the node, until it ends (best effort: logs never fail a job).

    The container backend's ``get_job_logs`` for "node-0" means every node, one after the other,
    so a container's own log is read by its name there; the Kubernetes backend yields nothing while
    the pod is pending, so the stream is retried until the node has started."""
    adapter = getattr(getattr(client, "backend", None), "_adapter", None)
    while not stop.is_set():
        received = False
        with contextlib.suppress(Exception):
            chunks = (adapter.container_logs(f"{name}-{step}", follow=True) if adapter is not None
                      else client.get_job_logs(name, follow=True, step=step))
            buffer = ""
            for chunk in chunks:
                received = True
                buffer += chunk
                *lines, buffer = buffer.split("\n")
                for line in lines:
                    echo(f"[{step}] {line}")
            if buffer:
                echo(f"[{step}] {buffer}")
        if received:
            return
        stop.wait(2)


def _node_failures(client: Any, name: str) -> list[str]:
    """The nodes that failed, with their exit codes where the backend knows them."""
    failed = []
    with contextlib.suppress(Exception):
        job = client.get_job(name)
        adapter = getattr(getattr(client, "backend", None), "_adapter", None)
        for step in job.steps:
            if step.status != "Failed":
                continue
            detail = ""
            if adapter is not None:
                with contextlib.suppress(Exception):
                    _status, code = adapter.container_status(step.pod_name)
                    detail = f" (exit code {code}{', killed' if code in (137, 143) else ''})"
            failed.append(f"{step.name}{detail}")
    return failed


def _wait(client: Any, name: str, request: TrainJobRequest, started: float,
          pending_reason: Callable[[], str]) -> float:
    """Poll until Complete (returns when every node first ran) or raise one line on failure."""
    all_running_at = 0.0
    while True:
        job = client.get_job(name)
        now = time.monotonic()
        if not all_running_at and job.steps and all(s.status in ("Running", "Succeeded", "Complete", "Failed")
                                                    for s in job.steps if s.name.startswith("node")):
            all_running_at = now
        if job.status == "Complete":
            return (all_running_at or now) - started
        if job.status == "Failed":
            nodes = _node_failures(client, name) or ["a node"]
            raise TrainJobError(
                f"TrainJob {name} failed: {', '.join(nodes)}; its checkpoints stay in {request.out / 'checkpoints' / request.task} "
                "and running the step again resumes from the last finished epoch")
        if not all_running_at and now - started > request.schedule_timeout_s:
            raise TrainJobError(f"TrainJob {name} did not start within {request.schedule_timeout_s} s: "
                                f"{pending_reason() or 'its nodes are still pending'}")
        if now - started > request.timeout_s:
            raise TrainJobError(f"TrainJob {name} did not finish within {request.timeout_s} s")
        time.sleep(2)


def _pending_reason(client: Any, name: str) -> Callable[[], str]:
    def reason() -> str:
        with contextlib.suppress(Exception):
            events = client.get_job_events(name)
            messages = [f"{e.involved_object_name}: {e.reason}: {e.message}" for e in events
                        if e.reason not in _PROGRESS_EVENTS]
            if messages:
                return messages[-1]
        return ""
    return reason


def _read_manifest(request: TrainJobRequest, name: str) -> dict[str, Any]:
    path = request.out / f"train_{request.task}.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        raise TrainJobError(f"TrainJob {name} finished but its rank 0 wrote no readable {path}") from None
    if manifest.get("trainjob") != name:
        raise TrainJobError(f"{path} is from another training (trainjob {manifest.get('trainjob')!r}, expected {name}): "
                            "run the step again")
    return manifest


def run_trainjob(request: TrainJobRequest, engine: str = "auto",
                 echo: Callable[[str], None] = print) -> TrainJobOutcome:
    """Submit the TrainJob, stream every node's log through ``echo``, wait, and return rank 0's manifest."""
    sdk_logger = logging.getLogger("kubeflow")
    level = sdk_logger.level
    sdk_logger.setLevel(logging.CRITICAL)  # the SDK logs its failures with tracebacks; ours is one line
    try:
        return _run_trainjob(request, engine, echo)
    finally:
        sdk_logger.setLevel(level)


def _run_trainjob(request: TrainJobRequest, engine: str, echo: Callable[[str], None]) -> TrainJobOutcome:
    engine = choose_engine(engine)
    name = job_name(request.task)
    for folder, made_by in ((request.tasks, "vsbench abid prepare"), (request.images, "vsbench abid resize")):
        if not folder.is_dir():
            raise TrainJobError(f"{folder}: no such folder; it is what `{made_by}` writes")
    request.out.mkdir(parents=True, exist_ok=True)
    echo(f"trainjob {name}: {request.task} on {request.nodes} node(s) x {max(1, request.gpus_per_node)} "
         f"process(es), engine {engine}, image {request.node_image}")
    started = time.monotonic()
    if engine == "process":
        startup = _run_processes(request, name, echo)
        return TrainJobOutcome(name, engine, request.nodes, request.processes, startup, time.monotonic() - started,
                               _read_manifest(request, name))
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(_podman_client(request)) if engine == "podman" else _kubernetes_client()
        trainer = _custom_trainer(request, name, python="python", engine=engine)
        from kubeflow.trainer.options import Name

        try:
            client.train(runtime=client.get_runtime(request.runtime), trainer=trainer, options=[Name(name=name)])
        except TrainJobError:
            raise
        except Exception as exc:  # noqa: BLE001 - the SDK and the Kubernetes client raise many kinds
            described = _describe_api_error(exc, request)
            if described is None:
                raise TrainJobError(f"TrainJob {name} could not be submitted: {str(exc).splitlines()[0]}") from exc
            raise TrainJobError(described) from None
        stop = threading.Event()
        streams = [threading.Thread(target=_stream, args=(client, name, f"node-{rank}", echo, stop), daemon=True,
                                    name=f"trainjob-log-{rank}") for rank in range(request.nodes)]
        try:
            time.sleep(1)
            for thread in streams:
                thread.start()
            startup = _wait(client, name, request, started, _pending_reason(client, name))
            for thread in streams:
                thread.join(timeout=30)
        finally:
            stop.set()
            if engine == "podman":
                with contextlib.suppress(Exception):
                    client.delete_job(name)
        return TrainJobOutcome(name, engine, request.nodes, request.processes, startup, time.monotonic() - started,
                               _read_manifest(request, name))


def _custom_trainer(request: TrainJobRequest, name: str, python: str, engine: str) -> Any:
    """The SDK's CustomTrainer for the job. On a cluster the nodes take their settings from the
    runtime (the vsbench-config ConfigMap, Secrets): nothing of this pod's environment is written
    into the TrainJob, whose spec anyone who may read TrainJobs can read. Here the nodes get the
    settings the container runner gives a step."""
    from kubeflow.trainer import CustomTrainer

    resources: dict[str, Any] = {"gpu": request.gpus_per_node} if request.gpus_per_node else {}
    passed = {} if engine == "kubernetes" else {**_shared_cores(request), **step_environment()}
    env = {**passed, JOB_ENV: name}
    return CustomTrainer(func=vsbench_train_node, func_args={"argv": request.node_argv(), "python": python},
                         num_nodes=request.nodes, resources_per_node=resources or None, env=env)


def _shared_cores(request: TrainJobRequest) -> dict[str, str]:
    """Nodes on one machine share its cores: each node's process gets its share of threads (torchrun
    sets OMP_NUM_THREADS=1 only for several processes per node; one process per node would run as
    many threads as the machine has cores, and N nodes would oversubscribe it N times)."""
    if "OMP_NUM_THREADS" in os.environ:
        return {"OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"]}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // request.processes))}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _run_processes(request: TrainJobRequest, name: str, echo: Callable[[str], None]) -> float:
    """The nodes as torchrun processes here: the container backend's rendezvous, without containers."""
    port = _free_port()
    env = {**os.environ, **_shared_cores(request), JOB_ENV: name}
    nproc = max(1, request.gpus_per_node)
    nodes: list[subprocess.Popen[str]] = []
    for rank in range(request.nodes):
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={nproc}",
                   f"--nnodes={request.nodes}", f"--node-rank={rank}", "--rdzv-backend=static",
                   f"--rdzv-endpoint=127.0.0.1:{port}", "--max-restarts=0", "-m", "vsbench", *request.node_argv()]
        nodes.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env))
    readers = [threading.Thread(target=_pipe, args=(node, f"node-{rank}", echo), daemon=True)
               for rank, node in enumerate(nodes)]
    for reader in readers:
        reader.start()
    codes = [node.wait() for node in nodes]
    for reader in readers:
        reader.join(timeout=10)
    failed = [f"node-{rank} (exit code {code})" for rank, code in enumerate(codes) if code]
    if failed:
        raise TrainJobError(f"TrainJob {name} failed: {', '.join(failed)}; its checkpoints stay in "
                            f"{request.out / 'checkpoints' / request.task} and running the step again resumes from the last finished epoch")
    return 0.0


def _pipe(process: subprocess.Popen[str], prefix: str, echo: Callable[[str], None]) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        echo(f"[{prefix}] {line.rstrip()}")
