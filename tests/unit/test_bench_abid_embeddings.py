"""The abid_embeddings adapter on a hand-made ABID data root.

Train bins: 0 1 2 hold asin A, 3 4 5 hold B, 9 10 11 hold C; validation bins: 6 (A), 7 (B), 8 (C).
With one-hot "perfect" features per asin, a bin's cosine to a bin sharing its asin is 1 and 0
otherwise, so every question and every retrieval is answered right.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from vsbench.abid.gallery import (
    accuracy_threshold,
    bin_id,
    find_bin_image,
    load_abid_embeddings,
    ranked_average_precision,
)
from vsbench.benchmarks.base import EvalSettings
from vsbench.io.features import FeatureSet
from vsbench.io.inputs import InputError

ASIN_OF = {0: "A", 1: "A", 2: "A", 3: "B", 4: "B", 5: "B", 6: "A", 7: "B", 8: "C", 9: "C", 10: "C", 11: "C"}
HOLDERS = {"A": [0, 1, 2], "B": [3, 4, 5], "C": [9, 10, 11]}
QUESTIONS = [[6, "A", 1, HOLDERS["A"]], [6, "B", 0, HOLDERS["B"]], [7, "B", 1, HOLDERS["B"]],
             [7, "C", 0, HOLDERS["C"]], [8, "C", 1, HOLDERS["C"]], [8, "A", 0, HOLDERS["A"]]]


def _layout(root: Path, images: str = "bin-images-resize", name=lambda i: f"{i + 1:05d}.jpg",
            missing: tuple[int, ...] = ()) -> None:
    tasks = root / "tasks"
    tasks.mkdir(parents=True)
    metadata = [{"BIN_FCSKU_DATA": {f"K{i}": {"asin": asin, "quantity": 1}}, "EXPECTED_QUANTITY": 1}
                for i, asin in sorted(ASIN_OF.items())]
    (tasks / "metadata.json").write_text(json.dumps(metadata))
    train = [[i, [[asin, [t for t in bins if t != i]]]] for asin, bins in HOLDERS.items() for i in bins]
    (tasks / "obj_verification_train.json").write_text(json.dumps(train))
    (tasks / "obj_verification_val.json").write_text(json.dumps(QUESTIONS))
    folder = root / images
    folder.mkdir(parents=True)
    for i in ASIN_OF:
        if i not in missing:
            (folder / name(i)).write_bytes(b"jpeg")


def _perfect(ids: tuple[str, ...]) -> FeatureSet:
    axis = {"A": 0, "B": 1, "C": 2}
    vectors = np.zeros((len(ids), 3), dtype=np.float32)
    for row, image_id in enumerate(ids):
        vectors[row, axis[ASIN_OF[int(image_id) - 1]]] = 1.0
    return FeatureSet(np.array(ids), vectors)


def _evaluate(bench, features: FeatureSet | None = None) -> dict:
    ids = bench.image_sets()["bins"].ids
    return bench.evaluate({"bins": features or _perfect(ids)}, EvalSettings()).records[0]


def test_perfect_features_answer_everything(tmp_path: Path) -> None:
    _layout(tmp_path)
    bench = load_abid_embeddings(tmp_path)
    bins = bench.image_sets()["bins"]
    assert bins.ids == tuple(bin_id(i) for i in range(12)) and bins.ids[0] == "00001"
    assert bins.paths[0] == tmp_path / "bin-images-resize" / "00001.jpg"
    record = _evaluate(bench)
    assert record["verification_accuracy"] == 1.0
    assert record["verification_precision"] == 1.0 and record["verification_recall"] == 1.0
    assert record["asin_retrieval_map"] == 1.0
    assert 0.0 < record["threshold"] < 1.0 and record["calibration_accuracy"] == 1.0
    assert (record["num_questions"], record["num_unanswerable"], record["num_retrieval_queries"]) == (6, 0, 3)
    assert record["num_calibration_questions"] == 18 and record["task"] == "moderate"


def test_random_features_score_like_sklearn(tmp_path: Path) -> None:
    _layout(tmp_path)
    bench = load_abid_embeddings(tmp_path, retrieval_k=None)
    ids = bench.image_sets()["bins"].ids
    features = FeatureSet(np.array(ids), np.random.default_rng(0).normal(size=(len(ids), 8)).astype(np.float32))
    record = _evaluate(bench, features)
    unit = features.features / np.linalg.norm(features.features, axis=1, keepdims=True)
    gallery = [0, 1, 2, 3, 4, 5, 9, 10, 11]
    expected = [average_precision_score([ASIN_OF[g] == ASIN_OF[q] for g in gallery], unit[gallery] @ unit[q])
                for q in (6, 7, 8)]
    assert record["asin_retrieval_map"] == pytest.approx(np.mean(expected))


def test_missing_images_make_questions_unanswerable(tmp_path: Path) -> None:
    _layout(tmp_path, missing=(6,))  # the validation bin 6: its two questions are answered "no"
    record = _evaluate(load_abid_embeddings(tmp_path))
    assert record["num_unanswerable"] == 2 and record["num_retrieval_queries"] == 2
    # "no" is wrong for [6, A, 1] and right for [6, B, 0]; the four other questions are answered right
    assert record["verification_accuracy"] == pytest.approx(5 / 6)


def test_raw_images_in_either_spelling(tmp_path: Path) -> None:
    _layout(tmp_path, images="raw/bin-images", name=lambda i: f"{i + 1}.jpg" if i % 2 else f"{i + 1:05d}.jpg")
    assert find_bin_image(tmp_path / "raw" / "bin-images", 1) == tmp_path / "raw" / "bin-images" / "2.jpg"
    assert _evaluate(load_abid_embeddings(tmp_path))["verification_accuracy"] == 1.0


def test_targets_are_capped_like_the_siamese_baseline(tmp_path: Path) -> None:
    _layout(tmp_path)
    bench = load_abid_embeddings(tmp_path, max_targets=2)
    assert all(len(q.targets) == 2 for q in bench.questions)
    assert _evaluate(bench)["verification_accuracy"] == 1.0


def test_bad_question_file_names_the_entry(tmp_path: Path) -> None:
    _layout(tmp_path)
    (tmp_path / "tasks" / "obj_verification_val.json").write_text(json.dumps([[6, "A", 1, [0, 99]]]))
    with pytest.raises(InputError, match=r"obj_verification_val.json: entry 1: targets must be bin indices in 0..11"):
        load_abid_embeddings(tmp_path)


def test_accuracy_threshold() -> None:
    # yes iff score > t: separable -> midway between 0.4 and 0.6; a tie group cannot be split.
    assert accuracy_threshold(np.array([0.6, 0.1, 0.9, 0.4]), np.array([1, 0, 1, 0])) == (pytest.approx(0.5), 1.0)
    threshold, accuracy = accuracy_threshold(np.array([0.5, 0.5, 0.2]), np.array([1, 0, 0]))
    assert accuracy == pytest.approx(2 / 3) and threshold == pytest.approx(0.35)  # lowest of the best
    assert accuracy_threshold(np.array([0.3, 0.3]), np.array([1, 1]))[0] < 0.3  # all yes


def test_ranked_average_precision_with_ties_and_truncation() -> None:
    scores = np.array([0.9, 0.8, 0.8, 0.5, 0.1])
    relevant = np.array([False, True, False, True, False])
    assert ranked_average_precision(scores, relevant, 2) == pytest.approx(average_precision_score(relevant, scores))
    # truncated after 3 with 2 relevant in total: only the tie group (P = 1/3 at R = 1/2) counts
    assert ranked_average_precision(scores[:3], relevant[:3], 2) == pytest.approx(0.5 * 1 / 3)


def test_reads_what_prepare_writes_from_generated_bins(tmp_path: Path) -> None:
    from vsbench.abid.prepare import prepare_abid
    from vsbench.abid.synth import generate_abid

    generate_abid(tmp_path / "raw", 60, seed=0, progress=False)
    prepare_abid(tmp_path / "raw", tmp_path / "tasks", seed=0, progress=False)
    bench = load_abid_embeddings(tmp_path)  # no bin-images-resize/: raw/bin-images/, both spellings
    bins = bench.image_sets()["bins"]
    assert all(path.is_file() for path in bins.paths)
    features = FeatureSet(np.array(bins.ids), np.random.default_rng(0).normal(size=(len(bins.ids), 16)).astype(
        np.float32))
    record = _evaluate(bench, features)
    questions = json.loads((tmp_path / "tasks" / "obj_verification_val.json").read_text())
    assert record["num_questions"] == len(questions) > 0
    assert 0.0 <= record["verification_accuracy"] <= 1.0 and 0.0 < record["asin_retrieval_map"] <= 1.0
