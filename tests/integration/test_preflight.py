"""`vsbench similarity run` checks everything it can before the work starts (issue 39): each mistake
is one `error:` line naming the option (or file) and the fix, exit code 2, no traceback, all of them
in one pass, and no image is read before. And what can only be known later (an unreadable image, a
full disk) names the file too.

Each case is driven through the CLI as a user types it, on the tiny DISC the integration tests
use (a TorchScript model of 6-d descriptors). "No image read" is a spy on the embed step's one
entry (any image read, hashed or decoded, goes through it) and an output folder never made.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.integration.tiny_model import scripted_model
from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.cli.app import app

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a tiny DISC, a TorchScript model for it)."""
    base = tmp_path_factory.mktemp("preflight")
    generate_disc(base / "disc", references=12, queries=8, train=12, seed=3)
    return base / "disc", scripted_model(base / "tiny.pt", 0)


@pytest.fixture
def no_embedding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any image read (the embed step hashes and decodes them) fails the test."""
    def spy(*args, **kwargs):
        raise AssertionError("an image set was embedded before the checks ended")

    monkeypatch.setattr("vsbench.retrieval.embed.embed_image_set", spy)  # engine imports it at the call


def _run(root: Path, out: Path, model: Path, *extra: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    """(exit code, the `error:` lines, the whole output) of one `similarity run`."""
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(root), "--out", str(out), "--model", "torchscript",
        "--model-options", f'{{"path": "{model}"}}', "--batch-size", "8", "--no-track", "--device", "cpu", *extra],
        env={"VSBENCH_EMBED_CACHE": "off", **(env or {})})
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert "Traceback" not in result.output and "unexpected" not in result.output, result.output[-3000:]
    return result.exit_code, errors, result.output


def test_an_unknown_benchmark_option_is_one_line_listing_the_valid_ones(data, tmp_path: Path, no_embedding) -> None:
    code, errors, output = _run(*data[:1], tmp_path / "out", data[1], "--benchmark-options", '{"nosuch": 1}')
    assert code == 2 and len(errors) == 1, output
    assert "--benchmark-options" in errors[0] and "'nosuch'" in errors[0] and "query_dir" in errors[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_device_cuda_without_cuda_is_one_line_with_the_fix(data, tmp_path: Path, no_embedding) -> None:
    code, errors, output = _run(data[0], tmp_path / "out", data[1], "--device", "cuda")
    assert code == 2 and len(errors) == 1, output
    assert "--device cuda" in errors[0] and "--device cpu" in errors[0]


def test_a_bad_codec_and_search_params_that_fit_no_codec_are_refused_before_any_image(
        data, tmp_path: Path, no_embedding) -> None:
    code, errors, output = _run(data[0], tmp_path / "out", data[1], "--codecs", "Bogus,Flat;Flat;IVF4,Flat",
                                "--search-params", "nprobe=8")
    assert code == 2 and len(errors) == 2, output
    assert errors[0].startswith("error: --codecs:") and "'Bogus,Flat'" in errors[0]
    assert errors[1].startswith("error: --search-params:") and "codec 'Flat'" in errors[1] and "IVF" in errors[1]
    assert not (tmp_path / "out").exists()  # IVF4,Flat takes nprobe: no line for it


def test_a_codec_that_only_some_sizes_fit_is_left_to_the_index_step(data, tmp_path: Path, no_embedding) -> None:
    """PQ7 is valid FAISS for 7-d descriptors: the check cannot know the model's size, so it does not refuse
    (the index step names the size); the spy proves the run got past the checks."""
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(data[0]), "--out", str(tmp_path / "out"),
        "--model", "torchscript", "--model-options", f'{{"path": "{data[1]}"}}', "--codecs", "PQ7", "--no-track"])
    assert "an image set was embedded before the checks ended" in result.output, result.output  # the spy, reached


def test_an_out_that_is_a_file_is_named_itself(data, tmp_path: Path, no_embedding) -> None:
    out = tmp_path / "a-file"
    out.write_text("not a folder\n")
    code, errors, output = _run(data[0], out, data[1])
    assert code == 2 and errors == [f"error: --out {out}: is a file, not a folder; choose a folder path"], output
    code, errors, output = _run(data[0], out / "below", data[1])
    assert code == 2 and len(errors) == 1 and str(out) in errors[0] and ".tmp" not in output, output


def test_an_out_that_cannot_be_written_is_one_line_before_any_work(data, tmp_path: Path, no_embedding,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Root may write anywhere, so the kernel's refusal is played by the probe file's creation."""
    out = tmp_path / "read-only"
    out.mkdir()

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("vsbench.runspec.preflight.tempfile.mkstemp", refused)
    code, errors, output = _run(data[0], out, data[1])
    assert code == 2 and errors == [f"error: --out {out}: cannot write in it (Permission denied); choose a "
                                    "writable folder"], output


