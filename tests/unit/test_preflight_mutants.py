"""The preflight's checks called directly (issue 49): each refusal line's whole text, which check runs
in which round, and what is left alone. Fast: no CLI, no image read, no model built; the one
benchmark read is a 10-image synthetic DISC made once per module.

tests/integration/test_preflight.py drives the same checks through `vsbench similarity run`."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

import pytest

from vsbench.benchmarks.disc.synth import generate_disc
from vsbench.runspec import preflight
from vsbench.runspec.preflight import (
    _as_option,
    _collect,
    output_problem,
    problem_line,
    similarity_problems,
    step_problems,
    submitted_problems,
)
from vsbench.runspec.run import BenchmarkRun

NO_OPTION = ("benchmark 'disc' has no option 'nosuch'; its options are query_dir, reference_dir, train_dir, "
             "ground_truth, query_list, reference_list, train_list")
BAD_CODEC = "codec 'IVF4x,Flat' is not a FAISS index_factory string"
NPROBE = "search parameters 'nprobe=8' do not apply to codec 'Flat'"


@pytest.fixture(scope="module")
def disc(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("preflight-unit") / "disc"
    generate_disc(root, references=4, queries=2, train=4, seed=3)
    return root


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device check answers as on a machine without CUDA, whatever this one has."""
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    monkeypatch.delenv("VSBENCH_MAX_IMAGE_PIXELS", raising=False)
    monkeypatch.delenv("VSBENCH_LOCK_WAIT_S", raising=False)


def _run(disc: Path, tmp_path: Path, *, device: str = "cpu", batch_size: int = 8, runner: str | None = None,
         **fields):
    extra = {} if runner is None else {"runner": runner}
    return similarity_problems({"benchmark": "disc", "root": str(disc), **fields}, out=tmp_path / "out",
                               device=device, batch_size=batch_size, **extra)


# --- problem_line and _collect ---------------------------------------------------------------------

def test_a_file_error_names_its_file_and_reason() -> None:
    assert problem_line(OSError(errno.ENOENT, "No such file or directory", "/x/y")) == "/x/y: No such file or directory"
    bare = OSError("it broke")
    bare.filename = "/x/z"
    assert problem_line(bare) == f"/x/z: {bare}"  # no strerror: the exception's text
    assert problem_line(OSError("no file named")) == "no file named"


def test_any_other_failure_is_its_text_on_one_line_or_its_type() -> None:
    assert problem_line(ValueError("first\n   second\tthird ")) == "first second third"
    assert problem_line(ValueError()) == "ValueError"
    assert problem_line(ImportError("  ")) == "ImportError"


def test_collect_turns_an_expected_failure_into_a_line_and_passes_anything_else() -> None:
    problems: list[str] = []
    assert _collect(problems, lambda: 7, "p: ") == 7 and problems == []

    def fails(exc):
        def check():
            raise exc
        return check

    assert _collect(problems, fails(ValueError("bad value")), "--x: ") is None
    assert _collect(problems, fails(OSError(errno.EACCES, "Permission denied", "/f"))) is None
    assert _collect(problems, fails(ImportError("no module named nosuch"))) is None
    assert problems == ["--x: bad value", "/f: Permission denied", "no module named nosuch"]
    with pytest.raises(TypeError):
        _collect(problems, fails(TypeError("a bug, not a user's mistake")))
    assert len(problems) == 3


# --- output_problem ------------------------------------------------------------------------------

def test_an_existing_writable_folder_is_probed_and_left_as_it_was(tmp_path: Path, monkeypatch) -> None:
    calls = []
    real = tempfile.mkstemp

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr("vsbench.runspec.preflight.tempfile.mkstemp", spy)
    assert output_problem(tmp_path) is None
    assert calls == [{"prefix": ".vsbench-write-probe-", "dir": tmp_path}]
    assert list(tmp_path.iterdir()) == []  # the probe removed


