"""Issue 26 part 6: `vsbench track upload` treats a run bundle as data, not as instructions.

Each case was found on main: an artifact path naming any file on the machine (a credentials file
copied into the store, the run left RUNNING); the bundle's own tracking URI contacted when no
MLFLOW_TRACKING_URI is set; a forged bundle appending a metric to an existing run; a wrongly typed
field giving a traceback; a 600 MB bundle read whole (2.6 GB of memory)."""

from __future__ import annotations

import json
import socket
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.tracking.command import BUNDLE_NAME, read_bundle, upload_bundle, write_bundle


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("VSBENCH_MLFLOW_ARTIFACT_LOCATION", str(tmp_path / "artifacts"))
    return uri


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port that would accept a connection: whether anything connected is checked afterwards."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    yield sock
    sock.close()


def _bundle(folder: Path, **overrides) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text('{"uap": 1.0}\n')
    run = {"experiment": "exp", "pipeline": "vsbench-similarity", "params": {"model": "m"},
           "metrics": {"uap": 1.0}, "artifacts": {str(folder / "metrics.json"): ""}, **overrides}
    return write_bundle(folder / BUNDLE_NAME, **run)


def _edit(bundle: Path, change, *, redigest: bool) -> None:
    """Change a bundle's JSON as a forger would; ``redigest``: recompute its digest too."""
    data = json.loads(bundle.read_text())
    change(data)
    if redigest:
        from vsbench.tracking.bundles import content_digest

        content = {k: v for k, v in data.items() if k not in ("uploaded", "digest", "tracking_uri")}
        data["digest"] = content_digest(content)
    bundle.write_text(json.dumps(data))


def _entry(path: str, real: Path) -> dict:
    """An artifact entry as a forger writes it: with the real file's size and sha256, so that the
    check under test is the one that refuses it (since issue 37 a missing sha256 is refused first)."""
    import hashlib

    data = real.read_bytes()
    return {"path": path, "folder": "", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def _upload(*args: str):
    return CliRunner().invoke(app, ["track", "upload", *args])


def _one_line_error(result, *fragments: str) -> str:
    assert result.exit_code != 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.output.splitlines() if "not uploaded" in line or "error" in line]
    assert len(lines) == 1, result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _runs(uri: str) -> list:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("exp")
    return [] if experiment is None else client.search_runs([experiment.experiment_id])


# --- artifacts only from the bundle's own folder ----------------------------------------------------

def test_an_artifact_path_outside_the_bundles_folder_is_refused_and_no_run_is_made(tmp_path, store):
    secret = tmp_path / "home" / ".aws" / "credentials"
    secret.parent.mkdir(parents=True)
    secret.write_text("[default]\naws_secret_access_key = hunter2\n")
    bundle = _bundle(tmp_path / "out")
    _edit(bundle, lambda d: d["artifacts"].append(_entry(str(secret), secret)), redigest=True)
    line = _one_line_error(_upload(str(bundle)), "artifacts.1.path", str(secret), "outside the bundle's folder")
    assert "hunter2" not in line
    assert _runs(store) == []  # validated before the store is contacted: nothing RUNNING, nothing copied
    assert not [p for p in tmp_path.joinpath("artifacts").rglob("credentials")]


def test_a_relative_path_climbing_out_and_a_symlink_pointing_out_are_refused(tmp_path, store):
    outside = tmp_path / "secret.txt"
    outside.write_text("hunter2")
    bundle = _bundle(tmp_path / "out")
    _edit(bundle, lambda d: d["artifacts"].append(_entry("../secret.txt", outside)), redigest=True)
    _one_line_error(_upload(str(bundle)), "artifacts.1.path", "../secret.txt", "outside")

    bundle = _bundle(tmp_path / "out2")
    (tmp_path / "out2" / "link.txt").symlink_to(outside)
    _edit(bundle, lambda d: d["artifacts"].append(_entry("link.txt", outside)), redigest=True)
    _one_line_error(_upload(str(bundle)), "artifacts.1.path", "link.txt", str(outside.resolve()))
    assert _runs(store) == []


def test_a_hidden_file_in_the_bundles_folder_is_refused(tmp_path, store):
    """A bundle dropped in a home folder could name .aws/credentials "beside" it."""
    bundle = _bundle(tmp_path / "home")
    (tmp_path / "home" / ".aws").mkdir()
    (tmp_path / "home" / ".aws" / "credentials").write_text("hunter2")
    credentials = tmp_path / "home" / ".aws" / "credentials"
    _edit(bundle, lambda d: d["artifacts"].append(_entry(".aws/credentials", credentials)), redigest=True)
    _one_line_error(_upload(str(bundle)), "artifacts.1.path", ".aws/credentials", "hidden")
    assert _runs(store) == []


