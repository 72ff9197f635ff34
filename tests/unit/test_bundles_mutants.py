"""A run bundle's checks called directly (issue 49): each refusal line's whole text, the caps at
their edges, what the digest covers. Fast: no MLflow store, no CLI; test_bundle_integrity.py drives
the same checks through `vsbench track upload`."""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

import pytest

from vsbench.io.inputs import InputError, quote
from vsbench.tracking import bundles
from vsbench.tracking.bundles import (
    Bundle,
    _missing_digests,
    _validation_line,
    artifact_folder_problem,
    check_run_key,
    content_digest,
    file_sha256,
    max_artifact_bytes,
    max_bundle_bytes,
    parse_bundle,
    redact_uri,
    resolve_artifact,
    sealed_bundle,
    verify_bundle,
)
from vsbench.tracking.evaluations import Embedder, Evaluation

FIX = "it is not a bundle as vsbench writes it; re-run the command that wrote it, or remove the file"
NO_DIGEST = ("re-run the command that wrote it (bundles written before vsbench recorded digests, or edited since, "
             "are not uploaded)")
RERUN = "re-run the command that wrote the bundle"
VARIABLES = ("VSBENCH_MAX_BUNDLE_BYTES", "VSBENCH_MAX_ARTIFACT_BYTES", "VSBENCH_MAX_BUNDLE_PARAMS",
             "VSBENCH_MAX_BUNDLE_METRICS", "VSBENCH_MAX_BUNDLE_TAGS", "VSBENCH_MAX_BUNDLE_ARTIFACTS",
             "VSBENCH_MAX_BUNDLE_EVALUATIONS")


@pytest.fixture(autouse=True)
def default_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fields(**overrides) -> dict:
    return {"format": 1, "experiment": "exp", "pipeline": "vsbench-similarity", "run_key": "cli-20260101T000000-ab12",
            "run_name": "run", "start_ms": 1, "end_ms": 2, "tracking_uri": "http://store", "params": {"model": "m"},
            "metrics": {"uap": 0.5}, "tags": {"vsbench.profile": "p"}, "artifacts": [], **overrides}


def _artifact(folder: Path, name: str = "metrics.json", data: bytes = b'{"uap": 0.5}\n', run_folder: str = "") -> dict:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"path": name, "folder": run_folder, "size": len(data), "sha256": _sha(data)}


