"""Failure sheets of the patch pairs and ABID (issue 47): on small sets whose failures are known, the sheet
names exactly those, worst first; ids are escaped end to end; an image outside the root is refused; the
score steps write the files and name them; VSBENCH_FAILURE_ROWS=0 turns them off; a sheet that cannot
be made is one warning, never a failed step."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from tests.abid_data import track_to_sqlite
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.patch_pairs.adapter import load_patch_pairs
from vsbench.benchmarks.patch_pairs.failures import recall_threshold
from vsbench.io.features import FeatureSet
from vsbench.reporting.plots import close
from vsbench.reporting.sheets import SHEET_ROWS_ENV

EVIL = "<script>alert(1)</script>"

# --- patch pairs ------------------------------------------------------------------------------------

# pos_easy: 19 matching pairs at 0.1 and one at 0.9: 95% recall is reached at 0.1 (the 19th smallest),
# so the one at 0.9 is the only false negative. neg_diffseq: lines 2 and 4 tie at 0.05, line 1 is at
# 0.1 (= the threshold: called a match), the others are far. pos_hard: 38 at 0.2, so two false
# negatives (0.8, 0.7 over 0.2). neg_sameseq: nothing under any threshold.
DISTANCES = {"pos_easy": [0.1] * 19 + [0.9], "pos_hard": [0.2] * 38 + [0.7, 0.8],
             "neg_diffseq": [0.1, 0.05, 2.0, 0.05, 3.0], "neg_sameseq": [5.0, 6.0]}


def _patch_set(root: Path, names: dict[str, str] | None = None) -> FeatureSet:
    """Pairs files whose pair i of file f is (f_i_a, f_i_b), 1-D descriptors ``DISTANCES[f][i]`` apart,
    each patch a small PNG (``names`` renames a patch id)."""
    names = names or {}
    ids, values = [], []
    (root / "patches").mkdir(parents=True, exist_ok=True)
    for infix, distances in DISTANCES.items():
        lines = []
        for i, d in enumerate(distances):
            a, b = (names.get(f"{infix}_{i}_{s}", f"{infix}_{i}_{s}") for s in "ab")
            lines.append(f"{a},{b},{int(infix.startswith('pos'))}\n")
            ids += [a, b]
            values += [[0.0], [d]]
            for patch in (a, b):
                Image.new("RGB", (32, 32), (i * 10 % 255, 80, 120)).save(root / "patches" / f"{patch}.png")
        (root / f"test_{infix}.pairs").write_text("".join(lines))
    return FeatureSet(np.array(ids), np.array(values, dtype=np.float64))


def _units(root: Path, features: FeatureSet) -> dict[str, Any]:
    result = load_patch_pairs(root).evaluate({"patches": features}, EvalSettings())
    for figure in result.figures.values():
        close(figure)
    return {record["variant"]: units for record, units in zip(result.records, result.units)}


def _pairs_named(sheet) -> list[tuple[str, str]]:
    return [(row.tiles[0].caption[0], row.tiles[1].caption[0]) for row in sheet.rows]


def test_the_patch_pair_sheet_names_exactly_the_hardest_errors(tmp_path: Path) -> None:
    units = _units(tmp_path, _patch_set(tmp_path))
    bench = load_patch_pairs(tmp_path)
    sheet = bench.failure_sheet(units["easy_diffseq"], 24)
    # false positives: smallest distance first, the tie in file order; then the false negative
    assert _pairs_named(sheet) == [("neg_diffseq_1_a", "neg_diffseq_1_b"), ("neg_diffseq_3_a", "neg_diffseq_3_b"),
                                   ("neg_diffseq_0_a", "neg_diffseq_0_b"), ("pos_easy_19_a", "pos_easy_19_b")]
    assert sheet.total == 4 and [t.mark for t in sheet.rows[0].tiles] == ["false", "false"]
    assert sheet.rows[-1].title.startswith("false negative 1 of 1") and "distance 0.9000 > threshold 0.1000" in \
        sheet.rows[-1].title
    assert "threshold 0.1: the distance at 95% recall" in sheet.notes[0]
    hard = bench.failure_sheet(units["hard_sameseq"], 24)  # no false positive; two negatives, largest first
    assert _pairs_named(hard) == [("pos_hard_39_a", "pos_hard_39_b"), ("pos_hard_38_a", "pos_hard_38_b")]
    two = bench.failure_sheet(units["easy_diffseq"], 2)  # a row of each kind, each the worst
    assert _pairs_named(two) == [("neg_diffseq_1_a", "neg_diffseq_1_b"), ("pos_easy_19_a", "pos_easy_19_b")]
    assert two.total == 4
    for row in sheet.rows:
        for tile in row.tiles:
            assert tile.image == (tmp_path / "patches" / f"{tile.caption[0]}.png").resolve()


def test_the_threshold_is_the_distance_at_95_percent_recall() -> None:
    assert recall_threshold(np.arange(1, 21, dtype=float)) == 19.0
    assert recall_threshold(np.array([3.0])) == 3.0
    assert recall_threshold(np.arange(1, 101, dtype=float)) == 95.0


def _engine_score(root: Path, features: FeatureSet, out: Path):
    from vsbench.retrieval.engine import Engine
    from vsbench.runspec.run import BenchmarkRun

    run = BenchmarkRun.parse(benchmark="patch_pairs", root=str(root), benchmark_options={})
    engine = Engine(run, out, bench=load_patch_pairs(root))
    engine._features = {"patches": features}
    result = engine.score()
    for figure in result.figures.values():
        close(figure)
    return result


def test_the_similarity_score_writes_each_records_sheet_and_names_it(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SHEET_ROWS_ENV, raising=False)
    root = tmp_path / "data"
    features = _patch_set(root, {"neg_diffseq_1_a": f"x{EVIL.replace('/', '')}"})
    result = _engine_score(root, features, tmp_path / "out")
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    records, entries = written["records"], written["units"]
    assert [record["failures"]["total"] for record in records] == [4, 1, 5, 2, 6]  # the mean pools every file
    for record, entry in zip(records, entries):
        stem = Path(entry["file"]).stem
        assert record["failures"]["png"] == f"failures/{stem}.png" and record["failures"]["html"] == f"failures/{stem}.html"
        assert (tmp_path / "out" / record["failures"]["png"]).read_bytes().startswith(b"\x89PNG")
    page = (tmp_path / "out" / records[0]["failures"]["html"]).read_text()
    assert "<script>" not in page and "x&lt;script&gt;alert(1)&lt;script&gt;" in page
    assert result.records[0]["failures"] == records[0]["failures"]


def test_sheets_off_and_a_patch_folder_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "data"
    features = _patch_set(root)
    monkeypatch.setenv(SHEET_ROWS_ENV, "0")
    _engine_score(root, features, tmp_path / "off")
    assert not (tmp_path / "off" / "failures").exists()
    assert all("failures" not in r for r in json.loads((tmp_path / "off" / "metrics.json").read_text())["records"])
    monkeypatch.delenv(SHEET_ROWS_ENV)
    bench = load_patch_pairs(root)
    for path in (root / "patches").iterdir():
        path.unlink()
    (root / "patches").rmdir()
    from vsbench.retrieval.engine import Engine
    from vsbench.runspec.run import BenchmarkRun

    engine = Engine(BenchmarkRun.parse(benchmark="patch_pairs", root=str(root), benchmark_options={}),
                    tmp_path / "gone", bench=bench)
    engine._features = {"patches": features}
    result = engine.score()  # the score stands
    for figure in result.figures.values():
        close(figure)
    assert len(result.records) == 5 and not (tmp_path / "gone" / "failures").exists()
    lines = [line for line in capsys.readouterr().err.splitlines() if "no failure sheet" in line]
    assert len(lines) == 5 and "patch folder" in lines[0]


def test_a_patch_outside_the_root_is_refused(tmp_path: Path) -> None:
    units = _units(tmp_path / "data", _patch_set(tmp_path / "data"))
    secret = tmp_path / "secret.png"
    Image.new("RGB", (32, 32), "red").save(secret)
    target = tmp_path / "data" / "patches" / "neg_diffseq_1_a.png"
    target.unlink()
    os.symlink(secret, target)
    sheet = load_patch_pairs(tmp_path / "data").failure_sheet(units["easy_diffseq"], 24)
    tile = sheet.rows[0].tiles[0]
    assert tile.image is None and "outside the benchmark's root" in tile.missing
    assert any("outside the benchmark's root" in note for note in sheet.notes)


# --- ABID -------------------------------------------------------------------------------------------

COUNTS = [1, 2, 3, 4, 0, 2, 5, 1]
PREDICTED = [3, 2, 0, 4, 0, 3, 2, 1]  # errors: +2 (q0), -3 (q2), +1 (q5), -3 (q6)
VERIFY = [[3, "B0AAAAAAAA", 1, [7, 8]], [4, EVIL, 0, [9]], [5, "B0CCCCCCCC", 1, []], [6, "B0DDDDDDDD", 0, [2]]]
VERIFY_SAID = [1, 1, 0, 0]  # wrong: q1 (said yes), q2 (said no)
QUANTITY = [[1, "B0EEEEEEEE", 1, 2, 2, [7]], [2, "B0FFFFFFFF", 0, 1, 3, [8]], [3, "B0GGGGGGGG", 0, 2, 1, [9]]]
QUANTITY_SAID = [0, 0, 1]  # wrong: q0, q2


@pytest.fixture(scope="module")
def abid(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data root: 12 generated bins resized to 32 px, task files asking known questions of them, and
    result files whose wrong answers are known."""
    from vsbench.abid.resize import resize_abid
    from vsbench.abid.synth import generate_abid

    root = tmp_path_factory.mktemp("abid")
    generate_abid(root / "raw", 12, seed=3, progress=False)
    resize_abid(root / "raw", root / "bin-images-resize", size=32, workers=1, progress=False)
    (root / "tasks").mkdir()
    (root / "tasks" / "counting_val.json").write_text(json.dumps([[i, c] for i, c in enumerate(COUNTS)]))
    (root / "tasks" / "obj_verification_val.json").write_text(json.dumps(VERIFY))
    (root / "tasks" / "obj_num_verification_val.json").write_text(json.dumps(QUANTITY))
    for name, answers in (("counting.txt", PREDICTED), ("verification.txt", VERIFY_SAID),
                          ("quantity.txt", QUANTITY_SAID)):
        (root / name).write_text("".join(f"{a}\n" for a in answers))
    return root