def test_an_artifact_folder_that_climbs_out_of_the_run_is_refused(tmp_path, store):
    bundle = _bundle(tmp_path / "out")
    _edit(bundle, lambda d: d["artifacts"][0].update(folder="../../elsewhere"), redigest=True)
    _one_line_error(_upload(str(bundle)), "artifacts.0.folder", "not a plain relative folder")
    assert _runs(store) == []


def test_write_bundle_records_artifacts_relative_with_size_and_digest_and_leaves_out_others(tmp_path, capsys):
    bundle = _bundle(tmp_path / "out")
    (artifact,) = read_bundle(bundle)["artifacts"]
    assert artifact["path"] == "metrics.json" and artifact["size"] == len('{"uap": 1.0}\n')
    assert len(artifact["sha256"]) == 64 and len(read_bundle(bundle)["digest"]) == 64
    (tmp_path / "elsewhere.json").write_text("{}")
    bundle = _bundle(tmp_path / "out", artifacts={str(tmp_path / "elsewhere.json"): ""})
    assert read_bundle(bundle)["artifacts"] == []
    assert "elsewhere.json is outside the run bundle's folder" in capsys.readouterr().err


# --- the store comes from the environment or the default, never from the bundle -------------------

def test_no_tracking_uri_set_means_the_default_store_not_the_bundles_own(tmp_path, monkeypatch, listener):
    bundle_uri = f"http://127.0.0.1:{listener.getsockname()[1]}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", bundle_uri)  # where the run was meant to go when written
    bundle = _bundle(tmp_path / "out")
    assert read_bundle(bundle)["tracking_uri"] == bundle_uri
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("VSBENCH_DEFAULT_STORE")
    result = _upload(str(bundle))
    assert result.exit_code == 0, result.output
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing ever connected to the bundle's URI
    import os

    uploaded = read_bundle(bundle)["uploaded"]
    assert uploaded["tracking_uri"] == f"sqlite:///{Path(os.environ['VSBENCH_HOME']).resolve() / 'mlflow.db'}"
    assert "local store" in result.output
    assert len(_runs(uploaded["tracking_uri"])) == 1


def test_no_store_at_all_is_one_line_not_the_bundles_uri(tmp_path, monkeypatch, listener):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{listener.getsockname()[1]}")
    bundle = _bundle(tmp_path / "out")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")  # and VSBENCH_DEFAULT_STORE=off (conftest)
    _one_line_error(_upload(str(bundle)), "MLFLOW_TRACKING_URI is not set", "--tracking-uri")
    with pytest.raises(BlockingIOError):
        listener.accept()


def test_credentials_in_the_tracking_uri_are_not_written_into_the_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "https://alice:s3cret@mlflow.example:8443/path")
    bundle = _bundle(tmp_path / "out")
    assert "s3cret" not in bundle.read_text() and "alice" not in bundle.read_text()
    assert read_bundle(bundle)["tracking_uri"] == "https://mlflow.example:8443/path"


# --- a run is only ever completed by the bundle that made it ----------------------------------------

@pytest.mark.parametrize("redigest", [False, True], ids=["digest-left", "digest-recomputed"])
def test_a_forged_bundle_for_an_existing_run_key_is_refused_and_the_history_is_unchanged(tmp_path, store, redigest):
    from mlflow.tracking import MlflowClient

    bundle = _bundle(tmp_path / "out")
    run_id = upload_bundle(bundle)
    forged = tmp_path / "forged" / BUNDLE_NAME
    forged.parent.mkdir()
    original = json.loads(bundle.read_text())
    forged.write_text(json.dumps({**original, "artifacts": [], "uploaded": None}))
    (tmp_path / "forged" / "metrics.json").write_text('{"uap": 0.01}\n')

    def lower(data):
        data["metrics"]["uap"] = 0.01
        data["end_ms"] += 1000  # a later timestamp: on main this became the run's latest value

    _edit(forged, lower, redigest=redigest)
    expected = "edited" if not redigest else "a run made from a different bundle"
    _one_line_error(_upload(str(forged)), str(forged), expected)
    client = MlflowClient(store)
    assert [m.value for m in client.get_metric_history(run_id, "uap")] == [1.0]
    assert client.get_run(run_id).info.status == "FINISHED"


