"""Download against a real S3 HTTP endpoint (moto's server) on 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vsbench.abid.download import MANIFEST_NAME, download_abid, plan_objects
from vsbench.io.locks import LOCK_FILE
from vsbench.io.storage import is_temporary
from vsbench.platform.local_s3 import LocalS3

from .flaky_proxy import FlakyProxy

pytestmark = pytest.mark.integration


def _put_dataset(s3: LocalS3, bucket: str, n: int = 30) -> dict[str, bytes]:
    """Objects with padded, unpadded and both spellings, plus junk keys; returns key -> bytes."""
    client = s3.admin_client()
    objects: dict[str, bytes] = {}
    for i in range(1, n + 1):
        stem = f"{i:05d}" if i % 4 == 0 else str(i)
        objects[f"bin-images/{stem}.jpg"] = hashlib.sha256(f"img{i}".encode()).digest() * (50 + i)
        objects[f"metadata/{stem}.json"] = json.dumps({"EXPECTED_QUANTITY": i % 6, "BIN_FCSKU_DATA": {}}).encode()
    objects["bin-images/00003.jpg"] = objects["bin-images/3.jpg"]  # the same bin under both spellings
    objects["bin-images/readme.txt"] = b"not an image"
    objects["bin-images/../escape.jpg"] = b"path traversal attempt"
    for key, data in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    return objects


def _expected_files(objects: dict[str, bytes]) -> dict[str, bytes]:
    expected = {}
    for key, data in objects.items():
        directory, name = key.split("/", 1)
        stem, ext = name.rsplit(".", 1)
        if stem.isdigit():
            expected[f"{directory}/{int(stem):05d}.{ext}"] = data
    return expected


def _local_files(dest: Path) -> dict[str, bytes]:
    """The data files under ``dest`` (not the manifests, nor the one-writer lock files)."""
    return {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*")
            if p.is_file() and not p.relative_to(dest).as_posix().startswith("_manifests")
            and not p.name.startswith(LOCK_FILE)}


def test_unsigned_download_of_padded_and_unpadded_keys(local_s3, public_bucket, no_aws_credentials, tmp_path):
    objects = _put_dataset(local_s3, public_bucket)
    summary = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)

    assert summary.complete
    assert summary.duplicate_spellings == 1
    assert summary.ignored_keys == 2  # readme.txt and the traversal key never become local paths
    assert summary.fetched == summary.planned == 60
    assert _local_files(tmp_path) == _expected_files(objects)
    assert not (tmp_path.parent / "escape.jpg").exists()
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["fetched"] == 60 and manifest["complete"] is True


def test_second_run_skips_verified_files_and_refetches_damaged_ones(local_s3, public_bucket, no_aws_credentials,
                                                                     tmp_path):
    objects = _put_dataset(local_s3, public_bucket, n=10)
    download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)
    (tmp_path / "bin-images" / "00002.jpg").write_bytes(b"damaged")  # wrong size
    same_size = tmp_path / "bin-images" / "00005.jpg"
    same_size.write_bytes(bytes(len(same_size.read_bytes())))  # right size, wrong bytes: MD5 catches it
    (tmp_path / "metadata" / "00007.json").unlink()

    again = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)

    assert (again.fetched, again.refetched, again.skipped, again.failed) == (3, 2, 17, 0)
    assert _local_files(tmp_path) == _expected_files(objects)
    # The key log of the second run says, per key, what it did and why.
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["keys_log"] == "_manifests/download.keys.jsonl" and manifest["refetched"] == 2
    lines = [json.loads(line) for line in (tmp_path / manifest["keys_log"]).read_text().splitlines()]
    by_path = {line["path"]: line for line in lines}
    assert len(lines) == len(by_path) == again.planned == 20
    assert by_path["bin-images/00002.jpg"]["status"] == "refetched"
    assert by_path["bin-images/00002.jpg"]["reason"] == f"local copy damaged: size 7 != listed {len(objects['bin-images/2.jpg'])}"
    assert by_path["bin-images/00005.jpg"]["status"] == "refetched"
    assert by_path["bin-images/00005.jpg"]["reason"] == "local copy damaged: md5 does not match the ETag"
    assert by_path["metadata/00007.json"]["status"] == "fetched" and by_path["metadata/00007.json"]["reason"] == ""
    assert by_path["metadata/00007.json"]["key"] == "metadata/7.json"
    assert sum(line["status"] == "skipped" for line in lines) == 17
    assert not [p for p in tmp_path.rglob("*") if is_temporary(p.name)]


def test_a_rerun_that_refetches_one_object_reports_its_rate_and_what_it_kept(local_s3, public_bucket,
                                                                             no_aws_credentials, tmp_path):
    """Issue 39: the rates are over what was transferred and its own time, not one object over the whole
    run (listing and verifying the 19 kept ones included), and the summary says what was kept."""
    objects = _put_dataset(local_s3, public_bucket, n=10)
    args = ("abid", "download", "--dest", str(tmp_path), "--source", f"s3://{public_bucket}",
            "--endpoint-url", local_s3.endpoint_url)
    assert _cli(*args).exit_code == 0
    (tmp_path / "bin-images" / "00002.jpg").write_bytes(b"damaged")

    result = _cli(*args)

    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert (manifest["fetched"], manifest["refetched"], manifest["skipped"]) == (1, 1, 19)
    assert 0 < manifest["fetch_seconds"] <= manifest["seconds"]
    assert manifest["objects_per_second"] == round(1 / manifest["fetch_seconds"], 2)
    size = len(objects["bin-images/2.jpg"])
    assert manifest["bytes_fetched"] == size
    assert manifest["megabytes_per_second"] == round(size / 1e6 / manifest["fetch_seconds"], 2)
    line = next(line for line in result.stdout.splitlines() if line.startswith("transferred"))
    assert line == (f"transferred 1 object ({size / 1e6:,.1f} MB) in {manifest['fetch_seconds']:g} s: "
                    f"{manifest['objects_per_second']:g} objects/s, {manifest['megabytes_per_second']:g} MB/s; "
                    "19 objects already on disk, verified against the listing and kept")
    assert "objects_per_second" not in result.stdout  # the rate is in the line above, not over the whole run

    nothing = _cli(*args)
    assert nothing.exit_code == 0 and ("transferred nothing; 20 objects already on disk, verified against the "
                                       "listing and kept") in nothing.stdout


def test_the_key_log_names_each_failed_and_untried_key(local_s3, public_bucket, no_aws_credentials, tmp_path):
    objects = _put_dataset(local_s3, public_bucket, n=40)
    with FlakyProxy(local_s3.endpoint_url) as proxy:
        proxy.mode, proxy.healthy_gets = "fail", 25
        first = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=proxy.url, concurrency=8,
                              retries=2, backoff=0.01, progress=False)
    assert first.failed > 0
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    lines = [json.loads(line) for line in (tmp_path / manifest["keys_log"]).read_text().splitlines()]
    assert len(lines) == first.planned == 80 and len({line["path"] for line in lines}) == 80
    failed = {line["key"]: line for line in lines if line["status"] in ("failed", "not_tried")}
    assert len(failed) == first.failed and all(line["reason"] for line in failed.values())
    assert {f["key"] for f in manifest["failures"]} <= set(failed)
    fetched = [line for line in lines if line["status"] == "fetched"]
    assert len(fetched) == first.fetched and all(line["size"] == len(objects[line["key"]]) for line in fetched)


def _key_log(dest: Path, manifest: str = MANIFEST_NAME) -> dict[str, dict]:
    """The key log named by ``manifest``, by local path (each path once)."""
    name = json.loads((dest / manifest).read_text())["keys_log"]
    lines = [json.loads(line) for line in (dest / name).read_text().splitlines()]
    by_path = {line["path"]: line for line in lines}
    assert len(by_path) == len(lines), "a key logged twice"
    return by_path


def test_a_resume_logs_each_refetch_with_its_reason_and_each_failing_key(local_s3, public_bucket, no_aws_credentials,
                                                                         tmp_path, monkeypatch):
    """Issue 29, item 1: after a resume, which file was fetched again and why, and which key failed and why."""
    import builtins
    import errno

    from vsbench.abid import fetch

    objects = _put_dataset(local_s3, public_bucket, n=8)
    source = f"s3://{public_bucket}"
    first = download_abid(source, tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)
    assert first.complete and first.fetched == 16
    (tmp_path / "bin-images" / "00002.jpg").write_bytes(b"cut")  # damaged: size
    unreadable = tmp_path / "bin-images" / "00005.jpg"  # right size, but reading it fails (a bad disk block)
    (tmp_path / "metadata" / "00006.json").unlink()  # missing, and its key fails on the resume
    (tmp_path / "metadata" / "00007.json").write_bytes(b"{}")  # damaged, and its key fails on the resume
    real_open = builtins.open

    def failing_open(file, *args, **kwargs):
        if Path(file) == unreadable:
            raise OSError(errno.EIO, "Input/output error", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(fetch, "open", failing_open, raising=False)  # where local copies are verified
    with FlakyProxy(local_s3.endpoint_url) as proxy:
        proxy.missing_keys = {"metadata/6.json", "metadata/7.json"}
        again = download_abid(source, tmp_path, endpoint_url=proxy.url, retries=2, backoff=0.01, progress=False)

    assert (again.fetched, again.refetched, again.skipped, again.failed) == (2, 2, 12, 2)
    log = _key_log(tmp_path)
    assert len(log) == again.planned == 16  # this run's log: every planned key once, nothing of the first run
    assert log["bin-images/00002.jpg"] == {
        "key": "bin-images/2.jpg", "path": "bin-images/00002.jpg", "status": "refetched",
        "reason": f"local copy damaged: size 3 != listed {len(objects['bin-images/2.jpg'])}", "attempts": 1,
        "size": len(objects["bin-images/2.jpg"])}
    assert log["bin-images/00005.jpg"]["status"] == "refetched"
    assert log["bin-images/00005.jpg"]["reason"] == "local copy damaged: unreadable ([Errno 5] Input/output error)"
    assert log["metadata/00006.json"]["status"] == "failed"
    assert log["metadata/00006.json"]["reason"] == "HTTP 404 NoSuchKey: The specified key does not exist."
    assert log["metadata/00007.json"]["status"] == "failed"
    assert log["metadata/00007.json"]["reason"].endswith("; the damaged local copy stays (size 2 != listed "
                                                         f"{len(objects['metadata/7.json'])})")
    assert {path for path, line in log.items() if line["status"] == "skipped"} == (
        {f"bin-images/{i:05d}.jpg" for i in range(1, 9)} | {f"metadata/{i:05d}.json" for i in range(1, 9)}
    ) - {"bin-images/00002.jpg", "bin-images/00005.jpg", "metadata/00006.json", "metadata/00007.json"}
    assert all(line["reason"] == "verified against the listing" for line in log.values() if line["status"] == "skipped")
    assert all(line["size"] == len(objects[line["key"]]) for line in log.values() if line["status"] == "skipped")
    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert (manifest["refetched"], manifest["failed"]) == (2, 2)
    assert [f["key"] for f in manifest["failures"]] == ["metadata/6.json", "metadata/7.json"]
    assert (tmp_path / "bin-images" / "00002.jpg").read_bytes() == objects["bin-images/2.jpg"]


def test_a_folder_where_a_file_belongs_is_named_and_not_retried(local_s3, public_bucket, no_aws_credentials, tmp_path):
    objects = _put_dataset(local_s3, public_bucket, n=3)
    (tmp_path / "bin-images" / "00002.jpg").mkdir(parents=True)
    summary = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)
    assert (summary.fetched, summary.failed, summary.refetched) == (5, 1, 0)
    line = _key_log(tmp_path)["bin-images/00002.jpg"]
    assert line["status"] == "failed" and line["attempts"] == 1
    assert line["reason"] == ("cannot write bin-images/00002.jpg under the destination: [Errno 21] Is a directory; "
                              "the damaged local copy stays (a folder, not a file)")
    assert summary.failures[0]["permanent"] and not summary.resumable
    assert summary.advice() == (
        f"1 object failed, 1 of them for a reason no retry changes (denied, gone, or a local path that cannot be "
        f"written; {tmp_path / '_manifests/download.keys.jsonl'} says which and why); fix those, then run the same "
        "command again to resume")
    expected = _expected_files(objects)
    del expected["bin-images/00002.jpg"]
    assert _local_files(tmp_path) == expected  # the five others written; the folder left as it was


def test_each_shard_keeps_its_own_key_log(local_s3, public_bucket, no_aws_credentials, tmp_path):
    """Shards share the destination: each names its own key log, and a shard's resume rewrites only its own."""
    from vsbench.abid.download import keys_log_name, manifest_name

    _put_dataset(local_s3, public_bucket, n=10)
    source, logs = f"s3://{public_bucket}", {}
    for shard in (0, 1):
        summary = download_abid(source, tmp_path, endpoint_url=local_s3.endpoint_url, progress=False, shard=shard,
                                num_shards=2)
        assert summary.complete and summary.keys_log == keys_log_name(shard, 2)
        assert summary.keys_log == f"_manifests/download.shard-{shard}-of-2.keys.jsonl"
        logs[shard] = _key_log(tmp_path, manifest_name(shard, 2))
        assert {int(Path(path).stem) % 2 for path in logs[shard]} == {shard}
        assert {line["status"] for line in logs[shard].values()} == {"fetched"}
    assert len(logs[0]) + len(logs[1]) == 20 and not (tmp_path / MANIFEST_NAME).exists()
    shard_0_log = (tmp_path / keys_log_name(0, 2)).read_bytes()
    (tmp_path / "metadata" / "00003.json").write_bytes(b"{}")
    again = download_abid(source, tmp_path, endpoint_url=local_s3.endpoint_url, progress=False, shard=1, num_shards=2)
    assert (again.refetched, again.skipped) == (1, 9)
    assert _key_log(tmp_path, manifest_name(1, 2))["metadata/00003.json"]["status"] == "refetched"
    assert (tmp_path / keys_log_name(0, 2)).read_bytes() == shard_0_log


