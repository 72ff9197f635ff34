"""The compare sheet (`vsbench.reporting.changes`) word for word (issue 56: `make mutate` left 56 of
its 314 mutants alive: the other tests check which units are listed, not what each row, tile, note
and heading says, nor the round robin's cap). Each test was seen failing with its mutant planted."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tests.unit.test_compare_sheets import _disc
from vsbench.reporting.changes import Comparison, NoImages, change_sheet, count_words, counted
from vsbench.stats.outcomes import Outcomes, Shown
from vsbench.stats.units import Units
from vsbench.steps.compare import outcomes_of

RULE = "right: the top-scored prediction is a true copy; queries without a copy are not judged"


class Lookup:
    """Each run's images under its own folder; every shown image missing with a reason naming the run
    and the row it was asked for."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def unit(self, outcomes: Outcomes, row: int) -> list[tuple[str, Path | None, str]]:
        unit = str(outcomes.units.ids[row])
        return [(unit, Path(f"/img/{self.tag}/{unit}.jpg"), ""), (f"{unit}-b", None, f"{self.tag}: no second photo")]

    def shown(self, outcomes: Outcomes, row: int, shown: Shown) -> tuple[Path | None, str]:
        return None, f"{self.tag} row {row} of {outcomes.units.benchmark}: no {shown.image}"


def _disc_outcomes() -> tuple[Outcomes, Outcomes]:
    first, second, _, _ = _disc()
    a, b = outcomes_of(first), outcomes_of(second)
    assert a is not None and b is not None
    return a, b


def test_the_whole_sheet_word_for_word() -> None:
    a, b = _disc_outcomes()
    sheet, counts = change_sheet([Comparison("disc · Flat", a, b, Lookup("A"), Lookup("B"))], 10,
                                 labels=("m1", "m2"), runs=("abcdef1234", "m2run"))
    assert counts == {"first_only": 1, "second_only": 1, "unmatched": 0, "unjudged": 1, "same": 1, "by_rank": 0,
                      "by_ap": 0}
    assert sheet.title == "m1 (run abcdef1234) vs m2 (run m2run): 1 right only in m1, 1 only in m2"
    assert sheet.what == "changed units" and sheet.total == 2
    assert sheet.legend == {"query": "the unit", "true": "a true match", "false": "a false match"}
    assert sheet.notes == (f"disc · Flat: {RULE}", "1 unit right in m1 (first 1 row), 1 in m2 (next 1 row); 1 judged alike",
                           "1 unit the rule does not judge in one of the runs: not compared")
    q1, q2 = sheet.rows
    assert q1.title == ("disc · Flat · Q1 · m1 right: top R1 (0.8, true); true copy at rank 1 · "
                        "m2 wrong: top R0 (0.8, false); true copy at rank 2")
    assert [(t.image, t.caption, t.mark, t.missing) for t in q1.tiles] == [
        (Path("/img/A/Q1.jpg"), ("Q1", "m1: right", "m2: wrong"), "query", ""),
        (None, ("Q1-b",), "query", "A: no second photo"),
        (None, ("m1: R1", "top 1, 0.8"), "true", f"A row {a.units.ids.tolist().index('Q1')} of disc: no R1"),
        (None, ("m2: R0", "top 1, 0.8"), "false", f"B row {b.units.ids.tolist().index('Q1')} of disc: no R0")]
    assert q2.title.startswith("disc · Flat · Q2 · m1 wrong: ") and " · m2 right: " in q2.title
    assert q2.tiles[0].caption == ("Q2", "m1: wrong", "m2: right")


def test_a_rank_comparison_says_ranked_higher_and_lower() -> None:
    a, b = _disc_outcomes()
    sheet, counts = change_sheet([Comparison("disc", a, b, NoImages(), NoImages(), by_rank=True)], 10)
    assert counts["by_rank"] == 1 and counts["by_ap"] == 0
    first_section = sheet.rows[0]
    assert first_section.tiles[0].caption == (first_section.tiles[0].caption[0], "first: ranked higher",
                                              "second: ranked lower")
    assert " · first ranked higher: " in first_section.title and " · second ranked lower: " in first_section.title
    assert sheet.rows[-1].tiles[0].caption[1:] == ("first: ranked lower", "second: ranked higher")
    assert sheet.notes[0] == ("disc: the rank of each unit's first true match, largest move first (its AP with one "
                              f"true match); {RULE}")


