"""The synthetic ABID must be indistinguishable from the real bucket to every consumer.

These tests pin what consumers rely on: the exact layout and schema with the real data's
quirks, reproducibility (byte-identical output for a seed, whatever the worker count), the
published statistics, and products that look the same in every bin (else object verification
would be unlearnable).
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vsbench.abid.ids import IMAGES_DIR, METADATA_DIR
from vsbench.abid.synth import (
    AbidPlan,
    AbidSynthSummary,
    BinItem,
    BinPlan,
    generate_abid,
    plan_dataset,
    render_bin,
)

BINS = 60
ASIN = re.compile(r"^(B0[A-Z0-9]{8}|\d{10})$")
KEY = re.compile(r"^[A-Z0-9]{10}$")
DIM_FIELDS = ("height", "length", "width")


def _quirky_seed(bins: int) -> int:
    """The first seed whose small plan shows every quirk, so a fast test can check them all."""
    for seed in range(1000):
        plan = plan_dataset(bins, seed)
        summary = plan.summary()
        items = [(plan.catalog[i.product], i) for b in plan.bins if b.has_metadata for i in b.items]
        if (
            summary.dual_keys
            and summary.padded_keys > summary.dual_keys
            and summary.image_only
            and summary.metadata_only
            and summary.empty_bins
            and any(item.key != product.asin for product, item in items)
            and any(item.missing for _, item in items)
        ):
            return seed
    raise AssertionError("no seed below 1000 shows every quirk in a small plan")


def _digest(root: Path) -> dict[str, str]:
    return {
        path.relative_to(root).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _stems(folder: Path) -> dict[int, list[str]]:
    by_id: dict[int, list[str]] = {}
    for path in sorted(folder.iterdir()):
        by_id.setdefault(int(path.stem), []).append(path.stem)
    return by_id


@pytest.fixture(scope="module")
def seed() -> int:
    return _quirky_seed(BINS)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory, seed: int) -> tuple[Path, AbidSynthSummary]:
    out = tmp_path_factory.mktemp("abid") / "data"
    return out, generate_abid(out, BINS, seed, progress=False)


@pytest.fixture(scope="module")
def big_plan() -> AbidPlan:
    return plan_dataset(2000, seed=11)


def test_same_seed_gives_identical_bytes_whatever_the_workers(
    tree: tuple[Path, AbidSynthSummary], seed: int, tmp_path: Path
) -> None:
    root, summary = tree
    expected = _digest(root)
    for workers in (1, 2):
        again = generate_abid(tmp_path / f"w{workers}", BINS, seed, workers=workers, progress=False)
        assert again == summary
        assert _digest(tmp_path / f"w{workers}") == expected


def test_different_seed_differs(tree: tuple[Path, AbidSynthSummary], seed: int, tmp_path: Path) -> None:
    root, _ = tree
    generate_abid(tmp_path, 10, seed + 1, progress=False)
    ours, theirs = _digest(root), _digest(tmp_path)
    common = set(ours) & set(theirs)
    assert common and all(ours[name] != theirs[name] for name in common)


def test_summary_matches_the_files(tree: tuple[Path, AbidSynthSummary]) -> None:
    root, summary = tree
    images, metadata = _stems(root / IMAGES_DIR), _stems(root / METADATA_DIR)
    assert summary.bins == BINS
    assert set(images) | set(metadata) == set(range(1, BINS + 1))
    assert summary.images == len(images) and summary.metadata == len(metadata)
    assert summary.image_only == len(set(images) - set(metadata)) > 0
    assert summary.metadata_only == len(set(metadata) - set(images)) > 0
    spellings = {i: set(images.get(i, [])) | set(metadata.get(i, [])) for i in range(1, BINS + 1)}
    assert summary.padded_keys == sum(any(s != str(i) for s in stems) for i, stems in spellings.items())
    assert summary.dual_keys == sum(len(stems) == 2 for stems in spellings.values()) > 0
    # An id keeps one spelling (or both) for its image and its metadata alike.
    for bin_id in set(images) & set(metadata):
        assert images[bin_id] == metadata[bin_id]
    assert summary.as_dict()["catalog_size"] == summary.catalog_size


def test_metadata_follows_the_abid_schema(tree: tuple[Path, AbidSynthSummary]) -> None:
    root, summary = tree
    keys_differ = lacks_field = 0
    quantities: dict[int, int] = {}
    asins: set[str] = set()
    for path in sorted((root / METADATA_DIR).iterdir()):
        text = path.read_text()
        data = json.loads(text)
        assert text == json.dumps(data, indent=4)  # the real files' formatting
        assert list(data) == ["BIN_FCSKU_DATA", "EXPECTED_QUANTITY"]
        entries = data["BIN_FCSKU_DATA"]
        assert isinstance(entries, dict) and isinstance(data["EXPECTED_QUANTITY"], int)
        assert data["EXPECTED_QUANTITY"] == sum(e["quantity"] for e in entries.values())
        for key, entry in entries.items():
            assert KEY.match(key) and ASIN.match(entry["asin"])
            assert isinstance(entry["quantity"], int) and entry["quantity"] >= 1
            for field in DIM_FIELDS:
                if field in entry:
                    assert entry[field]["unit"] == "IN"
                    assert isinstance(entry[field]["value"], float) and entry[field]["value"] > 0
            if "weight" in entry:
                assert entry["weight"]["unit"] == "pounds" and entry["weight"]["value"] > 0
            for field in ("name", "normalizedName"):
                assert isinstance(entry.get(field, ""), str)
            assert list(entry) == sorted(entry)  # the real files' field order
            keys_differ += key != entry["asin"]
            lacks_field += len(entry) < 8
            asins.add(entry["asin"])
        quantities[int(path.stem)] = data["EXPECTED_QUANTITY"]
    assert keys_differ > 0 and lacks_field > 0
    assert 0 in quantities.values()
    assert summary.mean_quantity == pytest.approx(np.mean(list(quantities.values())))
    assert summary.distinct_asins_used == len(asins)


def test_images_are_bin_sized_jpegs(tree: tuple[Path, AbidSynthSummary]) -> None:
    root, _ = tree
    for path in sorted((root / IMAGES_DIR).iterdir()):
        data = path.read_bytes()
        assert data[:3] == b"\xff\xd8\xff"
        assert 30_000 <= len(data) <= 90_000, (path.name, len(data))
        with Image.open(io.BytesIO(data)) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            assert 430 <= image.width <= 470 and 350 <= image.height <= 390


def test_both_spellings_hold_identical_bytes(tree: tuple[Path, AbidSynthSummary]) -> None:
    root, _ = tree
    duals = 0
    for folder in (root / IMAGES_DIR, root / METADATA_DIR):
        stems = {p.stem for p in folder.iterdir()}
        padded = [s for s in stems if s != str(int(s))]
        assert padded and any(s == str(int(s)) for s in stems)
        for stem in padded:
            plain = str(int(stem))
            if plain in stems:
                duals += 1
                suffix = ".jpg" if folder.name == IMAGES_DIR else ".json"
                assert (folder / f"{stem}{suffix}").read_bytes() == (folder / f"{plain}{suffix}").read_bytes()
    assert duals > 0


def test_regenerating_removes_files_the_new_dataset_lacks(
    tree: tuple[Path, AbidSynthSummary], seed: int, tmp_path: Path
) -> None:
    root, _ = tree
    copy = tmp_path / "data"
    shutil.copytree(root, copy)
    (copy / "notes.txt").write_text("not ours to delete")
    generate_abid(copy, 10, seed, progress=False)
    fresh = tmp_path / "fresh"
    generate_abid(fresh, 10, seed, progress=False)
    assert {k: v for k, v in _digest(copy).items() if k != "notes.txt"} == _digest(fresh)
    assert (copy / "notes.txt").exists()


def test_plan_matches_abid_statistics(big_plan: AbidPlan) -> None:
    summary = big_plan.summary()
    quantities = np.array([b.expected_quantity for b in big_plan.bins if b.has_metadata])
    assert 4.0 <= quantities.mean() <= 6.5
    assert summary.mean_quantity == pytest.approx(quantities.mean())
    assert (quantities < 10).mean() >= 0.85
    assert 0.02 <= (quantities == 0).mean() <= 0.07
    assert 15 <= quantities.max() <= 30
    # About two distinct asins a bin (what ABID's repetition counts imply), in several units each:
    # single units are the most common entry, yet most items come in multi-unit entries.
    distinct = np.array([len(b.items) for b in big_plan.bins if b.has_metadata and b.items])
    assert 1.7 <= distinct.mean() <= 2.4
    units = Counter(i.quantity for b in big_plan.bins for i in b.items)
    assert units.most_common(1)[0][0] == 1 and 0.35 < units[1] / sum(units.values()) < 0.6
    assert sum(q * n for q, n in units.items() if q > 1) > 0.6 * sum(q * n for q, n in units.items())
    assert max(units) <= 12

    repeats = Counter(big_plan.asin_bin_counts().values())
    assert repeats[1] >= 500 and repeats[2] >= 250
    assert sum(n for times, n in repeats.items() if times >= 5) >= 50
    assert summary.distinct_asins_used <= summary.catalog_size

    n = summary.bins
    assert 0.07 * n <= summary.padded_keys <= 0.13 * n
    assert 0.003 * n <= summary.dual_keys <= 0.02 * n
    assert 0.01 * n <= summary.image_only <= 0.03 * n
    assert 0.01 * n <= summary.metadata_only <= 0.03 * n
    entries = [i for b in big_plan.bins for i in b.items]
    other_keys = sum(i.key != big_plan.catalog[i.product].asin for i in entries) / len(entries)
    missing = sum(bool(i.missing) for i in entries) / len(entries)
    assert 0.1 <= other_keys <= 0.2 and 0.01 <= missing <= 0.05
    # A few books: 10-digit ISBN asins, as in the real catalog.
    assert any(p.asin.isdigit() for p in big_plan.catalog)
    assert len({p.asin for p in big_plan.catalog}) == len(big_plan.catalog)


def test_plan_is_deterministic(seed: int) -> None:
    assert plan_dataset(30, seed) == plan_dataset(30, seed)
    assert plan_dataset(30, seed) != plan_dataset(30, seed + 1)


def _chromaticity(plan: AbidPlan, product: int, bin_id: int) -> np.ndarray:
    """Median colour of the product drawn alone in a bin, brightness removed.

    Rendering the same bin id empty gives the identical background, tapes and lighting, so the
    pixels that changed are the item (and its shadow).
    """
    item = BinItem(product=product, key=plan.catalog[product].asin, quantity=1, missing=())
    stems = (str(bin_id),)
    full = np.asarray(render_bin(BinPlan(bin_id, (item,), stems, True, True), plan.catalog, plan.seed), float)
    empty = np.asarray(render_bin(BinPlan(bin_id, (), stems, True, True), plan.catalog, plan.seed), float)
    changed = np.abs(full - empty).sum(axis=-1) > 60
    assert changed.sum() > 1000
    colour = np.median(full[changed], axis=0)
    return colour / colour.sum()


def test_a_product_looks_the_same_in_every_bin(big_plan: AbidPlan) -> None:
    def saturated(index: int) -> bool:
        product = big_plan.catalog[index]
        colour = np.array(product.base_color, float)
        return (
            product.texture == "solid"
            and product.shape in ("box", "rounded")
            and min(product.size_px) >= 80
            and colour.max() - colour.min() > 90
        )

    def base_chromaticity(index: int) -> np.ndarray:
        colour = np.array(big_plan.catalog[index].base_color, float)
        return colour / colour.sum()

    candidates = [i for i in range(len(big_plan.catalog)) if saturated(i)]
    first = candidates[0]
    other = next(i for i in candidates if np.abs(base_chromaticity(i) - base_chromaticity(first)).sum() > 0.3)
    here, there = _chromaticity(big_plan, first, 101), _chromaticity(big_plan, first, 202)
    elsewhere = _chromaticity(big_plan, other, 101)
    same = np.abs(here - there).sum()
    assert same < 0.08
    assert np.abs(here - elsewhere).sum() > 3 * same
