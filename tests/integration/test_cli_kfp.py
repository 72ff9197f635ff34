"""`vsbench submit` and `vsbench schedule` as a user types them, against the KFP stand-in on 127.0.0.1."""

from __future__ import annotations

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
