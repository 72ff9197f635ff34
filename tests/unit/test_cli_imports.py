"""What a command imports before it answers (issue 48, "fast and narrow"): help and a run its checks
refuse load none of the heavy libraries, whose imports were most of their time (torch alone takes
2-5 s, MLflow 4 s; bench/cli_startup.py prints the figures). Nothing is timed here: each case runs
the CLI in a fresh interpreter and lists the top-level packages it loaded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HEAVY = ("numpy", "torch", "mlflow", "faiss", "pandas", "pyarrow", "kfp")
CHECKED = ("torch", "faiss", "mlflow", "pandas", "kfp")  # a refused run may read JSON with numpy/pydantic

# Runs each argv (a JSON list of lists) through the CLI in this one process, then prints the
# top-level packages loaded and the exit codes: help pages import nothing heavy, so running them in
# turn adds nothing another would not.
_WRAPPER = """
import json, sys
from vsbench.cli.app import app
codes = []
for argv in json.loads(sys.argv[1]):
    try:
        app(argv, prog_name="vsbench")
    except SystemExit as exc:
        codes.append(exc.code or 0)
print(json.dumps({"codes": codes, "loaded": sorted({name.split(".")[0] for name in sys.modules})}), file=sys.stderr)
"""


def _loaded(*argvs: list[str], cwd: Path | None = None) -> tuple[list[int], set[str], str]:
    """(exit codes, top-level packages loaded, stderr) of ``argvs`` run in one fresh interpreter."""
    done = subprocess.run([sys.executable, "-c", _WRAPPER, json.dumps(list(argvs))], capture_output=True,
                          text=True, timeout=120, cwd=cwd)
    last = done.stderr.strip().splitlines()[-1]
    found = json.loads(last)
    return found["codes"], set(found["loaded"]), done.stderr


def _help_paths() -> list[list[str]]:
    """Every command and group's ``--help``, hidden spellings left out (they share a page)."""
    import typer

    from vsbench.cli.app import app

    paths: list[list[str]] = []

    def walk(group, prefix: list[str]) -> None:
        paths.append([*prefix, "--help"])
        for name, command in group.commands.items():
            if getattr(command, "hidden", False):
                continue
            if hasattr(command, "commands"):
                walk(command, [*prefix, name])
            else:
                paths.append([*prefix, name, "--help"])

    walk(typer.main.get_command(app), [])
    return paths


def test_the_root_help_and_similarity_runs_import_no_heavy_library() -> None:
    codes, loaded, stderr = _loaded(["--help"])
    assert codes == [0] and not loaded & set(HEAVY), (sorted(loaded & set(HEAVY)), stderr[-2000:])
    codes, loaded, stderr = _loaded(["similarity", "run", "--help"])
    assert codes == [0] and not loaded & set(HEAVY), (sorted(loaded & set(HEAVY)), stderr[-2000:])


def test_no_help_page_imports_a_heavy_library() -> None:
    paths = _help_paths()
    assert len(paths) > 30 and ["score", "copy-detection", "--help"] in paths
    codes, loaded, stderr = _loaded(*paths)
    assert codes == [0] * len(paths), stderr[-2000:]
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("mistake", [
    ["--root", "{tmp}/no-such-root"],
    ["--root", "{tmp}", "--benchmark-options", '{{"nosuch": 1}}'],
    ["--root", "{tmp}/no-such-root", "--codecs", "Flat;;Flat", "--device", "gpu", "--batch-size", "0"],
], ids=["missing-root", "unknown-benchmark-option", "several"])
def test_a_refused_similarity_run_loads_neither_torch_nor_faiss(tmp_path: Path, mistake: list[str]) -> None:
    """The cheap checks come first; the model (torch), the codecs against faiss and the benchmark's
    files (pandas) only once they pass. Nothing is made: the output folder stays absent."""
    argv = ["similarity", "run", "--benchmark", "disc", "--out", str(tmp_path / "out"), "--no-track",
            *(part.format(tmp=tmp_path) for part in mistake)]
    codes, loaded, stderr = _loaded(argv, cwd=tmp_path)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert codes == [2] and errors and "Traceback" not in stderr, stderr[-2000:]
    assert not loaded & set(CHECKED), sorted(loaded & set(CHECKED))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("step", ["index", "search", "score"])
def test_a_refused_step_command_loads_neither_torch_nor_faiss(tmp_path: Path, step: str) -> None:
    """`similarity index|search|score` check their options before importing the step (torch, faiss)."""
    argv = ["similarity", step, "--benchmark", "disc", "--root", str(tmp_path / "no-such-root"),
            "--out", str(tmp_path / "nothing")]
    codes, loaded, stderr = _loaded(argv, cwd=tmp_path)
    assert codes == [2] and "error: --root" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not loaded & set(CHECKED), sorted(loaded & set(CHECKED))


