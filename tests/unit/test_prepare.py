"""Split and task files on a small hand-made fixture, every output checked by hand.

The fixture (1-based ids; letters are asins):
  1: A x1, B x2        2: A x1 (keyed 'ZZKEY00001'), C x1      3: empty
  4: B, C, D            5: A x3, E x3 (6 items: hard only)      6: malformed JSON
  7: image, no metadata 8: metadata, no image                   9: A, D
 10: B + an entry without asin (EXPECTED_QUANTITY 2)           11: C, E
 12: F ('00012' spelling)
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vsbench.abid.pairs import SiamesePairSampler
from vsbench.abid.prepare import AbidTasks, bin_items, load_metadata, prepare_abid, round_half_up, split_ids


def _entry(asin: str, quantity: int = 1) -> dict:
    return {"asin": asin, "name": f"Product {asin}", "normalizedName": f"Product {asin}", "quantity": quantity,
            "height": {"unit": "IN", "value": 1.0}, "length": {"unit": "IN", "value": 2.0},
            "width": {"unit": "IN", "value": 3.0}, "weight": {"unit": "pounds", "value": 0.5}}


def _bin(*items: tuple[str, int], keys: dict[str, str] | None = None, expected: int | None = None) -> dict:
    keys = keys or {}
    data = {keys.get(asin, asin): _entry(asin, q) for asin, q in items}
    return {"BIN_FCSKU_DATA": data, "EXPECTED_QUANTITY": sum(q for _, q in items) if expected is None else expected}


BINS = {
    1: _bin(("A", 1), ("B", 2)),
    2: _bin(("A", 1), ("C", 1), keys={"A": "ZZKEY00001"}),
    3: _bin(),
    4: _bin(("B", 1), ("C", 1), ("D", 1)),
    5: _bin(("A", 3), ("E", 3)),
    8: _bin(("D", 1)),
    9: _bin(("A", 1), ("D", 1)),
    11: _bin(("C", 1), ("E", 1)),
    12: _bin(("F", 1)),
}


@pytest.fixture
def fixture_dir(tmp_path: Path) -> Path:
    images, metadata = tmp_path / "bin-images", tmp_path / "metadata"
    images.mkdir()
    metadata.mkdir()
    for bin_id in [1, 2, 3, 4, 5, 6, 7, 9, 10, 11]:
        (images / f"{bin_id}.jpg").write_bytes(b"\xff\xd8jpeg")
    (images / "00012.jpg").write_bytes(b"\xff\xd8jpeg")
    for bin_id, content in BINS.items():
        name = "00012.json" if bin_id == 12 else f"{bin_id}.json"
        (metadata / name).write_text(json.dumps(content, indent=4))
    (metadata / "6.json").write_text('{"BIN_FCSKU_DATA": {"A": ')
    ten = _bin(("B", 1), expected=2)
    ten["BIN_FCSKU_DATA"]["K2"] = {"name": "no asin here", "quantity": 1}
    (metadata / "10.json").write_text(json.dumps(ten))
    (images / ".3.jpg.tmp-abc").write_bytes(b"half")  # a crashed write: ignored
    return tmp_path


def _tasks(fixture_dir: Path) -> AbidTasks:
    quantities = [0] * 12
    items: list[list] = [[] for _ in range(12)]
    for bin_id in [1, 2, 3, 4, 5, 9, 10, 11, 12]:
        name = "00012.json" if bin_id == 12 else f"{bin_id}.json"
        raw, problems = load_metadata(fixture_dir / "metadata" / name, bin_id)
        assert raw is not None and not problems
        quantities[bin_id - 1] = raw["EXPECTED_QUANTITY"]
        items[bin_id - 1], _ = bin_items(raw, bin_id, name)
    return AbidTasks(quantities, items)


TRAIN = [0, 1, 2, 3, 4, 8, 9]  # ids 1 2 3 4 5 9 10
VAL = [10, 11]  # ids 11 12


def test_instances_by_hand(fixture_dir):
    instances = _tasks(fixture_dir).instances
    assert list(instances) == ["A", "B", "C", "D", "E", "F"]
    assert instances["A"] == {"repeat": 4, "quantity": 6, "name": "Product A", "bin_list": [0, 1, 4, 8]}
    assert instances["B"] == {"repeat": 3, "quantity": 4, "name": "Product B", "bin_list": [0, 3, 9]}
    assert instances["C"]["bin_list"] == [1, 3, 10] and instances["C"]["quantity"] == 3
    assert instances["D"]["bin_list"] == [3, 8]
    assert instances["E"] == {"repeat": 2, "quantity": 4, "name": "Product E", "bin_list": [4, 10]}
    assert instances["F"]["bin_list"] == [11]


def test_counting_by_hand(fixture_dir):
    tasks = _tasks(fixture_dir)
    assert tasks.counting(TRAIN, hard=False) == [[0, 3], [1, 2], [2, 0], [3, 3], [8, 2], [9, 2]]
    assert tasks.counting(TRAIN, hard=True) == [[0, 3], [1, 2], [2, 0], [3, 3], [4, 6], [8, 2], [9, 2]]
    assert tasks.counting(VAL, hard=False) == [[10, 2], [11, 1]]


def test_verification_train_by_hand(fixture_dir):
    tasks = _tasks(fixture_dir)
    moderate = tasks.verification_train(tasks.candidates(TRAIN, hard=False))
    assert moderate == [
        [0, [["A", [1, 8]], ["B", [3, 9]]]],
        [1, [["A", [0, 8]]]],
        [3, [["B", [0, 9]]]],
        [8, [["A", [0, 1]]]],
        [9, [["B", [0, 3]]]],
    ]
    hard = tasks.verification_train(tasks.candidates(TRAIN, hard=True))
    assert hard[0] == [0, [["A", [1, 4, 8]], ["B", [3, 9]]]]
    assert [4, [["A", [0, 1, 8]]]] in hard


def test_verification_val_by_hand(fixture_dir):
    tasks = _tasks(fixture_dir)
    for seed in range(20):
        rng = np.random.default_rng(seed)
        rows = tasks.verification_val(tasks.candidates(TRAIN, False), tasks.candidates(VAL, False), rng, 20000)
        positives = [r for r in rows if r[2] == 1]
        negatives = [r for r in rows if r[2] == 0]
        assert positives == [[10, "C", 1, [1, 3]]]
        assert len(negatives) == 1  # balanced: as many negatives as positives
        idx, asin, _, targets = negatives[0]
        held = {"A": {0, 1, 8}, "B": {0, 3, 9}, "C": {1, 3}, "D": {3, 8}}
        assert asin in held and targets == sorted(held[asin])
        assert asin not in {10: {"C", "E"}, 11: {"F"}}[idx]  # the upstream bug, fixed


def test_negative_questions_never_ask_for_a_present_asin(fixture_dir):
    """Bin 11 holds C and E; with a pool of only {C, E, D} the draw must still avoid C and E."""
    tasks = _tasks(fixture_dir)
    val_mask = tasks.candidates([10], hard=True)
    train_mask = tasks.candidates(TRAIN, hard=True)
    for seed in range(50):
        negatives = tasks._negatives(train_mask, val_mask, np.random.default_rng(seed))
        assert negatives and all(row[1] not in ("C", "E") for row in negatives)


def test_quantity_questions(fixture_dir):
    tasks = _tasks(fixture_dir)
    rows = tasks.quantity_verification_val(tasks.candidates(TRAIN, True), tasks.candidates(VAL, True),
                                           np.random.default_rng(3), 20000)
    for idx, asin, label, truth, asked, targets in rows:
        assert truth == {("C", 10): 1, ("E", 10): 1}[(asin, idx)]
        assert (asked == truth) == (label == 1) and asked >= 1 and targets


def test_split_rule():
    assert round_half_up(0.5) == 1 and round_half_up(2.5) == 3 and round_half_up(53523.4) == 53523
    train, val = split_ids(range(1, 21), np.random.default_rng(0), 0.25)
    assert len(val) == 5 and len(train) == 15 and not set(train) & set(val)
    assert train == sorted(train) and val == sorted(val)


def test_prepare_writes_every_file_reproducibly(fixture_dir, tmp_path):
    out1, out2 = tmp_path / "a", tmp_path / "b"
    summary = prepare_abid(fixture_dir, out1, seed=7, val_fraction=0.25, progress=False)
    prepare_abid(fixture_dir, out2, seed=7, val_fraction=0.25, progress=False)
    names = ["random_train.txt", "random_val.txt", "metadata.json", "instances.json", "counting_train.json",
             "counting_val.json", "counting_train_hard.json", "counting_val_hard.json",
             "obj_verification_train.json", "obj_verification_val.json", "obj_verification_train_hard.json",
             "obj_verification_val_hard.json", "obj_num_verification_val.json"]
    for name in names:
        assert (out1 / name).read_bytes() == (out2 / name).read_bytes(), name

    train = [int(x) for x in (out1 / "random_train.txt").read_text().split()]
    val = [int(x) for x in (out1 / "random_val.txt").read_text().split()]
    assert sorted(train + val) == [1, 2, 3, 4, 5, 9, 10, 11, 12]  # eligible: image and valid metadata
    assert len(val) == 2 and train == sorted(train)  # round_half_up(0.25 * 9) = 2

    metadata = json.loads((out1 / "metadata.json").read_text())
    assert len(metadata) == 12 and metadata[5] == metadata[6] == metadata[7] == {}
    assert metadata[1]["BIN_FCSKU_DATA"]["ZZKEY00001"]["asin"] == "A"
    assert (out1 / "counting_val.json").read_text().startswith("[[")  # upstream's json.dump spacing
    counting_val = json.loads((out1 / "counting_val.json").read_text())
    quantity = {1: 3, 2: 2, 3: 0, 4: 3, 5: 6, 9: 2, 10: 2, 11: 2, 12: 1}
    assert counting_val == [[i - 1, quantity[i]] for i in val if quantity[i] < 6]

    reasons = {(p["bin_id"], p["reason"].split(":")[0].split(";")[0]) for p in summary.problems}
    assert (6, "malformed JSON") in reasons
    assert (7, "no metadata for this image") in reasons
    assert (8, "no image for this metadata") in reasons
    assert (10, "entry 'K2' has no asin") in reasons


def test_prepare_seed_changes_the_split(fixture_dir, tmp_path):
    splits = {(tmp_path / str(s) / "random_val.txt").read_text() if prepare_abid(
        fixture_dir, tmp_path / str(s), seed=s, val_fraction=0.25, progress=False) else "" for s in range(6)}
    assert len(splits) > 1


def test_prepare_on_empty_folder_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        prepare_abid(tmp_path, tmp_path / "out", progress=False)


def test_siamese_negative_pairs_share_no_asin(fixture_dir):
    tasks = _tasks(fixture_dir)
    rows = tasks.verification_train(tasks.candidates(TRAIN, hard=False))
    asins = {i: frozenset(item.asin for item in tasks.items[i]) for i in TRAIN}
    sampler = SiamesePairSampler(rows, asins)
    rng = np.random.default_rng(0)
    pairs = [sampler.sample(i % len(sampler), rng) for i in range(400)]
    assert {p.label for p in pairs} == {0, 1}
    for pair in pairs:
        shared = asins[pair.first] & asins[pair.second]
        assert bool(shared) == (pair.label == 1), pair


# --- issue 18: summaries say what they count; empty task files are named with a reason ---------


def test_summary_counts_say_what_they_count(fixture_dir, tmp_path):
    summary = prepare_abid(fixture_dir, tmp_path / "out", seed=7, val_fraction=0.25, progress=False)
    # ids 1-12 seen (11 images: 1-7, 9-12; metadata: 1-6, 8-12), so the largest is 12 and 12 are distinct
    assert (summary.max_id, summary.distinct_ids) == (12, 12)
    assert (summary.ids_with_image, summary.ids_with_metadata, summary.eligible) == (11, 11, 9)
    assert summary.distinct_asins == 6  # A-F
    report = json.loads((tmp_path / "out" / "prepare_report.json").read_text())
    assert report["max_id"] == 12 and report["distinct_ids"] == 12 and "ids" not in report


def test_max_id_and_distinct_ids_differ_when_ids_are_missing(tmp_path):
    """The issue's case: the largest id (629) was printed as ``ids`` though 627 ids were present."""
    (tmp_path / "bin-images").mkdir()
    (tmp_path / "metadata").mkdir()
    for bin_id in (1, 2, 40):
        (tmp_path / "bin-images" / f"{bin_id}.jpg").write_bytes(b"\xff\xd8jpeg")
        (tmp_path / "metadata" / f"{bin_id}.json").write_text(json.dumps(_bin(("A", 1))))
    summary = prepare_abid(tmp_path, tmp_path / "out", progress=False)
    assert (summary.max_id, summary.distinct_ids) == (40, 3)