def test_limit_keeps_the_smallest_ids_with_their_metadata(local_s3, public_bucket, no_aws_credentials, tmp_path):
    _put_dataset(local_s3, public_bucket, n=12)
    summary = download_abid(f"s3://{public_bucket}", tmp_path, limit=5, endpoint_url=local_s3.endpoint_url,
                            progress=False)
    assert summary.planned == 10
    assert sorted(p.name for p in (tmp_path / "bin-images").iterdir()) == [f"{i:05d}.jpg" for i in range(1, 6)]


@pytest.mark.parametrize("mode", ["fail", "truncate"])
def test_outage_part_way_then_resume_ends_complete(local_s3, public_bucket, no_aws_credentials, tmp_path, mode):
    objects = _put_dataset(local_s3, public_bucket, n=40)
    expected = _expected_files(objects)
    with FlakyProxy(local_s3.endpoint_url) as proxy:
        proxy.mode, proxy.healthy_gets = mode, 25
        first = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=proxy.url, concurrency=8,
                              retries=2, backoff=0.01, progress=False)
        assert not first.complete and first.failed > 0
        assert first.fetched + first.failed == first.planned == 80
        local = _local_files(tmp_path)
        assert len(local) == first.fetched
        assert all(expected[name] == data for name, data in local.items()), "a partial file under a final name"
        assert not [p for p in tmp_path.rglob("*") if is_temporary(p.name)]
        reasons = {failure["reason"] for failure in json.loads((tmp_path / MANIFEST_NAME).read_text())["failures"]}
        assert reasons and all(reasons)

        proxy.mode = "ok"
        second = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=proxy.url, concurrency=8,
                               retries=2, backoff=0.01, progress=False)

    assert second.complete
    assert second.skipped == first.fetched and second.fetched == first.failed
    assert _local_files(tmp_path) == expected  # nothing lost, nothing duplicated


