"""The compare sheet: the units one run got right and the other wrong, both ways, as pictures.

Why: when a nightly check fails or two models are compared, the paired test says the difference is
real; the person then wants to see it: which queries the new model lost, which it won, and what each
run answered (issue 47). This module turns two runs' per-unit verdicts (:mod:`vsbench.stats.outcomes`)
into a :class:`~vsbench.reporting.sheets.Sheet`: one row per changed unit, its photo(s) and each
run's answer; the first section the units right in the first run only, the second those right in the
second only, each worst first, the two sharing the sheet's rows (neither crowds the other out); for a
ranking metric, the units whose own AP or true match's rank moved, under the run where it is higher,
largest move first, an AP row with both runs' APs (issue 55 item 8). Which
images a unit shows is the caller's (:class:`ImageLookup`, from the benchmark's files and root); a
unit without one keeps its row with a grey tile saying why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from vsbench.reporting.sheets import Row, Sheet, Tile
from vsbench.stats.outcomes import Changes, Outcomes, Shown, changed


class ImageLookup(Protocol):
    """Where a unit's photos are: ``unit(units, row)`` gives its own as ``(id, path or None, why
    missing)``; ``shown(units, row, shown)`` the file of an image a run's answer points at."""

    def unit(self, outcomes: Outcomes, row: int) -> list[tuple[str, Path | None, str]]: ...

    def shown(self, outcomes: Outcomes, row: int, shown: Shown) -> tuple[Path | None, str]: ...


class NoImages:
    """No dataset root: every tile says so, the rows and answers stay."""

    def __init__(self, why: str = "no image root known (give --root)") -> None:
        self.why = why

    def unit(self, outcomes: Outcomes, row: int) -> list[tuple[str, Path | None, str]]:
        return [(str(outcomes.units.ids[row]), None, self.why)]

    def shown(self, outcomes: Outcomes, row: int, shown: Shown) -> tuple[Path | None, str]:
        return None, self.why


@dataclass(frozen=True)
class Comparison:
    """One unit file of each run, judged: ``name`` says which (benchmark and variant)."""

    name: str
    first: Outcomes
    second: Outcomes
    first_images: ImageLookup
    second_images: ImageLookup
    # Compare the rank of each unit's first true match, not right/wrong at rank 1: for a global-ranking
    # metric (uAP, recall at p90), whose change right/wrong does not see (issue 55 item 8).
    by_rank: bool = False

    def changes(self) -> Changes:
        return changed(self.first, self.second, self.by_rank)


# The sheet's note on how a unit file was compared, by Changes.measure ("": right/wrong, its rule alone).
MEASURE_NOTES = {"": "", "rank": "the rank of each unit's first true match, largest move first (its AP with one "
                                  "true match); ",
                 "ap": "each unit's own AP, largest move first; "}


def counted(n: int, word: str = "unit") -> str:
    """``1 unit``, ``3 units``: a count with its noun ("1 units" read as a bug on every sheet)."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _share(first: int, second: int, rows: int) -> tuple[int, int]:
    """Rows for each section: half each, a short section's spare rows to the other."""
    a = min(first, math.ceil(rows / 2))
    b = min(second, rows - a)
    return min(first, rows - b), b


def _row(comparison: Comparison, i: int, j: int, right_first: bool, labels: tuple[str, str],
         measure: str = "") -> Row:
    first, second = comparison.first, comparison.second
    unit = str(first.units.ids[i])
    words = ("ranked higher", "ranked lower") if measure else ("right", "wrong")
    verdict = words if right_first else words[::-1]
    if measure == "ap":  # each run's own AP, in both sections: the section says which is higher
        verdict = (first.ap_words(i), second.ap_words(j))
    title = (f"{comparison.name} · {unit} · {labels[0]} {verdict[0]}: {first.answer(i)} · "
             f"{labels[1]} {verdict[1]}: {second.answer(j)}")
    tiles = []
    for n, (image_id, path, why) in enumerate(comparison.first_images.unit(first, i)):
        caption = (image_id, f"{labels[0]}: {verdict[0]}", f"{labels[1]}: {verdict[1]}") if n == 0 else (image_id,)
        tiles.append(Tile(path, caption, "query", why))
    for label, outcomes, row, images in ((labels[0], first, i, comparison.first_images),
                                         (labels[1], second, j, comparison.second_images)):
        for shown in outcomes.shows(row):
            path, why = images.shown(outcomes, row, shown)
            caption = (f"{label}: {shown.caption[0] if shown.caption else shown.image}", *shown.caption[1:])
            tiles.append(Tile(path, caption, shown.mark, why))
    return Row(title, tuple(tiles))


