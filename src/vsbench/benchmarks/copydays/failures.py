"""The failure sheet of one Copydays evaluation: the queries whose original ranked lowest, as pictures.

Read from the evaluation's units (:mod:`vsbench.benchmarks.copydays.units`: each query's result list
as FAISS returned it, its distances, which results are positives, and the index ids) plus the images
shown. Every Copydays query has an original in the index, so the sheet is of misses only: an
original missing from the query's k results first, then ranked lowest (order and bounds:
:mod:`vsbench.benchmarks.ranked_failures`). A result's rank is its place in the list the metrics
scored (FAISS's order, ties included); an original never retrieved is shown at the row's end when
the caller gives the positives (``truths``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from vsbench.benchmarks.ranked_failures import Outcomes, Pictures, first_true, query_row, worst
from vsbench.io.features import ImageSet
from vsbench.reporting.sheets import MAX_TILES, Sheet
from vsbench.stats.units import Units

REFERENCE_SETS = ("query", "distractors")  # the originals are queries too; the index also holds distractors


def copydays_sheet(units: Units, images: Mapping[str, tuple[ImageSet, Path]], *, rows: int,
                   truths: Callable[[Sequence[str]], Mapping[str, Sequence[str]]] | None = None,
                   pictures: Pictures | None = None, title: str = "") -> Sheet:
    """The sheet of one Copydays evaluation's units (columns ``distances``, ``hits``, ``references``,
    ``n_positives``). ``images``: ``{"query": (ImageSet, root), "distractors": (ImageSet, its folder)}``;
    ``truths``: query ids -> their originals' index ids; ``pictures``: shared by one score's sheets."""
    pictures = pictures or Pictures(images)
    if "references" not in units.columns:
        raise ValueError("these Copydays units hold no result ids (written before issue 47's sheets need them)")
    distances, owner = units.lists("distances")
    hits, _ = units.lists("hits", bool)
    references = units.columns["references"]
    n = len(units)
    offsets = np.asarray(references.offsets)
    place = np.arange(owner.size, dtype=np.int64) - offsets[owner]  # the scored order: FAISS's
    found = np.asarray(references.texts()).astype(str) != ""
    rank = first_true(hits, owner, place, n)
    nonempty = np.diff(offsets) > 0
    has_results = np.zeros(n, dtype=bool)
    has_results[nonempty] = found[offsets[:-1][nonempty]]  # FAISS pads a short list with id -1: ""
    top = np.full(n, np.nan)
    top[has_results] = distances[offsets[:-1][has_results]]
    outcomes = Outcomes(units.ids, units.values("n_positives") > 0, rank, has_results, top, higher_is_better=False)
    chosen, total = worst(outcomes, rows)
    k = int(np.diff(offsets).max(initial=0))
    missing = [str(units.ids[r]) for r, _ in chosen if rank[r] < 0]
    truth = truths(missing) if truths is not None and missing else {}
    texts = references.texts()
    sheet_rows = []
    for row, kind in chosen:
        flat = np.arange(offsets[row], offsets[row + 1])[:MAX_TILES - 1]
        neighbours = [(str(texts[i]), float(distances[i]), bool(hits[i])) for i in flat.tolist() if texts[i] != ""]
        query = str(units.ids[row])
        also = [(str(t), None) for t in truth.get(query, ())]
        if rank[row] >= MAX_TILES - 1:  # ranked, past the tiles a row has: shown last, with its rank
            also.append((str(texts[offsets[row] + rank[row]]), int(rank[row])))
        sheet_rows.append(query_row(pictures, unit=query, query=query, query_sets=("query",), kind=kind,
                                    neighbours=neighbours, reference_sets=REFERENCE_SETS, k=k,
                                    true_rank=None if rank[row] < 0 else int(rank[row]),
                                    also_true=also,
                                    score_word="distance", what="original"))
    return Sheet(title or f"{units.benchmark} {units.variant}: worst queries (original ranked lowest or missing from "
                          f"the top {k})", tuple(sheet_rows), total, what="failing queries", notes=pictures.notes())
