"""`vsbench.abid.failures`' titles and its verification sheet's edges, exactly (issue 56: `make
mutate` found the default model names and a task entry without a training bin reached by no fast
test). Each test was seen failing with its mutant planted."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vsbench.abid.failures import task_models, verification_sheet


def _bin_3_outside(tmp_path: Path) -> Path:
    """An image folder whose bin 3 photo is a link out of it: refused, and noted on the sheet."""
    from vsbench.abid.ids import local_name

    images = tmp_path / "images"
    images.mkdir()
    (tmp_path / "elsewhere.jpg").write_bytes(b"x")
    (images / local_name(4, "image")).symlink_to(tmp_path / "elsewhere.jpg")
    return images


def test_each_tasks_model_as_a_title_names_it() -> None:
    assert task_models() == {"counting": "counting network", "verification": "siamese network",
                             "quantity": "asin prior + counting network"}
    assert task_models("resnet34", "siamese-resnet34") == {
        "counting": "resnet34 counting network", "verification": "siamese-resnet34 network",
        "quantity": "asin prior + resnet34 counting network"}


def test_a_verification_question_without_a_training_bin_says_so(tmp_path: Path) -> None:
    entries = [[3, "B00X", 1], [4, "B00Y", 0, "not a list"], [5, "B00Z", 1, [7, 8]]]
    sheet = verification_sheet(entries, np.array([0, 1, 0]), np.array([1, 0, 1]), ["q3", "q4", "q5"], tmp_path, 10)
    assert sheet.total == 3 and len(sheet.rows) == 3
    for row in sheet.rows[:2]:
        assert row.tiles[1].caption == ("no training bin",) and row.tiles[1].missing == (
            "the task file lists no training bin with this asin")
    assert sheet.rows[2].tiles[1].caption != ("no training bin",)
    assert sheet.rows[0].title.startswith("is asin B00X in ") and sheet.rows[0].title.endswith(
        "? said no, truth yes (question q3)")


def test_the_verification_sheet_word_for_word(tmp_path: Path) -> None:
    from vsbench.abid.failures import LEGENDS
    images = _bin_3_outside(tmp_path)
    entries = [[3, "B00X", 1], [5, "B00Z", 1, [7, 8]]]
    sheet = verification_sheet(entries, np.array([0, 1]), np.array([1, 0]), ["q3", "q5"], images, 1)
    assert sheet.title == "ABID object verification: the wrong answers"
    assert sheet.what == "wrong answers" and sheet.total == 2 and len(sheet.rows) == 1
    assert sheet.legend == dict(LEGENDS["verification"])
    assert len(sheet.notes) == 1 and "outside" in sheet.notes[0]
    query, reference = sheet.rows[0].tiles
    assert query.mark == "query" and reference.mark == "true" and reference.image is None
    shown = verification_sheet(entries[1:], np.array([1]), np.array([0]), ["q5"], tmp_path, 5)
    assert [t.mark for t in shown.rows[0].tiles] == ["query", "true"]


def test_the_quantity_sheet_word_for_word(tmp_path: Path) -> None:
    from vsbench.abid.failures import LEGENDS, quantity_sheet
    images = _bin_3_outside(tmp_path)
    entries = [[3, "B00X", 1, 2, 3], [5, "B00Z", 1, 1, 1]]
    sheet = quantity_sheet(entries, np.array([1, 1]), np.array([0, 0]), ["q3", "q5"], images, 1)
    assert sheet.title == "ABID quantity verification: the wrong answers"
    assert sheet.what == "wrong answers" and sheet.total == 2 and len(sheet.rows) == 1
    assert sheet.legend == dict(LEGENDS["quantity"])
    assert len(sheet.notes) == 1 and "outside" in sheet.notes[0]
    (tile,) = sheet.rows[0].tiles
    assert tile.mark == "query" and tile.caption == (sheet.rows[0].title.split(" in ")[1].split("?")[0],)
    assert sheet.rows[0].title.startswith("3 of asin B00X in ") and sheet.rows[0].title.endswith(
        "? said yes, truth no (holds 2; question q3)")


def test_the_counting_sheet_word_for_word(tmp_path: Path) -> None:
    from vsbench.abid.failures import LEGENDS, counting_sheet
    images = _bin_3_outside(tmp_path)
    sheet = counting_sheet([[3], [5], [6]], np.array([1, 4, 2]), np.array([4, 4, 1]), ["a", "b", "c"], images, 1)
    assert sheet.title == "ABID counting: the bins counted wrong"
    assert sheet.what == "counting errors" and sheet.total == 2 and len(sheet.rows) == 1
    assert sheet.legend == dict(LEGENDS["counting"])
    assert len(sheet.notes) == 1 and "outside" in sheet.notes[0]
    (tile,) = sheet.rows[0].tiles
    assert tile.mark == "false" and sheet.rows[0].title.endswith(": true count 4, predicted 1 (off by 3)")


def test_an_entry_that_is_not_a_bin_index_is_a_tile_saying_so(tmp_path: Path) -> None:
    from vsbench.abid.failures import bin_label, bin_tile

    for index in ("x" * 50, -1, True, 2.0):
        tile = bin_tile(tmp_path, index, "query")
        assert tile.image is None and tile.mark == "query"
        assert tile.caption == (f"entry {str(index)[:40]!r}",) == (bin_label(index),)
        assert tile.missing == f"image index {str(index)[:40]!r} is not a bin index"
    assert bin_label(0) == "bin 00001" and bin_tile(tmp_path, 0, "true").caption == ("bin 00001",)


def test_a_sheet_notes_five_refused_pictures_at_most_each_once(tmp_path: Path) -> None:
    from vsbench.abid.failures import counting_sheet
    from vsbench.abid.ids import local_name

    images = tmp_path / "images"
    images.mkdir()
    (tmp_path / "elsewhere.jpg").write_bytes(b"x")
    for index in range(7):
        (images / local_name(index + 1, "image")).symlink_to(tmp_path / "elsewhere.jpg")
    entries = [[index] for index in range(7)] + [[0]]  # bin 0 twice: noted once
    sheet = counting_sheet(entries, np.full(8, 2), np.ones(8), [str(n) for n in range(8)], images, 10)
    assert len(sheet.rows) == 8 and len(sheet.notes) == 5 and len(set(sheet.notes)) == 5
    assert list(sheet.notes) == sorted(sheet.notes) and all("outside" in note for note in sheet.notes)


def test_a_task_file_the_sheet_cannot_read_is_one_warning_naming_the_task(tmp_path: Path, capsys) -> None:
    import json

    from vsbench.abid.failures import write_abid_failure_sheets

    (tmp_path / "images").mkdir()
    task_file = tmp_path / "counting_val.json"
    task_file.write_text(json.dumps([[3]]))  # a counting question needs an image index and a quantity
    made = write_abid_failure_sheets({"counting": task_file}, {"counting": np.array([1])}, {"counting": np.array([2])},
                                     {"counting": ["3"]}, tmp_path / "images", tmp_path / "out", {"counting": "c"}, 5)
    assert made == {}
    err = capsys.readouterr().err
    assert err.startswith("vsbench: abid counting: no failure sheet (InputError: ") and err.count("\n") == 1
    assert "counting_val.json: entry 1: expected an ABID counting question, got '[3]'" in err
