"""k8s/training: the PyTorchJobs of distributed training render with ``kubectl kustomize``; their
pod templates validate offline as Kubernetes 1.30 PodTemplates (kubernetes-validate knows no
PyTorchJob CRD), are locked down like every other vsbench pod, skip the Istio sidecar, mount the
data volume, run torchrun with the operator's variables, and use the CUDA image of images.py.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from tests.unit.test_k8s import (
    KUBECTL,
    KUBERNETES_VERSION,
    NAMESPACE,
    RUNTIME_UID,
    assert_valid,
    component_image,
    containers,
    default_images,
    render,
)

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for `kubectl kustomize`)")

JOBS = {"vsbench-abid-counting": "counting", "vsbench-abid-siamese": "siamese"}
REPLICA_TYPES = ("Master", "Worker")


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return render("training")


def jobs(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "PyTorchJob"}


def templates(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{name}/{kind}", job["spec"]["pytorchReplicaSpecs"][kind]["template"])
            for name, job in jobs(docs).items() for kind in REPLICA_TYPES]


def as_pod_template(where: str, template: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodTemplate",
            "metadata": {"name": where.replace("/", "-").lower(), "namespace": NAMESPACE}, "template": template}


def test_the_training_kustomization_holds_both_jobs_in_the_namespace(docs) -> None:
    assert set(jobs(docs)) == set(JOBS)
    for job in jobs(docs).values():
        assert job["apiVersion"] == "kubeflow.org/v1"
        specs = job["spec"]["pytorchReplicaSpecs"]
        assert set(specs) == set(REPLICA_TYPES) and specs["Master"]["replicas"] == 1 and specs["Worker"]["replicas"] >= 1
        assert job["spec"]["runPolicy"]["backoffLimit"] == 0, "a failed run is resubmitted and resumes"
    for doc in docs:
        assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]["name"]


def test_every_pod_template_and_the_other_documents_validate_strictly_offline(docs) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    checked = [as_pod_template(where, template) for where, template in templates(docs)]
    checked += [d for d in docs if d["kind"] != "PyTorchJob"]
    assert len(checked) == 2 * len(JOBS) + 2
    for doc in checked:
        assert_valid(kubernetes_validate, doc)


def test_pod_template_validation_catches_a_typo(docs) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    where, template = templates(docs)[0]
    broken = copy.deepcopy(template)
    broken["spec"]["containers"][0]["volumeMount"] = []  # a typo of volumeMounts
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(as_pod_template(where, broken), KUBERNETES_VERSION, strict=True)


def test_training_pods_are_locked_down_and_skip_the_istio_sidecar(docs) -> None:
    for where, template in templates(docs):
        assert template["metadata"]["annotations"]["sidecar.istio.io/inject"] == "false", where
        pod = template["spec"]
        assert pod["automountServiceAccountToken"] is False and pod["serviceAccountName"] == "vsbench-trainer", where
        assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault", where
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == RUNTIME_UID
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in containers(pod):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
            assert volumes[mounts["/data"]]["persistentVolumeClaim"]["claimName"] == "vsbench-data", where
            assert "emptyDir" in volumes[mounts["/tmp"]], where
            assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory", where
            assert {"cpu", "memory", "nvidia.com/gpu"} <= set(container["resources"]["requests"]), where
            assert "memory" in container["resources"]["limits"], where
    account = [d for d in docs if d["kind"] == "ServiceAccount"]
    assert [a["metadata"]["name"] for a in account] == ["vsbench-trainer"]
    assert account[0]["automountServiceAccountToken"] is False


def test_each_pod_runs_torchrun_with_the_operators_variables_and_one_gpu_per_rank(docs) -> None:
    for name, job in jobs(docs).items():
        nproc = int(job["spec"]["nprocPerNode"])
        for kind in REPLICA_TYPES:
            (container,) = job["spec"]["pytorchReplicaSpecs"][kind]["template"]["spec"]["containers"]
            assert container["name"] == "pytorch", "the operator adds MASTER_ADDR etc. to this container only"
            assert container["command"] == ["python", "-m", "torch.distributed.run"]
            args = container["args"]
            for flag, variable in [("--nnodes", "PET_NNODES"), ("--nproc-per-node", "PET_NPROC_PER_NODE"),
                                   ("--node-rank", "PET_NODE_RANK"), ("--master-addr", "MASTER_ADDR"),
                                   ("--master-port", "MASTER_PORT")]:
                assert f"{flag}=$({variable})" in args, (name, flag)
            program = args[args.index("-m"):]
            assert program[:5] == ["-m", "vsbench", "abid", "train", JOBS[name]], name
            assert f"--out=/data/runs/{JOBS[name]}" in program and "--device=cuda" in program
            gpus = container["resources"]["limits"]["nvidia.com/gpu"]
            assert gpus == container["resources"]["requests"]["nvidia.com/gpu"] == nproc, (name, kind)


def test_training_image_is_the_cuda_image_of_images_py(docs) -> None:
    _, gpu_image, tag = default_images()
    found = {c["image"] for _, template in templates(docs) for c in containers(template["spec"])}
    assert gpu_image.endswith(f":{tag}") and re.search(r"/vsbench-cuda:", gpu_image)
    # k8s/components/images: the tag of images.py until `images/build.sh --push` writes a digest
    expected = component_image("vsbench-cuda")
    assert found == {expected} and (expected == gpu_image or "@sha256:" in expected)


def test_ranks_of_a_job_may_reach_each_other_through_the_default_deny(docs) -> None:
    (policy,) = [d for d in docs if d["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]["matchExpressions"]
    assert selector == [{"key": "training.kubeflow.org/job-name", "operator": "In", "values": sorted(JOBS)}]
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchExpressions": selector}}]}]