def change_sheet(comparisons: Sequence[Comparison], rows: int, labels: tuple[str, str] = ("first", "second"),
                 title: str = "", runs: tuple[str, str] = ("", "")) -> tuple[Sheet, dict[str, int]]:
    """The compare sheet of ``comparisons`` (at most ``rows`` rows, shared between the two sections and
    the unit files) and its counts: ``first_only``, ``second_only`` (units right only in that run, or,
    for a comparison ``by_rank``, whose true match that run ranked higher or whose own AP is higher
    there), ``unmatched``, ``unjudged``, ``same``, ``by_rank`` and ``by_ap`` (1: every ranked
    comparison by AP; its words). ``labels`` name the two runs in every row; ``runs`` (their MLflow run ids) join
    them in the title, so that a sheet says which two runs it compares."""
    found = [(c, c.changes()) for c in comparisons]
    ranked = any(ch.by_rank for _, ch in found)
    by_ap = ranked and all(ch.measure == "ap" for _, ch in found if ch.by_rank)
    better = "had the higher AP" if by_ap else "ranked the true match higher" if ranked else "right"
    counts = {"first_only": sum(len(ch.first_only) for _, ch in found),
              "second_only": sum(len(ch.second_only) for _, ch in found),
              "unmatched": sum(ch.unmatched for _, ch in found), "unjudged": sum(ch.unjudged for _, ch in found),
              "same": sum(ch.same for _, ch in found), "by_rank": int(ranked), "by_ap": int(by_ap)}
    take_a, take_b = _share(counts["first_only"], counts["second_only"], rows)
    section_a: list[Row] = []
    section_b: list[Row] = []
    # Round-robin over the unit files so that each shows its worst (one file cannot fill the sheet).
    found_by = {id(c): ch.measure for c, ch in found}
    queues_a = [[(c, i, j) for i, j in ch.first_only] for c, ch in found]
    queues_b = [[(c, i, j) for i, j in ch.second_only] for c, ch in found]
    for queues, take, section, right_first in ((queues_a, take_a, section_a, True),
                                               (queues_b, take_b, section_b, False)):
        depth = 0
        while len(section) < take:
            for queue in queues:
                if depth < len(queue) and len(section) < take:
                    c, i, j = queue[depth]
                    section.append(_row(c, i, j, right_first, labels, measure=found_by[id(c)]))
            depth += 1
    notes = [f"{c.name}: " + MEASURE_NOTES[found_by[id(c)]] + c.first.rule for c in comparisons]
    notes.append(f"{counted(counts['first_only'])} {better} in {labels[0]} (first {counted(len(section_a), 'row')}), "
                 f"{counts['second_only']} in {labels[1]} (next {counted(len(section_b), 'row')}); "
                 f"{counts['same']} judged alike")
    if counts["unmatched"]:
        notes.append(f"{counted(counts['unmatched'])} only one run scored: not compared")
    if counts["unjudged"]:
        notes.append(f"{counted(counts['unjudged'])} the rule does not judge in one of the runs: not compared")
    named = [f"{label} (run {run})" if run and run[:8] not in label else label for label, run in zip(labels, runs)]
    heading = title or (f"{named[0]} vs {named[1]}: {counts['first_only']} {better} only in {labels[0]}, "
                        f"{counts['second_only']} only in {labels[1]}")
    sheet = Sheet(heading, (*section_a, *section_b), counts["first_only"] + counts["second_only"],
                  what="changed units", notes=tuple(notes),
                  legend={"query": "the unit", "true": "a true match", "false": "a false match"})
    return sheet, counts


def count_words(counts: Mapping[str, object], first: str = "the first", second: str = "the second") -> str:
    """The compare sheet's counts in words, as the terminal and the report say them: ``3 units right
    only in the first, 1 right only in the second``, or for a comparison by rank ``3 units whose true
    match ranked higher in the first, 1 in the second``, by AP ``3 units whose AP was higher in ...``."""
    a, b = counts.get("first_only", 0), counts.get("second_only", 0)
    if counts.get("by_ap"):
        return f"{counted(a)} whose AP was higher in {first}, {b} in {second}"
    if counts.get("by_rank"):
        return f"{counted(a)} whose true match ranked higher in {first}, {b} in {second}"
    return f"{counted(a)} right only in {first}, {b} right only in {second}"
