"""Every command that reads a file or folder the user names, given a missing path, a folder where a
file belongs (or a file where a folder belongs), an empty file and a file of random bytes: one
``error:`` line naming the path, a non-zero exit, never a traceback and never "unexpected" (which
is what a bug ends as). Issue 28, item 8."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from vsbench.cli.app import app
from vsbench.cli.common import ERROR_DIR_ENV

FILE_CASES = ("missing", "folder", "empty", "random")
FOLDER_CASES = ("missing", "file", "empty_folder", "random")


def _bad(kind: str, where: Path) -> Path:
    """A bad path of ``kind`` under ``where``: what the command is given instead of a good input."""
    path = where / f"bad-{kind}"
    if kind == "folder" or kind == "empty_folder":
        path.mkdir()
    elif kind in ("empty", "file"):
        path.write_bytes(b"")
    elif kind == "random":
        path.write_bytes(np.random.default_rng(5).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return path


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Valid companions, so that each case reaches the bad input it is about."""
    root = tmp_path_factory.mktemp("good")
    files = {
        "counting_gt": root / "counting_val.json", "verification_gt": root / "obj_verification_val.json",
        "quantity_gt": root / "obj_num_verification_val.json", "counts": root / "counting_result.txt",
        "answers": root / "answers.txt", "disc_gt": root / "gt.csv", "predictions": root / "preds.csv",
        "queries": root / "queries.jsonl", "gallery": root / "gallery.csv", "images": root / "images",
    }
    files["counting_gt"].write_text(json.dumps([[1, 2], [2, 3]]))
    files["verification_gt"].write_text(json.dumps([[1, "A1", 1, [2]], [2, "A2", 0, [1]]]))
    files["quantity_gt"].write_text(json.dumps([[1, "A1", 1, 2, 2, [2]], [2, "A2", 0, 1, 3, [1]]]))
    files["counts"].write_text("2\n3\n")
    files["answers"].write_text("1\n0\n")
    files["disc_gt"].write_text("query_id,reference_id\nQ1,R1\n")
    files["predictions"].write_text("query_id,reference_id,score\nQ1,R1,0.5\n")
    files["queries"].write_text(json.dumps({"source_pid": "a", "candidates": [{"candidate_pid": "g1", "label": 1}]})
                                + "\n")
    files["gallery"].write_text("ASIN,Image ID\nX,g1\n")
    files["images"].mkdir()
    return files


def _commands(good: dict[str, Path], out: Path) -> list[tuple[str, list[str], str]]:
    """(case name, arguments with BAD where the bad path goes, the slot's kind: file or folder)."""
    g = {name: str(path) for name, path in good.items()}
    o = str(out)
    score_tail = ["--output", f"{o}/m.json", "--no-track"]
    return [
        ("compile cluster config", ["compile", "--out", o, "--cluster-config", "BAD"], "file"),
        ("compile suite", ["compile", "--out", o, "--suite", "BAD"], "file"),
        ("submit cluster config", ["submit", "--host", "http://127.0.0.1:9", "--cluster-config", "BAD"], "file"),
        ("schedule cluster config", ["schedule", "--host", "http://127.0.0.1:9", "--cron", "0 0 2 * * *",
                                     "--cluster-config", "BAD"], "file"),
        ("abid prepare data", ["abid", "prepare", "--data", "BAD", "--out", o], "folder"),
        ("abid resize data", ["abid", "resize", "--data", "BAD", "--out", o, "--workers", "1"], "folder"),
        ("abid train tasks", ["abid", "train", "counting", "--tasks", "BAD", "--images", g["images"], "--out", o],
         "folder"),
        ("similarity run root", ["similarity", "run", "--benchmark", "disc", "--root", "BAD", "--out", o,
                                 "--no-track"], "folder"),
        ("similarity index root", ["similarity", "index", "--benchmark", "patch_pairs", "--root", "BAD", "--out", o],
         "folder"),
        ("similarity search root", ["similarity", "search", "--benchmark", "vsd", "--root", "BAD", "--out", o],
         "folder"),
        ("similarity score root", ["similarity", "score", "--benchmark", "product_search", "--root", "BAD",
                                   "--out", o], "folder"),
        ("similarity models torchscript", ["similarity", "models", "torchscript", "--model-options",
                                           '{"path": "BAD"}'], "file"),
        ("score abid-counting pred", ["score", "abid-counting", "--pred", "BAD", "--gt", g["counting_gt"],
                                      *score_tail], "file"),
        ("score abid-counting gt", ["score", "abid-counting", "--pred", g["counts"], "--gt", "BAD", *score_tail],
         "file"),
        ("score abid-verification pred", ["score", "abid-verification", "--pred", "BAD", "--gt",
                                          g["verification_gt"], *score_tail], "file"),
        ("score abid-verification gt", ["score", "abid-verification", "--pred", g["answers"], "--gt", "BAD",
                                        *score_tail], "file"),
        ("score abid-quantity gt", ["score", "abid-quantity", "--pred", g["answers"], "--gt", "BAD", *score_tail],
         "file"),
        ("score copy-detection predictions", ["score", "copy-detection", "--predictions", "BAD", "--gt", g["disc_gt"],
                                              *score_tail], "file"),
        ("score copy-detection gt", ["score", "copy-detection", "--predictions", g["predictions"], "--gt", "BAD",
                                     *score_tail], "file"),
        ("score pairs results", ["score", "pairs", "--results", "BAD", *score_tail], "folder"),
        ("score product-search queries", ["score", "product-search", "--queries", "BAD", "--gallery", g["gallery"],
                                          "--features", g["gallery"], *score_tail], "file"),
        ("score product-search gallery", ["score", "product-search", "--queries", g["queries"], "--gallery", "BAD",
                                          "--features", g["gallery"], *score_tail], "file"),
        ("score product-search features", ["score", "product-search", "--queries", g["queries"], "--gallery",
                                           g["gallery"], "--features", "BAD", *score_tail], "file"),
        ("track upload", ["track", "upload", "BAD"], "folder"),
    ]