def test_a_bundle_naming_a_pipeline_runs_key_is_refused(tmp_path, store):
    """A pipeline's parent run carries the same run-key tag but no bundle digest."""
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.provenance import RUN_KEY_TAG
    from vsbench.tracking.runs import ensure_experiment

    client = MlflowClient(store)
    kfp_run = "0b3a7c1e-5d2f-4c1a-9e8b-7f6d5c4b3a21"
    run_id = client.create_run(ensure_experiment(client, "exp"), tags={RUN_KEY_TAG: kfp_run}).info.run_id
    client.log_metric(run_id, "uap", 1.0)
    bundle = _bundle(tmp_path / "out", run_key=kfp_run, metrics={"uap": 0.01})
    _one_line_error(_upload(str(bundle)), "a run not made from a bundle", run_id)
    assert [m.value for m in client.get_metric_history(run_id, "uap")] == [1.0]


def test_uploading_twice_keeps_one_run_and_one_value_per_metric(tmp_path, store):
    from mlflow.tracking import MlflowClient

    bundle = _bundle(tmp_path / "out", metrics={"uap": 1.0, "recall": 0.5})
    first = _upload(str(bundle))
    assert first.exit_code == 0, first.output
    again = _upload(str(bundle), "--force")
    assert again.exit_code == 0, again.output
    (run,) = _runs(store)
    client = MlflowClient(store)
    from vsbench.tracking.bundles import DIGEST_TAG

    assert run.data.tags[DIGEST_TAG] == read_bundle(bundle)["digest"]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "uap")] == [1.0]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "recall")] == [0.5]
    assert run.info.status == "FINISHED"


def test_a_failed_upload_ends_the_run_failed_and_a_retry_completes_it(tmp_path, store, monkeypatch):
    from mlflow.tracking import MlflowClient

    bundle = _bundle(tmp_path / "out")
    real = MlflowClient.log_artifact

    def broken(self, *args, **kwargs):
        raise ConnectionError("store went away")

    monkeypatch.setattr(MlflowClient, "log_artifact", broken)
    result = _upload(str(bundle))
    _one_line_error(result, "store went away")
    (run,) = _runs(store)
    assert run.info.status == "FAILED"  # never left RUNNING
    monkeypatch.setattr(MlflowClient, "log_artifact", real)
    retry = _upload(str(bundle))
    assert retry.exit_code == 0, retry.output
    (run,) = _runs(store)
    client = MlflowClient(store)
    assert run.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "uap")] == [1.0]
    assert [a.path for a in client.list_artifacts(run.info.run_id)] == ["metrics.json"]


def test_an_artifact_changed_after_the_bundle_was_written_is_refused(tmp_path, store):
    bundle = _bundle(tmp_path / "out")
    (tmp_path / "out" / "metrics.json").write_text('{"uap": 0.9}\n')  # same size, other bytes
    _one_line_error(_upload(str(bundle)), "artifacts.0.path", "changed since the bundle was written")
    assert _runs(store) == []


def test_a_bundle_written_before_digests_is_refused_saying_to_rerun_its_command(tmp_path, store):
    """The format before issue 26: absolute artifact paths, no sizes, hashes or digest. Issue 37: a
    bundle without a digest vouches for nothing (anyone can write one), so it is refused in one line."""
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "metrics.json").write_text("{}")
    legacy = {"format": 1, "experiment": "exp", "pipeline": "p", "run_key": "cli-20260101T000000-abcdef",
              "run_name": "p-cli-20260101T000000-abcdef", "start_ms": 1, "end_ms": 2,
              "tracking_uri": "http://127.0.0.1:1", "params": {"a": "1"}, "metrics": {"uap": 0.5},
              "tags": {"vsbench.run_key": "cli-20260101T000000-abcdef"},
              "artifacts": [{"path": str(folder / "metrics.json"), "folder": ""}], "uploaded": None}
    (folder / BUNDLE_NAME).write_text(json.dumps(legacy))
    _one_line_error(_upload(str(folder / BUNDLE_NAME)), str(folder / BUNDLE_NAME), "field digest",
                    "missing", "re-run the command that wrote it")
    assert _runs(store) == []


# --- malformed fields and sizes: one line each, before anything is read whole ------------------------