def test_an_old_report_is_read_with_todays_names():
    from vsbench.abid.prepare import read_counts

    old = {"ids": 629, "images": 627, "metadata_files": 627, "instances": 900, "eligible": 620}
    assert read_counts(old) == {"max_id": 629, "ids_with_image": 627, "ids_with_metadata": 627,
                                "distinct_asins": 900, "eligible": 620}


@pytest.fixture
def five_bins(tmp_path: Path) -> Path:
    """A ``--limit 5`` download: 5 bins, no asin in two of them."""
    (tmp_path / "bin-images").mkdir()
    (tmp_path / "metadata").mkdir()
    for bin_id in range(1, 6):
        (tmp_path / "bin-images" / f"{bin_id}.jpg").write_bytes(b"\xff\xd8jpeg")
        (tmp_path / "metadata" / f"{bin_id}.json").write_text(json.dumps(_bin((f"ASIN{bin_id}", 2))))
    return tmp_path


def test_five_bins_name_every_empty_task_file_with_its_reason(five_bins, tmp_path):
    summary = prepare_abid(five_bins, tmp_path / "out", progress=False)
    assert (summary.train, summary.val) == (4, 1)  # round_half_up(0.1 * 5) = 1
    empty = {item["file"]: item for item in summary.empty_files}
    assert set(empty) == {name for name, info in summary.files.items() if info["entries"] == 0}
    assert {"obj_verification_train.json", "obj_verification_val.json", "obj_num_verification_val.json",
            "obj_verification_val_hard.json"} <= set(empty)
    assert empty["obj_verification_val.json"]["reason"] == "no validation bin shares an asin with a training bin"
    assert empty["obj_verification_val.json"]["needed"].startswith("about 50 eligible bins are needed")
    assert "two other training bins" in empty["obj_verification_train.json"]["reason"]
    # One line names them all; the report holds it and the list.
    assert summary.warning.count("\n") == 0 and summary.warning.startswith(f"warning: {len(empty)} task files")
    assert "obj_verification_val.json is empty: no validation bin shares an asin with a training bin; about" \
        in summary.warning
    report = json.loads((tmp_path / "out" / "prepare_report.json").read_text())
    assert report["warning"] == summary.warning and report["empty_files"] == summary.empty_files