def _write(folder: Path, raw: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "mlflow-run.json"
    path.write_text(json.dumps(raw))
    return path


def _sealed_file(folder: Path, **overrides) -> tuple[Path, Bundle]:
    bundle = sealed_bundle(**_fields(**overrides))
    return _write(folder, bundle.as_file()), bundle


def _refusal(path: Path, bundle: Bundle | None = None) -> str:
    """The InputError's text after ``{path}: ``."""
    with pytest.raises(InputError) as caught:
        parse_bundle(path) if bundle is None else verify_bundle(path, bundle)
    text = str(caught.value)
    assert text.startswith(f"{path}: "), text
    return text.removeprefix(f"{path}: ")


# --- caps ------------------------------------------------------------------------------------------

def test_the_caps_default_and_come_from_their_variables(monkeypatch) -> None:
    assert max_bundle_bytes() == 16 << 20 and max_artifact_bytes() == 1 << 30
    assert bundles._counts() == {
        "params": (1_000, "VSBENCH_MAX_BUNDLE_PARAMS"), "metrics": (10_000, "VSBENCH_MAX_BUNDLE_METRICS"),
        "tags": (1_000, "VSBENCH_MAX_BUNDLE_TAGS"), "artifacts": (1_000, "VSBENCH_MAX_BUNDLE_ARTIFACTS"),
        "evaluations": (1_000, "VSBENCH_MAX_BUNDLE_EVALUATIONS")}
    for number, variable in enumerate(VARIABLES, start=2):
        monkeypatch.setenv(variable, str(number))
    assert max_bundle_bytes() == 2 and max_artifact_bytes() == 3
    assert [cap for cap, _ in bundles._counts().values()] == [4, 5, 6, 7, 8]


def test_a_bundle_over_the_byte_cap_is_refused_before_it_is_read(tmp_path: Path, monkeypatch) -> None:
    path, _ = _sealed_file(tmp_path)
    size = path.stat().st_size
    monkeypatch.setenv("VSBENCH_MAX_BUNDLE_BYTES", str(size))
    parse_bundle(path)
    monkeypatch.setenv("VSBENCH_MAX_BUNDLE_BYTES", "100")
    assert _refusal(path) == (f"file is {size} bytes, over the 100 bytes limit for this kind of file (set "
                              "VSBENCH_MAX_BUNDLE_BYTES to raise it)")


def test_a_bundle_that_is_not_json_is_one_line_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "mlflow-run.json"
    path.write_text('{"format": 1,')
    assert _refusal(path) == "not valid JSON (Expecting property name enclosed in double quotes at line 1, column 14)"


@pytest.mark.parametrize(("name", "variable", "entries"), [
    ("params", "VSBENCH_MAX_BUNDLE_PARAMS", {f"p{i}": "v" for i in range(3)}),
    ("metrics", "VSBENCH_MAX_BUNDLE_METRICS", {f"m{i}": 1.0 for i in range(3)}),
    ("tags", "VSBENCH_MAX_BUNDLE_TAGS", {f"vsbench.t{i}": "v" for i in range(3)}),
    ("artifacts", "VSBENCH_MAX_BUNDLE_ARTIFACTS", [{}] * 3),
    ("evaluations", "VSBENCH_MAX_BUNDLE_EVALUATIONS", [{}] * 3),
])
def test_too_many_entries_are_refused_naming_the_field_and_its_variable(tmp_path: Path, monkeypatch, name, variable,
                                                                        entries) -> None:
    path = _write(tmp_path, {**_fields(), "digest": "0" * 64, name: entries})
    monkeypatch.setenv(variable, "2")
    assert _refusal(path) == f"field {name}: 3 entries, over the limit of 2 (set {variable} to raise it)"
    monkeypatch.setenv(variable, "3")  # at the cap: on to the next check
    try:
        parse_bundle(path)
    except InputError as exc:
        assert "entries, over the limit" not in str(exc)


def test_an_entry_count_is_written_with_thousands_separators(tmp_path: Path) -> None:
    path = _write(tmp_path, {**_fields(), "digest": "0" * 64, "params": {f"p{i}": "v" for i in range(1_001)}})
    assert _refusal(path) == ("field params: 1,001 entries, over the limit of 1,000 (set VSBENCH_MAX_BUNDLE_PARAMS to "
                              "raise it)")


# --- what is not a bundle, and its digests -------------------------------------------------------------

@pytest.mark.parametrize("raw", [[1], {"run_key": "k"}, {"format": 2, "run_key": "k"}, {"format": 1}])
def test_something_else_than_a_bundle_is_one_line(tmp_path: Path, raw) -> None:
    assert _refusal(_write(tmp_path, raw)) == 'not a vsbench run bundle (no "format": 1 and "run_key")'


def test_a_missing_blank_null_or_malformed_digest_is_named() -> None:
    def line(field, what, state):
        return f"field {field}: {what} is {state}, so nothing vouches for the bundle; {NO_DIGEST}"

    good = {"path": "a", "sha256": "a" * 64}
    assert _missing_digests({"digest": "b" * 64, "artifacts": [good, "not a dict", good]}) == ""
    assert _missing_digests({"digest": "b" * 64, "artifacts": "not a list"}) == ""
    assert _missing_digests({}) == line("digest", "the bundle's content digest", "missing")
    assert _missing_digests({"digest": None}) == line("digest", "the bundle's content digest", "null")
    assert _missing_digests({"digest": ""}) == line("digest", "the bundle's content digest", "blank")
    artifacts = [good, "skipped", {"path": "b"}]
    assert _missing_digests({"digest": "b" * 64, "artifacts": artifacts}) == line(
        "artifacts.2.sha256", "the artifact's sha256", "missing")
    assert _missing_digests({"digest": "b" * 64, "artifacts": [{"sha256": None}]}) == line(
        "artifacts.0.sha256", "the artifact's sha256", "null")
    assert _missing_digests({"digest": "B" * 64}) == f"field digest: {'B' * 64!r} is not a sha256 (64 lowercase hex " \
                                                     f"digits); {NO_DIGEST}"
    assert _missing_digests({"digest": 7}) == f"field digest: '7' is not a sha256 (64 lowercase hex digits); {NO_DIGEST}"
    assert _missing_digests({"digest": "b" * 65}).startswith("field digest: ")
    assert _missing_digests({"digest": "b" * 64, "artifacts": [{"sha256": "x"}]}) == (
        f"field artifacts.0.sha256: 'x' is not a sha256 (64 lowercase hex digits); {NO_DIGEST}")


def test_a_bundle_without_its_digest_is_refused_before_the_model_check(tmp_path: Path) -> None:
    raw = {**_fields(uploaded="yes")}
    assert _refusal(_write(tmp_path, raw)) == (f"field digest: the bundle's content digest is missing, so nothing "
                                               f"vouches for the bundle; {NO_DIGEST}")


# --- the model ---------------------------------------------------------------------------------------

def test_a_bundle_as_vsbench_writes_it_is_read_back_equal(tmp_path: Path) -> None:
    path, bundle = _sealed_file(tmp_path, artifacts=[_artifact(tmp_path)])
    assert parse_bundle(path) == bundle


@pytest.mark.parametrize(("change", "line"), [
    ({"uploaded": "yes"}, "field uploaded: Input should be a valid dictionary or instance of Uploaded, got 'yes'"),
    ({"start_ms": "1"}, "field start_ms: Input should be a valid integer, got '1'"),
    ({"experiment": ""}, "field experiment: String should have at least 1 character, got ''"),
    ({"start_ms": -1, "end_ms": -2}, "field start_ms: Input should be greater than or equal to 0, got '-1' "
                                     "(and 1 more problems)"),
    ({"metrics": {"uap": math.inf}}, "field metrics.uap: Input should be a finite number, got 'inf'"),
    ({"tags": {"mlflow.parentRunId": "x"}}, "field tags: Value error, tag 'mlflow.parentRunId' is not one vsbench "
                                            "writes (vsbench.*, interval_note.<metric> or mlflow.source.git.commit)"),
])
def test_a_malformed_field_is_one_line_naming_it(tmp_path: Path, change, line) -> None:
    path = _write(tmp_path, {**_fields(**change), "digest": "0" * 64})
    assert _refusal(path) == f"{line}; {FIX}"


def test_a_missing_field_shows_no_input_and_an_extra_one_is_named(tmp_path: Path) -> None:
    raw = {**_fields(), "digest": "0" * 64}
    del raw["experiment"]
    assert _refusal(_write(tmp_path / "a", raw)) == f"field experiment: Field required; {FIX}"
    raw = {**_fields(), "digest": "0" * 64, "extra": "x"}
    assert _refusal(_write(tmp_path / "b", raw)) == f"field extra: Extra inputs are not permitted, got 'x'; {FIX}"


def test_a_validation_error_at_the_top_level_is_named_so() -> None:
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        Bundle.model_validate("not a dict")
    assert _validation_line(caught.value) == (
        f"field (top level): Input should be a valid dictionary or instance of Bundle, got 'not a dict'; {FIX}")


def test_only_the_tags_vsbench_writes_are_taken() -> None:
    tags = {"vsbench.run_key": "k", "mlflow.source.git.commit": "abc"}
    assert sealed_bundle(**_fields(tags=tags)).tags == tags
    for key in ("mlflow.parentRunId", "vsbenchx", "Vsbench.x"):
        with pytest.raises(ValueError, match=f"tag '{key}' is not one vsbench writes"):
            sealed_bundle(**_fields(tags={key: "x"}))


def _evaluation() -> Evaluation:
    return Evaluation(benchmark="disc", embedder=Embedder(model="m"), params={"a": "b"}, metrics={"uap": 0.5})


def test_the_file_and_the_digest_leave_out_evaluations_only_when_there_are_none() -> None:
    bare = sealed_bundle(**_fields(), uploaded={"run_id": "r", "tracking_uri": "u", "at": "t"})
    assert "evaluations" not in bare.as_file() and "uploaded" in bare.as_file() and "digest" in bare.as_file()
    assert set(bare.content()) == {"format", "experiment", "pipeline", "run_key", "run_name", "start_ms", "end_ms",
                                   "params", "metrics", "tags", "artifacts"}
    with_evaluations = sealed_bundle(**_fields(), evaluations=[_evaluation()])
    # issue 55's interval notes are written (and digested) only when an evaluation has one, so a bundle
    # written before them keeps its digest
    before = _evaluation().model_dump(exclude={"interval_notes"})
    assert with_evaluations.as_file()["evaluations"] == [before]
    assert with_evaluations.content()["evaluations"] == [before]
    assert with_evaluations.digest != bare.digest
    noted = _evaluation().model_copy(update={"interval_notes": {"uap": "only 3 queries (under 20): a rough interval"}})
    with_notes = sealed_bundle(**_fields(), evaluations=[noted])
    assert with_notes.as_file()["evaluations"] == [noted.model_dump()]
    assert with_notes.digest != with_evaluations.digest


def test_a_sealed_bundle_carries_the_digest_of_its_content_not_of_the_placeholder() -> None:
    bundle = sealed_bundle(**_fields())
    assert bundle.digest == content_digest(bundle.content()) != "0" * 64
    assert sealed_bundle(**_fields(tracking_uri="elsewhere")).digest == bundle.digest  # informational only
    assert sealed_bundle(**_fields(metrics={"uap": 0.25})).digest != bundle.digest


# --- digests, URIs, paths ------------------------------------------------------------------------------

def test_the_content_digest_is_of_canonical_json() -> None:
    content = {"b": [1.5, "é"], "a": {"y": 1, "x": None}}
    canonical = '{"a":{"x":null,"y":1},"b":[1.5,"é"]}'.encode()
    assert content_digest(content) == _sha(canonical)
    with pytest.raises(ValueError):
        content_digest({"a": math.nan})


def test_a_files_sha256_is_of_all_its_bytes(tmp_path: Path) -> None:
    data = os.urandom(1) * ((1 << 20) + 3) + b"tail"
    (tmp_path / "f").write_bytes(data)
    assert file_sha256(tmp_path / "f") == _sha(data)
    (tmp_path / "empty").write_bytes(b"")
    assert file_sha256(tmp_path / "empty") == _sha(b"")


@pytest.mark.parametrize(("uri", "redacted"), [
    ("https://alice:s3cret@mlflow.example:8443/path?x=1", "https://mlflow.example:8443/path?x=1"),
    ("http://alice@host/p", "http://host/p"),
    ("http://:pw@host/p", "http://host/p"),
    ("http://u:p@[::1]:5000/p", "http://[::1]:5000/p"),
    ("http://u:p@host:0/p", "http://host:0/p"),
    ("http://u:p@host:99999/p", ""),  # a port out of range: nothing kept
    ("http://[::1", ""),
    ("http://u:p@/x", "http:///x"),  # no host: none made up
    ("http://host:5000/p", "http://host:5000/p"),
    ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
    ("", ""),
])
def test_a_uri_is_kept_without_its_credentials(uri: str, redacted: str) -> None:
    assert redact_uri(uri) == redacted


@pytest.mark.parametrize("folder", ["", "steps", "steps/score", "a.b/c"])
def test_a_plain_relative_folder_is_taken(folder: str) -> None:
    assert artifact_folder_problem(folder) == ""


@pytest.mark.parametrize("folder", ["/abs", "../up", "a/../b", "a\\b", "a\0b", ".."])
def test_a_folder_that_is_not_plain_and_relative_is_named(folder: str) -> None:
    assert artifact_folder_problem(folder) == (f"{folder!r} is not a plain relative folder (no '..', '.', '\\' or "
                                               "leading '/')")


def test_an_artifact_path_resolves_inside_the_bundles_folder_only(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "f.json").write_text("{}")
    assert resolve_artifact(folder, "sub/f.json") == folder / "sub" / "f.json"
    assert resolve_artifact(folder, str(folder / "sub" / "f.json")) == folder / "sub" / "f.json"
    assert resolve_artifact(folder, "sub/../sub/f.json") == folder / "sub" / "f.json"
    with pytest.raises(ValueError) as caught:
        resolve_artifact(folder, "../secret")
    assert str(caught.value) == (f"'../secret' resolves to {tmp_path / 'secret'}, outside the bundle's folder {folder}; "
                                 "a bundle may only name files beside it")
    with pytest.raises(ValueError) as caught:
        resolve_artifact(folder, str(tmp_path / "out-sibling" / "x"))
    assert "outside the bundle's folder" in str(caught.value)
    for hidden in (".aws/credentials", "sub/.hidden"):
        with pytest.raises(ValueError) as caught:
            resolve_artifact(folder, hidden)
        assert str(caught.value) == f"{hidden!r} is a hidden file or lies in a hidden folder; vsbench never names one"
    with pytest.raises(ValueError) as caught:
        resolve_artifact(folder, "a\0b")
    assert str(caught.value) == "the path holds a NUL character"


def test_a_run_key_must_be_of_the_form_vsbench_writes() -> None:
    for key in ("cli-20260101T000000-ab12", "0b3a7c1e-5d2f-4c1a-9e8b-7f6d5c4b3a21", "a" * 200, "A.b_c:d-e"):
        assert check_run_key(key) == key
    for key in ("", "-a", "a" * 201, "x' or 1=1", "a\n"):
        with pytest.raises(ValueError) as caught:
            check_run_key(key)
        assert str(caught.value) == f"run key {quote(key)} is not of the form vsbench writes"


# --- verify_bundle -----------------------------------------------------------------------------------

def test_a_bundle_and_its_artifacts_as_written_are_verified(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    artifacts = [_artifact(folder), _artifact(folder, "steps/manifest", b"m", "steps/score")]
    path, bundle = _sealed_file(folder, artifacts=artifacts)
    digest, files = verify_bundle(path, bundle)
    assert digest == bundle.digest
    assert files == [(folder.resolve() / "metrics.json", ""), (folder.resolve() / "steps" / "manifest", "steps/score")]


def test_an_edited_bundle_is_refused(tmp_path: Path) -> None:
    path, bundle = _sealed_file(tmp_path)
    edited = bundle.model_copy(update={"metrics": {"uap": 0.99}})
    assert _refusal(path, edited) == ("field digest: the content does not match the digest recorded when vsbench wrote "
                                      "the bundle (it was edited); re-run the command that wrote it")


def test_an_artifact_folder_that_is_not_plain_is_refused_first(tmp_path: Path) -> None:
    path, bundle = _sealed_file(tmp_path, artifacts=[_artifact(tmp_path), _artifact(tmp_path, run_folder="../x")])
    assert _refusal(path, bundle) == ("field artifacts.1.folder: '../x' is not a plain relative folder (no '..', '.', "
                                      "'\\' or leading '/')")


def test_an_artifact_that_is_missing_outside_or_not_a_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    entry = _artifact(folder)
    (folder / "metrics.json").unlink()
    path, bundle = _sealed_file(folder, artifacts=[entry])
    assert _refusal(path, bundle) == ("field artifacts.0.path: No such file or directory; refused (the file is not "
                                      "uploaded)")
    path, bundle = _sealed_file(folder, artifacts=[{**entry, "path": "../x"}])
    assert _refusal(path, bundle) == (f"field artifacts.0.path: '../x' resolves to {tmp_path / 'x'}, outside the "
                                      f"bundle's folder {folder}; a bundle may only name files beside it; refused (the "
                                      "file is not uploaded)")
    (folder / "a-folder").mkdir()
    path, bundle = _sealed_file(folder, artifacts=[{**entry, "path": "a-folder"}])
    assert _refusal(path, bundle) == "field artifacts.0.path: 'a-folder' is not a regular file; refused"


def test_an_artifact_over_its_cap_is_refused_naming_the_variable(tmp_path: Path, monkeypatch) -> None:
    path, bundle = _sealed_file(tmp_path, artifacts=[_artifact(tmp_path, data=b"x" * 2048)])
    monkeypatch.setenv("VSBENCH_MAX_ARTIFACT_BYTES", "2048")
    verify_bundle(path, bundle)
    monkeypatch.setenv("VSBENCH_MAX_ARTIFACT_BYTES", "2047")
    assert _refusal(path, bundle) == ("field artifacts.0.path: 'metrics.json' is 2.0 KiB, over the 2.0 KiB limit for an "
                                      "artifact (set VSBENCH_MAX_ARTIFACT_BYTES to raise it)")


def test_artifacts_over_the_total_cap_together_are_refused(tmp_path: Path, monkeypatch) -> None:
    artifacts = [_artifact(tmp_path, "a", b"x" * 1024), _artifact(tmp_path, "b", b"y" * 1024)]
    path, bundle = _sealed_file(tmp_path, artifacts=artifacts)
    monkeypatch.setattr(bundles, "MAX_ARTIFACTS_TOTAL_BYTES", 2048)
    verify_bundle(path, bundle)
    monkeypatch.setattr(bundles, "MAX_ARTIFACTS_TOTAL_BYTES", 2047)
    assert _refusal(path, bundle) == "field artifacts: over 2.0 KiB of files together; refused"
    monkeypatch.setattr(bundles, "MAX_ARTIFACTS_TOTAL_BYTES", 1024)
    assert _refusal(path, bundle) == "field artifacts: over 1.0 KiB of files together; refused"


def test_an_artifact_changed_since_the_bundle_was_written_is_refused(tmp_path: Path) -> None:
    entry = _artifact(tmp_path, data=b"x" * 1500)
    path, bundle = _sealed_file(tmp_path, artifacts=[entry])
    (tmp_path / "metrics.json").write_bytes(b"x" * 1501)
    assert _refusal(path, bundle) == (f"field artifacts.0.path: 'metrics.json' is 1,501 bytes, not the 1,500 recorded "
                                      f"when the bundle was written: the file changed since; {RERUN}")
    (tmp_path / "metrics.json").write_bytes(b"y" * 1500)
    assert _refusal(path, bundle) == (f"field artifacts.0.path: 'metrics.json' changed since the bundle was written "
                                      f"(sha256 differs); {RERUN}")
