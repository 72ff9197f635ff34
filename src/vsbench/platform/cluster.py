"""Cluster settings compiled into the pipelines: GPUs, resources, node pools, secrets, the data volume,
retries. Local runs (kfp.local) compile without them: kfp.local ignores Kubernetes settings anyway.

The defaults match k8s/ (PVC ``vsbench-data`` at ``/data``, ConfigMap ``vsbench-config``, Secrets
``vsbench-s3`` and ``vsbench-cache``); ``vsbench compile --cluster-config FILE.yaml`` overrides any field.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["gpu", "cpu", "light", "fill"]


class Toleration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    key: str
    operator: Literal["Equal", "Exists"] = "Exists"
    value: str | None = None
    effect: Literal["NoExecute", "NoSchedule", "PreferNoSchedule"] | None = "NoSchedule"


class Resources(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cpu_request: str
    cpu_limit: str
    memory_request: str
    memory_limit: str


class ClusterSettings(BaseModel):
    """Everything a platform team may need to change, validated once (a typo is an error)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    data_pvc: str = "vsbench-data"
    data_mount: str = "/data"
    config_map: str = "vsbench-config"
    config_map_env: dict[str, str] = Field(default_factory=lambda: {
        "MLFLOW_TRACKING_URI": "MLFLOW_TRACKING_URI", "AWS_DEFAULT_REGION": "AWS_DEFAULT_REGION",
        # Edited in the ConfigMap, then "Retry": a step stopped by the failure rate resumes and passes.
        "VSBENCH_MAX_FAILURE_RATE": "VSBENCH_MAX_FAILURE_RATE"})
    s3_secret: str = "vsbench-s3"
    s3_secret_env: dict[str, str] = Field(default_factory=lambda: {
        "AWS_ACCESS_KEY_ID": "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY": "AWS_SECRET_ACCESS_KEY"})
    # The embedding cache's signing key (vsbench.io.cache_secret): every pod signs and verifies the
    # shared cache's chunks with it, so a chunk written by anyone without it is embedded again (issue 54).
    cache_secret: str = "vsbench-cache"
    cache_secret_env: dict[str, str] = Field(default_factory=lambda: {"VSBENCH_CACHE_SECRET": "VSBENCH_CACHE_SECRET"})
    gpu_resource: str = "nvidia.com/gpu"
    gpus_per_step: int = Field(default=1, ge=1)
    gpu_node_selector: dict[str, str] = Field(default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    gpu_tolerations: list[Toleration] = Field(default_factory=lambda: [Toleration(key="nvidia.com/gpu")])
    resources: dict[Role, Resources] = Field(default_factory=lambda: {
        "gpu": Resources(cpu_request="8", cpu_limit="16", memory_request="32Gi", memory_limit="64Gi"),
        "cpu": Resources(cpu_request="4", cpu_limit="8", memory_request="8Gi", memory_limit="16Gi"),
        "light": Resources(cpu_request="500m", cpu_limit="2", memory_request="1Gi", memory_limit="4Gi"),
        # One index fill task holds one reference shard's codes and one block of rows: size it by the
        # shard (docs/scale.md "Galleries past one node": ~1.3 GB at 1.25 M x 256-d Flat).
        "fill": Resources(cpu_request="4", cpu_limit="16", memory_request="8Gi", memory_limit="32Gi"),
    })
    # Fill tasks encode on a GPU when faiss-gpu is in the image (IVF assignment is most of a fill's
    # work); false runs them on CPU nodes, with the "fill" resources and no GPU request.
    fill_gpu: bool = True
    tmp_size: str = "8Gi"  # emptyDir at /tmp: the images run with a read-only root filesystem
    # Every step's container: runAsNonRoot always; the user and group of the images (UID/GID 10001,
    # images/Dockerfile.*). Set them to null where the platform assigns its own (OpenShift).
    run_as_user: int | None = Field(default=10001, ge=1)
    run_as_group: int | None = Field(default=10001, ge=0)

    @classmethod
    def load(cls, path: Path | None) -> ClusterSettings:
        from vsbench.io.inputs import read_yaml

        if path is None:
            return cls()
        data = read_yaml(path) or {}
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
        return cls(**data)


# Retries chosen per step: steps that talk to the network or a GPU node (preemptible) retry and
# resume from their own checkpoints/manifests; pure computations on local files do not.
RETRIES: dict[str, int] = {"download": 3, "resize": 2, "train": 2, "embed": 2, "index": 1, "fill": 2, "search": 2,
                           "score": 1, "default": 0}


def apply(task, role: Role, settings: ClusterSettings | None, retries: int = 0):
    """Attach the cluster settings of ``role`` to a pipeline task; a no-op without settings."""
    if settings is None:
        return task
    from kfp import kubernetes

    limits = settings.resources.get(role) or ClusterSettings().resources[role]  # a config that predates a role
    gpu = role == "gpu" or (role == "fill" and settings.fill_gpu)
    with _setters_without_stack_walk():
        task.set_cpu_request(limits.cpu_request).set_cpu_limit(limits.cpu_limit)
        task.set_memory_request(limits.memory_request).set_memory_limit(limits.memory_limit)
        if gpu:
            task.set_accelerator_type(settings.gpu_resource).set_accelerator_limit(settings.gpus_per_step)
    if gpu:
        for label, value in settings.gpu_node_selector.items():
            kubernetes.add_node_selector(task, label, value)
        for toleration in settings.gpu_tolerations:
            kubernetes.add_toleration(task, key=toleration.key, operator=toleration.operator,
                                      value=toleration.value, effect=toleration.effect)
    kubernetes.mount_pvc(task, pvc_name=settings.data_pvc, mount_path=settings.data_mount)
    kubernetes.empty_dir_mount(task, volume_name="tmp", mount_path="/tmp", size_limit=settings.tmp_size)
    kubernetes.use_config_map_as_env(task, config_map_name=settings.config_map,
                                     config_map_key_to_env=settings.config_map_env)
    kubernetes.use_secret_as_env(task, secret_name=settings.s3_secret, secret_key_to_env=settings.s3_secret_env,
                                 optional=True)  # optional: the public ABID bucket needs no credentials
    # optional too: without it a pod signs with a key of its own (a file under /tmp), so the shared cache
    # is never believed across pods (safe, slower) and the step says so in one line (k8s/README.md)
    kubernetes.use_secret_as_env(task, secret_name=settings.cache_secret, secret_key_to_env=settings.cache_secret_env,
                                 optional=True)
    # kfp-kubernetes sets the identity fields only; the KFP backend's compiler adds
    # allowPrivilegeEscalation=false, capabilities drop ALL and the RuntimeDefault seccomp profile to
    # every step's container, and the namespace's Pod Security "restricted" level refuses any pod
    # without them (k8s/base/namespace.yaml, docs/reliability.md "Supply chain").
    kubernetes.set_security_context(task, run_as_user=settings.run_as_user, run_as_group=settings.run_as_group,
                                    run_as_non_root=True)
    if retries:
        task.set_retry(num_retries=retries, backoff_duration="60s", backoff_factor=2.0, backoff_max_duration="3600s")
    return task


@contextlib.contextmanager
def _setters_without_stack_walk() -> Iterator[None]:
    """kfp's resource setters (``set_cpu_request`` ...) check that the task is a container step, and to
    name themselves in that check's error they call ``inspect.stack()``, which reads the source file of
    every frame on the stack. That was 4.6 of 8.2 s of ``vsbench compile`` (six setters for each of
    about 80 steps), and over 30 s under pytest, whose stack is deeper. Here the same check names the
    setter from its own frame; outside this block kfp is untouched. A kfp without the method (renamed
    in a later release) keeps its own."""
    from kfp.dsl import pipeline_task

    task_class = pipeline_task.PipelineTask
    original = getattr(task_class, "_ensure_container_spec_exists", None)
    if original is None:
        yield
        return

    def ensure_container_spec_exists(self) -> None:
        if self.container_spec is None:
            caller = sys._getframe(1).f_code.co_name
            raise ValueError(f"{caller} can only be used on single-step components, not pipelines used as "
                             "components, or special components like importers.")

    task_class._ensure_container_spec_exists = ensure_container_spec_exists
    try:
        yield
    finally:
        task_class._ensure_container_spec_exists = original