def test_every_problem_is_reported_in_one_pass_and_nothing_is_embedded(data, tmp_path: Path, no_embedding) -> None:
    out = tmp_path / "a-file"
    out.write_text("")
    code, errors, output = _run(
        tmp_path / "no-such-root", out, data[1], "--benchmark-options", '{"nosuch": 1}', "--codecs", "Bogus;Flat",
        "--search-params", "nprobe=8", "--score-norm", "junk", "--device", "gpu", "--batch-size", "0",
        "--merge-ondisk")
    starts = [line.split(":")[1].split()[0] for line in errors]
    assert code == 2 and starts == ["--merge-ondisk", "--benchmark-options", "--root", "--codecs", "--search-params",
                                    "--score-norm", "--device", "--out", "--batch-size"], output
    assert len(output.strip().splitlines()) == len(errors), output


def test_an_unreadable_image_stops_the_run_naming_its_file_and_reason(data, tmp_path: Path) -> None:
    """DISC's scores are defined over every image it lists: an image that cannot be read is named (file and
    reason), with or without the failure tolerance raised, never "ids have no features"; the advice names no
    option `similarity run` lacks. Fixed, the run goes on and embeds only what changed."""
    root = tmp_path / "disc"
    shutil.copytree(data[0], root)
    broken = sorted((root / "val_ref").glob("*.jpg"))[0]
    original = broken.read_bytes()
    broken.write_bytes(b"not a jpeg")
    for env in ({}, {"VSBENCH_MAX_FAILURE_RATE": "0.5"}):
        code, errors, output = _run(root, tmp_path / "out", data[1], env=env)
        assert code == 2 and len(errors) == 1, output
        assert str(broken) in errors[0] and "cannot identify image file" in errors[0] and "reference" in errors[0]
        assert "no features" not in output and "--max-failure-rate" not in output
    broken.write_bytes(original)
    code, errors, output = _run(root, tmp_path / "out", data[1])
    assert code == 0 and not errors and sum(line.startswith("Flat,") for line in output.splitlines()) == 2, output
    assert "query.shard-0-of-1: already complete, kept" in output


