"""``submit`` and ``schedule`` against a stand-in for the KFP v2beta1 API on 127.0.0.1, with the request
bodies asserted: the compiled spec (GPU settings included), parameters, experiment, cron, token."""

# No ``from __future__ import annotations``: kfp reads the component's and pipeline's annotations
# below as types, not strings.
import json
from collections.abc import Iterator
from pathlib import Path

import kfp
import pytest
import yaml
from kfp import compiler, dsl

from vsbench.platform.cluster import ClusterSettings
from vsbench.platform.compile import PIPELINES, load_pipeline
from vsbench.platform.kfp_client import parse_arguments, schedule, submit, validate_cron

from .kfp_standin import KfpStandIn

pytestmark = pytest.mark.integration

RUNS = "/apis/v2beta1/runs"
RECURRING = "/apis/v2beta1/recurringruns"
EXPERIMENTS = "/apis/v2beta1/experiments"
UPLOAD = "/apis/v2beta1/pipelines/upload"
UPLOAD_VERSION = "/apis/v2beta1/pipelines/upload_version"


@pytest.fixture
def kfp_api(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[KfpStandIn]:
    """A fresh stand-in per test, with no credentials or kfp settings leaking in from the environment."""
    for name in ("KFP_TOKEN", "KF_PIPELINES_ENDPOINT", "KF_PIPELINES_DEFAULT_EXPERIMENT_NAME",
                 "KF_PIPELINES_OVERRIDE_EXPERIMENT_NAME", "KF_PIPELINES_IAP_OAUTH2_CLIENT_ID",
                 "KF_PIPELINES_APP_OAUTH2_CLIENT_ID", "KF_PIPELINES_APP_OAUTH2_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "no-kfp-context.json"))
    with KfpStandIn() as server:
        yield server


def _compiled_docs(pipeline: str, tmp_path: Path) -> tuple[dict, dict]:
    """The pipeline compiled here, independently of kfp_client: (pipeline spec, platform spec)."""
    path = tmp_path / f"expected-{pipeline}.yaml"
    compiler.Compiler().compile(load_pipeline(pipeline, ClusterSettings()), package_path=str(path))
    spec, platform = yaml.safe_load_all(path.read_text())
    return spec, platform


def _root_parameters(pipeline: str) -> set[str]:
    return set(load_pipeline(pipeline).pipeline_spec.root.input_definitions.parameters)


# ------------------------------------------------------------------------------------------- submit

def test_submit_sends_the_compiled_spec_parameters_experiment_and_token(
        kfp_api: KfpStandIn, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KFP_TOKEN", "t0ken-from-env")
    arguments = {"limit": 100, "source": "s3://bucket/abid", "val_fraction": 0.25}

    run_id = submit(kfp_api.url, "abid", arguments=arguments, experiment="vsbench-ci", run_name="abid smoke")

    (created,) = kfp_api.requests_to("POST", EXPERIMENTS)
    assert created.body["display_name"] == "vsbench-ci"
    (run,) = kfp_api.requests_to("POST", RUNS)
    body = run.body
    assert run_id in kfp_api.runs and kfp_api.runs[run_id]["display_name"] == "abid smoke"
    assert body["experiment_id"] == kfp_api.runs[run_id]["experiment_id"] in kfp_api.experiments
    assert body["service_account"] == "vsbench-pipeline-runner"
    assert body["runtime_config"]["parameters"] == arguments
    assert isinstance(body["runtime_config"]["parameters"]["limit"], int)
    # A platform spec (GPUs, node pools, volumes) makes kfp send {pipeline_spec, platform_spec}.
    spec, platform = body["pipeline_spec"]["pipeline_spec"], body["pipeline_spec"]["platform_spec"]
    assert spec["pipelineInfo"]["name"] == "vsbench-abid"
    assert set(spec["root"]["inputDefinitions"]["parameters"]) == _root_parameters("abid")
    assert (spec, platform) == _compiled_docs("abid", tmp_path)
    assert "nvidia.com/gpu" in json.dumps(platform)
    assert all(r.headers.get("authorization") == "Bearer t0ken-from-env" for r in kfp_api.requests)


def test_submit_reuses_the_experiment_and_sends_no_credentials_without_a_token(kfp_api: KfpStandIn) -> None:
    first = submit(kfp_api.url, "abid", arguments={}, experiment="vsbench-ci")
    second = submit(kfp_api.url, "abid", arguments={"limit": 3}, experiment="vsbench-ci")

    assert first != second and len(kfp_api.requests_to("POST", RUNS)) == 2
    assert len(kfp_api.requests_to("POST", EXPERIMENTS)) == 1
    assert not [r for r in kfp_api.requests if "authorization" in r.headers]
    assert kfp_api.runs[second]["display_name"].startswith("vsbench-abid ")  # default: name and UTC time


@pytest.mark.parametrize("pipeline", sorted(PIPELINES))
def test_every_registered_pipeline_submits_under_its_own_name(kfp_api: KfpStandIn, pipeline: str) -> None:
    submit(kfp_api.url, pipeline, arguments={}, experiment="vsbench-ci")

    spec = kfp_api.requests_to("POST", RUNS)[0].body["pipeline_spec"]["pipeline_spec"]
    assert spec["pipelineInfo"]["name"] == load_pipeline(pipeline).pipeline_spec.pipeline_info.name
    assert set(spec["root"]["inputDefinitions"]["parameters"]) == _root_parameters(pipeline)


def test_submit_passes_the_namespace_on(kfp_api: KfpStandIn) -> None:
    submit(kfp_api.url, "abid", arguments={}, experiment="vsbench-ci", namespace="team-vision",
           service_account="other-runner")

    assert kfp_api.requests_to("POST", EXPERIMENTS)[0].body["namespace"] == "team-vision"
    assert kfp_api.requests_to("POST", RUNS)[0].body["service_account"] == "other-runner"


@pytest.mark.parametrize(("arguments", "message"), [
    ({"limt": 100}, "has no parameter 'limt'; valid parameters: .*limit"),
    ({"limit": "100"}, "'limit' is NUMBER_INTEGER, got str"),
    ({"limit": True}, "'limit' is NUMBER_INTEGER, got bool"),
])
def test_submit_refuses_bad_arguments_before_contacting_the_server(
        kfp_api: KfpStandIn, arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        submit(kfp_api.url, "abid", arguments=arguments, experiment="vsbench-ci")
    assert kfp_api.requests == []


# ----------------------------------------------------------------------------------------- schedule

def test_schedule_uploads_the_compiled_pipeline_and_creates_the_recurring_run(
        kfp_api: KfpStandIn, tmp_path: Path) -> None:
    arguments = {"limit": 0, "train_profile": "full"}

    job_id = schedule(kfp_api.url, "abid", cron="0 0 2 * * *", arguments=arguments, experiment="vsbench-nightly",
                      job_name="abid-nightly")

    (upload,) = kfp_api.requests_to("POST", UPLOAD)
    assert upload.param("name") == "vsbench-abid"
    uploaded = upload.files["uploadfile"].content
    assert b"nvidia.com/gpu" in uploaded
    assert tuple(yaml.safe_load_all(uploaded)) == _compiled_docs("abid", tmp_path)

    (created,) = kfp_api.requests_to("POST", RECURRING)
    body = created.body
    assert job_id in kfp_api.recurring_runs
    assert body["display_name"] == "abid-nightly"
    assert body["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert body["max_concurrency"] == 1 and body["no_catchup"] is True and body["mode"] == "ENABLE"
    assert body["runtime_config"]["parameters"] == arguments
    assert body["service_account"] == "vsbench-pipeline-runner"
    assert kfp_api.experiments[body["experiment_id"]]["display_name"] == "vsbench-nightly"
    # The recurring run pins the uploaded version; that version holds the compiled YAML.
    reference = body["pipeline_version_reference"]
    assert "pipeline_spec" not in body
    assert kfp_api.pipelines[reference["pipeline_id"]]["display_name"] == "vsbench-abid"
    assert kfp_api.uploads[reference["pipeline_version_id"]] == uploaded


def test_schedule_options_reach_the_body(kfp_api: KfpStandIn) -> None:
    schedule(kfp_api.url, "abid", cron="0  30 1 * *  MON-FRI", arguments={}, experiment="vsbench-nightly",
             job_name="weekdays", max_concurrency=2, no_catchup=False, service_account="other-runner")

    body = kfp_api.requests_to("POST", RECURRING)[0].body
    assert body["trigger"]["cron_schedule"]["cron"] == "0 30 1 * * MON-FRI"  # normalized spacing
    assert body["max_concurrency"] == 2 and body["no_catchup"] is False
    assert body["service_account"] == "other-runner"


def test_schedule_refuses_an_existing_name_unless_told_to_replace_it(kfp_api: KfpStandIn) -> None:
    options = {"cron": "0 0 2 * * *", "arguments": {}, "experiment": "vsbench-nightly", "job_name": "abid-nightly"}
    first = schedule(kfp_api.url, "abid", **options)

    with pytest.raises(ValueError, match=f"'abid-nightly' already exists.*{first}.*replace"):
        schedule(kfp_api.url, "abid", **options)
    assert len(kfp_api.requests_to("POST", RECURRING)) == 1
    assert not kfp_api.requests_to("POST", UPLOAD_VERSION)  # nothing uploaded for a refused schedule

    second = schedule(kfp_api.url, "abid", **options, replace=True)

    assert list(kfp_api.recurring_runs) == [second] and second != first
    (deleted,) = kfp_api.requests_to("DELETE", f"{RECURRING}/{first}")
    # The pipeline existed, so the second upload is a new version of it, which the new run pins.
    (version_upload,) = kfp_api.requests_to("POST", UPLOAD_VERSION)
    assert version_upload.param("pipelineid") == kfp_api.recurring_runs[second]["pipeline_version_reference"][
        "pipeline_id"]
    assert version_upload.param("name").startswith("vsbench-abid-")
    assert len(kfp_api.pipelines) == 1 and len(kfp_api.versions) == 2
    created = kfp_api.requests_to("POST", RECURRING)[1]
    assert kfp_api.requests.index(created) < kfp_api.requests.index(deleted)  # the old schedule goes only once the new one exists


def test_schedule_refuses_a_crontab_before_contacting_the_server(kfp_api: KfpStandIn) -> None:
    with pytest.raises(ValueError, match=r"5 fields.*seconds first.*'0 0 2 \* \* \*'"):
        schedule(kfp_api.url, "abid", cron="0 2 * * *", arguments={}, experiment="e", job_name="j")
    assert kfp_api.requests == []


# ---------------------------------------------------------------------------------------------- cron

@pytest.mark.parametrize("expression", [
    "0 0 2 * * *", "*/15 * * * * *", "0 0 0 1 JAN ?", "0 0 2 ? * mon-fri", "0 5,35 8-18/2 1-15 1-12 0-6",
    "59 59 23 31 12 SAT", "0 0 2 * * 1/2",
])
def test_valid_cron_passes(expression: str) -> None:
    assert validate_cron(expression) == expression


def test_five_field_crontab_gets_the_six_field_suggestion() -> None:
    with pytest.raises(ValueError) as caught:
        validate_cron("0 2 * * *")
    message = str(caught.value)
    assert "5 fields" in message and "six fields, seconds first, in UTC" in message
    assert "Did you mean '0 0 2 * * *'?" in message


@pytest.mark.parametrize(("expression", "problem"), [
    ("0 0 2 * *", "5 fields"),
    ("0 0 0 2 * * *", "7 fields"),
    ("@daily", "1 fields"),
    ("60 0 2 * * *", "seconds field '60': 60 is out of range 0-59"),
    ("0 60 2 * * *", "minutes field"),
    ("0 0 24 * * *", "hours field '24': 24 is out of range 0-23"),
    ("0 0 2 0 * *", "day of month field '0': 0 is out of range 1-31"),
    ("0 0 2 * 13 *", "month field"),
    ("0 0 2 * * 7", "day of week field '7': 7 is out of range 0-6"),
    ("0 0 5-2 * * *", "range '5-2' runs backwards"),
    ("0 0 */0 * * *", "step '0' must be a positive whole number"),
    ("0 0 2 * * FUN", "'FUN' is not a number or one of SUN"),
    ("0 0 two * * *", "'two' is not a number"),
    ("? 0 2 * * *", "'\\?' is only allowed"),
    ("0 0 1-2-3 * * *", "not '\\*', a value, or a range"),
    ("0 0 1,,2 * * *", "hours field"),
    ("0 0 2 L * *", "day of month field"),
])
def test_invalid_cron_is_refused_with_the_reason(expression: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        validate_cron(expression)


# ----------------------------------------------------------------------------------------- arguments

@dsl.component(base_image="python:3.11-slim", install_kfp_package=False)
def _echo(text: str) -> str:
    return text


def _typed_pipeline(cluster: ClusterSettings | None = None):
    """A pipeline with one parameter of each KFP type, one of them required."""

    @dsl.pipeline(name="typed")
    def typed(name: str, count: int = 1, ratio: float = 0.5, flag: bool = False, tags: list = [],  # noqa: B006
              options: dict = {}):  # noqa: B006
        _echo(text=name)

    return typed


@pytest.fixture
def typed_pipeline(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(PIPELINES, "typed", (__name__, "_typed_pipeline"))
    return "typed"


def test_parse_arguments_types_values_by_the_pipeline() -> None:
    parsed = parse_arguments(["limit=100", "source=s3://x/y?a=b", "val_fraction=0.25", "device= cuda"],
                             pipeline="abid")
    assert parsed == {"limit": 100, "source": "s3://x/y?a=b", "val_fraction": 0.25, "device": " cuda"}
    assert isinstance(parsed["limit"], int) and isinstance(parsed["val_fraction"], float)
    assert parse_arguments([], pipeline="abid") == {}


def test_parse_arguments_covers_every_kfp_type(typed_pipeline: str) -> None:
    parsed = parse_arguments(["name=x", "count=7", "ratio=1e-3", "flag=TRUE", 'tags=["a", 2]', 'options={"k": 1}'],
                             pipeline=typed_pipeline)
    assert parsed == {"name": "x", "count": 7, "ratio": 0.001, "flag": True, "tags": ["a", 2], "options": {"k": 1}}
    assert parse_arguments(["flag=no"], pipeline=typed_pipeline) == {"flag": False}


@pytest.mark.parametrize(("pairs", "message"), [
    (["limt=100"], "'abid' has no parameter 'limt'; valid parameters: concurrency, data_root, device"),
    (["limit"], "'limit' is not NAME=VALUE"),
    (["=3"], "not NAME=VALUE"),
    (["limit=1", "limit=2"], "'limit' is given twice"),
    (["limit=ten"], "'limit' takes an integer, got 'ten'"),
    (["limit=1.5"], "takes an integer"),
    (["val_fraction=a lot"], "'val_fraction' takes a finite number"),
    (["val_fraction=nan"], "'val_fraction' takes a finite number"),
])
def test_parse_arguments_errors_name_the_problem(pairs: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_arguments(pairs, pipeline="abid")


@pytest.mark.parametrize(("pairs", "message"), [
    (["flag=maybe"], "'flag' takes true or false"),
    (["tags={}"], "'tags' takes a JSON list"),
    (["options=[1]"], "'options' takes a JSON object"),
    (["options={bad json"], "'options' takes a JSON object"),
])
def test_parse_arguments_refuses_badly_typed_values(typed_pipeline: str, pairs: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_arguments(pairs, pipeline=typed_pipeline)


def test_submit_refuses_a_missing_required_parameter(kfp_api: KfpStandIn, typed_pipeline: str) -> None:
    with pytest.raises(ValueError, match="needs parameters without defaults: name"):
        submit(kfp_api.url, typed_pipeline, arguments={"count": 2}, experiment="e")
    assert kfp_api.requests == []


def test_parse_arguments_rejects_an_unknown_pipeline() -> None:
    with pytest.raises(ValueError, match="unknown pipeline 'nope'"):
        parse_arguments(["a=1"], pipeline="nope")
