"""What the retrieval benchmarks' failure sheets share: which queries are worst, and how a query's row looks.

Why one module: DISC, Copydays, VSD and product search all rank candidates for a query, and a person
looking at what a model got wrong wants the same picture from each (issue 47): the query, its top k
with their scores and ranks, the true match marked, and where the true match ranked. Each family's
``failures.py`` reads its own :class:`~vsbench.stats.units.Units` columns into :class:`Outcomes`
(numpy arrays, one entry per query: nothing per query in Python) and hands each chosen query's
neighbours to :func:`query_row`; this module picks and orders the queries and draws the rows.

Worst first, deterministically (the same units give the same sheet on any machine):

1. *missed* queries (they have a true match, and it is not ranked first): a true match missing from
   the results first, then by its rank, lowest first; equal ranks by the score of the query's top
   (false) result, most confident first; then by unit id;
2. *false matches* (queries without a true match that still got results: DISC's queries with no
   copy): the highest-scored top result first, then by unit id.

A sheet of ``rows`` rows gives the false matches up to half of them (they are a different failure,
and a long list of misses would hide them) and the misses the rest; a group with fewer fills the
other's share. Images are looked up in the benchmark's image sets and shown only from under the
folder each set lies in (:func:`vsbench.reporting.sheets.image_in_root`): a symlink out of it is a
grey tile naming the refusal, never read.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vsbench.io.features import ImageSet
from vsbench.reporting.sheets import MAX_ROWS, MAX_TILES, Row, Tile, image_in_root, rank_text

MISSED = "missed"
FALSE = "false"
MAX_EXTRA = 3  # true matches shown past a row's results (a DISC query may have several copies)


@dataclass(frozen=True)
class Outcomes:
    """Per query (one entry per unit, in the units' order): whether it has a true match at all, the
    0-based rank of its best-ranked true match (-1: not among its results), whether it got any result,
    and its top result's score on the benchmark's own scale (``higher_is_better`` says which way)."""

    ids: np.ndarray
    has_true: np.ndarray
    true_rank: np.ndarray
    has_results: np.ndarray
    top_score: np.ndarray
    higher_is_better: bool = True


def worst(outcomes: Outcomes, rows: int) -> tuple[list[tuple[int, str]], int]:
    """``([(unit row, MISSED or FALSE), ...] worst first, at most ``rows`` and :data:`MAX_ROWS`), the
    number of failures)``: only the chosen few are ever made into rows (10,000 misses cost two sorts)."""
    ids = np.asarray(outcomes.ids).astype(str)
    has_true = np.asarray(outcomes.has_true, dtype=bool)
    rank = np.asarray(outcomes.true_rank, dtype=np.int64)
    has_results = np.asarray(outcomes.has_results, dtype=bool)
    confidence = np.asarray(outcomes.top_score, dtype=np.float64)
    if not outcomes.higher_is_better:
        confidence = -confidence
    confidence = np.where(np.isfinite(confidence), confidence, -np.inf)
    missed = np.flatnonzero(has_true & (rank != 0))
    false = np.flatnonzero(~has_true & has_results)
    # np.lexsort: the last key sorts first. Missing (-1) counts as the lowest rank of all.
    lowest = np.where(rank[missed] < 0, np.iinfo(np.int64).max, rank[missed])
    missed = missed[np.lexsort((ids[missed], -confidence[missed], -lowest))]
    false = false[np.lexsort((ids[false], -confidence[false]))]
    total = int(missed.size + false.size)
    rows = min(max(0, rows), MAX_ROWS)  # whatever a caller asks: the renderer keeps no more
    take_false = min(false.size, max(rows // 2, rows - missed.size))
    take_missed = min(missed.size, rows - take_false)
    chosen = [(int(r), MISSED) for r in missed[:take_missed]] + [(int(r), FALSE) for r in false[:take_false]]
    return chosen, total


class Pictures:
    """Image ids -> tiles, from a benchmark's image sets: ``{set name: (ImageSet, the folder its images
    must lie under)}``. Each set's id index is built the first time an id of it is asked for, once for
    every sheet of one score (a million references cost one dict, not one per record)."""

    def __init__(self, sets: Mapping[str, tuple[ImageSet, Path]]) -> None:
        self.sets = dict(sets)
        self._index: dict[str, dict[str, Path]] = {}
        self.refused: list[str] = []

    def path(self, image_id: str, sets: Sequence[str]) -> tuple[Path | None, str]:
        """(the image's path, checked to lie under its set's folder, "") or (None, why not)."""
        for name in sets:
            if name not in self.sets:
                continue
            images, root = self.sets[name]
            if name not in self._index:
                self._index[name] = dict(zip(images.ids, images.paths))
            found = self._index[name].get(str(image_id))
            if found is None:
                continue
            path, why = image_in_root(root, os.path.abspath(found))  # a set's paths may be relative to here
            if path is None:
                self.refused.append(why)
            return path, why
        return None, f"no image with id {str(image_id)[:80]!r}"

    def tile(self, image_id: str, sets: Sequence[str], caption: tuple[str, ...], mark: str) -> Tile:
        path, why = self.path(image_id, sets)
        return Tile(path, caption, mark, why)

    def notes(self) -> tuple[str, ...]:
        """One line per distinct refusal (a path out of its folder), the first few."""
        seen = list(dict.fromkeys(self.refused))
        more = f" (and {len(seen) - 3} more)" if len(seen) > 3 else ""
        return tuple(seen[:3]) + ((f"{len(seen)} image paths refused{more}",) if len(seen) > 3 else ())


def score_text(score: float, word: str = "score") -> str:
    return f"{word} {score:.4g}" if np.isfinite(score) else f"{word} -"


def query_row(pictures: Pictures, *, unit: str, query: str, query_sets: Sequence[str], kind: str,
              neighbours: Sequence[tuple[str, float, bool | None]], reference_sets: Sequence[str], k: int,
              true_rank: int | None, also_true: Sequence[tuple[str, int | None]] = (), score_word: str = "score",
              what: str = "true match") -> Row:
    """One query as a row: its image, its first ``MAX_TILES - 1`` results best first (each with its
    score and 1-based rank, marked ``true``/``false``, or unmarked when unknown: ``None``), then the
    true matches not among them (``also_true``: id and 0-based rank, or None when not retrieved; at
    most :data:`MAX_EXTRA`, each taking the place of the last result shown).
    ``true_rank``: the 0-based rank of the best true match, None when there is none among the results;
    ``k``: how many results the benchmark keeps (``not in the top k``)."""
    first = {str(image_id) for image_id, _, _ in neighbours[:MAX_TILES - 1]}
    extra = list(dict.fromkeys((str(i), r) for i, r in also_true if str(i) not in first))[:MAX_EXTRA]
    shown = list(neighbours[:MAX_TILES - 1 - len(extra)])  # the true matches past them keep their tiles
    tiles = [pictures.tile(query, query_sets, (str(unit) if str(unit) == str(query) else f"{unit}: {query}",
                                               "query"), "query")]
    for place, (image_id, score, is_true) in enumerate(shown):
        mark = "" if is_true is None else ("true" if is_true else "false")
        tiles.append(pictures.tile(image_id, reference_sets, (str(image_id), score_text(score, score_word),
                                                              f"rank {place + 1}"), mark))
    for image_id, rank in extra:
        tiles.append(pictures.tile(image_id, reference_sets, (str(image_id), what, rank_text(rank, k)), "true"))
    if kind == MISSED:
        title = f"query {unit}: {what} {rank_text(true_rank, k)}"
    else:
        top = f"{shown[0][0]} ({score_text(shown[0][1], score_word)})" if shown else "nothing"
        title = f"query {unit}: no {what}; its top result {top}"
    return Row(title, tuple(tiles))


def ranked_lists(values: np.ndarray, owner: np.ndarray, tiebreak: np.ndarray, units: int,
                 higher_is_better: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The flat results of every query sorted into rank order (best score first; equal scores by
    ``tiebreak``, e.g. the result's id): ``(order, place)``, ``order`` the flat rows in rank order
    grouped by query, ``place[i]`` the 0-based rank of ``order[i]`` within its query."""
    values = np.asarray(values, dtype=np.float64)
    key = -values if higher_is_better else values
    order = np.lexsort((tiebreak, key, owner))
    starts = np.zeros(units + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=units), out=starts[1:])
    place = np.arange(order.size, dtype=np.int64) - starts[np.asarray(owner)[order]]
    return order, place


def first_true(is_true_in_order: np.ndarray, owner_in_order: np.ndarray, place: np.ndarray,
               units: int) -> np.ndarray:
    """Per query, the 0-based rank of its first true result (-1: none), from rank-ordered flat lists."""
    rank = np.full(units, -1, dtype=np.int64)
    hits = np.flatnonzero(is_true_in_order)
    if hits.size:
        query, first = np.unique(owner_in_order[hits], return_index=True)
        rank[query] = place[hits[first]]
    return rank


def top_scores(values_in_order: np.ndarray, owner_in_order: np.ndarray, place: np.ndarray,
               units: int) -> tuple[np.ndarray, np.ndarray]:
    """Per query, (whether it has any result, its top result's score: NaN when none)."""
    top = np.full(units, np.nan)
    first = place == 0
    top[owner_in_order[first]] = np.asarray(values_in_order, dtype=np.float64)[first]
    has = np.zeros(units, dtype=bool)
    has[owner_in_order[first]] = True
    return has, top


def sheet_title(benchmark: str, variant: str, k: int) -> str:
    return f"{benchmark} {variant}: worst queries (true match ranked lowest or missing from the top {k}; " \
           "highest-scored false matches)".replace("  ", " ")
