"""Invariants of the task files on generated data in the real layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vsbench.abid.prepare import prepare_abid
from vsbench.abid.synth import generate_abid


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("abid")
    generate_abid(root / "data", 150, seed=4, progress=False)
    prepare_abid(root / "data", root / "tasks", seed=9, val_fraction=0.2, progress=False)
    return root / "data", root / "tasks"


def _load(tasks: Path, name: str):
    return json.loads((tasks / name).read_text())


def _asins(metadata: list[dict], idx: int) -> set[str]:
    return {entry["asin"] for entry in metadata[idx]["BIN_FCSKU_DATA"].values() if "asin" in entry}


def test_split_is_disjoint_and_covers_the_eligible_ids(prepared):
    data, tasks = prepared
    train = [int(x) for x in (tasks / "random_train.txt").read_text().split()]
    val = [int(x) for x in (tasks / "random_val.txt").read_text().split()]
    assert not set(train) & set(val)
    metadata = _load(tasks, "metadata.json")
    assert sorted(train + val) == [i + 1 for i, m in enumerate(metadata) if m]
    for bin_id in train + val:
        assert any((data / "bin-images" / name).exists() for name in (f"{bin_id}.jpg", f"{bin_id:05d}.jpg"))


def test_counting_files(prepared):
    _, tasks = prepared
    val_ids = {int(x) - 1 for x in (tasks / "random_val.txt").read_text().split()}
    moderate, hard = _load(tasks, "counting_val.json"), _load(tasks, "counting_val_hard.json")
    assert all(0 <= q < 6 for _, q in moderate) and {i for i, _ in moderate} <= val_ids
    assert {i for i, _ in hard} == val_ids and max(q for _, q in hard) >= 6
    assert moderate == [row for row in hard if row[1] < 6]


def test_every_verification_negative_is_absent_from_its_bin(prepared):
    _, tasks = prepared
    metadata = _load(tasks, "metadata.json")
    train_ids = {int(x) - 1 for x in (tasks / "random_train.txt").read_text().split()}
    for name in ("obj_verification_val.json", "obj_verification_val_hard.json"):
        rows = _load(tasks, name)
        labels = [row[2] for row in rows]
        assert labels.count(0) == labels.count(1) > 0, name
        for idx, asin, label, targets in rows:
            assert (asin in _asins(metadata, idx)) == (label == 1)
            assert targets and set(targets) <= train_ids
            assert all(asin in _asins(metadata, t) for t in targets)


def test_training_rows_list_other_train_images_holding_the_object(prepared):
    _, tasks = prepared
    metadata = _load(tasks, "metadata.json")
    train_ids = {int(x) - 1 for x in (tasks / "random_train.txt").read_text().split()}
    rows = _load(tasks, "obj_verification_train.json")
    assert rows
    for idx, objects in rows:
        assert idx in train_ids and 0 < metadata[idx]["EXPECTED_QUANTITY"] < 6
        for asin, targets in objects:
            assert len(targets) > 1 and idx not in targets and set(targets) <= train_ids
            assert all(asin in _asins(metadata, t) for t in targets)


def test_quantity_questions_are_consistent(prepared):
    _, tasks = prepared
    metadata = _load(tasks, "metadata.json")
    rows = _load(tasks, "obj_num_verification_val.json")
    assert rows and [r[2] for r in rows].count(1) == [r[2] for r in rows].count(0)
    for idx, asin, label, truth, asked, targets in rows:
        held = sum(e["quantity"] for e in metadata[idx]["BIN_FCSKU_DATA"].values() if e.get("asin") == asin)
        assert truth == held and (asked == truth) == (label == 1) and asked >= 1 and targets