def _score(root: Path, out: Path, **kwargs: Any):
    from vsbench.steps.abid import abid_score_step

    return abid_score_step(str(root / "tasks"), str(root / "counting.txt"), str(root / "verification.txt"),
                           str(root / "quantity.txt"), units_dir=str(out), **kwargs)


def _rows(page: str) -> list[str]:
    return re.findall(r"<h2>(.*?)</h2>", page)


@pytest.fixture
def tracked_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSBENCH_NO_TRACK", "1")
    monkeypatch.delenv(SHEET_ROWS_ENV, raising=False)


def test_the_abid_score_step_writes_the_sheets_and_names_them(abid: Path, tmp_path: Path, tracked_off: None) -> None:
    result = _score(abid, tmp_path / "score")
    units = result.manifest["units"]
    for task, total in (("counting", 4), ("verification", 2), ("quantity", 2)):
        entry = units[f"abid_{task}_units.parquet"]["failures"]
        assert entry == {"png": str(tmp_path / "score" / "failures" / f"abid_{task}_units.png"),
                         "html": str(tmp_path / "score" / "failures" / f"abid_{task}_units.html"),
                         "rows": total, "total": total, "sha256": {
                             kind: hashlib.sha256(Path(entry[kind]).read_bytes()).hexdigest() for kind in ("png", "html")}}
        assert Path(entry["png"]).read_bytes().startswith(b"\x89PNG")
    pages = {task: Path(units[f"abid_{task}_units.parquet"]["failures"]["html"]).read_text()
             for task in ("counting", "verification", "quantity")}
    # counting: largest absolute error first, the tie (q2, q6) in file order
    # each bin by its own id: task index 2 is bin 00003 (its photo 00003.jpg, its truth 00003.json)
    assert _rows(pages["counting"]) == ["bin 00003: true count 3, predicted 0 (off by 3)",
                                        "bin 00007: true count 5, predicted 2 (off by 3)",
                                        "bin 00001: true count 1, predicted 3 (off by 2)",
                                        "bin 00006: true count 2, predicted 3 (off by 1)"]
    escaped = EVIL.replace("<", "&lt;").replace(">", "&gt;")
    assert _rows(pages["verification"]) == [
        f"is asin {escaped} in bin 00005? said yes, truth no (question 4:{escaped})",
        "is asin B0CCCCCCCC in bin 00006? said no, truth yes (question 5:B0CCCCCCCC)"]
    assert "<script>" not in pages["verification"] and pages["verification"].count("data:image/jpeg") == 3
    assert "no training bin" in pages["verification"]  # q2's task entry lists none: a tile saying so
    assert _rows(pages["quantity"]) == [
        "2 of asin B0EEEEEEEE in bin 00002? said no, truth yes (holds 2; question 1:B0EEEEEEEE:2)",
        "1 of asin B0GGGGGGGG in bin 00004? said yes, truth no (holds 2; question 3:B0GGGGGGGG:1)"]


