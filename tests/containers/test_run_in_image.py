"""Every step inside the CPU image, through kfp.local's DockerRunner, as a pod runs it.

Same generated data and seed through the subprocess runner and the container runner must give
the same scores. The tolerance is 1e-9 on scores that are ratios of counts (any real difference
is at least 1/N): both runs use the same pinned wheels (torch, numpy, Pillow with its bundled
libjpeg), so the arithmetic is the same; only the Python patch release and the base system differ.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.containers.conftest import podman_services, vsbench_containers
from vsbench.abid.synth import generate_abid
from vsbench.io.storage import upload_tree
from vsbench.platform.local_run import kfp_runner, run_abid_pipeline_locally, step_manifests
from vsbench.runtime.images import CPU_IMAGE
from vsbench.tracking.config import ARTIFACT_LOCATION_ENV
from vsbench.tracking.provenance import IMAGE_ID_TAG, IMAGE_TAG, PARENT_TAG, STEP_TAG

pytestmark = [pytest.mark.container, pytest.mark.integration, pytest.mark.slow]

TRAIN = json.dumps({"epochs": 1, "image_size": 32, "batch_size": 8, "workers": 0})


def _assert_nothing_left_running() -> None:
    assert vsbench_containers() == [], "step containers left behind"
    assert podman_services() == [], "a podman service vsbench started is still running"


def test_a_step_runs_as_a_pod_would(cpu_image, tmp_path, monkeypatch):
    from kfp import local

    from tests.containers.probe_components import probe, write_outside_tmp

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")  # passed through, never used here
    monkeypatch.setenv("AWS_PROFILE", "host-only")
    monkeypatch.setenv("SOME_HOST_SECRET", "must not reach the step")
    root = tmp_path / "kfp"
    with kfp_runner("container", root) as (runner, ran_in):
        local.init(runner=runner, pipeline_root=str(root), raise_on_error=True)
        report = json.loads(Path(probe().outputs["out"].path).read_text())
        with pytest.raises(RuntimeError):
            write_outside_tmp(path="/home/vsbench/out.txt")
    _assert_nothing_left_running()
    assert cpu_image in ran_in
    assert (report["uid"], report["gid"]) == (10001, 10001)
    assert report["tmp"] and not report["home"] and not report["root"] and not report["venv"]
    assert report["pass_root"] and not report["list_root"], "a root user's folders, mounted at their path, are reachable"
    env = report["environment"]
    assert env["VSBENCH_IMAGE"] == CPU_IMAGE, "the CUDA-named step ran in the runner's CPU image"
    assert env["VSBENCH_IMAGE_ID"].startswith("sha256:")
    assert env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:1"
    assert "AWS_PROFILE" not in env and "SOME_HOST_SECRET" not in env
    assert env["HOME"] == "/home/vsbench"


def _scores(report) -> dict[str, float]:
    """Scores and data counts. Resize is compared by the images it leaves (resized + kept): the killed
    run may or may not have finished resizing before SIGTERM landed, so the resumed run's split
    between "resized" and "kept" depends on timing, their sum does not."""
    prepare, resize = report.steps["abid-prepare"]["metrics"], report.steps["abid-resize"]["metrics"]
    return {**report.scores(), **{f"abid-prepare.{key}": prepare[key] for key in ("train", "val", "distinct_asins")},
            "abid-resize.images": resize["resized"] + resize["kept"], "abid-resize.failed": resize["failed"]}


def test_abid_pipeline_in_the_image_scores_as_the_subprocess_run_and_resumes_after_a_kill(
        cpu_image, local_s3, public_bucket, no_aws_credentials, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    generate_abid(tmp_path / "synth", 80, seed=5, progress=False)
    upload_tree(tmp_path / "synth", f"s3://{public_bucket}", local_s3.admin_client())
    arguments = {"source": f"s3://{public_bucket}", "endpoint_url": local_s3.endpoint_url, "seed": 3, "size": 32,
                 "train_profile": "demo", "train_overrides": TRAIN}

    host = run_abid_pipeline_locally(tmp_path / "host", tmp_path / "host-kfp",
                                     {**arguments, "experiment": "host"}, runner="subprocess")
    assert host.succeeded, host.render()
    assert host.ran_in == "host venv"

    # A first container run, killed (SIGTERM, as `kill` or a CI timeout sends) once a step is done.
    data, pipeline_root = tmp_path / "image", tmp_path / "image-kfp"
    command = [sys.executable, "-m", "vsbench", "abid", "run-local", "--runner", "container",
               "--data-root", str(data), "--pipeline-root", str(pipeline_root), "--experiment", "image",
               "--source", arguments["source"], "--endpoint-url", arguments["endpoint_url"], "--seed", "3",
               "--size", "32", "--train-overrides", TRAIN]
    killed = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while not list(pipeline_root.glob("*/abid-prepare/manifest")):
        assert killed.poll() is None, killed.stdout.read()
        assert time.monotonic() < deadline, "the container run did not get past prepare"
        time.sleep(0.5)
    killed.send_signal(signal.SIGTERM)
    output, _ = killed.communicate(timeout=120)
    assert killed.returncode != 0, output
    _assert_nothing_left_running()

    image = run_abid_pipeline_locally(data, pipeline_root, {**arguments, "experiment": "image"}, runner="container")
    assert image.succeeded, image.render()
    _assert_nothing_left_running()
    assert image.ran_in.startswith(CPU_IMAGE)
    assert image.steps["abid-download"]["metrics"]["fetched"] == 0, "the second run resumes: nothing fetched again"
    assert image.steps["abid-download"]["metrics"]["skipped"] == host.steps["abid-download"]["metrics"]["fetched"]

    host_scores, image_scores = _scores(host), _scores(image)
    assert set(host_scores) == set(image_scores) and len(host_scores) > 4
    for key, value in host_scores.items():
        assert image_scores[key] == pytest.approx(value, abs=1e-9), key

    for step in ("abid-prepare", "abid-train-siamese", "abid-score"):
        (manifest,) = step_manifests(image.run_dir, step)
        ran_in = json.loads(manifest.read_text())["ran_in"]
        assert ran_in["image"] == CPU_IMAGE and ran_in["image_id"].startswith("sha256:"), step
        (host_manifest,) = step_manifests(host.run_dir, step)
        assert json.loads(host_manifest.read_text())["ran_in"]["image"] == "host venv"

    client = MlflowClient()
    runs = client.search_runs([client.get_experiment_by_name("image").experiment_id])
    parent = next(r for r in runs if r.info.run_id == image.parent_run_id)
    children = [r for r in runs if r.data.tags.get(PARENT_TAG) == parent.info.run_id]
    assert parent.info.status == "FINISHED" and children
    for run in [parent, *children]:
        assert run.data.tags[IMAGE_TAG] == CPU_IMAGE, run.data.tags.get(STEP_TAG)
        assert run.data.tags[IMAGE_ID_TAG].startswith("sha256:")
    assert (tmp_path / "artifacts").exists() and any((tmp_path / "artifacts").rglob("*.png")), \
        "the steps in the image wrote their plots to the mounted artifact store"


def test_similarity_run_in_the_image_prints_the_inline_table(cpu_image, tmp_path, monkeypatch):
    from vsbench.benchmarks.disc.synth import generate_disc

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv(ARTIFACT_LOCATION_ENV, str(tmp_path / "artifacts"))
    generate_disc(tmp_path / "disc", references=16, queries=10, train=16, seed=4)
    tables = {}
    for runner in ("inline", "container"):
        out = tmp_path / runner
        result = subprocess.run(
            [sys.executable, "-m", "vsbench", "similarity", "run", "--benchmark", "disc", "--root",
             str(tmp_path / "disc"), "--out", str(out), "--codecs", "Flat;PCAW8,L2norm,Flat", "--batch-size", "8",
             "--runner", runner], capture_output=True, text=True, timeout=900, env=dict(os.environ), check=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        assert "codec,score_norm,uAP" in result.stdout, "the benchmark's own table is printed"
        access = [line for line in result.stdout.splitlines() if line.startswith("note: the steps run as user and group")]
        if runner == "container":  # the folders opened to the steps' group are said once, before the steps
            assert len(access) == 1 and str(out) in access[0], result.stdout[-3000:]
            assert (out.stat().st_gid, out.stat().st_mode & 0o2070) == (10001, 0o2070)
        else:
            assert access == [] and out.stat().st_gid != 10001
        tables[runner] = list(csv.DictReader((out / "disc_metrics.csv").open()))
    _assert_nothing_left_running()
    assert len(tables["inline"]) == 4
    for inline, contained in zip(tables["inline"], tables["container"], strict=True):
        assert inline.keys() == contained.keys()
        for key, value in inline.items():
            try:
                assert float(contained[key]) == pytest.approx(float(value), abs=1e-6), key
            except ValueError:
                assert contained[key] == value, key