def test_an_out_that_is_a_file_or_lies_under_one_is_named(tmp_path: Path) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    assert output_problem(file) == f"--out {file}: is a file, not a folder; choose a folder path"
    below = file / "x" / "y"
    assert output_problem(str(below)) == f"--out {below}: {file} is a file, not a folder; choose a folder path"


def test_an_out_the_kernel_refuses_to_write_in_is_one_line(tmp_path: Path, monkeypatch) -> None:
    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr("vsbench.runspec.preflight.tempfile.mkstemp", refused)
    assert output_problem(tmp_path) == (f"--out {tmp_path}: cannot write in it (Permission denied); choose a "
                                        "writable folder")

    def refused_without_reason(*args, **kwargs):
        raise OSError("read-only mount")

    monkeypatch.setattr("vsbench.runspec.preflight.tempfile.mkstemp", refused_without_reason)
    assert output_problem(tmp_path) == (f"--out {tmp_path}: cannot write in it (read-only mount); choose a "
                                        "writable folder")


def test_a_folder_to_be_made_is_checked_on_its_nearest_existing_parent(tmp_path: Path, monkeypatch) -> None:
    asked = []

    def access(path, mode):
        asked.append((Path(path), mode))
        return allowed

    monkeypatch.setattr("vsbench.runspec.preflight.os.access", access)
    out = tmp_path / "a" / "b" / "c"
    allowed = True
    assert output_problem(out) is None
    allowed = False
    assert output_problem(out) == (f"--out {out}: cannot create it in {tmp_path} (not writable); choose a writable "
                                   "folder")
    assert asked == [(tmp_path, os.W_OK | os.X_OK)] * 2
    assert not (tmp_path / "a").exists()


# --- the small helpers -----------------------------------------------------------------------------

def test_a_fields_problem_is_named_as_the_commands_option() -> None:
    assert _as_option("merge_ondisk: applies to IVF codecs only") == "--merge-ondisk: applies to IVF codecs only"
    assert _as_option("model_options.x: bad: worse") == "model_options.x: bad: worse"  # no identifier: as it is
    assert _as_option("no colon here") == "no colon here"
    assert _as_option("k:1") == "k:1"


# --- similarity_problems ---------------------------------------------------------------------------

def test_a_run_with_nothing_wrong_has_no_problem_and_its_benchmark_loaded(disc: Path, tmp_path: Path) -> None:
    run, bench, problems = _run(disc, tmp_path, batch_size=1, model="torchscript",
                                model_options={"path": str(disc / "val_groundtruth_matches.csv")}, runner="inline")
    assert problems == [] and run is not None and run.root == str(disc) and run.model == "torchscript"
    assert type(bench).__name__ == "DiscBenchmark" and Path(bench.root) == disc
    assert not (tmp_path / "out").exists()


def test_every_cheap_problem_is_reported_in_one_pass(disc: Path, tmp_path: Path) -> None:
    out_file = tmp_path / "out"
    out_file.write_text("")
    run, bench, problems = similarity_problems(
        {"benchmark": "disc", "root": str(tmp_path / "none"), "benchmark_options": {"nosuch": 1},
         "codecs": "Flat;IVF4x,Flat", "search_params": "nprobe=8", "score_norm": "junk", "merge_ondisk": True,
         "model": "nosuch"}, out=out_file, device="gpu", batch_size=0)
    assert run is None and bench is None
    starts = ["--merge-ondisk:", "--benchmark-options:", "--root ", "--search-params:", "--codecs:", "--score-norm:",
              "--model: unknown model 'nosuch'", "--device 'gpu'", "--out ", "--batch-size 0:"]  # the model: issue 57
    assert len(problems) == len(starts) and all(map(str.startswith, problems, starts)), problems
    assert problems[1:3] == [
        f"--benchmark-options: {NO_OPTION}",
        f"--root {tmp_path / 'none'}: no such folder; give the benchmark's data folder (vsbench synth similarity "
        "disc --out DIR makes one)"]
    assert problems[3].startswith(f"--search-params: {NPROBE}") and problems[4].startswith(f"--codecs: {BAD_CODEC}")
    assert problems[7:] == ["--device 'gpu' is not a device: use auto, cpu, cuda or cuda:N",
                            f"--out {out_file}: is a file, not a folder; choose a folder path",
                            "--batch-size 0: must be at least 1 (images per forward pass)"]


