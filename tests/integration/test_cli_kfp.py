"""`vsbench submit` and `vsbench schedule` as a user types them, against the KFP stand-in on 127.0.0.1."""

from __future__ import annotations

import socket

import pytest
import yaml
from typer.testing import CliRunner

from vsbench.cli.app import app

from .kfp_standin import API, KfpStandIn

runner = CliRunner()


def test_submit_sends_the_compiled_pipeline_and_typed_arguments(monkeypatch):
    monkeypatch.setenv("KFP_TOKEN", "t0ken")
    with KfpStandIn() as kfp_api:
        result = runner.invoke(app, ["submit", "--host", kfp_api.url, "--pipeline", "abid", "--arg", "limit=100",
                                     "--arg", "source=s3://bucket", "--experiment", "nightly-tests"])
        assert result.exit_code == 0, result.output
        (request,) = kfp_api.requests_to("POST", f"{API}/runs")
    body = request.body
    assert request.headers["authorization"] == "Bearer t0ken"
    assert body["pipeline_spec"]["pipeline_spec"]["pipelineInfo"]["name"] == "vsbench-abid"
    assert "nvidia.com/gpu" in str(body["pipeline_spec"]["pipeline_spec"]["deploymentSpec"])
    parameters = body["runtime_config"]["parameters"]
    assert parameters["limit"] == 100 and parameters["source"] == "s3://bucket"
    assert body["service_account"] == "vsbench-pipeline-runner"
    assert "run " in result.output


def test_schedule_sends_the_cron_and_uploads_the_gpu_pipeline():
    with KfpStandIn() as kfp_api:
        result = runner.invoke(app, ["schedule", "--host", kfp_api.url, "--cron", "0 0 2 * * *",
                                     "--pipeline", "nightly", "--arg", "report_last=10"])
        assert result.exit_code == 0, result.output
        (request,) = kfp_api.requests_to("POST", f"{API}/recurringruns")
        uploads = kfp_api.uploads
    body = request.body
    assert body["trigger"]["cron_schedule"]["cron"] == "0 0 2 * * *"
    assert body["runtime_config"]["parameters"]["report_last"] == 10
    assert body["max_concurrency"] == "1" or body["max_concurrency"] == 1
    (uploaded,) = uploads.values()
    documents = [doc for doc in yaml.safe_load_all(uploaded) if doc]
    assert documents[0]["pipelineInfo"]["name"] == "vsbench-nightly"
    assert "nvidia.com/gpu" in uploaded.decode()


def test_five_field_cron_is_refused_before_any_request():
    with KfpStandIn() as kfp_api:
        result = runner.invoke(app, ["schedule", "--host", kfp_api.url, "--cron", "0 2 * * *"])
        assert result.exit_code == 2
        assert "six fields" in result.output and "0 0 2 * * *" in result.output
        assert not kfp_api.requests_to("POST", f"{API}/recurringruns")


def test_unknown_pipeline_parameter_is_named():
    result = runner.invoke(app, ["submit", "--host", "http://127.0.0.1:9", "--pipeline", "abid", "--arg", "limt=5"])
    assert result.exit_code == 2 and "limt" in result.output


def _closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then closed): a connection is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("command", [["submit", "--pipeline", "abid"], ["schedule", "--cron", "0 0 2 * * *"]])
def test_an_unreachable_host_is_one_line_naming_it_and_the_fix(command, tmp_path, monkeypatch):
    """Issue 57: a closed port (a port-forward not running) was 'unexpected MaxRetryError' and a
    traceback file, exit 1; it is one error line naming the host and what to check, exit 2."""
    monkeypatch.setenv("VSBENCH_ERROR_DIR", str(tmp_path / "errors"))
    host = f"http://127.0.0.1:{_closed_port()}"
    result = runner.invoke(app, [*command, "--host", host])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert host in lines[0] and "connection refused" in lines[0]
    assert "--host" in lines[0] and "port-forward" in lines[0]
    assert "unexpected" not in lines[0] and "Traceback" not in result.output
    assert not (tmp_path / "errors").exists()


def test_a_server_that_is_not_the_kfp_api_is_one_line_with_its_status(tmp_path, monkeypatch):
    """A URL that answers, but 404 at kfp's health check (another web server, a wrong path): kfp retries
    5 times, logging a traceback each; that is one line naming the host and the status, exit 2."""
    import kfp.client.client

    monkeypatch.setattr(kfp.client.client.time, "sleep", lambda seconds: None)  # kfp waits 5 s a retry
    monkeypatch.setenv("VSBENCH_ERROR_DIR", str(tmp_path / "errors"))
    with KfpStandIn() as kfp_api:
        host = f"{kfp_api.url}/not-the-api"
        result = runner.invoke(app, ["submit", "--host", host, "--pipeline", "abid"])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert host in lines[0] and "HTTP 404" in lines[0] and "--host" in lines[0]
    assert not (tmp_path / "errors").exists()
