"""Issue 39: an --endpoint-url that is not S3 (a plain web server) or not there at all ends in one line
naming the endpoint and the fix, for every command that talks to S3 (download's listing, synth's
upload), never "unexpected ClientError" with a traceback file."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.platform.local_s3 import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def plain_http(tmp_path: Path) -> Iterator[str]:
    """``python -m http.server`` on 127.0.0.1 over an empty folder: a bare 404 for every GET, a bare 501
    for every PUT (no S3 error code in either)."""
    root = tmp_path / "www"
    root.mkdir()
    handler = partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None  # type: ignore[attr-defined]
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _cli(*args: str):
    return CliRunner().invoke(app, list(args))


def _one_error(result) -> str:
    assert "Traceback" not in result.output and "unexpected" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


def test_download_from_a_plain_web_server_names_the_endpoint_and_the_fix(plain_http, no_aws_credentials,
                                                                         tmp_path):
    result = _cli("abid", "download", "--dest", str(tmp_path / "d"), "--source", "s3://abid",
                  "--endpoint-url", plain_http)
    assert result.exit_code == 2, result.output
    line = _one_error(result)
    assert line == (f"error: the endpoint {plain_http} answered ListObjectsV2 on s3://abid with a bare HTTP 404 (no "
                    "S3 error code): it is not an S3 endpoint, or not one serving this bucket; check --endpoint-url "
                    "(the S3 API's URL, e.g. http://host:9000 for MinIO) and that the bucket 'abid' is served there")
    assert not (tmp_path / "d").exists()


def test_download_with_credentials_says_the_same(plain_http, no_aws_credentials, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    result = _cli("abid", "download", "--dest", str(tmp_path / "d"), "--source", "s3://abid/some/prefix",
                  "--endpoint-url", plain_http)
    assert result.exit_code == 2 and "is not an S3 endpoint" in _one_error(result), result.output


def test_synth_upload_to_a_dead_port_names_the_endpoint(no_aws_credentials, tmp_path):
    endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    result = _cli("synth", "abid", "--out", "s3://bucket/abid", "--bins", "3", "--endpoint-url", endpoint)
    assert result.exit_code == 1, result.output  # a service down may come back: not a typed mistake
    assert _one_error(result) == (f"error: cannot connect to the S3 endpoint {endpoint}: check --endpoint-url "
                                  "(scheme, host and port) and the network")


def test_synth_upload_to_a_plain_web_server_names_the_endpoint(plain_http, no_aws_credentials):
    result = _cli("synth", "abid", "--out", "s3://bucket/abid", "--bins", "3", "--endpoint-url", plain_http)
    assert result.exit_code == 2, result.output
    line = _one_error(result)
    assert line.startswith(f"error: the endpoint {plain_http} answered PutObject on s3://bucket with a bare HTTP 501")
    assert "check --endpoint-url" in line


def test_synth_upload_to_a_missing_bucket_names_it(local_s3, no_aws_credentials):
    result = _cli("synth", "abid", "--out", "s3://no-such-synth-bucket/abid", "--bins", "2",
                  "--endpoint-url", local_s3.endpoint_url)
    assert result.exit_code == 2, result.output
    assert "the bucket s3://no-such-synth-bucket" in _one_error(result) and "does not exist" in result.stderr
