"""The ``disc`` adapter on a hand-made DISC2021 layout with hand-made features.

Features are chosen so the search results, and so uAP / accuracy at 1 / recall at P90, can be
worked out by hand; the layout checks pin SSCD's folder and file names and isc2021's ground-truth
conventions (empty reference = no copy, header optional).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from vsbench.benchmarks import registry
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.disc.adapter import (
    CSV_NAME,
    GROUND_TRUTH_CSV,
    QUERY_DIR,
    REFERENCE_DIR,
    TRAIN_DIR,
    disc_csv_rows,
    load_disc,
    precision_recall_curve,
)
from vsbench.io.features import FeatureError, FeatureSet
from vsbench.io.inputs import InputError
from vsbench.io.storage import UnsafePathError

QUERIES = ("Q00000", "Q00001", "Q00002")
REFERENCES = ("R000000", "R000001", "R000002")
TRAIN = ("T000000", "T000001", "T000002", "T000003")
# Q00002 has no copy; isc2021 writes it with an empty reference.
GROUND_TRUTH = "query_id,reference_id\nQ00000,R000000\nQ00001,R000001\nQ00002,\n"
NO_NORM = EvalSettings(codecs="Flat", score_norm="")


def _image(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (10, 20, 30)).save(path)


@pytest.fixture
def disc_root(tmp_path: Path) -> Path:
    for folder, ids in ((QUERY_DIR, QUERIES), (REFERENCE_DIR, REFERENCES), (TRAIN_DIR, TRAIN)):
        for image_id in reversed(ids):  # listing order must not matter
            _image(tmp_path / folder / f"{image_id}.jpg")
    (tmp_path / QUERY_DIR / "notes.txt").write_text("not an image")
    (tmp_path / GROUND_TRUTH_CSV).write_text(GROUND_TRUTH)
    return tmp_path


def _features(ids: tuple[str, ...], rows: list[list[float]]) -> FeatureSet:
    return FeatureSet(np.asarray(ids), np.asarray(rows, dtype=np.float32))


def _hand_features(train_rows: list[list[float]] | None = None) -> dict[str, FeatureSet]:
    """References e0, e1, e2; queries with components 0, 0.5 and 1, so that every inner product and
    every squared distance is exact in float32 whatever order a kernel sums in (AVX2, AVX-512, BLAS):
    the ties below hold on every CPU. With k = 2, by inner product (normalized runs) and by L2
    (unnormalized runs, scored as minus the squared distance) alike:

    Q00000 (copy of R000000): R000000 1 | -0.25 (hit), R000001 0.5 | -1.25
    Q00001 (copy of R000001): R000002 1 | -0.25, R000000 0.5 | -1.25 -- its copy is never retrieved
    Q00002 (no copy):        R000002 0.5 | -1.25, then 0 | -2.25
    """
    return {
        "query": _features(QUERIES, [[1, 0.5, 0, 0], [0.5, 0, 1, 0], [0, 0, 0.5, 1]]),
        "reference": _features(REFERENCES, [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]]),
        "train": _features(TRAIN, train_rows or [[0, 0, 0, 1]] * 4),
    }


def test_layout_ids_and_paths(disc_root: Path) -> None:
    bench = load_disc(disc_root)
    sets = bench.image_sets()
    assert bench.name == "disc" and registry.get("disc").loader == "vsbench.benchmarks.disc.adapter:load_disc"
    assert set(sets) == {"query", "reference", "train"}
    assert sets["query"].ids == QUERIES  # sorted, id = file stem, notes.txt ignored
    assert sets["reference"].ids == REFERENCES
    assert sets["train"].ids == TRAIN
    assert sets["query"].paths[1] == disc_root / QUERY_DIR / "Q00001.jpg"
    assert bench.gt_query.tolist() == ["Q00000", "Q00001"]  # the no-copy row is not a positive
    assert "train" not in load_disc(disc_root, train_dir=None).image_sets()


def test_perfect_features_score_one(disc_root: Path) -> None:
    eye = np.eye(4, dtype=np.float32)
    features = {
        "query": _features(QUERIES, [eye[0], eye[1], eye[3]]),  # Q00002 matches nothing
        "reference": _features(REFERENCES, [eye[0], eye[1], eye[2]]),
        "train": _features(TRAIN, [eye[3]] * 4),
    }
    result = load_disc(disc_root).evaluate(features, EvalSettings(codecs="Flat", score_norm="1.00[0,2]"))
    assert [(r["codec"], r["score_norm"]) for r in result.records] == [("Flat", "none"), ("Flat", "1.00[0,2]")]
    for record in result.records:
        assert record["uap"] == pytest.approx(1.0)
        assert record["accuracy_at_1"] == 1.0
        assert record["recall_at_p90"] == 1.0
    _close(result.figures)


def test_hand_worked_metrics_with_a_tie_and_a_missed_copy(disc_root: Path) -> None:
    # Pooled by score, negatives first on ties: -0.25 Q1-R2 (neg), -0.25 Q0-R0 (hit) -> P = 1/2 at the only hit.
    # uAP = (1/2) / N_gt(2) = 0.25; precision never reaches 0.9; acc@1: Q0 yes, Q1's copy missing -> 0.5.
    result = load_disc(disc_root).evaluate(_hand_features(), EvalSettings(codecs="Flat", k=2, score_norm=""))
    (record,) = result.records
    assert record == {"codec": "Flat", "score_norm": "none", "uap": pytest.approx(0.25), "accuracy_at_1": 0.5,
                      "recall_at_p90": 0.0,
                      # the tie could also have put the copy first: the range over tie orders
                      "uap_worst": pytest.approx(0.25), "uap_best": pytest.approx(0.5),
                      "recall_at_p90_worst": 0.0, "recall_at_p90_best": 0.5}
    _close(result.figures)


def test_score_normalization_subtracts_each_querys_training_similarity(disc_root: Path) -> None:
    # Every training row is e0 and [0,0] uses the first neighbour only, so each query's adjustment is its
    # inner product with e0: Q0 1, Q1 0.5, Q2 0. Normalized scores (k = 2), all exact in float32:
    # Q0: R0 0.0 (hit), R1 -0.5;  Q1: R2 0.5, R0 0.0;  Q2: R2 0.5, R0 or R1 0.0.
    # Pooled: two 0.5 neg, three at 0.0 (negatives first) -> the hit at rank 5: uAP = (1/5) / 2.
    features = _hand_features(train_rows=[[1, 0, 0, 0]] * 4)
    result = load_disc(disc_root).evaluate(features, EvalSettings(codecs="Flat", k=2, score_norm="1.0[0,0]"))
    normalized = result.records[1]
    assert normalized["score_norm"] == "1.00[0,0]"
    assert normalized["uap"] == pytest.approx(0.1)
    assert normalized["accuracy_at_1"] == 0.5  # a per-query constant never changes a query's own ranking
    _close(result.figures)


def test_unnormalized_runs_rank_by_l2_like_sscd(disc_root: Path) -> None:
    """Non-unit descriptors: SSCD ranks unnormalized runs by L2 distance and normalized ones by inner product."""
    features = {
        "query": _features(QUERIES, [[1, 0], [0, 1], [-1, -1]]),
        "reference": _features(REFERENCES, [[1, 0], [0, 1], [3, 3]]),  # R000002 has the larger inner products
        "train": _features(TRAIN, [[-1, 0]] * 4),
    }
    records = load_disc(disc_root).evaluate(features, EvalSettings(codecs="Flat", k=3)).records
    by_norm = {r["score_norm"]: r for r in records}
    assert by_norm["none"]["accuracy_at_1"] == 1.0  # L2: each query's own reference is nearest
    assert by_norm["1.00[0,2]"]["accuracy_at_1"] == 0.0  # inner product: R000002 (3, 3) wins for both


def test_csv_rows_use_sscds_columns_and_none_label(disc_root: Path) -> None:
    result = load_disc(disc_root).evaluate(_hand_features(), EvalSettings(codecs="Flat", k=2))
    assert result.csv_name == CSV_NAME == "disc_metrics.csv"
    assert result.csv_columns == ("codec", "score_norm", "uAP", "accuracy-at-1", "recall-at-p90")
    rows = disc_csv_rows(result.records)
    assert [list(row) for row in rows] == [list(result.csv_columns)] * 2
    assert [row["score_norm"] for row in rows] == ["None", "1.00[0,2]"]
    assert rows[0]["uAP"] == result.records[0]["uap"]
    assert set(result.figures) == {"disc_pr_Flat.png"}
    _close(result.figures)


def test_precision_recall_curve_puts_negatives_first_on_ties() -> None:
    precision, recall = precision_recall_curve(np.array([0.8, 0.8, 0.5]), np.array([True, False, True]), 4)
    assert precision.tolist() == pytest.approx([0.0, 0.5, 2 / 3])
    assert recall.tolist() == pytest.approx([0.0, 0.25, 0.5])


def test_unknown_ground_truth_ids_are_kept_with_a_warning(disc_root: Path, caplog: pytest.LogCaptureFixture) -> None:
    # SSCD keeps them: positives that can never be retrieved.
    (disc_root / GROUND_TRUTH_CSV).write_text("Q00000,R000000\nQ00009,R000000\n")
    bench = load_disc(disc_root)
    assert bench.gt_query.tolist() == ["Q00000", "Q00009"]
    assert "val_groundtruth_matches.csv:2: 1 id(s) in column 1 are not a query image in val_query" in caplog.text
    (disc_root / GROUND_TRUTH_CSV).write_text("Q00000,R000000\nQ00001,R000123\n")  # no header
    assert load_disc(disc_root).gt_reference.tolist() == ["R000000", "R000123"]
    assert "csv:2: 1 id(s) in column 2 are not a reference image in val_ref" in caplog.text


@pytest.mark.parametrize("option", [{"query_dir": "../elsewhere"}, {"ground_truth": "/etc/passwd"},
                                    {"reference_list": "../lists/refs"}])
def test_paths_that_leave_the_root_are_refused(disc_root: Path, option: dict[str, str]) -> None:
    with pytest.raises(UnsafePathError):
        load_disc(disc_root, **option)


def test_id_lists_restrict_and_refuse_traversal(disc_root: Path) -> None:
    (disc_root / "lists").mkdir()
    (disc_root / "lists" / "queries").write_text("Q00001\nQ00000.jpg\n\n")
    bench = load_disc(disc_root, query_list="lists/queries")
    assert bench.image_sets()["query"].ids == ("Q00001", "Q00000")  # the list's order
    (disc_root / "lists" / "queries").write_text("Q00001\n")
    assert load_disc(disc_root, query_list="lists/queries").gt_query.tolist() == ["Q00001"]  # rows of listed queries
    (disc_root / "lists" / "refs").write_text("R000000\nR000002\n")
    assert "R000001" in load_disc(disc_root, reference_list="lists/refs").gt_reference.tolist()
    (disc_root / "lists" / "queries").write_text("Q00001\n../val_ref/R000000\n")
    with pytest.raises(UnsafePathError):
        load_disc(disc_root, query_list="lists/queries")
    (disc_root / "lists" / "queries").write_text("Q00001\nQ00000\nQ00001.jpg\n")
    with pytest.raises(InputError, match=r"queries:3: id 'Q00001' repeats line 1"):
        load_disc(disc_root, query_list="lists/queries")
    (disc_root / "lists" / "queries").write_text("Q00001\nQ00042\n")
    with pytest.raises(InputError, match=r"queries:2: 'Q00042' is not an image"):
        load_disc(disc_root, query_list="lists/queries")


def test_two_files_with_one_id_are_refused(disc_root: Path) -> None:
    _image(disc_root / REFERENCE_DIR / "R000001.png")
    with pytest.raises(ValueError, match="share the id 'R000001'"):
        load_disc(disc_root)


def test_missing_features_and_score_norm_without_training(disc_root: Path) -> None:
    features = _hand_features()
    del features["train"]
    with pytest.raises(FeatureError, match="'train' image set"):
        load_disc(disc_root).evaluate(features, NO_NORM)
    with pytest.raises(ValueError, match="needs the training images"):
        load_disc(disc_root, train_dir=None).evaluate(features, EvalSettings(codecs="Flat"))
    result = load_disc(disc_root, train_dir=None).evaluate(features, EvalSettings(codecs="Flat", k=2, score_norm=""))
    assert result.records[0]["uap"] == pytest.approx(0.25)
    _close(result.figures)


def _close(figures: dict[str, object]) -> None:
    for figure in figures.values():
        plt.close(figure)
