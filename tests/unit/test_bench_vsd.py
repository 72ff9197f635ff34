"""The vsd adapter on a hand-made catalog whose rankings and metrics are worked out by hand.

Products P1 (a1, a2), P2 (b1, b2), P3 (c1), P4 (d1); w1 is a consumer photo of P1. Features are
2-D unit vectors at angles chosen so that the cosines to a1 (and to w1, which equals a1) are
a1 1.0, a2 0.99, b2 0.95, b1 0.9, d1 0.8, c1 0.5. Closed-catalog tags for seed a1:
b1 = 1, c1 = 1, d1 = 0, b2 = 0; wild tags for seed w1: b1 = 1, d1 = 0.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from sklearn.metrics import average_precision_score, roc_auc_score

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.vsd.adapter import load_vsd
from vsbench.io.features import FeatureSet
from vsbench.io.inputs import InputError
from vsbench.io.storage import UnsafePathError

COSINE = {"a1": 1.0, "a2": 0.99, "b2": 0.95, "b1": 0.9, "d1": 0.8, "c1": 0.5, "w1": 1.0}
IMAGES = [  # path, product, phase, category
    ("a1", "P1", "train", "dress"), ("a2", "P1", "train", "dress"),
    ("b1", "P2", "train", "dress"), ("b2", "P2", "query", "dress"),
    ("c1", "P3", "test", "dress"), ("d1", "P4", "train", "top"),
    ("w1", "P1", "search", "dress"),
]
H5 = sum(1 / i for i in range(1, 6))
H9 = sum(1 / i for i in range(1, 10))


def _tags(pairs: list[tuple[str, str, int]]) -> list[dict]:
    return [{"key": [s, c], "value": v} for s, c, v in pairs]


def _layout(root: Path) -> FeatureSet:
    metadata = {"images": [{"id": pid, "path": f"img/{path}.jpg", "phase": phase, "category": category,
                            "color": "red"} for path, pid, phase, category in IMAGES]}
    (root / "metadata.json").write_text(json.dumps(metadata))
    (root / "gt_tagging").mkdir()
    closed = [("a1", "b1", 1), ("a1", "c1", 1), ("a1", "d1", 0), ("a1", "b2", 0)]
    wild = [("w1", "b1", 1), ("w1", "d1", 0)]
    for name, tags in (("closed_catalog", closed), ("in_the_wild", wild)):
        rows = [(f"img/{s}.jpg", f"img/{c}.jpg", v) for s, c, v in tags]
        (root / "gt_tagging" / f"{name}.json").write_text(json.dumps(_tags(rows)))
    ids = [f"img/{path}.jpg" for path, *_ in IMAGES]
    vectors = [[COSINE[p], math.sqrt(1 - COSINE[p] ** 2)] for p, *_ in IMAGES]
    return FeatureSet(np.array(ids), np.array(vectors, dtype=np.float32))


@pytest.fixture
def catalog(tmp_path: Path) -> tuple[Path, FeatureSet]:
    return tmp_path, _layout(tmp_path)


def _evaluate(root: Path, features: FeatureSet, **options) -> dict[str, dict]:
    bench = load_vsd(root, **options)
    return {r["protocol"]: r for r in bench.evaluate({"images": features}, EvalSettings()).records}


def test_unique_id_filter_and_both_protocols(catalog: tuple[Path, FeatureSet]) -> None:
    root, features = catalog
    records = _evaluate(root, features)
    closed = records["closed"]
    # a1's ranking: a1 a2 (own product, dropped) b2 b1 d1 c1 -> kept [b2, d1, c1]: P2 is kept as b2,
    # so the tagged b1 is not in the list; c1 is at rank 3.
    assert closed["hr_at_5"] == pytest.approx(1 / 5) and closed["hr_at_9"] == pytest.approx(1 / 9)
    assert closed["mrr_at_5"] == pytest.approx((1 / 3) / H5) and closed["mrr_at_9"] == pytest.approx((1 / 3) / H9)
    labels, scores = [1, 1, 0, 0], [0.9, 0.5, 0.8, 0.95]
    # pos .9 beats neg .8 only: 1 of 4 pairs; AP: N(.95) P(.9) N(.8) P(.5) -> .5 * 1/2 + .5 * 2/4 = 0.5
    assert closed["roc_auc"] == pytest.approx(0.25) == pytest.approx(roc_auc_score(labels, scores))
    assert closed["pr_auc"] == pytest.approx(0.5) == pytest.approx(average_precision_score(labels, scores))
    assert (closed["num_seeds"], closed["num_positive_pairs"], closed["num_tagged_pairs"]) == (1, 2, 4)
    assert closed["num_skipped_tags"] == 0
    wild = records["wild"]
    # The wild gallery is phases train/test: b2 (phase "query") is not in it, so P2 is kept as b1.
    assert wild["hr_at_5"] == pytest.approx(1 / 5) and wild["mrr_at_5"] == pytest.approx(1 / H5)
    assert wild["roc_auc"] == 1.0 and wild["pr_auc"] == 1.0


def test_image_set_holds_galleries_and_seeds_once(catalog: tuple[Path, FeatureSet]) -> None:
    root, _ = catalog
    images = load_vsd(root).image_sets()["images"]
    assert images.ids == tuple(f"img/{p}.jpg" for p, *_ in IMAGES)
    assert images.paths[0] == root / "img" / "a1.jpg"
    closed_only = load_vsd(root, protocol="closed").image_sets()["images"]
    assert "img/w1.jpg" not in closed_only.ids


def test_metadata_field_keeps_the_seeds_category(catalog: tuple[Path, FeatureSet]) -> None:
    root, features = catalog
    closed = _evaluate(root, features, protocol="closed", metadata_field="category")["closed"]
    # d1 is a top, a1 a dress: kept [b2, c1] -> c1 at rank 2. ROC/PR still score every tagged pair.
    assert closed["mrr_at_5"] == pytest.approx((1 / 2) / H5)
    assert closed["roc_auc"] == pytest.approx(0.25)


def test_id_freq_threshold_drops_single_view_products(catalog: tuple[Path, FeatureSet]) -> None:
    root, features = catalog
    closed = _evaluate(root, features, protocol="closed", id_freq_threshold=2)["closed"]
    # P3 (c1) and P4 (d1) have one view: their tags are skipped; kept list [b2] misses b1.
    assert closed["num_skipped_tags"] == 2 and closed["num_tagged_pairs"] == 2
    assert closed["hr_at_5"] == 0.0 and closed["roc_auc"] == 0.0  # b1 0.9 < b2 0.95
    assert "img/c1.jpg" not in load_vsd(root, protocol="closed", id_freq_threshold=2).image_sets()["images"].ids


def test_use_all_data_false_keeps_the_train_phase(catalog: tuple[Path, FeatureSet]) -> None:
    root, features = catalog
    closed = _evaluate(root, features, protocol="closed", use_all_data=False)["closed"]
    # gallery a1 a2 b1 d1: tags with b2 and c1 skipped; kept [b1, d1] -> b1 at rank 1.
    assert closed["num_skipped_tags"] == 2
    assert closed["hr_at_5"] == pytest.approx(1 / 5) and closed["mrr_at_5"] == pytest.approx(1 / H5)


def test_tied_scores_report_a_range(catalog: tuple[Path, FeatureSet]) -> None:
    root, features = catalog
    # Every image the same one-hot descriptor: every cosine is exactly 1 whatever the kernel, so every
    # score ties and the order decides everything.
    one_hot = np.zeros_like(features.features)
    one_hot[:, 0] = 1.0
    flat = FeatureSet(features.ids, one_hot)
    record = _evaluate(root, flat, protocol="closed")["closed"]
    for name in ("hr_at_5", "mrr_at_9"):
        assert record[f"{name}_worst"] <= record[name] <= record[f"{name}_best"]
        assert record[f"{name}_worst"] < record[f"{name}_best"]
    assert "hr_at_5_best" not in _evaluate(root, features, protocol="closed")["closed"]  # distinct scores


def test_tags_option_and_protocol_checks(catalog: tuple[Path, FeatureSet]) -> None:
    root, features = catalog
    (root / "mine.json").write_text(json.dumps(_tags([("img/a1.jpg", "img/c1.jpg", 1),
                                                      ("img/a1.jpg", "img/d1.jpg", 0)])))
    closed = _evaluate(root, features, protocol="closed", tags="mine.json")["closed"]
    assert closed["num_tagged_pairs"] == 2 and closed["roc_auc"] == 0.0
    with pytest.raises(ValueError, match="protocol"):
        load_vsd(root, protocol="outdoor")
    with pytest.raises(ValueError, match="tags names one file"):
        load_vsd(root, tags="mine.json")


def test_bad_tags(catalog: tuple[Path, FeatureSet]) -> None:
    root, _ = catalog
    tags = root / "gt_tagging" / "closed_catalog.json"
    tags.write_text(json.dumps(_tags([("img/a1.jpg", "img/zz.jpg", 1)])))
    with pytest.raises(InputError, match=r"closed_catalog.json: entry 1: image 'img/zz.jpg' is not in the metadata"):
        load_vsd(root, protocol="closed")
    tags.write_text(json.dumps(_tags([("img/a1.jpg", "img/b1.jpg", 1), ("img/a1.jpg", "img/b1.jpg", 0)])))
    with pytest.raises(InputError, match="entry 2: pair .* tagged both 0 and 1"):
        load_vsd(root, protocol="closed")
    tags.write_text(json.dumps(_tags([("img/a1.jpg", "img/b1.jpg", 1)] * 2 + [("img/a1.jpg", "img/d1.jpg", 0)])))
    assert len(load_vsd(root, protocol="closed").protocols[0].tags) == 2  # exact duplicates collapse


def test_traversal_in_metadata_paths(tmp_path: Path) -> None:
    _layout(tmp_path)
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    metadata["images"][0]["path"] = "../../etc/passwd"
    (tmp_path / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(UnsafePathError):
        load_vsd(tmp_path)


def test_crop_bbox_writes_cropped_copies_once(tmp_path: Path) -> None:
    pixels = np.arange(10 * 20 * 3, dtype=np.uint8).reshape(10, 20, 3)
    (tmp_path / "img").mkdir()
    entries = []
    for name, pid in (("s", "P1"), ("t", "P2"), ("u", "P3")):
        Image.fromarray(pixels).save(tmp_path / "img" / f"{name}.png")
        entries.append({"id": pid, "path": f"img/{name}.png", "phase": "train", "bbox": [2, 3, 4, 5]})
    entries[1]["bbox"] = {"x1": 2, "y1": 3, "x2": 7, "y2": 7}  # upstream code's form, the same box
    (tmp_path / "metadata.json").write_text(json.dumps({"images": entries}))
    (tmp_path / "tags.json").write_text(json.dumps(_tags([("img/s.png", "img/t.png", 1),
                                                         ("img/s.png", "img/u.png", 0)])))
    bench = load_vsd(tmp_path, protocol="closed", tags="tags.json", crop_bbox=True, crop_dir="crops")
    paths = bench.image_sets()["images"].paths
    assert paths[:2] == (tmp_path / "crops" / "img" / "s.png.2_3_7_7.png", tmp_path / "crops" / "img" / "t.png.2_3_7_7.png")
    path = paths[0]
    with Image.open(path) as crop:  # [x=2, y=3, h=4, w=5]: 5 wide, 4 high
        np.testing.assert_array_equal(np.asarray(crop), pixels[3:7, 2:7])
    stamp = path.stat().st_mtime_ns
    bench.image_sets()
    assert path.stat().st_mtime_ns == stamp
    del entries[2]["bbox"]
    (tmp_path / "metadata.json").write_text(json.dumps({"images": entries}))
    with pytest.raises(ValueError, match="crop_bbox: 1 images have no bbox"):
        load_vsd(tmp_path, protocol="closed", tags="tags.json", crop_bbox=True)


def test_an_unreadable_image_keeps_its_own_path_for_the_embed_step_to_list(tmp_path: Path) -> None:
    """A corrupt image (or one over the pixel cap) to crop does not stop the benchmark: it is handed
    on uncropped and the embed step lists it with its reason, like any bad image."""
    pixels = np.zeros((10, 20, 3), dtype=np.uint8)
    (tmp_path / "img").mkdir()
    entries = []
    for name, pid in (("s", "P1"), ("t", "P2"), ("u", "P3")):
        Image.fromarray(pixels).save(tmp_path / "img" / f"{name}.png")
        entries.append({"id": pid, "path": f"img/{name}.png", "phase": "train", "bbox": [2, 3, 4, 5]})
    (tmp_path / "img" / "t.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (tmp_path / "metadata.json").write_text(json.dumps({"images": entries}))
    (tmp_path / "tags.json").write_text(json.dumps(_tags([("img/s.png", "img/t.png", 1),
                                                         ("img/s.png", "img/u.png", 0)])))
    bench = load_vsd(tmp_path, protocol="closed", tags="tags.json", crop_bbox=True, crop_dir="crops")
    paths = dict(zip(bench.image_sets()["images"].ids, bench.image_sets()["images"].paths))
    assert paths["img/t.png"] == tmp_path / "img" / "t.png"
    assert paths["img/s.png"] == tmp_path / "crops" / "img" / "s.png.2_3_7_7.png"
