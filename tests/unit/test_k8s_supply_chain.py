"""Supply chain and resource bounds of the Kubernetes manifests (issue 28 item 8), checked offline:
every container of every workload under k8s/ has CPU and memory requests and limits (in every
file as written, and in every rendered kustomization where kubectl is installed); the namespace
enforces the "restricted" Pod Security Standard; the prod overlay and the training jobs take their
images from the images component that ``images/build.sh --push`` fills with digests.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_k8s import KUBECTL, default_images, render

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
COMPONENT = K8S / "components" / "images" / "kustomization.yaml"
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod", "PyTorchJob"}
RENDERED = ("overlays/dev", "overlays/prod", "training")
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
needs_kubectl = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for `kubectl kustomize`)")


def manifest_files() -> list[Path]:
    files = sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")
    assert files, "no manifests under k8s/"
    return files


def pod_specs(doc: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, pod spec) of each pod a workload object makes, PyTorchJob replica types included."""
    kind, name, spec = doc["kind"], doc["metadata"]["name"], doc.get("spec", {})
    if kind == "Pod":
        yield f"{kind}/{name}", spec
    elif kind == "CronJob":
        yield f"{kind}/{name}", spec["jobTemplate"]["spec"]["template"]["spec"]
    elif kind == "PyTorchJob":
        for replica, replica_spec in spec["pytorchReplicaSpecs"].items():
            yield f"{kind}/{name}/{replica}", replica_spec["template"]["spec"]
    elif "template" in spec:
        yield f"{kind}/{name}", spec["template"]["spec"]


def workload_containers(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc and doc.get("kind") in WORKLOAD_KINDS:
            for where, pod in pod_specs(doc):
                for container in [*pod.get("initContainers", []), *pod.get("containers", [])]:
                    yield f"{where}/{container['name']}", container


def missing_bounds(container: dict[str, Any]) -> list[str]:
    resources = container.get("resources", {})
    return [f"{part}.{resource}" for part in ("requests", "limits") for resource in ("cpu", "memory")
            if resource not in resources.get(part, {})]


def test_every_container_of_every_workload_file_has_cpu_and_memory_requests_and_limits() -> None:
    """Every file under k8s/ as written, patches included: a patch that sets resources sets all four,
    so no overlay drops a bound of its base."""
    seen = 0
    for path in manifest_files():
        docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        for where, container in workload_containers(docs):
            seen += 1
            missing = missing_bounds(container)
            assert not missing, f"{path.relative_to(ROOT)}: {where} has no {', '.join(missing)}"
    assert seen >= 8, "the walk found too few containers: is it looking at the right files?"


def test_the_walk_catches_a_missing_cpu_limit() -> None:
    deployment = yaml.safe_load("""
kind: Deployment
metadata: {name: x}
spec:
  template:
    spec:
      containers:
        - name: c
          resources: {requests: {cpu: 100m, memory: 1Gi}, limits: {memory: 1Gi}}
""")
    ((where, container),) = workload_containers([deployment])
    assert missing_bounds(container) == ["limits.cpu"] and where == "Deployment/x/c"


@needs_kubectl
@pytest.mark.parametrize("target", RENDERED)
def test_every_rendered_container_has_cpu_and_memory_requests_and_limits(target: str) -> None:
    found = list(workload_containers(render(target)))
    assert found
    for where, container in found:
        assert not missing_bounds(container), f"{target}: {where} has no {', '.join(missing_bounds(container))}"


@needs_kubectl
@pytest.mark.parametrize("overlay", ("overlays/dev", "overlays/prod"))
def test_the_namespace_enforces_the_restricted_pod_security_standard(overlay: str) -> None:
    (namespace,) = [d for d in render(overlay) if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert re.fullmatch(r"v1\.\d+", labels["pod-security.kubernetes.io/enforce-version"])
    assert labels["pod-security.kubernetes.io/warn"] == labels["pod-security.kubernetes.io/audit"] == "restricted"


# ---- images by digest ------------------------------------------------------------------------

def read_component(path: Path = COMPONENT) -> dict[str, dict[str, str]]:
    """The component's image entries by image base name (vsbench-cpu, vsbench-cuda)."""
    component = yaml.safe_load(path.read_text())
    assert component["apiVersion"] == "kustomize.config.k8s.io/v1alpha1" and component["kind"] == "Component"
    assert set(component) == {"apiVersion", "kind", "images"}, "the component only retargets images"
    return {entry["name"].rsplit("/", 1)[1]: entry for entry in component["images"]}


def test_the_images_component_names_each_image_by_tag_or_by_digest() -> None:
    cpu_image, gpu_image, tag = default_images()
    entries = read_component()
    assert set(entries) == {"vsbench-cpu", "vsbench-cuda"}
    for default in (cpu_image, gpu_image):
        repository = default.rsplit(":", 1)[0]
        entry = entries[repository.rsplit("/", 1)[1]]
        assert entry["name"] == repository, "the name the base manifests use"
        assert entry["newName"].endswith("/" + repository.rsplit("/", 1)[1])
        if "digest" in entry:
            assert DIGEST.fullmatch(entry["digest"]) and "newTag" not in entry, entry
        else:
            assert entry["newTag"] == tag, f"{entry}: before a push, the version's tag ({tag})"


def test_prod_and_training_take_their_images_from_the_component() -> None:
    for kustomization in (K8S / "overlays" / "prod" / "kustomization.yaml", K8S / "training" / "kustomization.yaml"):
        data = yaml.safe_load(kustomization.read_text())
        targets = [(kustomization.parent / c).resolve() for c in data.get("components", [])]
        assert COMPONENT.parent.resolve() in targets, f"{kustomization.relative_to(ROOT)} does not use the component"
        assert all("digest" not in entry and "newName" not in entry for entry in data.get("images", [])), (
            f"{kustomization.relative_to(ROOT)}: retarget images in the component, not here")


@needs_kubectl
def test_a_digest_in_the_component_reaches_the_prod_and_training_pods(tmp_path: Path) -> None:
    """What `images/build.sh --push` writes renders as image@sha256 in every vsbench pod of prod and
    training (the dev overlay keeps the local tag)."""
    copy = tmp_path / "k8s"
    shutil.copytree(K8S, copy)
    digests = {"vsbench-cpu": "sha256:" + "1" * 64, "vsbench-cuda": "sha256:" + "2" * 64}
    component = yaml.safe_load(COMPONENT.read_text())
    for entry in component["images"]:
        base = entry["name"].rsplit("/", 1)[1]
        entry.pop("newTag", None)
        entry.update(newName=f"registry.example.test/ml/{base}", digest=digests[base])
    (copy / "components" / "images" / "kustomization.yaml").write_text(yaml.safe_dump(component))

    def images(target: str) -> set[str]:
        result = subprocess.run([KUBECTL, "kustomize", str(copy / target)], capture_output=True,
                                text=True, timeout=120, check=True)
        docs = [d for d in yaml.safe_load_all(result.stdout) if d]
        return {c["image"] for _, c in workload_containers(docs) if "/vsbench-" in c["image"]}

    assert images("overlays/prod") == {f"registry.example.test/ml/vsbench-cpu@{digests['vsbench-cpu']}"}
    assert images("training") == {f"registry.example.test/ml/vsbench-cuda@{digests['vsbench-cuda']}"}
    assert all(":" in image.rsplit("/", 1)[1] and "@" not in image for image in images("overlays/dev"))
