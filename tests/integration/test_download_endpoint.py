"""The ABID download records where it read from (issue 57, item 6): the bucket and the S3 endpoint,
on the pipeline's parent run and the download's own run, so that a run against a local mirror no
longer reads as one against the public bucket; never a credential. Against moto's server on
127.0.0.1, as the other download tests, with a sqlite MLflow store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from vsbench.platform.local_s3 import ACCESS_KEY, SECRET_KEY, LocalS3
from vsbench.tracking.provenance import DATA_ENDPOINT_TAG, DATA_SOURCE_TAG, public_endpoint

pytestmark = pytest.mark.integration


def _put_bins(s3: LocalS3, bucket: str, n: int = 4) -> None:
    client = s3.admin_client()
    for i in range(1, n + 1):
        client.put_object(Bucket=bucket, Key=f"bin-images/{i:05d}.jpg", Body=hashlib.sha256(b"%d" % i).digest())
        client.put_object(Bucket=bucket, Key=f"metadata/{i:05d}.json",
                          Body=json.dumps({"EXPECTED_QUANTITY": i, "BIN_FCSKU_DATA": {}}).encode())


def _download_under_a_parent(s3: LocalS3, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(parent run, download run) after the download step ran under a pipeline's parent run."""
    from mlflow.tracking import MlflowClient

    from vsbench.steps.abid import abid_download_step
    from vsbench.tracking.runs import open_parent_run

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    monkeypatch.delenv("VSBENCH_NO_TRACK", raising=False)
    _put_bins(s3, bucket)
    parent_id = open_parent_run("vsbench-abid", "kfp-run-1", "vsbench-abid", {"source": f"s3://{bucket}"})
    assert parent_id
    abid_download_step(f"s3://{bucket}", str(tmp_path / "raw"), endpoint_url=s3.endpoint_url,
                       parent_run_id=parent_id, progress=False)
    client = MlflowClient(uri)
    parent = client.get_run(parent_id)
    [child] = client.search_runs([parent.info.experiment_id], f"tags.`mlflow.parentRunId` = '{parent_id}'")
    return parent, child


def test_the_parent_run_names_the_mirror_it_read_from(local_s3, public_bucket, no_aws_credentials, tmp_path,
                                                      monkeypatch):
    parent, child = _download_under_a_parent(local_s3, public_bucket, tmp_path, monkeypatch)
    for run in (parent, child):
        assert run.data.tags[DATA_SOURCE_TAG] == f"s3://{public_bucket}"
        assert run.data.tags[DATA_ENDPOINT_TAG] == local_s3.endpoint_url  # http://127.0.0.1:<port>, not AWS
    assert child.data.params["endpoint_url"] == local_s3.endpoint_url


def test_signed_reads_record_the_endpoint_and_no_credential(local_s3, public_bucket, tmp_path, monkeypatch):
    """With credentials in the environment (boto3 signs), the runs hold the endpoint, never a key."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    parent, child = _download_under_a_parent(local_s3, public_bucket, tmp_path, monkeypatch)
    assert parent.data.tags[DATA_ENDPOINT_TAG] == local_s3.endpoint_url
    for run in (parent, child):
        recorded = json.dumps([run.data.tags, run.data.params])
        assert SECRET_KEY not in recorded and ACCESS_KEY not in recorded


@pytest.mark.parametrize(("given", "recorded"), [
    ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ("https://user:s3cr3t@minio.example:9000/base", "https://minio.example:9000/base"),
    ("https://s3.example/x?X-Amz-Signature=s3cr3t#frag", "https://s3.example/x"),
    ("http://[::1]:9000", "http://[::1]:9000"),
    ("not a url", ""),
    ("http://host:99999", ""),
])
def test_an_endpoint_is_recorded_without_its_secrets(given: str, recorded: str) -> None:
    assert public_endpoint(given) == recorded and "s3cr3t" not in public_endpoint(given)