def test_missing_bucket_fails_clearly(local_s3, no_aws_credentials, tmp_path):
    with pytest.raises(Exception, match="NoSuchBucket|does not exist"):
        download_abid("s3://no-such-bucket", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)


def test_plan_prefers_the_unpadded_spelling():
    listing = [{"Key": "p/bin-images/00007.jpg", "Size": 3, "ETag": "x"},
               {"Key": "p/bin-images/7.jpg", "Size": 3, "ETag": "x"},
               {"Key": "p/metadata/7.json", "Size": 2, "ETag": "y"},
               {"Key": "other/bin-images/8.jpg", "Size": 1, "ETag": "z"}]
    plan, ignored, duplicates, conflicts = plan_objects(listing, "p/")
    assert [(o.key, o.path, o.alternate_keys) for o in plan] == [
        ("p/bin-images/7.jpg", "bin-images/00007.jpg", ("p/bin-images/00007.jpg",)),
        ("p/metadata/7.json", "metadata/00007.json", ()),
    ]
    assert ignored == ["other/bin-images/8.jpg"] and duplicates == 1 and conflicts == []


def test_signed_requests_when_the_environment_has_credentials(local_s3, public_bucket, tmp_path, monkeypatch):
    """With credentials present the downloader signs (boto3) instead of plain anonymous GETs."""
    from vsbench.abid import download
    from vsbench.platform.local_s3 import ACCESS_KEY, SECRET_KEY

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    used = []
    original = download.BotoGetter

    class Spy(original):
        def __call__(self, key: str) -> bytes:
            used.append(key)
            return original.__call__(self, key)

    monkeypatch.setattr(download, "BotoGetter", Spy)
    objects = _put_dataset(local_s3, public_bucket, n=6)
    summary = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)
    assert summary.complete and len(used) == summary.fetched == 12
    assert _local_files(tmp_path) == _expected_files(objects)