def test_an_empty_validation_split_says_how_many_bins_fill_it(five_bins, tmp_path):
    for bin_id in (4, 5):
        (five_bins / "bin-images" / f"{bin_id}.jpg").unlink()
    summary = prepare_abid(five_bins, tmp_path / "out", progress=False, max_per_class=5)
    empty = {item["file"]: item for item in summary.empty_files}
    assert empty["random_val.txt"]["reason"] == "the validation split is empty (0.1 x 3 eligible bins rounds to 0)"
    assert empty["random_val.txt"]["needed"] == "at least 5 eligible bins are needed at val_fraction 0.1 (there are 3)"
    assert "counting_val.json" in empty and "random_train.txt" not in empty


def test_a_full_dataset_has_no_empty_file_and_no_warning(fixture_dir, tmp_path):
    summary = prepare_abid(fixture_dir, tmp_path / "out", seed=7, val_fraction=0.25, progress=False)
    assert [item["file"] for item in summary.empty_files] == \
        [name for name, info in summary.files.items() if info["entries"] == 0]
    if not summary.empty_files:
        assert summary.warning == ""


def test_cli_and_step_print_the_one_warning_line(five_bins, tmp_path, capsys):
    from typer.testing import CliRunner

    from vsbench.cli.app import app
    from vsbench.steps.abid import abid_prepare_step

    result = CliRunner().invoke(app, ["abid", "prepare", "--data", str(five_bins), "--out", str(tmp_path / "cli")])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("warning:")]
    assert len(lines) == 1 and "obj_verification_val.json is empty" in lines[0]
    assert "max_id" in result.output and "distinct_ids" in result.output
    step = abid_prepare_step(str(five_bins), str(tmp_path / "step"), progress=False)
    assert step.metrics["max_id"] == 5 and step.metrics["distinct_ids"] == 5
    assert step.metrics["empty_task_files"] == len(step.manifest["empty_files"]) > 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("warning:")]
    assert printed == [step.manifest["warning"]]