# An empty cluster-settings file is a valid one: every setting at its default.
VALID = {("compile cluster config", "empty"), ("submit cluster config", "empty"), ("schedule cluster config", "empty")}
CASES = [(name, kind) for name, _, slot in _commands({k: Path("x") for k in (
    "counting_gt", "verification_gt", "quantity_gt", "counts", "answers", "disc_gt", "predictions", "queries",
    "gallery", "images")}, Path("o")) for kind in (FILE_CASES if slot == "file" else FOLDER_CASES)
    if (name, kind) not in VALID]


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_a_bad_path_is_one_line_naming_it(name: str, kind: str, good: dict[str, Path], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ERROR_DIR_ENV, str(tmp_path / "errors"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("VSBENCH_DEFAULT_STORE", "off")
    (args, ) = [a for n, a, _ in _commands(good, tmp_path / "out") if n == name]
    if name.startswith("similarity ") and name.split()[1] in ("index", "search", "score"):
        (tmp_path / "out").mkdir()  # what the embed step wrote: only the path under test is bad
    bad = _bad(kind, tmp_path)
    args = [arg.replace("BAD", str(bad)) for arg in args]
    result = CliRunner().invoke(app, args)
    output = result.output
    assert result.exit_code not in (0, None), output
    assert "Traceback" not in output and "unexpected" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, output
    assert bad.name in errors[0], output
    assert not (tmp_path / "errors").exists() or not os.listdir(tmp_path / "errors")


def test_an_unexpected_error_is_one_line_and_a_file_holding_its_traceback(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug (here: a KeyError from inside a command) is not a user's mistake: exit 1, one line saying
    where the traceback is; --debug lets it through."""
    import vsbench.cli.benchmarks

    def broken() -> dict:
        raise KeyError("surprise")

    monkeypatch.setattr(vsbench.cli.benchmarks, "specs", broken)
    monkeypatch.setenv(ERROR_DIR_ENV, str(tmp_path / "errors"))
    result = CliRunner().invoke(app, ["benchmarks"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    (line,) = [line for line in result.output.splitlines() if line.strip()]
    assert line.startswith("error: unexpected KeyError") and "--debug" in line
    (written,) = (tmp_path / "errors").iterdir()
    assert str(written) in line and "Traceback" in written.read_text() and "surprise" in written.read_text()
    debug = CliRunner().invoke(app, ["--debug", "benchmarks"])
    assert isinstance(debug.exception, KeyError)