@pytest.mark.parametrize(("step", "benchmark", "missing"), [
    ("index", "disc", "val_query"), ("search", "disc", "val_query"), ("score", "disc", "val_query"),
    ("score", "copydays", "original"), ("score", "vsd", "metadata.json"),
    ("score", "product_search", "queries.jsonl"), ("score", "patch_pairs", "test_pos_easy.pairs"),
])
def test_a_root_without_the_benchmarks_files_is_refused_before_torch(tmp_path: Path, step: str, benchmark: str,
                                                                    missing: str) -> None:
    """Issue 57: a --root that is a folder, but not the benchmark's (no val_query/ for DISC), was refused
    only after the step's import of torch and faiss (~13 s). It is one line naming the root and what is
    missing in it, exit 2, before torch (an --out the embed step wrote is there: only the root is wrong)."""
    root, out = tmp_path / "not-the-data", tmp_path / "out"
    root.mkdir()
    out.mkdir()
    argv = ["similarity", step, "--benchmark", benchmark, "--root", str(root), "--out", str(out)]
    codes, loaded, stderr = _loaded(argv, cwd=tmp_path)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert codes == [2] and len(errors) == 1 and "Traceback" not in stderr, stderr[-2000:]
    assert errors[0].startswith(f"error: --root {root}: ") and str(root / missing) in errors[0], errors
    assert "torch" not in loaded and "faiss" not in loaded, sorted(loaded & set(CHECKED))


def test_a_refused_similarity_submit_loads_no_torch(tmp_path: Path) -> None:
    """`vsbench submit --pipeline similarity` reads the pipeline's parameters (kfp) and asks faiss about
    a codec it does not know, but the model (torch) waits for the other checks to pass."""
    argv = ["submit", "--host", "http://127.0.0.1:9", "--pipeline", "similarity", "--arg", "codecs=Bogus",
            "--arg", "model=nosuch"]
    codes, loaded, stderr = _loaded(argv, cwd=tmp_path)
    assert codes == [2] and "error: --arg codecs" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not loaded & {"torch", "mlflow", "pandas"}, sorted(loaded & {"torch", "mlflow", "pandas"})


_BAD_WEIGHTS = '{"weights": "nosuch"}'
_STEP = ["--benchmark", "disc", "--root", "{tmp}", "--out", "{tmp}", "--model", "resnet34", "--model-options",
         _BAD_WEIGHTS]


@pytest.mark.parametrize("argv", [
    ["submit", "--host", "http://127.0.0.1:9", "--pipeline", "similarity", "--arg", "model=resnet34",
     "--arg", f"model_options={_BAD_WEIGHTS}"],
    ["schedule", "--host", "http://127.0.0.1:9", "--cron", "0 0 2 * * *", "--pipeline", "similarity",
     "--arg", "model=resnet34", "--arg", f"model_options={_BAD_WEIGHTS}"],
    ["similarity", "models", "resnet34", "--model-options", _BAD_WEIGHTS],
    ["similarity", "index", *_STEP],
    ["similarity", "search", *_STEP],
    ["similarity", "score", *_STEP],
], ids=["submit", "schedule", "models", "index", "search", "score"])
def test_a_bad_model_option_value_is_refused_before_torch(tmp_path: Path, argv: list[str]) -> None:
    """Issue 57: every command that takes a model and its options refuses a value outside the model's
    declared choices in one line, exit 2, before torch is imported (its import was 8-24 s of the
    refusal on a loaded machine). ``submit`` and ``schedule`` passed the value to the cluster; the
    others named it only after torch."""
    codes, loaded, stderr = _loaded([part.replace("{tmp}", str(tmp_path)) for part in argv], cwd=tmp_path)
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert codes == [2] and "Traceback" not in stderr, stderr[-2000:]
    assert any("weights 'nosuch': resnet34 takes one of 'imagenet', 'random'" in line and "model_options" in
               line.replace("-", "_") for line in errors), errors
    assert "torch" not in loaded, stderr[-2000:]


def test_the_plain_codecs_the_preflight_takes_without_faiss_are_faiss_codecs() -> None:
    """:data:`PLAIN_CODECS` are passed without asking faiss: each must pass its check."""
    from vsbench.index.codec import check_codec
    from vsbench.runspec.preflight import PLAIN_CODECS

    for codec in PLAIN_CODECS:
        check_codec(codec, "")