@pytest.mark.parametrize(("change", "fragments"), [
    (lambda d: d.update(uploaded="yes"), ("field uploaded", "valid dictionary")),
    (lambda d: d.update(metrics={"uap": "high"}), ("field metrics.uap", "valid number")),
    (lambda d: d.update(params=["a"]), ("field params", "valid dictionary")),
    (lambda d: d.update(start_ms="yesterday"), ("field start_ms", "valid integer")),
    (lambda d: d.update(run_key="x' or 1=1 or tags.a = 'b"), ("field run_key", "pattern")),
    (lambda d: d.update(extra="field"), ("field extra", "not permitted")),
    (lambda d: d["artifacts"].append("metrics.json"), ("field artifacts.1", "valid dictionary")),
    (lambda d: d.update(format=2), ("not a vsbench run bundle",)),
    (lambda d: d["tags"].update({"mlflow.parentRunId": "abc"}), ("field tags", "mlflow.parentRunId")),
])
def test_a_malformed_field_is_one_line_naming_it(tmp_path, store, change, fragments):
    bundle = _bundle(tmp_path / "out")
    _edit(bundle, change, redigest=False)
    _one_line_error(_upload(str(bundle)), str(bundle), *fragments)
    assert _runs(store) == []


def test_an_oversized_bundle_is_refused_quickly_without_reading_it(tmp_path, store):
    bundle = tmp_path / "out" / BUNDLE_NAME
    bundle.parent.mkdir()
    with bundle.open("wb") as handle:  # 600 MB (sparse): on main this took 2.6 GB of memory
        handle.write(b'{"format": 1, "run_key": "cli-x", "params": {"a": "')
        handle.truncate(600 << 20)
    tracemalloc.start()
    started = time.monotonic()
    result = _upload(str(bundle))
    seconds = time.monotonic() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    _one_line_error(result, str(bundle), "600.0 MiB", "VSBENCH_MAX_BUNDLE_BYTES")
    assert seconds < 5 and peak < 20 << 20, (seconds, peak)


def test_too_many_entries_and_too_large_an_artifact_are_refused_naming_the_variable(tmp_path, store, monkeypatch):
    bundle = _bundle(tmp_path / "out", metrics={f"m{i}": float(i) for i in range(5)})
    monkeypatch.setenv("VSBENCH_MAX_BUNDLE_METRICS", "4")
    _one_line_error(_upload(str(bundle)), "field metrics", "5 entries", "VSBENCH_MAX_BUNDLE_METRICS")
    monkeypatch.delenv("VSBENCH_MAX_BUNDLE_METRICS")
    monkeypatch.setenv("VSBENCH_MAX_ARTIFACT_BYTES", "4")
    _one_line_error(_upload(str(bundle)), "artifacts.0.path", "VSBENCH_MAX_ARTIFACT_BYTES")
    assert _runs(store) == []


def test_a_pipeline_run_kept_for_later_uploads_its_step_manifests(tmp_path, store, capsys):
    """What `vsbench abid run` keeps when the store was down: step manifests deep in the run folder."""
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.command import keep_for_later

    run_dir = tmp_path / "kfp" / "run-1"
    manifests = {}
    for step in ("abid-resize", "abid-score"):
        path = run_dir / "for-loop-2-iteration-0" / step / "manifest"
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps({"step": step}))
        manifests[str(path)] = f"steps/{step}"
    bundle = keep_for_later(run_dir / BUNDLE_NAME, lambda _: None, experiment="exp", pipeline="vsbench-abid",
                            params={"seed": 3}, metrics={"counting_acc": 0.25}, tags={"vsbench.profile": "demo"},
                            artifacts=manifests)
    assert _upload(str(tmp_path / "kfp")).exit_code == 0
    (run,) = _runs(store)
    client = MlflowClient(store)
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id, "steps")) == [
        "steps/abid-resize", "steps/abid-score"]
    assert read_bundle(bundle)["uploaded"]["run_id"] == run.info.run_id


# --- issue 37: the digests are required, and cover all that decides the run ---------------------------

def _inflate(data: dict) -> None:
    data["metrics"]["uap"] = 0.999  # what the hand edit was after


def _blank_all(data: dict) -> None:
    """The issue's reproduction: the digest and every artifact's sha256 blanked, uap edited."""
    _inflate(data)
    data["digest"] = ""
    for artifact in data["artifacts"]:
        artifact["sha256"] = ""