def test_a_root_that_is_a_file_is_named(disc: Path, tmp_path: Path) -> None:
    root = tmp_path / "root-file"
    root.write_text("")
    _, bench, problems = _run(root, tmp_path)
    assert bench is None and problems == [
        f"--root {root}: is a file, not a folder; give the benchmark's data folder (vsbench synth similarity disc "
        "--out DIR makes one)"]


def test_a_loader_that_cannot_be_found_is_its_own_line_without_the_option_prefix(disc: Path, tmp_path: Path,
                                                                                  monkeypatch) -> None:
    class Plugin:
        name = "disc"

        def check_options(self, options):
            raise ImportError("plugin module 'x' cannot be imported")

    monkeypatch.setattr("vsbench.benchmarks.registry.get", lambda name: Plugin())
    _, _, problems = _run(disc, tmp_path)
    assert problems == ["plugin module 'x' cannot be imported"]


def test_an_accelerator_is_asked_for_only_once_the_cheap_checks_pass(disc: Path, tmp_path: Path) -> None:
    for device in ("cuda", "cuda:0"):
        assert _run(disc, tmp_path, device=device, batch_size=0)[2] == [
            "--batch-size 0: must be at least 1 (images per forward pass)"]
        run, bench, problems = _run(disc, tmp_path, device=device)
        assert run is not None and bench is not None
        assert problems == [f"--device {device}: no CUDA device is visible on this machine; use --device cpu (or auto)"]