# --- job-wide causes: one line naming the cause and the fix (issue 15) ------------------------------


def _list_only_bucket(s3: LocalS3, name: str, n: int) -> None:
    """Anonymous ListBucket allowed, GetObject not: every object GET is a 403 (the issue's 1,316 lines)."""
    client = s3.admin_client()
    client.create_bucket(Bucket=name)
    client.put_bucket_policy(Bucket=name, Policy=json.dumps({"Version": "2012-10-17", "Statement": [{
        "Effect": "Allow", "Principal": "*", "Action": ["s3:ListBucket"], "Resource": [f"arn:aws:s3:::{name}"]}]}))
    for i in range(1, n + 1):
        client.put_object(Bucket=name, Key=f"bin-images/{i}.jpg", Body=b"x" * i)


def _cli(*args: str):
    from typer.testing import CliRunner

    from vsbench.cli.app import app

    return CliRunner().invoke(app, list(args))


def test_a_bucket_denying_anonymous_reads_gives_one_line_and_stops_early(local_s3, no_aws_credentials, tmp_path):
    """On main: one `failed ...: HTTP 403` line per object, then "run the same command again"."""
    _list_only_bucket(local_s3, "denies-anonymous-gets", 60)
    summary = download_abid("s3://denies-anonymous-gets", tmp_path, endpoint_url=local_s3.endpoint_url,
                            concurrency=4, progress=False)
    assert not summary.complete and not summary.resumable and summary.stopped_early
    assert summary.fetched == 0 and summary.failed == 60
    assert "refused anonymous reads" in summary.cause and "set AWS credentials" in summary.cause
    assert "run" not in summary.advice()
    result = _cli("abid", "download", "--dest", str(tmp_path / "cli"), "--source", "s3://denies-anonymous-gets",
                  "--endpoint-url", local_s3.endpoint_url, "--concurrency", "4")
    assert result.exit_code == 1
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("download:")]
    errors = [line for line in lines if line.startswith("error:")]
    assert len(lines) == len(errors) == 1 and errors[0].startswith("error: the bucket s3://denies-anonymous-gets at ")
    assert "refused anonymous reads (HTTP 403 AccessDenied): set AWS credentials" in errors[0] and "run the same command" not in result.stderr