@pytest.mark.parametrize(("change", "fragments"), [
    (_blank_all, ("field digest", "blank", "re-run the command that wrote it")),
    (lambda d: (_inflate(d), d.update(digest="")), ("field digest", "blank")),
    (lambda d: (_inflate(d), d.pop("digest")), ("field digest", "missing")),
    (lambda d: (_inflate(d), d.update(digest=None)), ("field digest", "null")),
    (lambda d: (_inflate(d), d.update(digest="z" * 64)), ("field digest", "not a sha256")),
    (lambda d: (_inflate(d), d.update(digest=d["digest"].upper())), ("field digest", "not a sha256")),
    (lambda d: (_inflate(d), d.update(digest=d["digest"][:40])), ("field digest", "not a sha256")),
    (lambda d: (_inflate(d), d.update(digest=7)), ("field digest", "not a sha256")),
    (lambda d: d["artifacts"][0].update(sha256=""), ("field artifacts.0.sha256", "blank")),
    (lambda d: d["artifacts"][0].pop("sha256"), ("field artifacts.0.sha256", "missing")),
    (lambda d: d["artifacts"][0].update(sha256=None), ("field artifacts.0.sha256", "null")),
    (lambda d: d["artifacts"][0].update(sha256="not hex"), ("field artifacts.0.sha256", "not a sha256")),
    (lambda d: d["artifacts"][0].update(sha256="0" * 64), ("field artifacts.0.path", "sha256 differs")),
    (lambda d: d["artifacts"][0].pop("size"), ("field artifacts.0.size", "Field required")),
], ids=["issue-37", "digest-blank", "digest-deleted", "digest-null", "digest-not-hex", "digest-uppercase",
        "digest-short", "digest-a-number", "sha256-blank", "sha256-deleted", "sha256-null", "sha256-not-hex",
        "sha256-wrong", "size-deleted"])
def test_a_bundle_without_a_valid_digest_or_artifact_sha256_is_refused_and_nothing_recorded(
        tmp_path, store, change, fragments):
    """On main a blanked digest and blanked artifact hashes switched the checks off: a hand-edited
    uap of 0.999 was uploaded, exit 0."""
    bundle = _bundle(tmp_path / "out")
    (tmp_path / "out" / "metrics.json").write_text('{"uap": 0.9}\n')  # the artifact edited too (same size)
    _edit(bundle, change, redigest=False)
    _one_line_error(_upload(str(bundle)), str(bundle), *fragments)
    assert _runs(store) == []
    assert not (tmp_path / "artifacts").exists() or not list((tmp_path / "artifacts").rglob("metrics.json"))


def test_every_reader_of_a_bundle_refuses_one_without_its_digest(tmp_path):
    from vsbench.io.inputs import InputError

    bundle = _bundle(tmp_path / "out")
    _edit(bundle, lambda d: d.pop("digest"), redigest=False)
    with pytest.raises(InputError, match="field digest: the bundle's content digest is missing"):
        read_bundle(bundle)
    with pytest.raises(InputError, match="field digest"):
        upload_bundle(bundle, f"sqlite:///{tmp_path / 'never.db'}")
    assert not (tmp_path / "never.db").exists()  # refused before the store was touched


def _point_at_the_copy(data: dict) -> None:
    data["artifacts"][0]["path"] = "copy.json"  # another file beside it, with the same bytes


@pytest.mark.parametrize("change", [
    lambda d: d["metrics"].update(uap=0.999),
    lambda d: d["metrics"].update(extra=1.0),
    lambda d: d["params"].update(model="other"),
    lambda d: d["tags"].update({"vsbench.profile": "forged"}),
    lambda d: d.update(experiment="other"),
    lambda d: d.update(run_name="other"),
    lambda d: d.update(pipeline="other"),
    lambda d: d.update(start_ms=d["start_ms"] - 1),
    lambda d: d.update(end_ms=d["end_ms"] + 1),
    lambda d: d["artifacts"][0].update(folder="elsewhere"),
    _point_at_the_copy,
    lambda d: d["artifacts"].clear(),
], ids=["metric", "metric-added", "param", "tag", "experiment", "run-name", "pipeline", "start", "end",
        "artifact-folder", "artifact-path", "artifacts-dropped"])
def test_the_digest_covers_metrics_params_tags_and_every_artifact(tmp_path, store, change):
    bundle = _bundle(tmp_path / "out")
    (tmp_path / "out" / "copy.json").write_text('{"uap": 1.0}\n')
    _edit(bundle, change, redigest=False)
    _one_line_error(_upload(str(bundle)), str(bundle), "field digest", "edited")
    assert _runs(store) == []
