"""Generated patch-pair, VSD and product-search data: byte-identical per seed, and read by the adapters."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.patch_pairs.adapter import load_patch_pairs
from vsbench.benchmarks.patch_pairs.synth import generate_patch_pairs
from vsbench.benchmarks.product_search.adapter import load_product_search
from vsbench.benchmarks.product_search.synth import generate_product_search
from vsbench.benchmarks.vsd.adapter import load_vsd
from vsbench.benchmarks.vsd.synth import generate_vsd
from vsbench.io.features import FeatureSet, ImageSet
from vsbench.reporting.plots import close

GENERATORS: dict[str, Callable[..., dict[str, Any]]] = {
    "patch_pairs": lambda out, seed: generate_patch_pairs(out, patches=12, sequences=3, seed=seed),
    "vsd": lambda out, seed: generate_vsd(out, products=12, seed=seed),
    "product_search": lambda out, seed: generate_product_search(out, queries=4, extra_images=3, seed=seed),
}


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _pixels(images: ImageSet) -> FeatureSet:
    """A crude descriptor: the 8x8 thumbnail, centred, so that the adapters get real image features."""
    rows = []
    for path in images.paths:
        with Image.open(path) as image:
            rows.append(np.asarray(image.convert("RGB").resize((8, 8)), dtype=np.float32).ravel())
    values = np.stack(rows)
    return FeatureSet(np.array(images.ids), values - values.mean(axis=0))


def _records(result) -> list[dict]:
    for figure in result.figures.values():
        close(figure)
    return result.records


@pytest.mark.parametrize("name", sorted(GENERATORS))
def test_generators_are_deterministic(tmp_path: Path, name: str) -> None:
    first = GENERATORS[name](tmp_path / "a", 0)
    second = GENERATORS[name](tmp_path / "b", 0)
    GENERATORS[name](tmp_path / "c", 1)
    assert {k: v for k, v in first.items() if k != "root"} == {k: v for k, v in second.items() if k != "root"}
    assert _digests(tmp_path / "a") == _digests(tmp_path / "b")
    assert _digests(tmp_path / "a") != _digests(tmp_path / "c")


def test_patch_pairs_layout_loads_and_scores(tmp_path: Path) -> None:
    summary = generate_patch_pairs(tmp_path, patches=12, sequences=3)
    assert summary["pairs"] == {f"test_{f}.pairs": 12 for f in ("pos_easy", "pos_hard", "neg_diffseq", "neg_sameseq")}
    bench = load_patch_pairs(tmp_path)
    patches = bench.image_sets()["patches"]
    assert len(patches.ids) == summary["patches"] == 36 and all(p.is_file() for p in patches.paths)
    records = {r["variant"]: r for r in _records(bench.evaluate({"patches": _pixels(patches)}, EvalSettings()))}
    assert records["easy_diffseq"]["roc_auc"] > 0.9  # even thumbnails match the easy views
    assert 0.0 <= records["mean"]["mean_pr_ap"] <= 1.0


def test_vsd_layout_loads_and_scores(tmp_path: Path) -> None:
    summary = generate_vsd(tmp_path, products=12)
    metadata = json.loads((tmp_path / "metadata.json").read_text())["images"]
    assert len(metadata) == summary["images"]
    assert {e["phase"] for e in metadata} <= {"train", "test", "search"}
    for entry in metadata:
        x, y, h, w = entry["bbox"]
        with Image.open(tmp_path / entry["path"]) as image:
            assert 0 <= x < x + w <= image.width and 0 <= y < y + h <= image.height
    bench = load_vsd(tmp_path, crop_bbox=True)
    images = bench.image_sets()["images"]
    records = {r["protocol"]: r for r in _records(bench.evaluate({"images": _pixels(images)}, EvalSettings()))}
    assert records["closed"]["num_tagged_pairs"] == summary["tags"]["closed"]
    assert records["wild"]["num_tagged_pairs"] == summary["tags"]["wild"]
    assert records["closed"]["num_skipped_tags"] == records["wild"]["num_skipped_tags"] == 0
    assert records["closed"]["roc_auc"] > 0.5  # colour and shape show in the cropped thumbnails


def test_product_search_layout_loads_and_scores(tmp_path: Path) -> None:
    summary = generate_product_search(tmp_path, queries=4, extra_images=3)
    assert summary["gallery"] == 54 + 3
    good = load_product_search(tmp_path, submission="features_good.npz")
    assert _records(good.evaluate({}, EvalSettings()))[0]["map"] == 1.0
    valid = load_product_search(tmp_path, submission="features_valid.npz")
    assert 0.0 < _records(valid.evaluate({}, EvalSettings()))[0]["map"] <= 1.0
    image_only = load_product_search(tmp_path)
    features = {name: _pixels(images) for name, images in image_only.image_sets().items()}
    record = _records(image_only.evaluate(features, EvalSettings()))[0]
    assert record["mode"] == "image_only" and record["num_queries"] == 4