def test_a_denied_listing_is_one_line_naming_the_bucket(no_aws_credentials, tmp_path, monkeypatch):
    """moto's server lists anonymously whatever the policy says, so the denial comes from a stub client."""
    from botocore.exceptions import ClientError

    from vsbench.abid import download

    class DeniedClient:
        def get_paginator(self, name):
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"},
                               "ResponseMetadata": {"HTTPStatusCode": 403}}, "ListObjectsV2")

    monkeypatch.setattr(download, "s3_client", lambda *args, **kwargs: DeniedClient())
    result = _cli("abid", "download", "--dest", str(tmp_path), "--source", "s3://private-bucket")
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr == ("error: the bucket s3://private-bucket refused anonymous reads (HTTP 403 AccessDenied): "
                             "set AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE) or check "
                             "the bucket policy\n")


def test_a_missing_bucket_names_the_uri_and_the_fix(local_s3, no_aws_credentials, tmp_path):
    result = _cli("abid", "download", "--dest", str(tmp_path), "--source", "s3://no-such-bucket",
                  "--endpoint-url", local_s3.endpoint_url)
    assert result.exit_code == 2 and result.stderr.count("\n") == 1  # a typed mistake, as every other one
    assert "the bucket s3://no-such-bucket" in result.stderr and "does not exist: check the s3:// URI" in result.stderr


def test_a_wrong_endpoint_names_it_once(no_aws_credentials, tmp_path):
    from vsbench.platform.local_s3 import free_port

    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = _cli("abid", "download", "--dest", str(tmp_path), "--source", "s3://b", "--endpoint-url", endpoint)
    assert result.exit_code == 1 and result.stderr.count("\n") == 1
    assert f"cannot connect to the S3 endpoint {endpoint}" in result.stderr and "--endpoint-url" in result.stderr


