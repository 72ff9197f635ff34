"""The Kubernetes manifests: each overlay renders with ``kubectl kustomize`` and every document
validates offline against the Kubernetes 1.30 schemas in strict mode (kubernetes-validate); pods
are locked down; Secrets are templates only; MLflow accepts its in-cluster names.
"""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
KUBECTL = shutil.which("kubectl")
KUBERNETES_VERSION = "1.30.0"


def assert_valid(kubernetes_validate, doc: dict, where: str = "") -> None:
    """Fail with the object and the failing path when ``doc`` is not valid Kubernetes (strict)."""
    try:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        pytest.fail(f"{where}{doc['kind']}/{doc['metadata']['name']}: {error.message} at {list(error.path)}")
NAMESPACE = "vsbench"
OVERLAYS = ("dev", "prod")
SECRET_TEMPLATES = "base/secrets"
PLACEHOLDER = "REPLACE_ME"
RUNTIME_UID = 10001  # the vsbench images' user (images/Dockerfile.*)
MLFLOW_NAMES = ("mlflow", "mlflow.vsbench", "mlflow.vsbench.svc", "mlflow.vsbench.svc.cluster.local")
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed (needed for `kubectl kustomize`)")


def render(path: str) -> list[dict[str, Any]]:
    result = subprocess.run([KUBECTL, "kustomize", str(K8S / path)], check=False, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {name: render(f"overlays/{name}") for name in OVERLAYS} | {"secrets": render(SECRET_TEMPLATES)}


def find(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {len(matches)}"
    return matches[0]


def pod_specs(docs: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    for doc in docs:
        if doc["kind"] not in WORKLOAD_KINDS:
            continue
        spec = doc["spec"]
        if doc["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        yield f"{doc['kind']}/{doc['metadata']['name']}", (spec if doc["kind"] == "Pod" else spec["template"]["spec"])


def containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def images_in(docs: list[dict[str, Any]]) -> list[str]:
    return [c["image"] for _, pod in pod_specs(docs) for c in containers(pod)]


def default_images() -> tuple[str, str, str]:
    """CPU_IMAGE, GPU_IMAGE and TAG as compiled with no VSBENCH_IMAGE_REGISTRY override."""
    code = "from vsbench.runtime.images import CPU_IMAGE, GPU_IMAGE, TAG; print(CPU_IMAGE, GPU_IMAGE, TAG)"
    env = {k: v for k, v in os.environ.items() if k != "VSBENCH_IMAGE_REGISTRY"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    return out[0], out[1], out[2]


def component_image(base: str) -> str:
    """The image k8s/components/images names for ``base`` (vsbench-cpu or vsbench-cuda): by digest
    once `images/build.sh --push` wrote one, else by the version's tag."""
    component = yaml.safe_load((K8S / "components" / "images" / "kustomization.yaml").read_text())
    (entry,) = [e for e in component["images"] if e["name"].rsplit("/", 1)[1] == base]
    return f"{entry['newName']}@{entry['digest']}" if "digest" in entry else f"{entry['newName']}:{entry['newTag']}"


# ---- render and validate -------------------------------------------------------------------

@pytest.mark.parametrize("target", [*OVERLAYS, "secrets"])
def test_every_rendered_document_validates_strictly_offline(rendered, target: str) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate", reason="kubernetes-validate is not installed (dev extra; `make test` installs it)")
    docs = rendered[target]
    assert docs
    for doc in docs:
        assert_valid(kubernetes_validate, doc, f"{target}: ")


def test_strict_validation_catches_unknown_fields(rendered) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate is not installed")
    deployment = copy.deepcopy(find(rendered["dev"], "Deployment", "mlflow"))
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContxt"] = {}  # a typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_holds_the_whole_stack_in_one_namespace(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    assert find(docs, "Namespace", NAMESPACE)
    for kind, name in [("ServiceAccount", "vsbench-pipeline-runner"), ("ServiceAccount", "mlflow"),
                       ("Role", "vsbench-pipeline-runner"), ("RoleBinding", "vsbench-pipeline-runner"),
                       ("ConfigMap", "vsbench-config"), ("PersistentVolumeClaim", "vsbench-data"),
                       ("Deployment", "mlflow"), ("Service", "mlflow"), ("StatefulSet", "postgres"),
                       ("Service", "postgres"), ("NetworkPolicy", "default-deny-ingress")]:
        find(docs, kind, name)
    for doc in docs:
        if doc["kind"] != "Namespace":
            assert doc["metadata"].get("namespace") == NAMESPACE, f"{doc['kind']}/{doc['metadata']['name']}"


# ---- pods -----------------------------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_non_root_with_a_read_only_root_filesystem(rendered, overlay: str) -> None:
    pods = list(pod_specs(rendered[overlay]))
    assert pods
    for where, pod in pods:
        pod_context = pod.get("securityContext", {})
        assert pod_context.get("seccompProfile", {}).get("type") == "RuntimeDefault", where
        assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), where
        assert not any("hostPath" in volume for volume in pod.get("volumes", [])), where
        tmp_volumes = {v["name"] for v in pod.get("volumes", []) if "emptyDir" in v}
        for container in containers(pod):
            at = f"{where}/{container['name']}"
            context = container.get("securityContext", {})
            effective = {**pod_context, **context}
            assert effective.get("runAsNonRoot") is True, at
            assert effective.get("runAsUser", 0) != 0, at
            assert context.get("readOnlyRootFilesystem") is True, at
            assert context.get("allowPrivilegeEscalation") is False, at
            assert not context.get("privileged"), at
            assert "ALL" in context.get("capabilities", {}).get("drop", []), at
            assert not context.get("capabilities", {}).get("add"), at
            mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
            assert mounts.get("/tmp") in tmp_volumes, f"{at}: /tmp must be an emptyDir"
            resources = container.get("resources", {})
            assert {"cpu", "memory"} <= set(resources.get("requests", {})), at
            assert "memory" in resources.get("limits", {}), at


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_images_are_pinned_and_vsbench_images_match_vsbench_images_py(rendered, overlay: str) -> None:
    cpu_image, gpu_image, tag = default_images()
    found = images_in(rendered[overlay])
    for image in found:
        assert "@sha256:" in image or re.search(r":[\w.-]+$", image.rsplit("/", 1)[-1]), f"{image} has no tag"
        assert not image.endswith(":latest"), image
    ours = [image for image in found if re.search(r"/vsbench-(cpu|cuda)[:@]", image)]
    assert ours, "MLflow runs in the vsbench CPU image"
    if overlay == "prod":  # the images component: the tag until `images/build.sh --push` writes a digest
        assert set(ours) == {component_image("vsbench-cpu")}
        return
    assert set(ours) <= {cpu_image, gpu_image}, f"{ours} != vsbench.runtime.images {cpu_image}"
    assert all(image.endswith(f":{tag}") for image in ours)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_vsbench_image_pods_run_as_the_image_user(rendered, overlay: str) -> None:
    for where, pod in pod_specs(rendered[overlay]):
        for container in containers(pod):
            if "/vsbench-" in container["image"]:
                effective = {**pod.get("securityContext", {}), **container.get("securityContext", {})}
                assert effective.get("runAsUser") == RUNTIME_UID, where
    for dockerfile in ("Dockerfile.cpu", "Dockerfile.cuda"):
        assert f"USER {RUNTIME_UID}:{RUNTIME_UID}" in (ROOT / "images" / dockerfile).read_text()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_only_the_pipeline_runner_gets_an_api_token(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    for where, pod in pod_specs(docs):
        assert pod.get("automountServiceAccountToken") is False, where
        assert pod.get("serviceAccountName") not in (None, "default"), where
    accounts = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ServiceAccount"}
    for name, account in accounts.items():
        assert account.get("automountServiceAccountToken") is (name == "vsbench-pipeline-runner"), name


# ---- MLflow ---------------------------------------------------------------------------------

def _mlflow(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, str]]:
    """The MLflow container and its environment (ConfigMap values resolved, Secrets by name)."""
    container = find(docs, "Deployment", "mlflow")["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(find(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], item["value"])
        elif "configMapKeyRef" in item["valueFrom"]:
            ref = item["valueFrom"]["configMapKeyRef"]
            env[item["name"]] = find(docs, "ConfigMap", ref["name"])["data"][ref["key"]]
        else:
            env[item["name"]] = f"<secret {item['name']}>"
    return container, env


def _args(container: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    assert container["command"] == ["mlflow"] and container["args"][0] == "server"
    parsed = {}
    for arg in container["args"][1:]:
        key, _, value = arg.partition("=")
        parsed[key] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], value)
    return parsed


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mlflow_server_serves_s3_artifacts_from_a_postgres_store_on_in_cluster_names(rendered, overlay: str) -> None:
    container, env = _mlflow(rendered[overlay])
    args = _args(container, env)
    assert args["--host"] == "0.0.0.0" and args["--port"] == "5000"
    assert int(args["--workers"]) >= 1
    assert "--serve-artifacts" in args
    assert args["--artifacts-destination"].startswith("s3://")
    # --backend-store-uri is read from MLFLOW_BACKEND_STORE_URI, built from the Secret's variables.
    assert "--backend-store-uri" not in args
    uri = env["MLFLOW_BACKEND_STORE_URI"]
    assert re.fullmatch(r"postgresql://<secret POSTGRES_USER>:<secret POSTGRES_PASSWORD>@[\w.-]+:\d+/\w+", uri), uri
    allowed = args["--allowed-hosts"].split(",")
    for name in MLFLOW_NAMES:
        assert name in allowed and f"{name}:5000" in allowed, name
    assert "*" not in allowed


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_mlflow_probes_use_health(rendered, overlay: str) -> None:
    container, _ = _mlflow(rendered[overlay])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"]["path"] == "/health", probe
        assert container[probe]["httpGet"]["port"] in ("http", 5000), probe


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_pipeline_config_points_at_the_mlflow_service(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    uri = find(docs, "ConfigMap", "vsbench-config")["data"]["MLFLOW_TRACKING_URI"]
    assert uri == "http://mlflow.vsbench.svc.cluster.local:5000"
    service = find(docs, "Service", "mlflow")
    assert service["metadata"]["namespace"] == NAMESPACE
    assert [p["port"] for p in service["spec"]["ports"]] == [5000]
    postgres_host = find(docs, "ConfigMap", "mlflow-server-config")["data"]["POSTGRES_HOST"]
    assert postgres_host.split(".")[0] == find(docs, "Service", "postgres")["metadata"]["name"]


def test_prod_runs_more_and_bigger_mlflow_replicas_than_dev(rendered) -> None:
    def memory(quantity: str) -> float:
        number, unit = re.fullmatch(r"([\d.]+)(\w*)", quantity).groups()
        return float(number) * {"": 1, "Mi": 2**20, "Gi": 2**30}[unit]

    dev, prod = (find(rendered[o], "Deployment", "mlflow") for o in OVERLAYS)
    assert dev["spec"]["replicas"] == 1 and prod["spec"]["replicas"] == 2
    requests = [d["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"] for d in (dev, prod)]
    assert memory(requests[1]["memory"]) > memory(requests[0]["memory"])
    find(rendered["prod"], "PodDisruptionBudget", "mlflow")


# ---- Secrets --------------------------------------------------------------------------------

def test_secret_templates_hold_placeholders_only(rendered) -> None:
    secrets = [d for d in rendered["secrets"] if d["kind"] == "Secret"]
    assert secrets and len(secrets) == len(rendered["secrets"])
    for secret in secrets:
        assert "data" not in secret, "templates use stringData with placeholders"
        assert secret["stringData"] and set(secret["stringData"].values()) == {PLACEHOLDER}, secret["metadata"]["name"]
        assert secret["metadata"]["namespace"] == NAMESPACE


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlays_ship_no_secret_values(rendered, overlay: str) -> None:
    """Applying an overlay must never overwrite real Secrets; any Secret present is a placeholder."""
    for doc in rendered[overlay]:
        if doc["kind"] == "Secret":
            assert "data" not in doc and set(doc.get("stringData", {}).values()) <= {PLACEHOLDER}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_referenced_secret_and_key_has_a_template(rendered, overlay: str) -> None:
    templates = {d["metadata"]["name"]: set(d["stringData"]) for d in rendered["secrets"]}
    configmaps = {d["metadata"]["name"]: set(d["data"]) for d in rendered[overlay] if d["kind"] == "ConfigMap"}
    for where, pod in pod_specs(rendered[overlay]):
        for container in containers(pod):
            for source in container.get("envFrom", []):
                if "secretRef" in source:
                    assert source["secretRef"]["name"] in templates, where
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps, where
            for item in container.get("env", []):
                ref = item.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    assert ref["secretKeyRef"]["key"] in templates.get(ref["secretKeyRef"]["name"], ()), where
                if "configMapKeyRef" in ref:
                    assert ref["configMapKeyRef"]["key"] in configmaps.get(ref["configMapKeyRef"]["name"], ()), where
    role = find(rendered[overlay], "Role", "vsbench-pipeline-runner")
    secret_names = {n for rule in role["rules"] if "secrets" in rule["resources"] for n in rule["resourceNames"]}
    assert "vsbench-s3" in secret_names and "vsbench-s3" in templates
    # the embedding cache's signing key (issue 54): what the compiled pipelines mount, templated and readable
    from vsbench.platform.cluster import ClusterSettings

    settings = ClusterSettings()
    assert settings.cache_secret in secret_names and set(settings.cache_secret_env) <= templates[settings.cache_secret]


# ---- RBAC and NetworkPolicy -----------------------------------------------------------------

@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rbac_is_namespaced_and_least_privilege(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    assert not [d for d in docs if d["kind"] in ("ClusterRole", "ClusterRoleBinding")], "nothing cluster-wide"
    for role in (d for d in docs if d["kind"] == "Role"):
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            if {"secrets", "configmaps"} & set(rule["resources"]):
                assert rule["verbs"] == ["get"], rule
                assert rule.get("resourceNames"), f"{rule['resources']} must be named one by one"
    binding = find(docs, "RoleBinding", "vsbench-pipeline-runner")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                  "name": "vsbench-pipeline-runner"}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "vsbench-pipeline-runner",
                                    "namespace": NAMESPACE}]
    bound = {d["roleRef"]["name"] for d in docs if d["kind"] == "RoleBinding"}
    assert bound == {"vsbench-pipeline-runner"}, "MLflow and PostgreSQL need no API access"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_deny_by_default_and_open_only_what_is_needed(rendered, overlay: str) -> None:
    docs = rendered[overlay]
    deny = find(docs, "NetworkPolicy", "default-deny-ingress")["spec"]
    assert deny["podSelector"] == {} and deny["policyTypes"] == ["Ingress"] and not deny.get("ingress")

    def policy_for(app: str) -> dict[str, Any]:
        matches = [d["spec"] for d in docs if d["kind"] == "NetworkPolicy"
                   and d["spec"]["podSelector"].get("matchLabels") == {"app.kubernetes.io/name": app}]
        assert len(matches) == 1, app
        return matches[0]

    postgres = policy_for("postgres")
    assert postgres["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "mlflow"}}}],
                                    "ports": [{"protocol": "TCP", "port": 5432}]}]
    mlflow = policy_for("mlflow")
    (rule,) = mlflow["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 5000}]
    peers = rule["from"]
    assert {"podSelector": {}} in peers, "pods of the vsbench namespace"
    kubeflow = [p for p in peers if p.get("namespaceSelector", {}).get("matchLabels", {})
                .get("kubernetes.io/metadata.name") == "kubeflow"]
    assert kubeflow and "podSelector" in kubeflow[0], "pipeline pods of the kubeflow namespace"
