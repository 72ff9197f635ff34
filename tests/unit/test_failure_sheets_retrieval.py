"""Failure sheets of the retrieval benchmarks (issue 47): the right queries in the right order, ids
escaped end to end, no image read from outside the benchmark's root, and the score step writing,
naming and logging them (off with VSBENCH_FAILURE_ROWS=0, a broken sheet never failing a score)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vsbench.benchmarks.copydays.failures import copydays_sheet
from vsbench.benchmarks.copydays.units import copydays_units
from vsbench.benchmarks.disc.failures import copy_detection_sheet
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.benchmarks.product_search.failures import product_search_sheet
from vsbench.benchmarks.product_search.units import product_search_units
from vsbench.benchmarks.ranked_failures import Outcomes, worst
from vsbench.benchmarks.vsd.failures import vsd_sheet
from vsbench.benchmarks.vsd.units import vsd_units
from vsbench.io.features import ImageSet
from vsbench.reporting.record_sheets import failure_files, write_failure_sheets
from vsbench.reporting.sheets import Sheet, write_sheet
from vsbench.tracking.sheet_stamp import STAMP_HEIGHT


def _images(root: Path, folder: str, ids: list[str]) -> ImageSet:
    (root / folder).mkdir(parents=True, exist_ok=True)
    paths = []
    for n, image_id in enumerate(ids):
        path = root / folder / f"{image_id}.jpg"
        if not path.exists():
            Image.new("RGB", (40, 30), (20 * n % 256, 80, 160)).save(path)
        paths.append(path)
    return ImageSet(tuple(ids), tuple(paths))


def _titles(sheet: Sheet) -> list[str]:
    return [row.title for row in sheet.rows]


# --- DISC -----------------------------------------------------------------------------------------------

QUERIES = [f"Q{n}" for n in range(1, 9)]
REFERENCES = [f"R{n}" for n in range(1, 10)]
# query -> its copy (None: no copy); predictions (reference, score): known failures by construction.
COPIES = {"Q1": "R1", "Q2": "R2", "Q3": "R3", "Q4": "R4", "Q5": None, "Q6": None, "Q7": None, "Q8": "R8"}
PREDICTIONS = {
    "Q1": [("R1", 0.9), ("R5", 0.2)],  # right first: no failure
    "Q2": [("R6", 0.8), ("R7", 0.7), ("R2", 0.6)],  # its copy third
    "Q3": [("R5", 0.4), ("R6", 0.3)],  # its copy missing, top score 0.4
    "Q4": [("R9", 0.5), ("R4", 0.45)],  # its copy second
    "Q5": [("R1", 0.95), ("R2", 0.1)],  # no copy, top 0.95
    "Q6": [("R3", 0.5)],  # no copy, top 0.5
    "Q7": [],  # no copy, nothing predicted: no failure
    "Q8": [("R7", 0.9)],  # its copy missing, top score 0.9: the more confident miss
}


def _disc_units():
    pq, pr, ps = zip(*[(q, r, s) for q, found in PREDICTIONS.items() for r, s in found])
    gq = [q for q in QUERIES]
    gr = [COPIES[q] or "" for q in QUERIES]
    return copy_detection_units(np.asarray(pq), np.asarray(pr), np.asarray(ps), np.asarray(gq), np.asarray(gr),
                                queries=QUERIES)


def _disc_sets(root: Path) -> dict:
    return {"query": (_images(root, "val_query", QUERIES), root), "reference": (_images(root, "val_ref", REFERENCES), root)}


def _truths(queries):
    return {q: [COPIES[q]] for q in queries if COPIES.get(q)}


def test_disc_sheet_names_the_failing_queries_worst_first(tmp_path: Path) -> None:
    sheet = copy_detection_sheet(_disc_units(), _disc_sets(tmp_path), rows=24, k=10, truths=_truths)
    assert sheet.total == 6
    assert _titles(sheet) == [
        "query Q8: copy not in the top 10",  # missing, and its wrong answer the most confident
        "query Q3: copy not in the top 10",
        "query Q2: copy rank 3",
        "query Q4: copy rank 2",
        "query Q5: no copy; its top result R1 (score 0.95)",
        "query Q6: no copy; its top result R3 (score 0.5)",
    ]
    q3 = sheet.rows[1].tiles
    assert [t.mark for t in q3] == ["query", "false", "false", "true"]  # the copy never retrieved comes last
    assert q3[-1].caption == ("R3", "copy", "not in the top 10")
    q2 = sheet.rows[2].tiles
    assert [(t.caption[0], t.mark) for t in q2[1:]] == [("R6", "false"), ("R7", "false"), ("R2", "true")]
    assert q2[3].caption[1:] == ("score 0.6", "rank 3")
    assert all(t.image is not None for row in sheet.rows for t in row.tiles)


def test_a_small_sheet_keeps_room_for_the_false_matches(tmp_path: Path) -> None:
    sheet = copy_detection_sheet(_disc_units(), _disc_sets(tmp_path), rows=3, k=10)
    assert _titles(sheet)[:2] == ["query Q8: copy not in the top 10", "query Q3: copy not in the top 10"]
    assert _titles(sheet)[2].startswith("query Q5: no copy")
    assert sheet.total == 6


def test_ties_are_broken_by_id_whatever_the_units_order() -> None:
    ids = np.asarray(["b", "a", "d", "c", "e"])
    outcomes = Outcomes(ids, np.asarray([True, True, True, True, False]), np.asarray([-1, -1, 2, 2, -1]),
                        np.ones(5, dtype=bool), np.asarray([0.5, 0.5, 0.1, 0.1, 0.7]))
    chosen, total = worst(outcomes, 10)
    assert [ids[r] for r, _ in chosen] == ["a", "b", "c", "d", "e"] and total == 5
    shuffled = np.asarray([4, 2, 0, 3, 1])
    again = Outcomes(ids[shuffled], outcomes.has_true[shuffled], outcomes.true_rank[shuffled],
                     outcomes.has_results[shuffled], outcomes.top_score[shuffled])
    assert [again.ids[r] for r, _ in worst(again, 10)[0]] == ["a", "b", "c", "d", "e"]


def test_an_id_with_a_script_tag_is_escaped_end_to_end(tmp_path: Path) -> None:
    evil = "<script>alert(1)<"  # a legal file name; the sheet must print it, never run it
    queries, references = [evil, "Q2"], ["R1", "R2"]
    units = copy_detection_units(np.asarray([evil, "Q2"]), np.asarray(["R2", "R2"]), np.asarray([0.9, 0.8]),
                                 np.asarray([evil, "Q2"]), np.asarray(["R1", "R2"]), queries=queries)
    sets = {"query": (_images(tmp_path, "q", queries), tmp_path), "reference": (_images(tmp_path, "r", references), tmp_path)}
    sheet = copy_detection_sheet(units, sets, rows=24, k=10)
    assert _titles(sheet) == [f"query {evil}: copy not in the top 10"]
    written = write_sheet(sheet, tmp_path / "out", "s")
    page = Path(written["files"]["html"]["path"]).read_text()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;" in page
    assert page.count("data:image/jpeg") == 2  # the query and R2 were shown


def test_an_image_linked_from_outside_the_root_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "data"
    sets = _disc_sets(root)
    secret = tmp_path / "secret.jpg"
    Image.new("RGB", (8, 8), "white").save(secret)
    (root / "val_ref" / "R6.jpg").unlink()
    os.symlink(secret, root / "val_ref" / "R6.jpg")
    sheet = copy_detection_sheet(_disc_units(), sets, rows=24, k=10)
    r6 = [t for row in sheet.rows for t in row.tiles if t.caption and t.caption[0] == "R6"]
    assert r6 and all(t.image is None and "outside the benchmark's root" in t.missing for t in r6)
    assert any("outside the benchmark's root" in note for note in sheet.notes)
    page = Path(write_sheet(sheet, tmp_path / "out", "s")["files"]["html"]["path"]).read_text()
    assert "outside the benchmark&#x27;s root" in page


# --- Copydays, VSD, product search ----------------------------------------------------------------------


def test_copydays_sheet_lists_the_originals_ranked_lowest(tmp_path: Path) -> None:
    ids = ["original/a", "original/b", "strong/a1", "strong/b1"]
    queries = _images(tmp_path, "q", [i.replace("/", "_") for i in ids])
    queries = ImageSet(tuple(ids), queries.paths)
    index = np.asarray([["original/a", "original/b", "d1"], ["original/b", "d1", "original/a"],
                        ["d1", "original/b", "original/a"], ["d1", "original/a", ""]])
    hits = np.asarray([[1, 0, 0], [1, 0, 0], [0, 0, 1], [0, 0, 0]], dtype=bool)
    distances = np.asarray([[0, 1, 2], [0, 1, 2], [0.5, 1, 2], [0.2, 1, np.inf]], dtype=np.float32)
    units = copydays_units(ids, hits, distances, np.ones(4), ["original", "original", "strong", "strong"],
                           result_ids=index)
    distractors = _images(tmp_path, "distractors", ["d1"])
    sets = {"query": (queries, tmp_path), "distractors": (distractors, tmp_path / "distractors")}
    sheet = copydays_sheet(units, sets, rows=24, truths=lambda qs: {q: ["original/b"] for q in qs if q == "strong/b1"})
    assert _titles(sheet) == ["query strong/b1: original not in the top 3", "query strong/a1: original rank 3"]
    assert [t.caption[0] for t in sheet.rows[0].tiles] == ["strong/b1", "d1", "original/a", "original/b"]
    assert sheet.rows[0].tiles[-1].mark == "true" and sheet.rows[0].tiles[1].caption[1] == "distance 0.2"


def test_vsd_sheet_marks_tagged_candidates_and_lists_missing_positives(tmp_path: Path) -> None:
    names = ["s1", "s2", "s3", "g1", "g2", "g3"]
    sets = {"images": (_images(tmp_path, "img", names), tmp_path)}
    # s1: positive g2 ranked 2; s2: positive g3 not in its top; s3: only a negative tag (no positive)
    seeds, candidates = ["s1", "s1", "s2", "s3"], ["g2", "g1", "g3", "g1"]
    labels, ranks, scores = [1, 0, 1, 0], [2, 1, 0, 1], [0.8, 0.9, 0.1, 0.7]
    neighbours = {"s1": (["g1", "g2"], [0.9, 0.8]), "s2": (["g1", "g2"], [0.6, 0.5]), "s3": (["g1"], [0.7])}
    units = vsd_units(seeds, labels, ranks, scores, candidates=candidates, neighbours=neighbours, variant="closed")
    sheet = vsd_sheet(units, sets, rows=24)
    assert _titles(sheet) == ["query s2: similar product not in the top 2", "query s1: similar product rank 2",
                              "query s3: no similar product; its top result g1 (score 0.7)"]
    assert [(t.caption[0], t.mark) for t in sheet.rows[0].tiles] == [("s2", "query"), ("g1", ""), ("g2", ""),
                                                                     ("g3", "true")]
    assert [t.mark for t in sheet.rows[1].tiles] == ["query", "false", "true"]


def test_new_vsd_columns_change_no_metric() -> None:
    seeds, labels, ranks, scores = ["s1", "s1", "s2"], [1, 0, 1], [2, 1, 0], [0.8, 0.9, 0.1]
    plain = vsd_units(seeds, labels, ranks, scores)
    full = vsd_units(seeds, labels, ranks, scores, candidates=["a", "b", "c"], neighbours={"s1": (["b"], [0.9])})
    assert plain.metrics == full.metrics
    for name, column in plain.columns.items():
        other = full.columns[name]
        assert np.array_equal(getattr(column, "values", column), getattr(other, "values", other))


def test_product_search_sheet_ranks_candidates_by_cosine(tmp_path: Path) -> None:
    queries = _images(tmp_path, "images", ["src0", "src1", "src2"])
    gallery = _images(tmp_path, "images", ["ga", "gb", "gc"])
    gallery_features = np.eye(3)
    query_features = np.asarray([[1.0, 0.5, 0.1], [0.1, 1.0, 0.5], [1.0, 0.2, 0.0]])
    rows = [np.asarray([0, 1, 2]), np.asarray([0, 1, 2]), np.asarray([0, 1])]
    labels = [np.asarray([1, 0, 0]), np.asarray([1, 0, 0]), np.asarray([0, 0])]
    units = product_search_units(query_features, gallery_features, rows, labels, ids=["1", "2", "3"])
    ids = ["ga", "gb", "gc"]
    sheet = product_search_sheet(units, {"query": (queries, tmp_path), "gallery": (gallery, tmp_path)}, rows=24,
                                 query_images=["src0", "src1", "src2"], candidates=[ids, ids, ids[:2]])
    assert _titles(sheet) == ["query line 2: wanted product rank 3",
                              "query line 3: no wanted product; its top result ga (score 0.9806)"]
    assert [(t.caption[0], t.mark) for t in sheet.rows[0].tiles] == [("line 2: src1", "query"), ("gb", "false"),
                                                                     ("gc", "false"), ("ga", "true")]


# --- the score step -------------------------------------------------------------------------------------


def test_a_sheet_that_cannot_be_made_is_one_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    records = [{"codec": "Flat", "uap": 0.5}, {"codec": "PQ8", "uap": 0.4}]
    entries = [{"file": "units/a.parquet"}, {"file": "units/b.parquet"}]

    def make(index: int, rows: int) -> Sheet | None:
        if index == 0:
            raise FileNotFoundError("the image folder is gone")
        return Sheet("fine", (), 0)

    assert write_failure_sheets("disc", records, entries, make, tmp_path) == 1
    assert "failures" not in records[0] and records[1]["failures"]["png"] == "failures/b.png"
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "disc Flat: no failure sheet (FileNotFoundError: the image folder is gone" in lines[0]
    # Each file with the digest of its bytes as written: the evaluation's run logs a sheet only when it
    # still has them (issue 56: a digest left empty was never checked).
    assert failure_files(records[1], tmp_path) == {
        str(tmp_path / f"failures/b.{kind}"): hashlib.sha256((tmp_path / f"failures/b.{kind}").read_bytes()).hexdigest()
        for kind in ("png", "html")}


def test_zero_rows_turns_the_sheets_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VSBENCH_FAILURE_ROWS", "0")
    records = [{"uap": 0.5}]
    called = []
    assert write_failure_sheets("disc", records, [{"file": "units/a.parquet"}],
                                lambda i, r: called.append(i), tmp_path) == 0
    assert not called and "failures" not in records[0] and not (tmp_path / "failures").exists()


@pytest.mark.slow  # a whole similarity run (12 s): kept out of `make mutate`'s fast tests, run by `make test`
@pytest.mark.filterwarnings("ignore:`torch.jit.*` is deprecated:FutureWarning")
def test_a_similarity_run_writes_names_and_logs_each_records_sheet(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from tests.integration.tiny_model import scripted_model
    from vsbench.benchmarks.disc.synth import generate_disc
    from vsbench.cli.app import app
    from vsbench.runspec.run import SimilarityRun
    from vsbench.steps.evaluate import evaluations_for
    from vsbench.tracking.evaluations import _log_failures

    generate_disc(tmp_path / "disc", references=12, queries=8, train=12, seed=3)
    model = scripted_model(tmp_path / "tiny.pt", 0)
    args = ["similarity", "run", "--benchmark", "disc", "--root", str(tmp_path / "disc"), "--model", "torchscript",
            "--model-options", json.dumps({"path": str(model)}), "--batch-size", "8", "--no-track", "--device", "cpu"]
    env = {"VSBENCH_EMBED_CACHE": "off", "VSBENCH_RESAMPLES": "0"}
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")], env=env)
    assert result.exit_code == 0, result.output[-2000:]
    assert "failures" not in result.output.split("95%")[0].splitlines()[0]  # not a column of the printed table
    written = json.loads((tmp_path / "out" / "metrics.json").read_text())
    for record, entry in zip(written["records"], written["units"]):
        sheet = record["failures"]
        assert sheet["png"] == f"failures/{Path(entry['file']).stem}.png" and sheet["html"].endswith(".html")
        assert 0 < sheet["rows"] <= sheet["total"]
        assert (tmp_path / "out" / sheet["png"]).read_bytes().startswith(b"\x89PNG")
        page = (tmp_path / "out" / sheet["html"]).read_text()
        # The title names benchmark, model (as MLflow names it) and variant (issue 57), not "disc Flat none".
        assert f"<h1>disc · torchscript-tiny · {record['codec']} · {record['score_norm']}: worst queries" in page

    run = SimilarityRun.parse(benchmark="disc", root=str(tmp_path / "disc"), model="torchscript",
                              model_options={"path": str(model)})
    evaluation = evaluations_for(run, "torchscript", written["records"], tmp_path / "out", units=written["units"])[0]
    assert sorted(Path(p).suffix for p in evaluation.failures) == [".html", ".png"]

    class Client:
        logged: list[tuple[str, str]] = []
        bodies: dict[str, bytes] = {}

        def log_artifact(self, run_id: str, path: str, folder: str) -> None:
            self.logged.append((Path(path).name, folder))
            self.bodies[Path(path).name] = Path(path).read_bytes()

    _log_failures(Client(), "0123abcd" * 4, evaluation)
    assert sorted(Client.logged) == sorted((Path(p).name, "failures") for p in evaluation.failures)
    # The logged copies name the run they are logged to (drawn before it existed); the files on disk
    # keep the bytes the score's digests name.
    [page] = [body.decode() for name, body in Client.bodies.items() if name.endswith(".html")]
    assert f'<p class="run">MLflow run {"0123abcd" * 4} ({evaluation.run_name})</p>' in page
    [png] = [body for name, body in Client.bodies.items() if name.endswith(".png")]
    [disk] = [Path(p).read_bytes() for p in evaluation.failures if p.endswith(".png")]
    with Image.open(io.BytesIO(png)) as stamped, Image.open(io.BytesIO(disk)) as drawn:
        assert stamped.height == drawn.height + STAMP_HEIGHT
        assert stamped.convert("RGB").crop((0, 0, 400, STAMP_HEIGHT)).getextrema() != ((255, 255),) * 3
    assert all(hashlib.sha256(Path(p).read_bytes()).hexdigest() == d for p, d in evaluation.failures.items())

    off = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "off")], env={**env, "VSBENCH_FAILURE_ROWS": "0"})
    assert off.exit_code == 0, off.output[-2000:]
    assert not any("failures" in r for r in json.loads((tmp_path / "off" / "metrics.json").read_text())["records"])
    assert not (tmp_path / "off" / "failures").exists()


def test_a_true_match_ranked_past_the_row_keeps_a_tile_with_its_rank(tmp_path: Path) -> None:
    from vsbench.benchmarks.ranked_failures import Pictures, query_row

    names = [f"r{n}" for n in range(20)]
    pictures = Pictures({"refs": (_images(tmp_path, "refs", ["q", *names]), tmp_path)})
    neighbours = [(name, 1.0 - n / 100, n == 15) for n, name in enumerate(names)]
    row = query_row(pictures, unit="q", query="q", query_sets=("refs",), kind="missed", neighbours=neighbours,
                    reference_sets=("refs",), k=100, true_rank=15, also_true=[("r15", 15)])
    assert row.title == "query q: true match rank 16" and len(row.tiles) == 12
    assert [t.caption[0] for t in row.tiles[1:-1]] == names[:10]
    assert row.tiles[-1].caption == ("r15", "true match", "rank 16") and row.tiles[-1].mark == "true"


def test_ten_thousand_failures_stay_under_the_caps(tmp_path: Path) -> None:
    from vsbench.reporting.sheets import MAX_HTML_BYTES, MAX_PNG_ROWS, MAX_ROWS

    n = 10_000
    queries = np.asarray([f"Q{i:05d}" for i in range(n)])
    predicted = np.asarray([f"R{i % 97}" for i in range(n)])
    scores = (np.arange(n) % 1000) / 1000.0
    units = copy_detection_units(queries, predicted, scores, queries, np.asarray([f"C{i}" for i in range(n)]),
                                 queries=queries)
    empty = ImageSet((), ())  # no image to read: every tile says why, the bounds are what is tested
    sheet = copy_detection_sheet(units, {"query": (empty, tmp_path), "reference": (empty, tmp_path)}, rows=10**6, k=10)
    assert sheet.total == n and len(sheet.rows) == MAX_ROWS
    assert sheet.rows[0].title == "query Q00999: copy not in the top 10"  # the most confident miss first
    written = write_sheet(sheet, tmp_path, "big")
    assert written["rows"]["png"] == MAX_PNG_ROWS and written["files"]["html"]["bytes"] <= MAX_HTML_BYTES


def test_sheets_follow_the_records_that_have_unit_files_and_a_digest_is_never_made_up(tmp_path: Path) -> None:
    """No ``make``: nothing written, nothing said. More records than unit files (a record whose units
    were not written): the rest have no sheet. A record's files without a digest (none recorded, or
    not a mapping) read back as ``""``, which the evaluation's run refuses to log ("has no digest
    from the score that wrote it"), never as a text it would compare (issue 56, make mutate's
    record_sheets survivors)."""
    records = [{"codec": "Flat"}, {"codec": "PQ8"}]
    assert write_failure_sheets("disc", records, [{"file": "units/a.parquet"}], None, tmp_path) == 0
    assert records == [{"codec": "Flat"}, {"codec": "PQ8"}] and not (tmp_path / "failures").exists()
    assert write_failure_sheets("disc", records, [{"file": "units/a.parquet"}],
                                lambda index, rows: Sheet("fine", (), 0), tmp_path) == 1
    assert records[0]["failures"]["png"] == "failures/a.png" and "failures" not in records[1]
    files = {"png": "failures/a.png", "html": "failures/a.html"}
    paths = [str(tmp_path / "failures/a.png"), str(tmp_path / "failures/a.html")]
    for sha256 in ({}, {"sha256": "ab" * 32}, {"sha256": None}):
        assert failure_files({"failures": {**files, **sha256}}, tmp_path) == dict.fromkeys(paths, "")
    assert failure_files({"failures": {**files, "sha256": {"png": "ab" * 32}}}, tmp_path) == {
        paths[0]: "ab" * 32, paths[1]: ""}
    assert failure_files({"failures": "failures/a.png"}, tmp_path) == {} == failure_files({}, tmp_path)


def test_a_record_without_units_does_not_end_the_sheets_and_a_sheet_names_its_variant(tmp_path: Path, capsys) -> None:
    records = [{"codec": "Flat", "uap": 0.5}, {"codec": "PQ8", "nprobe": "4", "uap": 0.4}]

    def make(index: int, rows: int) -> Sheet | None:
        raise FileNotFoundError("gone")

    assert write_failure_sheets("disc", records, [None, {"file": "units/b.parquet"}], make, tmp_path) == 0
    assert "disc PQ8 · 4: no failure sheet (FileNotFoundError: gone" in capsys.readouterr().err
    assert write_failure_sheets("disc", records, [None, {"file": "units/b.parquet"}],
                                lambda index, rows: Sheet("fine", (), 0), tmp_path) == 1
    assert "failures" not in records[0] and records[1]["failures"]["html"] == "failures/b.html"
    assert write_failure_sheets("disc", records, [{"file": "units/a.parquet"}, {"file": "units/b.parquet"}],
                                lambda index, rows: Sheet("fine", (), 0), tmp_path) == 2  # each counted