def test_bad_credentials_are_named(local_s3, public_bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOTAREALKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    from botocore.exceptions import ClientError

    from vsbench.io.storage import explain_s3_error

    denied = ClientError({"Error": {"Code": "InvalidAccessKeyId", "Message": "no"}}, "ListObjectsV2")
    assert "rejected the credentials (InvalidAccessKeyId)" in explain_s3_error(
        denied, "b", endpoint_url=None, anonymous=False)
    moved = ClientError({"Error": {"Code": "PermanentRedirect"}, "ResponseMetadata": {"HTTPStatusCode": 301}}, "x")
    assert "set AWS_DEFAULT_REGION" in explain_s3_error(moved, "b", endpoint_url=None, anonymous=True)
    from botocore.exceptions import NoCredentialsError

    assert "no AWS credentials found" in explain_s3_error(NoCredentialsError(), "b", endpoint_url=None,
                                                          anonymous=False)


# --- issue 18: two spellings of one id with different contents ------------------------------------


def _put_conflicting_spellings(s3: LocalS3, bucket: str) -> dict[str, bytes]:
    """Ids 1-6; id 2's image, id 5's metadata and both of id 6's files exist under both spellings with
    different bytes, id 3's image under both spellings with the same bytes (a plain duplicate)."""
    client = s3.admin_client()
    objects: dict[str, bytes] = {}
    for i in range(1, 7):
        objects[f"bin-images/{i}.jpg"] = f"image {i}".encode() * 10
        objects[f"metadata/{i}.json"] = json.dumps({"EXPECTED_QUANTITY": i, "BIN_FCSKU_DATA": {}}).encode()
    objects["bin-images/00002.jpg"] = b"another photo of bin 2, longer" * 10
    objects["metadata/00005.json"] = json.dumps({"EXPECTED_QUANTITY": 50, "BIN_FCSKU_DATA": {}}).encode()
    objects["bin-images/00003.jpg"] = objects["bin-images/3.jpg"]
    objects["bin-images/00006.jpg"] = b"another photo of bin 6" * 10
    objects["metadata/00006.json"] = json.dumps({"EXPECTED_QUANTITY": 60, "BIN_FCSKU_DATA": {}}).encode()
    for key, data in objects.items():
        client.put_object(Bucket=bucket, Key=key, Body=data)
    return objects


def test_two_spellings_with_different_contents_are_listed_as_conflicts(local_s3, public_bucket, no_aws_credentials,
                                                                       tmp_path):
    objects = _put_conflicting_spellings(local_s3, public_bucket)
    summary = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)
    assert summary.complete and summary.planned == 12
    # Counted per id: id 3 identical; ids 2 (image), 5 (metadata) and 6 (both kinds) differ.
    assert (summary.duplicate_spellings, summary.spelling_conflicts) == (1, 3)
    assert summary.spelling_conflict_kinds == {"image": 1, "metadata": 1, "image and metadata": 1}
    assert (tmp_path / "bin-images" / "00002.jpg").read_bytes() == objects["bin-images/2.jpg"]  # unpadded kept
    assert (tmp_path / "metadata" / "00005.json").read_bytes() == objects["metadata/5.json"]

    manifest = json.loads((tmp_path / MANIFEST_NAME).read_text())
    assert manifest["spelling_conflicts"] == len(manifest["conflicts"]) == 3
    assert manifest["spelling_conflict_kinds"] == summary.spelling_conflict_kinds
    image, metadata, both = manifest["conflicts"]
    md5 = hashlib.md5  # moto's ETag of a single-part upload is the MD5 of the bytes
    assert (image["bin_id"], image["kinds"]) == (2, ["image"])
    assert image["objects"]["image"]["kept"] == {
        "key": "bin-images/2.jpg", "size": len(objects["bin-images/2.jpg"]),
        "etag": md5(objects["bin-images/2.jpg"]).hexdigest()}
    assert image["objects"]["image"]["dropped"] == [
        {"key": "bin-images/00002.jpg", "size": len(objects["bin-images/00002.jpg"]),
         "etag": md5(objects["bin-images/00002.jpg"]).hexdigest()}]
    assert "unpadded key" in image["reason"]
    assert (metadata["bin_id"], metadata["kinds"]) == (5, ["metadata"])
    assert metadata["objects"]["metadata"]["dropped"][0]["key"] == "metadata/00005.json"
    assert (both["bin_id"], both["kinds"], sorted(both["objects"])) == (6, ["image", "metadata"], ["image", "metadata"])
    line = summary.conflict_warning()
    assert "\n" not in line
    assert line.startswith("warning: 3 ids have two spellings with different contents (image: 1, metadata: 1, "
                           "image and metadata: 1; ids 2, 5, 6); kept the unpadded key of each"), line


def test_fifty_ids_colliding_in_both_kinds_are_fifty(local_s3, public_bucket, no_aws_credentials, tmp_path):
    client = local_s3.admin_client()
    for i in range(1, 51):
        for kind, ext in (("bin-images", "jpg"), ("metadata", "json")):
            client.put_object(Bucket=public_bucket, Key=f"{kind}/{i}.{ext}", Body=f"{kind} {i}".encode())
            client.put_object(Bucket=public_bucket, Key=f"{kind}/{i:05d}.{ext}", Body=f"other {kind} {i}".encode())
    summary = download_abid(f"s3://{public_bucket}", tmp_path, endpoint_url=local_s3.endpoint_url, progress=False)
    assert summary.spelling_conflicts == 50 and summary.spelling_conflict_kinds == {"image and metadata": 50}
    assert summary.conflict_warning().startswith(
        "warning: 50 ids have two spellings with different contents (image and metadata: 50; ids 1, 2, 3, 4, 5, ...)")


