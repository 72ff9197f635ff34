"""Generated copy-detection sets: the adapters read them, a seed fixes every byte, the copies are copies."""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
from PIL import Image

from vsbench.benchmarks.base import EvalSettings
from vsbench.benchmarks.copydays.adapter import load_copydays
from vsbench.benchmarks.copydays.synth import generate_copydays
from vsbench.benchmarks.disc.adapter import GROUND_TRUTH_CSV, load_disc
from vsbench.benchmarks.disc.synth import (
    SKIMAGE_DISTRACTORS,
    SKIMAGE_NEGATIVES,
    SKIMAGE_REFERENCES,
    SKIMAGE_TRAIN,
    TRANSFORMS_CSV,
    generate_disc,
    generate_skimage_copydetect,
)
from vsbench.io.features import FeatureSet, ImageSet


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _ground_truth(root: Path) -> list[tuple[str, str]]:
    with (root / GROUND_TRUTH_CSV).open() as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["query_id", "reference_id"]
    return [(q, r) for q, r in rows[1:]]


def _thumbnails(images: ImageSet) -> FeatureSet:
    """A crude but real descriptor (a centred, normalized 4x4 colour thumbnail): enough to tell copies."""
    rows = [np.asarray(Image.open(p).convert("RGB").resize((4, 4)), dtype=np.float32).ravel() / 255 - 0.5
            for p in images.paths]
    features = np.stack(rows)
    return FeatureSet(np.asarray(images.ids), features / np.linalg.norm(features, axis=1, keepdims=True))


def test_generate_disc_layout_and_ground_truth(tmp_path: Path) -> None:
    summary = generate_disc(tmp_path, references=8, queries=10, train=5, copy_fraction=0.6, seed=3)
    assert (summary["references"], summary["queries"], summary["train"], summary["copies"]) == (8, 10, 5, 6)
    bench = load_disc(tmp_path)
    sets = bench.image_sets()
    assert len(sets["reference"].ids) == 8 and len(sets["query"].ids) == 10 and len(sets["train"].ids) == 5
    assert all(i.startswith("R") and len(i) == 7 for i in sets["reference"].ids)
    assert all(i.startswith("Q") and len(i) == 6 for i in sets["query"].ids)
    rows = _ground_truth(tmp_path)
    assert [q for q, _ in rows] == list(sets["query"].ids)  # every query listed, as isc2021's file
    assert sum(1 for _, r in rows if r) == 6
    assert len({r for _, r in rows if r}) == 6  # distinct references while there are enough
    digests = _digest(tmp_path)
    images = [d for name, d in digests.items() if name.endswith(".jpg")]
    assert len(set(images)) == len(images)  # no two images identical
    assert (tmp_path / TRANSFORMS_CSV).read_text().startswith("query_id,source,edits\n")


def test_generators_are_deterministic(tmp_path: Path) -> None:
    generate_disc(tmp_path / "a", references=4, queries=4, train=2, seed=7)
    generate_disc(tmp_path / "b", references=4, queries=4, train=2, seed=7)
    generate_disc(tmp_path / "c", references=4, queries=4, train=2, seed=8)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    options = {"originals": 3, "distractors": 2, "train": 2, "jpeg_qualities": (30,), "crop_percents": (50,)}
    generate_copydays(tmp_path / "d", seed=1, **options)
    generate_copydays(tmp_path / "e", seed=1, **options)
    assert _digest(tmp_path / "d") == _digest(tmp_path / "e")


def test_generated_copies_are_found_by_a_crude_descriptor(tmp_path: Path) -> None:
    generate_disc(tmp_path, references=20, queries=16, train=12, seed=0)
    bench = load_disc(tmp_path)
    features = {name: _thumbnails(images) for name, images in bench.image_sets().items()}
    result = bench.evaluate(features, EvalSettings(codecs="Flat", score_norm=""))
    assert result.records[0]["accuracy_at_1"] >= 0.3  # chance is 1/20; rotations and crops fool a thumbnail
    for figure in result.figures.values():
        plt.close(figure)


def test_generate_copydays_follows_the_naming_scheme(tmp_path: Path) -> None:
    summary = generate_copydays(tmp_path, originals=4, distractors=3, train=5, jpeg_qualities=(3, 75),
                                crop_percents=(10, 80), seed=2)
    root = Path(summary["root"])
    originals = sorted(p.stem for p in (root / "original").glob("*.jpg"))
    assert originals == ["200000", "200100", "200200", "200300"]
    strong = sorted(p.stem for p in (root / "strong").glob("*.jpg"))
    assert len(strong) == summary["strong"] and 4 <= len(strong) <= 8
    assert {s[:4] for s in strong} == {o[:4] for o in originals}  # every original attacked, prefix rule holds
    assert sorted(p.stem for p in (root / "crops" / "80").glob("*.jpg")) == originals
    with Image.open(root / "original" / "200100.jpg") as full, Image.open(root / "crops" / "80" / "200100.jpg") as crop:
        assert crop.width * crop.height == pytest.approx(0.2 * full.width * full.height, rel=0.05)
    bench = load_copydays(root, distractors=summary["distractors"], codec_train=summary["codec_train"])
    assert len(bench.queries.ids) == summary["queries"] == 4 * 5 + len(strong)
    assert len(bench.distractors.ids) == 3 and len(bench.train.ids) == 5
    with pytest.raises(ValueError, match="standard blocks"):
        generate_copydays(tmp_path / "x", jpeg_qualities=(42,))


def test_skimage_set_uses_real_photos_in_the_disc_layout(tmp_path: Path) -> None:
    pytest.importorskip("skimage")
    groups = (SKIMAGE_REFERENCES, SKIMAGE_DISTRACTORS, SKIMAGE_NEGATIVES, SKIMAGE_TRAIN)
    assert sum(map(len, groups)) == len(set().union(*groups))  # the four roles never share a photo
    summary = generate_skimage_copydetect(tmp_path / "a", seed=0)
    assert (summary["references"], summary["queries"], summary["copies"]) == (32, 58, 40)
    assert summary["references"] + summary["queries"] + summary["train"] <= 300
    bench = load_disc(tmp_path / "a")
    rows = _ground_truth(tmp_path / "a")
    assert sum(1 for _, r in rows if not r) == 18
    with (tmp_path / "a" / TRANSFORMS_CSV).open() as handle:
        sources = {row["query_id"]: row["source"] for row in csv.DictReader(handle)}
    assert all((reference == "") == sources[query].endswith("(not in the references)") for query, reference in rows)
    generate_skimage_copydetect(tmp_path / "b", seed=0)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    assert len(bench.image_sets()["train"].ids) == summary["train"] == 120