def test_an_abid_sheets_label_names_the_bin_whose_photo_and_truth_it_shows(tmp_path: Path, tracked_off: None) -> None:
    """The label of a counting error is the bin whose metadata file holds the true count shown, and whose
    photo the tile shows (issue 57: labels were the 0-based task index, one bin off)."""
    from vsbench.abid.prepare import prepare_abid
    from vsbench.abid.resize import resize_abid
    from vsbench.abid.synth import generate_abid

    generate_abid(tmp_path / "raw", 24, seed=5, progress=False)
    resize_abid(tmp_path / "raw", tmp_path / "bin-images-resize", size=32, workers=1, progress=False)
    prepare_abid(tmp_path / "raw", tmp_path / "tasks", seed=0, val_fraction=0.5, progress=False)
    questions = json.loads((tmp_path / "tasks" / "counting_val.json").read_text())
    from vsbench.abid.failures import SHEETS
    from vsbench.abid.readers import read_task_entries

    entries = read_task_entries(tmp_path / "tasks" / "counting_val.json", "counting")
    answers = np.array([count + 7 for _, count in questions])  # every answer wrong by 7
    truths = np.array([count for _, count in questions])
    sheet = SHEETS["counting"](entries, answers, truths, [str(e[0]) for e in entries],
                               tmp_path / "bin-images-resize", 100)
    assert len(sheet.rows) == len(questions) >= 5
    for row in sheet.rows:
        stem, true = re.fullmatch(r"bin (\d{5}): true count (\d+), predicted \d+ \(off by 7\)", row.title).groups()
        raw = json.loads((tmp_path / "raw" / "metadata" / f"{int(stem)}.json").read_text())["BIN_FCSKU_DATA"]
        assert sum(item["quantity"] for item in raw.values()) == int(true), row.title
        assert row.tiles[0].image == (tmp_path / "bin-images-resize" / f"{stem}.jpg").resolve()
        assert row.tiles[0].caption == (f"bin {stem}",)