def test_conflicts_are_counted_per_id_whichever_kind_comes_first(local_s3, public_bucket, no_aws_credentials,
                                                                  tmp_path, monkeypatch):
    """Issue 29, item 2: id 1 collides in both kinds, id 2 in its metadata, id 3 in its image, id 4 not at
    all (the same bytes twice): three ids, each counted once under what collides, in a fixed order."""
    from vsbench.abid import download

    client = local_s3.admin_client()
    for i in range(1, 5):
        client.put_object(Bucket=public_bucket, Key=f"bin-images/{i}.jpg", Body=f"image {i}".encode())
        client.put_object(Bucket=public_bucket, Key=f"metadata/{i}.json", Body=f'{{"n": {i}}}'.encode())
    for key in ("bin-images/00001.jpg", "metadata/00001.json", "metadata/00002.json", "bin-images/00003.jpg"):
        client.put_object(Bucket=public_bucket, Key=key, Body=b"the other spelling's bytes")
    client.put_object(Bucket=public_bucket, Key="bin-images/00004.jpg", Body=b"image 4")
    dest = tmp_path / "abid"
    result = _cli("abid", "download", "--dest", str(dest), "--source", f"s3://{public_bucket}",
                  "--endpoint-url", local_s3.endpoint_url)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: 3 ids have two spellings with different contents (image: 1, metadata: 1, image and metadata: 1; "
        "ids 1, 2, 3); kept the unpadded key of each (the unpadded key is the canonical spelling); both keys, sizes "
        f"and ETags are under 'conflicts' in {dest / MANIFEST_NAME}"]
    assert "  spelling_conflicts   3\n" in result.stdout and "  duplicate_spellings  1\n" in result.stdout
    manifest = json.loads((dest / MANIFEST_NAME).read_text())
    assert manifest["spelling_conflicts"] == len(manifest["conflicts"]) == 3
    assert [(c["bin_id"], c["kinds"]) for c in manifest["conflicts"]] == [
        (1, ["image", "metadata"]), (2, ["metadata"]), (3, ["image"])]
    assert list(manifest["spelling_conflict_kinds"].items()) == [("image", 1), ("metadata", 1),
                                                                  ("image and metadata", 1)]
    kinds = {}  # the counts per kind, recounted from the list
    for conflict in manifest["conflicts"]:
        label = " and ".join(conflict["kinds"])
        kinds[label] = kinds.get(label, 0) + 1
    assert kinds == manifest["spelling_conflict_kinds"]

    # More conflicts than the manifest lists: the count stays exact and the line says how many are listed.
    monkeypatch.setattr(download, "MAX_LISTED_CONFLICTS", 2)
    capped = download_abid(f"s3://{public_bucket}", tmp_path / "capped", endpoint_url=local_s3.endpoint_url,
                           progress=False)
    assert capped.spelling_conflicts == 3 and [c["bin_id"] for c in capped.conflicts] == [1, 2]
    assert "under 'conflicts' (the first 2 ids) in " in capped.conflict_warning()
    # One id: singular.
    one = download_abid(f"s3://{public_bucket}", tmp_path / "one", endpoint_url=local_s3.endpoint_url, limit=1,
                        progress=False)
    assert one.conflict_warning().startswith("warning: 1 id has two spellings with different contents "
                                             "(image and metadata: 1; id 1); ")


def test_conflicts_are_one_warning_line_in_the_cli_and_the_step(local_s3, public_bucket, no_aws_credentials,
                                                                tmp_path, capsys):
    from vsbench.steps.abid import abid_download_step

    _put_conflicting_spellings(local_s3, public_bucket)
    result = _cli("abid", "download", "--dest", str(tmp_path / "cli"), "--source", f"s3://{public_bucket}",
                  "--endpoint-url", local_s3.endpoint_url)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "3 ids have two spellings" in warnings[0]
    assert "spelling_conflicts" in result.output

    step = abid_download_step(f"s3://{public_bucket}", str(tmp_path / "step"), endpoint_url=local_s3.endpoint_url,
                              progress=False)
    assert step.metrics["spelling_conflicts"] == 3 and step.metrics["duplicate_spellings"] == 1
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert len(printed) == 1 and len(step.manifest["conflicts"]) == 3


# --- issue 29 item 8: a failed download leaves nothing it created -----------------------------------


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("case", ["missing bucket", "wrong port", "empty bucket", "wrong prefix"])
@pytest.mark.parametrize("existing", [False, True])
def test_a_failed_download_leaves_nothing_it_created(local_s3, public_bucket, no_aws_credentials, tmp_path, case,
                                                     existing):
    client = local_s3.admin_client()
    endpoint, source = local_s3.endpoint_url, f"s3://{public_bucket}"
    if case == "missing bucket":
        source = "s3://no-such-bucket-29"
    elif case == "wrong port":
        endpoint = f"http://127.0.0.1:{_free_port()}"
    elif case == "wrong prefix":
        client.put_object(Bucket=public_bucket, Key="abid/bin-images/1.jpg", Body=b"x")
        client.put_object(Bucket=public_bucket, Key="abid/metadata/1.json", Body=b"{}")
    root = tmp_path / "root"
    if existing:
        (root / "kept").mkdir(parents=True)
        (root / "kept" / "file.txt").write_text("mine")
        dest = root / "kept"
    else:
        dest = root / "new" / "nested" / "abid"
    result = _cli("abid", "download", "--dest", str(dest), "--source", source, "--endpoint-url", endpoint)
    assert result.exit_code == (1 if case == "wrong port" else 2), result.output  # 2: the URI typed is wrong
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    if case == "wrong prefix":
        assert errors[0] == (f"error: no ABID objects under {source}: 2 keys listed, none named bin-images/<id>.jpg or "
                             f"metadata/<id>.json (e.g. abid/bin-images/1.jpg); ABID keys sit under "
                             f"s3://{public_bucket}/abid: use that as --source")
    if case == "empty bucket":
        assert errors[0] == f"error: no objects under {source}: the bucket (or prefix) is empty; check the s3:// URI"
    if existing:
        assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == ["kept", "kept/file.txt"]
    else:
        assert not root.exists()