@pytest.mark.parametrize("pieces", [1, 2, 3, 4096])
def test_task_files_are_json_dumps_bytes_whatever_the_chunking(fixture_dir, tmp_path, monkeypatch, pieces):
    """Files are written element by element (memory stays per bin); the bytes must be json.dumps's."""
    import hashlib

    import vsbench.abid.prepare as prepare

    monkeypatch.setattr(prepare, "CHUNK_PIECES", pieces)
    summary = prepare_abid(fixture_dir, tmp_path, seed=7, val_fraction=0.25, progress=False)
    for name, info in summary.files.items():
        data = (tmp_path / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == info["sha256"], name
        if name.endswith(".json"):
            assert data.decode() == json.dumps(json.loads(data)), name
            assert info["entries"] == len(json.loads(data)), name
    raw = {bin_id: json.loads((fixture_dir / "metadata" / f).read_text())
           for bin_id, f in [(1, "1.json"), (2, "2.json"), (12, "00012.json")]}
    metadata = json.loads((tmp_path / "metadata.json").read_text())
    assert all(metadata[bin_id - 1] == content for bin_id, content in raw.items())
    assert prepare._dumps({}) == "{}" and "".join(prepare.json_chunks({})) == "{}"
    assert "".join(prepare.json_chunks([])) == "[]"
    assert "".join(prepare.json_chunks({"a": [1, 2], "b\u00e9": {"c": None}})) == json.dumps(
        {"a": [1, 2], "b\u00e9": {"c": None}})