def test_images_without_a_caption_and_captions_of_three_lines() -> None:
    a, b = _disc_outcomes()
    a = replace(a, shows=lambda row: (Shown("img7"), Shown("x", ("one", "two", "three"), "false")))
    sheet, _ = change_sheet([Comparison("c", a, b, NoImages("none here"), NoImages())], 1)
    tiles = sheet.rows[0].tiles
    assert [t.caption for t in tiles[1:3]] == [("first: img7",), ("first: one", "two", "three")]
    assert tiles[0].missing == "none here" and tiles[1].mark == "" and tiles[2].mark == "false"
    assert NoImages().why == "no image root known (give --root)"
    assert NoImages().unit(a, 0) == [(str(a.units.ids[0]), None, "no image root known (give --root)")]


def _accuracy(ids: list[str], correct: list[float]) -> Outcomes:
    units = Units("query", "plugin", np.array(ids), {"correct": np.array(correct)},
                  {"accuracy": {"statistic": "ratio", "num": "correct"}})
    outcomes = outcomes_of(units)
    assert outcomes is not None
    return outcomes


def test_the_round_robin_takes_each_files_worst_in_turn_up_to_the_cap() -> None:
    one = Comparison("one", _accuracy(["a", "b", "c"], [1, 1, 1]), _accuracy(["a", "b", "c"], [0, 0, 0]),
                     NoImages(), NoImages())
    two = Comparison("two", _accuracy(["x", "y"], [1, 1]), _accuracy(["x", "y", "z"], [0, 0, 1]), NoImages(), NoImages())
    sheet, counts = change_sheet([one, two], 4)
    assert counts["first_only"] == 5 and counts["unmatched"] == 1
    assert [row.title.split(" · ")[:2] for row in sheet.rows] == [["one", "a"], ["two", "x"], ["one", "b"], ["two", "y"]]
    assert sheet.notes[-2:] == ("5 units right in first (first 4 rows), 0 in second (next 0 rows); 0 judged alike",
                                "1 unit only one run scored: not compared")
    assert len(change_sheet([one, two], 3)[0].rows) == 3


def test_a_label_that_names_its_run_is_not_named_twice() -> None:
    a, b = _disc_outcomes()
    sheet, _ = change_sheet([Comparison("d", a, b, NoImages(), NoImages())], 4, labels=("abcdefgh-run", "m2"),
                            runs=("abcdefgh1234", ""))
    assert sheet.title.startswith("abcdefgh-run vs m2: ")
    sheet, _ = change_sheet([Comparison("d", a, b, NoImages(), NoImages())], 4, labels=("abcdefg-x", "m2"),
                            runs=("abcdefgh1234", ""))
    assert sheet.title.startswith("abcdefg-x (run abcdefgh1234) vs m2: ")


def test_count_words() -> None:
    assert counted(0) == "0 units" and counted(1) == "1 unit" and counted(2, "row") == "2 rows"
    assert count_words({}) == "0 units right only in the first, 0 right only in the second"
    assert count_words({"first_only": 1, "second_only": 3}, "a", "b") == "1 unit right only in a, 3 right only in b"
    assert count_words({"second_only": 2, "by_rank": 1}) == (
        "0 units whose true match ranked higher in the first, 2 in the second")
    assert count_words({"first_only": 2, "by_rank": 1, "by_ap": 1}) == (
        "2 units whose AP was higher in the first, 0 in the second")


def test_units_judged_alike_are_counted_and_sections_sort_by_each_runs_own_rows() -> None:
    from vsbench.abid.units import counting_units
    from vsbench.stats.outcomes import changed

    alike = changed(_accuracy(["a", "b", "c", "d"], [1, 1, 0, 1]), _accuracy(["d", "c", "b", "a"], [1, 0, 1, 1]))
    assert alike.same == 4 and alike.first_only == [] and alike.second_only == []
    truth = [1, 2, 3, 1, 2, 3]
    first = outcomes_of(counting_units([1, 2, 3, 4, 9, 5], truth, ["0", "1", "2", "3", "4", "5"]))
    order = [5, 4, 3, 2, 1, 0]  # the second run holds its units the other way round
    second = outcomes_of(counting_units([[3, 8, 4, 1, 2, 3][k] for k in order], [truth[k] for k in order],
                                        [str(k) for k in order]))
    found = changed(first, second)
    assert [str(first.units.ids[i]) for i, _ in found.second_only] == ["4", "3", "5"]  # first's errors: 7, 3, 2
    assert [str(first.units.ids[i]) for i, _ in found.first_only] == ["1", "0", "2"]  # second's errors: 6, 2, 1