def _vsbench(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The real command (``python -m vsbench``) in a process of its own, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "vsbench", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _tree(root: Path) -> list[tuple[str, str]]:
    """Every path under ``root`` (``root`` included) with its kind and, for a file, its bytes."""
    if not root.exists():
        return []
    return sorted((p.relative_to(root.parent).as_posix(), "dir" if p.is_dir() else p.read_text())
                  for p in [root, *root.rglob("*")])


@pytest.mark.parametrize("case", ["missing bucket", "wrong port", "every GET denied"])
@pytest.mark.parametrize("dest_kind", ["new nested", "new through ..", "existing"])
def test_the_command_leaves_nothing_it_created_after_a_failure(local_s3, no_aws_credentials, tmp_path, case,
                                                               dest_kind):
    """Issue 29, item 8, through ``python -m vsbench abid download``: a new nested --dest (given plainly or
    as ``new/../other``) is gone after the failure; an existing one, with its own empty bin-images/, is
    as it was. "every GET denied" lists fine, writes the key log's folder, then fetches nothing."""
    source, endpoint = "s3://no-such-bucket-29b", local_s3.endpoint_url
    if case == "wrong port":
        source, endpoint = "s3://b", f"http://127.0.0.1:{_free_port()}"
    elif case == "every GET denied":
        source = f"s3://denies-gets-{dest_kind.replace(' ', '-').replace('.', 'dot')}"
        _list_only_bucket(local_s3, source.removeprefix("s3://"), 5)
    root = tmp_path / "root"
    root.mkdir()
    if dest_kind == "existing":
        dest = root / "data"
        (dest / "bin-images").mkdir(parents=True)  # a layout folder that was there before: kept
        (dest / "notes.txt").write_text("mine")
        arg = str(dest)
    elif dest_kind == "new nested":
        arg = str(root / "a" / "b" / "c")
    else:
        arg = "a/../x/y"  # relative to root: creates root/x/y, never root/a
    before = _tree(root)
    result = _vsbench("abid", "download", "--dest", arg, "--source", source, "--endpoint-url", endpoint,
                      "--concurrency", "2", cwd=root)
    assert result.returncode == (2 if case == "missing bucket" else 1), result.stderr  # 2: the URI typed is wrong
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    expected = {"missing bucket": "does not exist: check the s3:// URI",
                "wrong port": "cannot connect to the S3 endpoint",
                "every GET denied": "refused anonymous reads (HTTP 403 AccessDenied)"}[case]
    assert expected in errors[0]
    assert "manifest:" not in result.stdout
    assert _tree(root) == before


@pytest.mark.parametrize("blocker", ["dest is a file", "a parent is a file", "_manifests is a file",
                                     "metadata is a file"])
def test_a_destination_that_cannot_hold_the_layout_is_one_line_before_anything(local_s3, public_bucket,
                                                                                no_aws_credentials, tmp_path,
                                                                                blocker):
    _put_dataset(local_s3, public_bucket, n=3)
    root = tmp_path / "root"
    root.mkdir()
    (root / "file").write_text("in the way")
    dest, in_the_way = root / "data", root / "data" / "_manifests"
    if blocker == "dest is a file":
        dest = in_the_way = root / "file"
    elif blocker == "a parent is a file":
        dest, in_the_way = root / "file" / "abid", root / "file"
    else:
        in_the_way = root / "data" / blocker.split()[0]
        in_the_way.parent.mkdir()
        in_the_way.write_text("in the way")
    before = _tree(root)
    result = _cli("abid", "download", "--dest", str(dest), "--source", f"s3://{public_bucket}",
                  "--endpoint-url", local_s3.endpoint_url)
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: cannot download into {dest}: "
                                                                       f"{in_the_way} is ")
    assert "choose another --dest" in result.stderr
    assert _tree(root) == before  # nothing fetched, nothing created


def test_an_unwritable_destination_is_named(local_s3, public_bucket, no_aws_credentials, tmp_path, monkeypatch):
    """As root every folder is writable, so the permission check is shown its answer."""
    import os as os_module

    real_access = os_module.access
    monkeypatch.setattr(os_module, "access", lambda path, mode, **kw: (
        False if Path(path) == tmp_path else real_access(path, mode, **kw)))
    result = _cli("abid", "download", "--dest", str(tmp_path / "abid"), "--source", f"s3://{public_bucket}",
                  "--endpoint-url", local_s3.endpoint_url)
    assert result.exit_code == 1
    assert result.stderr == (f"error: cannot download into {tmp_path / 'abid'}: {tmp_path} is not writable by this "
                             "user; choose another --dest or fix its permissions\n")
    assert not (tmp_path / "abid").exists()