def test_mps_is_asked_for_only_once_the_cheap_checks_pass(disc: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("torch.backends.mps.is_available", lambda: False)
    assert _run(disc, tmp_path, device="mps", batch_size=0)[2] == [
        "--batch-size 0: must be at least 1 (images per forward pass)"]
    assert _run(disc, tmp_path, device="mps")[2] == [
        "--device mps: no MPS device on this machine; use --device cpu (or auto)"]


def test_the_benchmark_is_loaded_with_its_options(disc: Path, tmp_path: Path) -> None:
    run, bench, problems = _run(disc, tmp_path, benchmark_options={"query_dir": "elsewhere"})
    assert run is not None and bench is None and problems == [f"queries: no folder {disc / 'elsewhere'}"]


def test_the_environment_the_steps_read_is_checked(disc: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("VSBENCH_MAX_IMAGE_PIXELS", "many")
    monkeypatch.setenv("VSBENCH_LOCK_WAIT_S", "-1")
    _, bench, problems = _run(disc, tmp_path)
    assert bench is None and problems == ["VSBENCH_MAX_IMAGE_PIXELS='many' is not a number of pixels",
                                          "VSBENCH_LOCK_WAIT_S='-1' must be 0 or more seconds"]


def test_a_bad_model_is_refused_before_the_benchmark_s_files_are_read(tmp_path: Path) -> None:
    """Issue 57: an unknown built-in name is told in the first round, without torch or pandas; the
    benchmark's files (read in the second) are not reached."""
    empty = tmp_path / "empty"
    empty.mkdir()
    run, bench, problems = _run(empty, tmp_path, model="nosuch")
    assert run is not None and bench is None and len(problems) == 1
    assert problems[0].startswith("--model: unknown model 'nosuch'; choose from [")
    run, bench, problems = _run(empty, tmp_path)  # a good model: the files' problem, from the second round
    assert problems == [f"queries: no folder {empty / 'val_query'}"]


def test_a_bad_model_option_is_named_as_model_options(disc: Path, tmp_path: Path) -> None:
    assert _run(disc, tmp_path, model_options={"nosuch": 1})[2] == [
        "--model-options: model 'efficientnet_lite0' has no option 'nosuch'; its options are ['weights']"]  # issue 57:
    # from the declared options (vsbench.models.choices), before torch; the registry's line said the same


@pytest.mark.parametrize(("options", "shown"), [
    ({"path": "model"}, "path 'model'"),  # "path" is always a file
    ({"path": "sub/x.pt"}, "path 'sub/x.pt'"),
    ({"path": "x.pt"}, "path 'x.pt'"),
])
def test_a_model_file_that_does_not_exist_is_refused(disc: Path, tmp_path: Path, monkeypatch, options, shown) -> None:
    monkeypatch.chdir(tmp_path)
    assert _run(disc, tmp_path, model="torchscript", model_options=options)[2] == [
        f"--model-options: {shown}: no such file or folder; give the path of the torchscript model's file"]


@pytest.mark.parametrize("weights", ["random", "dir/x", "x.pt"])
def test_a_weights_value_is_a_file_only_when_it_looks_like_a_path(disc: Path, tmp_path: Path, monkeypatch,
                                                                  weights: str) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("vsbench.models.registry.check_model", lambda name, options: None)
    monkeypatch.setattr("vsbench.models.choices.option_problems", lambda name, options, loads=True: [])  # the file check alone
    problems = _run(disc, tmp_path, model_options={"weights": weights, "checkpoint": " ", "config": 3})[2]
    expected = [] if weights == "random" else [
        f"--model-options: weights {weights!r}: no such file or folder; give the path of the efficientnet_lite0 "
        "model's file"]
    assert problems == expected


def test_a_relative_model_file_is_refused_only_when_the_steps_run_elsewhere(disc: Path, tmp_path: Path,
                                                                            monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("model.pt").write_text("")
    relative = {"model": "torchscript", "model_options": {"path": "model.pt"}}
    assert _run(disc, tmp_path, **relative)[2] == []  # inline: the default runner
    assert _run(disc, tmp_path, runner="subprocess", model="torchscript",
                model_options={"path": str(tmp_path / "model.pt")})[2] == []
    assert _run(disc, tmp_path, runner="container", **relative)[2] == [
        "--model-options: path 'model.pt' is a relative path, which the pipeline's steps (--runner container) do not "
        f"resolve from here; give '{tmp_path / 'model.pt'}'"]
    assert _run(disc, tmp_path, runner="subprocess", model="torchscript", model_options={"path": "gone.pt"})[2] == [
        "--model-options: path 'gone.pt': no such file or folder; give the path of the torchscript model's file"]


def test_plain_codecs_without_search_parameters_are_not_checked_but_the_rest_are(disc: Path, tmp_path: Path,
                                                                              monkeypatch) -> None:
    checked = []

    def check_codec(codec, params):
        checked.append(codec)

    monkeypatch.setattr("vsbench.index.codec.check_codec", check_codec)
    assert _run(disc, tmp_path, codecs="Flat;L2norm,Flat;IVF4,Flat")[2] == []
    assert checked == ["IVF4,Flat"]
    checked.clear()
    assert _run(disc, tmp_path, codecs="Flat;IVF4,Flat", search_params="nprobe=2")[2] == []
    assert checked == ["Flat", "IVF4,Flat"]


def test_a_bad_codec_after_a_plain_one_is_found(disc: Path, tmp_path: Path) -> None:
    problems = _run(disc, tmp_path, codecs="Flat;IVF4x,Flat")[2]
    assert len(problems) == 1 and problems[0].startswith(f"--codecs: {BAD_CODEC}: ")
    problems = _run(disc, tmp_path, codecs="IVF4x,Flat")[2]
    assert len(problems) == 1 and problems[0].startswith(f"--codecs: {BAD_CODEC}: ")


def test_codecs_that_cannot_be_parsed_and_a_bad_score_norm_are_named(disc: Path, tmp_path: Path) -> None:
    problems = _run(disc, tmp_path, codecs=";", score_norm="junk")[2]
    assert [line.split(": ")[0] for line in problems] == ["--codecs", "--score-norm"], problems


def test_a_bad_field_leaves_the_others_checked_on_their_defaults(disc: Path, tmp_path: Path) -> None:
    run, bench, problems = _run(disc, tmp_path, k=0, codecs="IVF4x,Flat")
    assert run is None and bench is None
    assert problems[0] == "--k: Input should be greater than or equal to 1"
    assert len(problems) == 2 and problems[1].startswith(f"--codecs: {BAD_CODEC}")
    run, bench, problems = similarity_problems({"root": str(disc)}, out=tmp_path / "out", device="cpu", batch_size=8)
    assert run is None and bench is None and problems == ["--benchmark: Field required"]


# --- step_problems ---------------------------------------------------------------------------------

def test_a_step_reports_its_options_out_folder_and_codecs_together(disc: Path, tmp_path: Path) -> None:
    run = BenchmarkRun(benchmark="disc", root=str(disc), benchmark_options={"nosuch": 1}, codecs="Flat;IVF4x,Flat",
                       search_params="nprobe=8")
    problems = step_problems(run, tmp_path / "nothing")
    assert problems[:2] == [
        f"--benchmark-options: {NO_OPTION}",
        f"--out {tmp_path / 'nothing'}: no such folder; give the folder the embed step wrote (vsbench similarity run "
        "--out, or the pipeline's)"]
    assert problems[2].startswith(f"--search-params: {NPROBE}") and problems[3].startswith(f"--codecs: {BAD_CODEC}")
    assert len(problems) == 4
    file = tmp_path / "file"
    file.write_text("")
    assert step_problems(BenchmarkRun(benchmark="disc", root=str(tmp_path / "none")), file) == [
        f"--root {tmp_path / 'none'}: no such folder; give the benchmark's data folder, as given to the embed step",
        f"--out {file}: is a file, not a folder; give the folder the embed step wrote (vsbench similarity run --out, or "
        "the pipeline's)"]
    assert step_problems(BenchmarkRun(benchmark="disc", root=str(disc)), tmp_path) == []


# --- submitted_problems ----------------------------------------------------------------------------

def test_a_submitted_runs_arguments_are_named_as_arguments() -> None:
    problems = submitted_problems({"codecs": "Flat;IVF4x,Flat", "search_params": "nprobe=8", "runner": "ignored",
                                   "benchmark_options": {"nosuch": 1}, "merge_ondisk": True, "model": "nosuch"})
    assert problems[:2] == [
        "--arg merge_ondisk: applies to IVF codecs only: 'Flat' is not one; drop --merge-ondisk, or "
        "index with IVF codecs (e.g. IVF1024,Flat)",
        f"--arg benchmark_options: {NO_OPTION}"]
    assert problems[2].startswith(f"--arg search_params: {NPROBE}") and problems[3].startswith(f"--arg codecs: {BAD_CODEC}")
    # The model's name against the declared table (no torch) comes with the others (issue 57), as in
    # similarity run; the registry (torch) waits for them to pass.
    assert problems[4].startswith("--arg model: unknown model 'nosuch'; choose from [") and len(problems) == 5


def test_a_submitted_runs_model_is_checked_once_the_rest_pass_and_paths_are_the_clusters() -> None:
    assert submitted_problems({}) == []  # benchmark and root: the pipeline's defaults
    assert submitted_problems({"model": "nosuch"})[0].startswith("--arg model: unknown model 'nosuch'; choose from [")
    assert submitted_problems({"model": "torchscript", "model_options": {"path": "/no/such.pt"}}) == [
        "--arg model_options: path '/no/such.pt': no such file or folder; give the path of the torchscript model's "
        "file"]
    assert submitted_problems({"benchmark": "nosuch", "k": 0}) == [
        "--arg benchmark: unknown benchmark 'nosuch'; choose from disc, copydays, patch_pairs, vsd, product_search, "
        "abid_embeddings (vsbench benchmarks lists them)", "--arg k: Input should be greater than or equal to 1"]


def test_a_submitted_run_checks_relative_model_files_as_inline(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("model.pt").write_text("")
    assert submitted_problems({"model": "torchscript", "model_options": {"path": "model.pt"}}) == []


def test_plain_codecs_are_named_and_exist() -> None:
    assert preflight.PLAIN_CODECS == {"Flat", "L2norm,Flat"}
