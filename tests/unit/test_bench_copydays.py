"""The ``copydays`` adapter: SSCD's block folders, ground truth from file names, hand-made features."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from vsbench.benchmarks import registry
from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.copydays.adapter import (
    CSV_NAME,
    copydays_csv_rows,
    load_copydays,
    strong_positives,
)
from vsbench.io.features import FeatureSet

ORIGINALS = ("200000", "200100", "200200")
STRONG = ("200001", "200002", "200101")  # two attacks of 2000.., one of 2001.., none of 2002..
LAYOUT = {
    "original": ORIGINALS,
    "strong": STRONG,
    "jpegqual/30": ORIGINALS,
    "crops/50": ORIGINALS[:2],  # a partial block is fine
}


def _image(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (200, 100, 50)).save(path)


@pytest.fixture
def copydays_root(tmp_path: Path) -> Path:
    root = tmp_path / "copydays"
    for block, stems in LAYOUT.items():
        for stem in stems:
            _image(root / block / f"{stem}.jpg")
    (root / "strong" / "README.txt").write_text("only .jpg files count")
    (root / "jpegqual" / "31").mkdir()  # not a standard block: ignored
    _image(root / "jpegqual" / "31" / "200000.jpg")
    for name in ("d0.jpg", "d1.png"):
        _image(tmp_path / "distractors" / name)
    for n in range(6):
        _image(tmp_path / "whitening" / f"w{n}.jpg")
    return root


def test_queries_blocks_and_ground_truth_from_file_names(copydays_root: Path) -> None:
    bench = load_copydays(copydays_root, distractors=copydays_root.parent / "distractors")
    assert bench.name == "copydays" and registry.get("copydays").loader == "vsbench.benchmarks.copydays.adapter:load_copydays"
    assert bench.queries.ids == (
        "original/200000", "original/200100", "original/200200",
        "strong/200001", "strong/200002", "strong/200101",
        "jpegqual/30/200000", "jpegqual/30/200100", "jpegqual/30/200200",
        "crops/50/200000", "crops/50/200100",
    )
    # Index rows: the originals first (0, 1, 2), then the distractors.
    assert bench.positives == tuple(map(frozenset, ([0], [1], [2], [0], [0], [1], [0], [1], [2], [0], [1])))
    assert bench.blocks.count("strong") == 3
    assert set(bench.image_sets()) == {"query", "distractors"}
    assert bench.image_sets()["distractors"].ids == ("d0", "d1")
    assert bench.k == 100


def test_strong_prefix_rule_by_hand() -> None:
    originals = ("200000.jpg", "200050.jpg", "200100.jpg")  # two originals share the prefix 2000
    assert strong_positives("200001.jpg", originals, Path("strong/200001.jpg")) == {0, 1}
    assert strong_positives("200199.jpg", originals, Path("strong/200199.jpg")) == {2}
    with pytest.raises(ValueError, match=r"strong/200301.jpg: no original shares its first 4 characters '2003'"):
        strong_positives("200301.jpg", originals, Path("strong/200301.jpg"))
    assert strong_positives("12.jpg", ("12.jpg", "120.jpg"), Path("strong/12.jpg")) == {0}  # SSCD: "12.j"


def test_blocks_with_other_names_map_by_position_like_sscd(copydays_root: Path) -> None:
    _image(copydays_root / "crops" / "50" / "209900.jpg")  # 3 files for 3 originals: the i-th is a copy of the i-th
    bench = load_copydays(copydays_root)
    crops = [p for i, p in zip(bench.queries.ids, bench.positives) if i.startswith("crops/50/")]
    assert crops == [frozenset({0}), frozenset({1}), frozenset({2})]
    _image(copydays_root / "jpegqual" / "30" / "209900.jpg")  # 4 files, one unknown name: no mapping applies
    with pytest.raises(ValueError, match=r"jpegqual/30/209900.jpg: no original named 209900.jpg, .* 4 images for 3"):
        load_copydays(copydays_root)


def test_original_and_strong_blocks_are_required(copydays_root: Path) -> None:
    for path in (copydays_root / "strong").iterdir():
        path.unlink()
    (copydays_root / "strong").rmdir()
    with pytest.raises(FileNotFoundError, match="strong"):
        load_copydays(copydays_root)


def _features(bench, query_rows: dict[str, list[float]], dim: int = 6) -> dict[str, FeatureSet]:
    """One-hot features: original i -> e_i, each query -> its original's e_i unless overridden."""
    eye = np.eye(dim, dtype=np.float32)
    rows = []
    for image_id, positives in zip(bench.queries.ids, bench.positives):
        rows.append(query_rows.get(image_id, eye[min(positives)]))
    features = {"query": FeatureSet(np.asarray(bench.queries.ids), np.asarray(rows, dtype=np.float32))}
    if bench.distractors is not None:
        features["distractors"] = FeatureSet(np.asarray(bench.distractors.ids), eye[3:5])
    if bench.train is not None:
        ids = bench.train.ids
        features["train"] = FeatureSet(np.asarray(ids), np.random.default_rng(0).normal(size=(len(ids), dim))
                                       .astype(np.float32))
    return features


def test_perfect_features_score_one(copydays_root: Path) -> None:
    bench = load_copydays(copydays_root, distractors=copydays_root.parent / "distractors",
                          codec_train=copydays_root.parent / "whitening")
    result = bench.evaluate(_features(bench, {}), EvalSettings(codecs="Flat;PCA4,L2norm,Flat"))
    assert [r["codec"] for r in result.records] == ["Flat", "PCA4,L2norm,Flat"]
    flat = result.records[0]
    assert flat["strong_map"] == pytest.approx(1.0)
    assert flat["overall_uap"] == pytest.approx(1.0)
    assert flat["map_original"] == flat["map_jpegqual_30"] == flat["map_crops_50"] == pytest.approx(1.0)
    assert "map_strong" not in flat  # that is strong_map
    _close(result.figures)


def test_hand_worked_strong_map(copydays_root: Path) -> None:
    # strong/200002 sits nearest the distractor d0 (e3), then its original e0: its positive at rank 1 gives
    # the trapezoid (0/1 + 1/2) / 2 = 1/4. The other strong queries find theirs at rank 0 (AP 1).
    near_distractor = np.array([0.5, 0, 0, 1, 0, 0], dtype=np.float32)
    bench = load_copydays(copydays_root, distractors=copydays_root.parent / "distractors", k=3)
    result = bench.evaluate(_features(bench, {"strong/200002": near_distractor}), EvalSettings(codecs="Flat"))
    (record,) = result.records
    assert record["strong_map"] == pytest.approx((1 + 0.25 + 1) / 3)
    assert record["map_original"] == pytest.approx(1.0)
    assert record["overall_uap"] < 1.0
    rows = copydays_csv_rows(result.records)
    assert result.csv_name == CSV_NAME == "copydays_metrics.csv"
    assert result.csv_columns == ("codec", "strong_mAP", "overall_uAP")
    assert rows == [{"codec": "Flat", "strong_mAP": record["strong_map"], "overall_uAP": record["overall_uap"]}]
    assert set(result.figures) == {"copydays_blocks.png"}
    _close(result.figures)


def _close(figures: dict[str, object]) -> None:
    for figure in figures.values():
        plt.close(figure)