def test_a_full_disk_names_the_file_being_written(data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSPC comes from write() with no file name: the line names the file the run was writing."""
    def full(fd: int, data: bytes) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("vsbench.io.storage._write_all", full)
    out = tmp_path / "out"
    code, errors, output = _run(data[0], out, data[1])
    assert code == 2 and len(errors) == 1, output
    assert errors[0].startswith(f"error: {out}/") and errors[0].endswith(": No space left on device"), output
    assert ".tmp-" not in errors[0]


def test_submit_checks_a_similarity_runs_arguments_before_the_cluster_sees_them() -> None:
    """`vsbench submit --pipeline similarity`: what this machine can tell (codecs, search parameters,
    option names, the run spec's fields) is one line each, before any connection (the host is a dead port)."""
    result = CliRunner().invoke(app, [
        "submit", "--host", "http://127.0.0.1:9", "--pipeline", "similarity", "--arg", "codecs=Bogus;Flat",
        "--arg", "search_params=nprobe=8", "--arg", 'benchmark_options={"nosuch": 1}', "--arg", "merge_ondisk=true"])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and [line.split(":")[1].strip() for line in errors] == [
        "--arg merge_ondisk", "--arg benchmark_options", "--arg codecs", "--arg search_params"], result.output


def test_a_relative_model_file_is_refused_when_the_steps_run_elsewhere(data, tmp_path: Path, no_embedding,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With --runner subprocess the steps are other processes with their own working folder: a model file
    given relative to here is one line with its absolute path, before the pipeline starts."""
    monkeypatch.chdir(data[1].parent)
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(data[0]), "--out", str(tmp_path / "out"),
        "--model", "torchscript", "--model-options", f'{{"path": "{data[1].name}"}}', "--runner", "subprocess",
        "--no-track", "--device", "cpu"])
    assert result.exit_code == 2 and result.output.strip().splitlines() == [
        f"error: --model-options: path '{data[1].name}' is a relative path, which the pipeline's steps (--runner "
        f"subprocess) do not resolve from here; give '{data[1].resolve()}'"], result.output


@pytest.mark.parametrize("step", ["index", "search", "score"])
def test_a_step_command_checks_its_options_in_one_pass_before_reading_anything(data, tmp_path: Path, step: str,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The pipeline's tasks as commands (`similarity index|search|score`): an unknown benchmark option
    was an unexpected TypeError with a traceback file; search parameters that fit no codec were found
    after the search had started (and had set aside the finished result). Now every problem is a line
    before the step reads the benchmark, a feature or a result."""
    def spy(*args, **kwargs):
        raise AssertionError("the step started before the checks ended")

    monkeypatch.setattr("vsbench.steps.similarity.similarity_index_step", spy)
    monkeypatch.setattr("vsbench.steps.similarity.similarity_search_step", spy)
    monkeypatch.setattr("vsbench.steps.similarity.similarity_score_step", spy)
    monkeypatch.setattr("vsbench.retrieval.engine.Engine.__init__", spy)
    monkeypatch.setenv("VSBENCH_ERROR_DIR", str(tmp_path / "errors"))
    extra = ["--search-params", "nprobe=8"] if step != "index" else []
    result = CliRunner().invoke(app, [
        "similarity", step, "--benchmark", "disc", "--root", str(data[0]), "--out", str(tmp_path / "nothing"),
        "--benchmark-options", '{"nosuch": 1}', "--codecs", "Flat;IVF4x,Flat", *extra])
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert result.exit_code == 2 and "Traceback" not in result.output and "unexpected" not in result.output, \
        result.output
    assert not (tmp_path / "errors").exists()
    expected = ["--benchmark-options: benchmark 'disc' has no option 'nosuch'", f"--out {tmp_path / 'nothing'}: no such folder",
                "--codecs: codec 'IVF4x,Flat' is not a FAISS index_factory string"]
    if step != "index":
        expected.append("--search-params: search parameters 'nprobe=8' do not apply to codec 'Flat'")
    assert len(errors) == len(expected), result.output
    for start in expected:
        assert any(line.startswith(f"error: {start}") for line in errors), (start, errors)


def test_a_model_file_that_does_not_exist_is_refused_before_any_work(data, tmp_path: Path, no_embedding) -> None:
    """It used to be found after the embed step started (30 s), leaving a lock file and an incomplete
    manifest behind (issue 48)."""
    root, _ = data
    out = tmp_path / "out"
    code, errors, output = _run(root, out, tmp_path / "missing" / "model.pt")
    assert code == 2 and len(errors) == 1, output
    assert errors[0] == (f"error: --model-options: path '{tmp_path / 'missing' / 'model.pt'}': no such file or "
                         "folder; give the path of the torchscript model's file")
    assert not out.exists()


# --- issue 54: the embedding cache's secret ------------------------------------------------------

def test_a_short_cache_secret_is_one_line_naming_the_variable_before_any_image(data, tmp_path: Path,
                                                                               no_embedding) -> None:
    code, errors, output = _run(data[0], tmp_path / "out", data[1], env={
        "VSBENCH_EMBED_CACHE": str(tmp_path / "cache"), "VSBENCH_CACHE_SECRET": "too-short"})
    assert code == 2 and len(errors) == 1, output
    assert errors[0].startswith("error: VSBENCH_CACHE_SECRET holds 9 characters") and "openssl rand" in errors[0]
    assert "too-short" not in output and not (tmp_path / "out").exists()


def test_a_world_readable_secret_file_is_one_line_naming_it(data, tmp_path: Path, no_embedding) -> None:
    secret = tmp_path / "config" / "vsbench" / "cache-secret"
    secret.parent.mkdir(parents=True, mode=0o700)
    secret.write_text("s" * 40)
    secret.chmod(0o644)
    code, errors, output = _run(data[0], tmp_path / "out", data[1], env={
        "VSBENCH_EMBED_CACHE": str(tmp_path / "cache"), "VSBENCH_CACHE_SECRET": "",
        "XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert code == 2 and errors == [f"error: {secret}: mode 0644, owner uid {os.getuid()}: others could read the "
                                    "embedding cache's secret and forge cached descriptors; run `chmod 600 "
                                    f"{secret}` as its owner (or remove it: a new one is made), or set "
                                    "VSBENCH_CACHE_SECRET to at least 32 random characters (e.g. `openssl rand -hex "
                                    "32`)"], output


def test_with_the_cache_off_the_secret_is_not_asked_for(data, tmp_path: Path) -> None:
    """A run that caches nothing signs nothing: a bad secret does not stop it (the spy is reached)."""
    result = CliRunner().invoke(app, [
        "similarity", "run", "--benchmark", "disc", "--root", str(data[0]), "--out", str(tmp_path / "out"),
        "--model", "torchscript", "--model-options", f'{{"path": "{data[1]}"}}', "--no-track", "--device", "cpu"],
        env={"VSBENCH_EMBED_CACHE": "off", "VSBENCH_CACHE_SECRET": "too-short"})
    assert result.exit_code == 0 and "VSBENCH_CACHE_SECRET" not in result.output, result.output[-2000:]