def test_abid_sheets_cut_off_and_without_images(abid: Path, tmp_path: Path, tracked_off: None,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv(SHEET_ROWS_ENV, "1")
    one = _score(abid, tmp_path / "one").manifest["units"]["abid_counting_units.parquet"]["failures"]
    assert (one["rows"], one["total"]) == (1, 4)
    assert "1 of 4 counting errors shown" in Path(one["html"]).read_text()
    monkeypatch.setenv(SHEET_ROWS_ENV, "0")
    off = _score(abid, tmp_path / "off")
    assert not (tmp_path / "off" / "failures").exists()
    assert all("failures" not in entry for entry in off.manifest["units"].values())
    monkeypatch.delenv(SHEET_ROWS_ENV)
    gone = _score(abid, tmp_path / "gone", images=str(tmp_path / "nowhere"))  # the step stands, one line
    assert gone.metrics["counting_accuracy"] == 0.5 and not (tmp_path / "gone" / "failures").exists()
    assert len([line for line in capsys.readouterr().err.splitlines() if "no failure sheets" in line]) == 1


def test_an_abid_image_outside_the_root_is_refused(abid: Path, tmp_path: Path, tracked_off: None) -> None:
    images = tmp_path / "images"
    images.mkdir()
    for path in (abid / "bin-images-resize").glob("*.jpg"):
        os.link(path, images / path.name)
    secret = tmp_path / "secret.jpg"
    Image.new("RGB", (32, 32), "red").save(secret)
    (images / "00003.jpg").unlink()  # bin 2: the first counting error's photo
    os.symlink(secret, images / "00003.jpg")
    result = _score(abid, tmp_path / "score", images=str(images))
    page = Path(result.manifest["units"]["abid_counting_units.parquet"]["failures"]["html"]).read_text()
    assert "outside the benchmark&#x27;s root" in page and page.count("data:image/jpeg") == 3


def test_the_evaluation_run_logs_the_sheet_under_failures(tmp_path: Path) -> None:
    from vsbench.reporting.record_sheets import failure_files
    from vsbench.tracking.evaluations import Embedder, _log_failures, evaluations_of

    (tmp_path / "failures").mkdir()
    png, html = tmp_path / "failures" / "a.png", tmp_path / "failures" / "a.html"
    png.write_bytes(b"\x89PNG")
    html.write_text("<html>")
    record = {"variant": "mean", "mean_pr_ap": 0.5,
              "failures": {"png": "failures/a.png", "html": "failures/a.html", "rows": 1, "total": 3,
                           "sha256": {"png": hashlib.sha256(png.read_bytes()).hexdigest(),
                                      "html": hashlib.sha256(html.read_bytes()).hexdigest()}}}
    (evaluation,) = evaluations_of("patch_pairs", [record], Embedder(model="m"), run_params={},
                                   failures=[failure_files(record, tmp_path)])
    assert sorted(evaluation.failures) == sorted([str(png), str(html)])

    class Client:
        logged: list[tuple[str, str, str]] = []

        def log_artifact(self, run_id: str, path: str, folder: str) -> None:  # a copy stamped with the run
            self.logged.append((run_id, path, folder))

    client = Client()
    _log_failures(client, "run", evaluation)
    logged = sorted((run_id, Path(path).name, folder) for run_id, path, folder in client.logged)
    assert logged == sorted([("run", png.name, "failures"), ("run", html.name, "failures")])
    # A sheet changed after the score wrote it, or one with no recorded digest, is not logged.
    html.write_text("<html>changed")
    for failures in ({str(png): evaluation.failures[str(png)], str(html): evaluation.failures[str(html)]},
                     {str(png): "", str(html): ""}):
        client.logged.clear()
        _log_failures(client, "run", evaluation.model_copy(update={"failures": failures}))
        assert [Path(path).name for _, path, _ in client.logged] == ([png.name] if failures[str(png)] else [])


def test_the_sheets_png_reads_back_exactly() -> None:
    import io

    from vsbench.reporting.sheets import png_bytes

    rng = np.random.default_rng(0)
    for shape in ((1, 1, 3), (7, 5, 3), (40, 33, 3)):
        picture = Image.fromarray(rng.integers(0, 256, shape, dtype=np.uint8), "RGB")
        with Image.open(io.BytesIO(png_bytes(picture))) as read:
            read.load()
            assert read.format == "PNG" and np.array_equal(np.asarray(read), np.asarray(picture))


@pytest.mark.slow  # the score step logging to an MLflow store (4 s): `make test` runs it, `make mutate` does not
def test_the_abid_sheets_logged_to_the_score_run_name_it(abid: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The copies of the ABID sheets logged to the ``abid-score`` run say which run they are on (issue 57:
    a sheet never said which run it is about); the files on disk keep the bytes their digests name."""
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.runs import open_parent_run

    uri = track_to_sqlite(monkeypatch, tmp_path / "m.db")
    parent = open_parent_run("abid-sheets", "kfp-abid", "vsbench-abid", {})
    result = _score(abid, tmp_path / "score", parent_run_id=parent, resamples=0)
    client = MlflowClient(uri)
    [step] = [r for r in client.search_runs([client.get_run(parent).info.experiment_id])
              if r.info.run_name == "abid-score"]
    folder = Path(client.download_artifacts(step.info.run_id, "failures", str(tmp_path / "down")))
    page = (folder / "abid_counting_units.html").read_text()
    assert f'<p class="run">MLflow run {step.info.run_id} (abid-score)</p>' in page
    entry = result.manifest["units"]["abid_counting_units.parquet"]["failures"]
    assert hashlib.sha256(Path(entry["html"]).read_bytes()).hexdigest() == entry["sha256"]["html"]
    assert "MLflow run" not in Path(entry["html"]).read_text()


def test_each_abid_sheets_title_names_the_benchmark_model_variant_and_run_it_was_made_for(
        abid: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 57: an ABID sheet's title was ``ABID counting: the bins counted wrong`` whichever network
    answered. Each title logged to the ``abid-score`` run is read back and checked against the runs: the
    benchmark, the architecture its training step's run recorded, the score run's task set and its id."""
    from mlflow.tracking import MlflowClient

    from vsbench.tracking.runs import child_run, open_parent_run

    uri = track_to_sqlite(monkeypatch, tmp_path / "m.db")
    parent = open_parent_run("abid-titles", "kfp-titles", "vsbench-abid", {})
    # the training steps' runs as the pipeline leaves them (an older counting run first: the newest counts)
    for step, architecture in (("abid-train-counting", "resnet34"), ("abid-train-counting", "resnet18"),
                               ("abid-train-siamese", "siamese-resnet18")):
        with child_run(parent, step, {"architecture": architecture}):
            pass
    _score(abid, tmp_path / "score", parent_run_id=parent, resamples=0)
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_run(parent).info.experiment_id], order_by=["attributes.start_time DESC"])
    [step] = [r for r in runs if r.info.run_name == "abid-score"]
    newest = {name: next(r.data.params["architecture"] for r in runs if r.info.run_name == name)
              for name in ("abid-train-counting", "abid-train-siamese")}
    folder = Path(client.download_artifacts(step.info.run_id, "failures", str(tmp_path / "down")))
    variant = step.data.params["task_set"]
    counting = f"{newest['abid-train-counting']} counting network"
    for task, model, what in (("counting", counting, "the bins counted wrong"),
                              ("verification", f"{newest['abid-train-siamese']} network", "the wrong answers"),
                              ("quantity", f"asin prior + {counting}", "the wrong answers")):
        page = (folder / f"abid_{task}_units.html").read_text()
        [heading] = re.findall(r"<h1>(.*?)</h1>", page)
        assert heading == f"abid · {model} · {variant}: {what}", heading
        assert "resnet18" in heading and "resnet34" not in heading  # the newest training run's
        [title] = re.findall(r"<title>(.*?)</title>", page)
        assert title == f"{heading} · run {step.info.run_id}"
        assert f'<p class="run">MLflow run {step.info.run_id} (abid-score)</p>' in page
