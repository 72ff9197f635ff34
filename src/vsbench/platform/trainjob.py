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
  the data folders at their own paths (tasks and images read-only), the settings from the
  environment, a read-only root filesystem with a tmpfs on /tmp, no capabilities. Its user is
  this machine's user (uid and gid; ``--userns=keep-id`` on a rootless engine), so the nodes
  write the run folder and the MLflow store as their owner and no host folder changes mode or group.
* ``process``: where no container engine exists, the nodes are torchrun processes on this machine
  with the same static rendezvous the container backend uses. (The SDK's own local-process
  backend builds a fresh virtual environment per job and pip-installs torch into it, which an
  offline machine cannot do and which would train with another torch than the one tested.)

Before anything is submitted, :func:`check_request` makes every path absolute and checks it as
the nodes will see it (folders there, readable, the run folder writable, podman's mounts), one line
per problem. A failed job fails the caller with one line naming the node that failed first and its
own error, and where every node's log is (``<out>/logs/<job>/``); the checkpoints stay, and the
next submission resumes from the last finished epoch, as ``vsbench abid train`` does.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from vsbench.platform.containers import (
    ContainerPlan,
    existing_docker_api,
    podman_service,
    step_environment,
)
from vsbench.platform.trainjob_logs import NodeFailure, NodeLogs, failure_line
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


class TrainJobInputError(ValueError):
    """What the nodes would trip on, found before anything is submitted: one line per problem
    (``problems``), so the user fixes them all at once (a ValueError: the CLI exits 2)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


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

    def written_folders(self) -> list[Path]:
        """What the nodes write: the runs folder whole, since the siamese network may start from the
        counting run beside its own (profile field siamese_trunk_init)."""
        return [self.out.parent]

    def read_folders(self) -> list[Path]:
        """What the nodes only read (mounted read-only on the container engine)."""
        return [self.tasks, self.images]

    def logs_folder(self, name: str) -> Path:
        """Where every node's whole log of job ``name`` is written (the terminal shows it too)."""
        return self.out / "logs" / name


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


# ---- before submitting: every path, as the nodes will see it -----------------------------------

# The image's own folders (and the kernel's): a data mount at the same path would hide them.
_SYSTEM_FOLDERS = tuple(Path(p) for p in ("/bin", "/dev", "/etc", "/lib", "/lib64", "/opt", "/proc", "/sbin",
                                          "/sys", "/usr"))
_READ, _WRITE, _SEARCH = os.R_OK, os.W_OK, os.X_OK
_WALK_LIMIT = 2000  # folders of an existing --out looked at (checkpoints/, logs/...): a bound, not a scan


@dataclass(frozen=True)
class NodeUser:
    """Who the nodes are to this machine's files. ``uid`` None: this process itself (the process
    engine: its groups and capabilities too). Otherwise a container user with exactly this uid and
    gid, no other group and no capability (as the runtime's pods: capabilities dropped), whose
    access the mode bits alone decide."""

    uid: int | None = None
    gid: int | None = None

    def may(self, path: Path, want: int) -> bool:
        if self.uid is None:
            return os.access(path, want)
        info = path.stat()
        shift = 6 if info.st_uid == self.uid else 3 if info.st_gid == self.gid else 0
        return (info.st_mode >> shift) & want == want

    def __str__(self) -> str:
        return "you" if self.uid is None else f"uid {self.uid} gid {self.gid}, no capabilities"


def node_user(engine: str) -> NodeUser | None:
    """The nodes' user on this machine's files: on podman this machine's user (its uid and gid; a
    rootless engine maps them with --userns=keep-id), so nothing of the host needs to change hands;
    as processes this process; on a cluster the runtime's (None: its volume is the cluster's)."""
    if engine == "podman":
        return NodeUser(os.getuid(), os.getgid())
    return NodeUser() if engine == "process" else None


def check_request(request: TrainJobRequest, engine: str, environ: dict[str, str] | None = None) -> TrainJobRequest:
    """The request with absolute paths (symlinks resolved: a container mounts what a path points at,
    at that path), once every check that can be made before submitting passes; else
    :class:`TrainJobInputError` with one line per problem. It creates and changes nothing."""
    tasks, images, out = (Path(p).expanduser().resolve() for p in (request.tasks, request.images, request.out))
    user = node_user(engine)
    problems: list[str] = []
    for option, folder, made_by in (("--tasks", tasks, "vsbench abid prepare"), ("--images", images, "vsbench abid resize")):
        if not folder.is_dir():
            problems.append(f"{option} {folder}: {'not a folder' if folder.exists() else 'no such folder'}; "
                            f"it is what `{made_by}` writes")
            continue
        if user is None:  # a cluster's volume: its pods' rights are the cluster's to give
            continue
        unreadable = [p for p in (folder, *(sorted(folder.iterdir()) if option == "--tasks" else ()))
                      if not user.may(p, _READ | (_SEARCH if p.is_dir() else 0))]
        if unreadable:
            problems.append(f"{option} {unreadable[0]}: the nodes ({user}) cannot read it"
                            f"{f' (nor {len(unreadable) - 1} more in it)' if len(unreadable) > 1 else ''}: "
                            f"make it readable (chmod -R a+rX {folder})")
    problems += _out_problems(out, user)
    if engine == "podman":
        problems += _mount_problems(tasks, images, out, user, os.environ if environ is None else environ)
    if problems:
        raise TrainJobInputError(problems)
    return dataclasses.replace(request, tasks=tasks, images=images, out=out)


def _out_problems(out: Path, user: NodeUser | None) -> list[str]:
    """--out: a folder this process may create, or one whose folders the nodes may all write."""
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not existing.is_dir():
        return [f"--out {out}: {existing} is a file, not a folder: choose a folder path"]
    if existing != out:
        if not os.access(existing, _WRITE | _SEARCH):
            return [f"--out {out}: cannot be created, {existing} is not writable by you: choose a folder you may write"]
        return []
    if user is None:
        return []
    for count, (current, folders, _files) in enumerate(os.walk(out)):
        if count >= _WALK_LIMIT:
            break
        if not user.may(Path(current), _READ | _WRITE | _SEARCH):
            return [f"--out {out}: {current} is not writable by the nodes ({user}); an earlier run may have made "
                    f"it another user's: `chown -R {user.uid if user.uid is not None else os.getuid()}:"
                    f"{user.gid if user.gid is not None else os.getgid()} {out}` or choose a new --out"]
        folders.sort()
    return []


def _mount_problems(tasks: Path, images: Path, out: Path, user: NodeUser | None,
                    environ: dict[str, str] | os._Environ[str]) -> list[str]:
    """What the podman engine mounts (each at its own path): never over the image's system folders,
    and the MLflow store reachable and writable by the nodes."""
    from vsbench.tracking.config import tracking_disabled

    problems: list[str] = []
    store: list[Path] = []
    files: list[Path] = []
    if not tracking_disabled():
        try:
            store, files = _mlflow_mounts(dict(environ))
        except TrainJobError as exc:
            problems.append(str(exc))
    for label, mount in (("--tasks", tasks), ("--images", images), (f"--out {out}: its runs folder", out.parent),
                         *(("the MLflow store", folder) for folder in store)):
        if mount == Path("/") or any(mount == s or s in mount.parents for s in _SYSTEM_FOLDERS):
            problems.append(f"{label} {mount} would be mounted at its own path on each node, over the image's "
                            f"{'root' if mount == Path('/') else 'own ' + str(mount)}: keep data, runs and the MLflow "
                            "store in a folder of their own (e.g. /data/runs/counting, or under your home)")
    for path in (*store, *files):
        if user is not None and path.exists() and not user.may(path, _READ | _WRITE | (_SEARCH if path.is_dir() else 0)):
            problems.append(f"the MLflow store {path} is not writable by the nodes ({user}): make it yours, or "
                            "use another MLFLOW_TRACKING_URI, or train with --no-track")
    return problems


# ---- the container backend's nodes, made like the TrainingRuntime's pods ----------------------

class _PodLikeAdapter:
    """The SDK's podman adapter, with what the vsbench TrainingRuntime gives each node on a cluster.

    The SDK's container backend mounts only its work folder and passes only the trainer's env;
    vsbench's steps read and write the data root and log to MLflow, so every node container also
    gets the data folders at their own paths (what it only reads, read-only), a read-only root
    filesystem with /tmp in memory, no capabilities and no privilege escalation (the runtime's
    securityContext), and the GPUs through CDI when asked for. Its user is this machine's user
    (``user``, mapped by --userns=keep-id on a rootless engine): where a pod has fsGroup to make
    a volume its own, a local node then writes the host's folders as their owner, and the host's
    modes and groups stay as they are."""

    def __init__(self, inner: Any, plan: ContainerPlan, gpus: int, user: NodeUser, rootless: bool) -> None:
        self._inner = inner
        self._plan = plan
        self._gpus = gpus
        self._user = user
        self._rootless = rootless

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def run_arguments(self, volumes: dict[str, dict[str, str]]) -> dict[str, Any]:
        """The container's mounts, user and security settings (what ``podman run`` would be told)."""
        volumes = {**volumes, **{str(path): {"bind": str(path), "mode": "rw"} for path in self._plan.mounts()},
                   **{str(path): {"bind": str(path), "mode": "ro"} for path in self._plan.read_only_mounts()}}
        extra: dict[str, Any] = {"userns_mode": "keep-id"} if self._rootless else {}
        if self._gpus:
            extra["devices"] = ["nvidia.com/gpu=all"]
        return {"volumes": volumes, "user": f"{self._user.uid}:{self._user.gid}", "read_only": True,
                "cap_drop": ["ALL"], "no_new_privileges": True,
                "mounts": [{"type": "tmpfs", "source": "tmpfs", "target": "/tmp", "size": "2g", "chown": True}],
                "shm_size": 2 * 1024 ** 3, **extra}

    def create_and_start_container(self, image: str, command: list[str], name: str, network_id: str,
                                   environment: dict[str, str], labels: dict[str, str],
                                   volumes: dict[str, dict[str, str]], working_dir: str) -> str:
        # network_mode "bridge": the job's own network (podman-py passes the network name alone, and
        # vsbench's containers.conf makes the host's network the default). hostname: node 0's
        # rendezvous binds its own name, and podman's CNI networks (Debian's default) have no DNS;
        # podman writes the hostname into the container's /etc/hosts. The other nodes reach node 0
        # by the IP the SDK reads from it.
        container = self._inner.client.containers.run(
            image=image, command=command, name=name, hostname=name, network=network_id, network_mode="bridge",
            working_dir=working_dir, environment=environment, labels=labels, detach=True, remove=False,
            **self.run_arguments(volumes))
        return container.id


def _rootless(podman: Any) -> bool:
    """Whether the engine runs rootless (then the host's uid is mapped in with keep-id); asked of
    the engine, since a rootful socket may serve a user who is not root."""
    with contextlib.suppress(Exception):
        return bool(podman.info()["host"]["security"]["rootless"])
    return os.geteuid() != 0


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
        from vsbench.io.store import store_client

        # bounded (issue 54): a store down is one line naming it, not minutes of MLflow's retries
        value = store_client(uri=uri).get_run(parent_run_id).info.artifact_uri or ""
        artifacts = urlparse(value)
        if artifacts.scheme in ("", "file"):  # <root>/<experiment id>/<run id>/artifacts
            folders.append(experiment_folder(parent_run_id, value, Path(artifacts.path)))
    return folders, files


def experiment_folder(run_id: str, value: str, path: Path) -> Path:
    """The experiment's artifact folder that a local run's ``artifact_uri`` (``value``, its path
    ``path``) lies in: ``<experiment folder>/<run id>/artifacts``, as MLflow lays it out. The value is
    read from the store, and the folder is mounted writable into the nodes: a path of another shape
    (too short to hold those parts, relative, or with the folder at ``/``) is one line naming the run
    and the value, never an ``IndexError`` or a mount of the machine's root (issue 54)."""
    parts = path.parts
    if not (path.is_absolute() and len(parts) >= 4 and parts[-1] == "artifacts" and parts[-2] == run_id):
        raise TrainJobError(f"run {run_id}: its artifact_uri {value[:200]!r} is not <experiment folder>/{run_id}/"
                            "artifacts, the folder the TrainJob's nodes log into; log to an experiment whose artifact "
                            "location is a local folder (a new one takes VSBENCH_MLFLOW_ARTIFACT_LOCATION)")
    return path.parents[1]


@contextlib.contextmanager
def _podman_client(request: TrainJobRequest, open_parent: Callable[[], str] | None) -> Iterator[tuple[Any, TrainJobRequest]]:
    """The SDK's client on podman with the pod-like adapter, and the request with its parent run
    (opened here, once the engine answers and has the image: a job that cannot start leaves no run)."""
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
        request = _with_parent(request, open_parent)
        folders, files = _mlflow_mounts(dict(os.environ), request.parent_run_id)
        for folder in [*request.written_folders(), *folders]:  # a mount's source must exist; new folders are yours
            folder.mkdir(parents=True, exist_ok=True)
        plan = ContainerPlan(request.node_image, folders=(*request.written_folders(), *folders), files=tuple(files),
                             read_only=tuple(request.read_folders()))
        user = node_user("podman")
        assert user is not None
        client.backend._adapter = _PodLikeAdapter(adapter, plan, request.gpus_per_node, user,
                                                  _rootless(adapter.client))
        yield client, request


def _with_parent(request: TrainJobRequest, open_parent: Callable[[], str] | None) -> TrainJobRequest:
    """The request under the run ``open_parent`` makes (when none was given): called only once the
    job is about to be submitted, so a check that fails leaves no MLflow run behind."""
    if request.parent_run_id or open_parent is None:
        return request
    return dataclasses.replace(request, parent_run_id=open_parent())


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

def _stream(client: Any, name: str, step: str, logs: NodeLogs, stop: threading.Event) -> None:
    """One node's log lines into ``logs``, until it ends (best effort: logs never fail a job).

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
                    logs.line(step, line)
            if buffer:
                logs.line(step, buffer)
        if received:
            return
        stop.wait(2)


def _finished_at(text: str) -> float | None:
    """An engine's end time (RFC 3339, nanoseconds and all) as seconds, or None."""
    text = (text or "").strip().replace("Z", "+00:00")
    if not text or text.startswith("0001-"):
        return None
    head, dot, rest = text.partition(".")
    if dot:  # at most the microseconds fromisoformat reads; the zone kept
        digits = "".join(c for c in rest if c.isdigit())
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{zone}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _node_failures(client: Any, name: str) -> list[NodeFailure]:
    """The nodes that failed, with their exit codes and end times where the backend knows them."""
    failed = []
    with contextlib.suppress(Exception):
        job = client.get_job(name)
        adapter = getattr(getattr(client, "backend", None), "_adapter", None)
        for step in job.steps:
            if step.status != "Failed":
                continue
            code = ended = None
            if adapter is not None:
                with contextlib.suppress(Exception):
                    _status, code = adapter.container_status(step.pod_name)
                with contextlib.suppress(Exception):
                    ended = _finished_at(adapter.client.containers.get(step.pod_name).attrs["State"]["FinishedAt"])
            failed.append(NodeFailure(step.name, code, ended))
    return failed


def _resume_advice(request: TrainJobRequest) -> str:
    """What a re-run resumes from: the checkpoints when an epoch finished, else nothing."""
    checkpoints = request.out / "checkpoints" / request.task
    if (checkpoints / "last.pt").is_file():
        return f"its checkpoints stay in {checkpoints} and running the step again resumes from the last finished epoch"
    return "no epoch had finished, so a re-run starts from the beginning"


def _wait(client: Any, name: str, request: TrainJobRequest, started: float,
          pending_reason: Callable[[], str], logs: NodeLogs, streams: list[threading.Thread]) -> float:
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
            failures = _node_failures(client, name)
            for failure in failures:  # a failed node's log is over: read to its end, for its own error
                rank = failure.step.removeprefix("node-")
                if rank.isdigit() and int(rank) < len(streams) and streams[int(rank)].is_alive():
                    streams[int(rank)].join(timeout=10)
            raise TrainJobError(failure_line(name, failures, logs, _resume_advice(request)))
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


def run_trainjob(request: TrainJobRequest, engine: str = "auto", echo: Callable[[str], None] = print,
                 open_parent: Callable[[], str] | None = None) -> TrainJobOutcome:
    """Check the request (:func:`check_request`), submit the TrainJob, stream every node's log
    through ``echo`` (and into a file per node), wait, and return rank 0's manifest.

    ``open_parent``: makes the MLflow parent run the job logs under, when the request names none;
    called only when the job is about to be submitted."""
    sdk_logger = logging.getLogger("kubeflow")
    level = sdk_logger.level
    sdk_logger.setLevel(logging.CRITICAL)  # the SDK logs its failures with tracebacks; ours is one line
    try:
        return _run_trainjob(request, engine, echo, open_parent)
    finally:
        sdk_logger.setLevel(level)


def _run_trainjob(request: TrainJobRequest, engine: str, echo: Callable[[str], None],
                  open_parent: Callable[[], str] | None) -> TrainJobOutcome:
    engine = choose_engine(engine)
    request = check_request(request, engine)
    name = job_name(request.task)
    request.out.mkdir(parents=True, exist_ok=True)
    echo(f"trainjob {name}: {request.task} on {request.nodes} node(s) x {max(1, request.gpus_per_node)} "
         f"process(es), engine {engine}, image {request.node_image}")
    started = time.monotonic()
    if engine == "process":
        request = _with_parent(request, open_parent)
        with NodeLogs(request.logs_folder(name), request.nodes, echo) as logs:
            startup = _run_processes(request, name, logs)
        return TrainJobOutcome(name, engine, request.nodes, request.processes, startup, time.monotonic() - started,
                               _read_manifest(request, name))
    with contextlib.ExitStack() as stack:
        if engine == "podman":
            client, request = stack.enter_context(_podman_client(request, open_parent))
        else:
            client = _kubernetes_client()
            request = _with_parent(request, open_parent)
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
        logs = stack.enter_context(NodeLogs(request.logs_folder(name), request.nodes, echo))
        stop = threading.Event()
        streams = [threading.Thread(target=_stream, args=(client, name, f"node-{rank}", logs, stop), daemon=True,
                                    name=f"trainjob-log-{rank}") for rank in range(request.nodes)]
        try:
            time.sleep(1)
            for thread in streams:
                thread.start()
            startup = _wait(client, name, request, started, _pending_reason(client, name), logs, streams)
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


def _run_processes(request: TrainJobRequest, name: str, logs: NodeLogs) -> float:
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
    ended: dict[str, float] = {}
    readers = [threading.Thread(target=_pipe, args=(node, f"node-{rank}", logs, ended), daemon=True)
               for rank, node in enumerate(nodes)]
    for reader in readers:
        reader.start()
    codes = [node.wait() for node in nodes]
    for reader in readers:
        reader.join(timeout=10)
    failed = [NodeFailure(f"node-{rank}", code, ended.get(f"node-{rank}")) for rank, code in enumerate(codes) if code]
    if failed:
        raise TrainJobError(failure_line(name, failed, logs, _resume_advice(request)))
    return 0.0


def _pipe(process: subprocess.Popen[str], step: str, logs: NodeLogs, ended: dict[str, float]) -> None:
    """A node's output into ``logs`` until it ends; then when it ended (which node failed first)."""
    assert process.stdout is not None
    for line in process.stdout:
        logs.line(step, line.rstrip())
    process.wait()
    ended[step] = time.monotonic()
