"""The failure sheet of one copy-detection evaluation (DISC2021): its worst queries, as pictures.

Read from the evaluation's units alone (:mod:`vsbench.benchmarks.disc.units`: each query's predicted
references, their scores and which are ground-truth pairs, and its number of pairs) plus the images
of the few queries shown: the queries whose copy was ranked lowest or not retrieved at all, then
the queries with no copy whose top prediction scored highest (the false matches uAP pays for
first). Order and bounds: :mod:`vsbench.benchmarks.ranked_failures`. A copy never retrieved is
shown at the row's end when the caller gives the ground truth (``truths``); the units hold only
what was predicted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from vsbench.benchmarks.ranked_failures import (
    FALSE,
    Outcomes,
    Pictures,
    first_true,
    query_row,
    ranked_lists,
    sheet_title,
    top_scores,
    worst,
)
from vsbench.io.features import ImageSet
from vsbench.reporting.sheets import MAX_TILES, Sheet
from vsbench.stats.units import ListColumn, Units

Truths = Callable[[Sequence[str]], Mapping[str, Sequence[str]]]


def copy_detection_sheet(units: Units, images: Mapping[str, tuple[ImageSet, Path]], *, rows: int, k: int = 0,
                         truths: Truths | None = None, pictures: Pictures | None = None, title: str = "") -> Sheet:
    """The sheet of one copy-detection evaluation's units (columns ``scores``, ``positive``,
    ``references``, ``n_positives``). ``images``: ``{"query": (ImageSet, folder), "reference": ...}``;
    ``k``: the search's k (the title's "not in the top k"; default the longest list); ``truths``:
    query ids -> their ground-truth references (for copies never retrieved); ``pictures``: a lookup
    shared by the sheets of one score."""
    pictures = pictures or Pictures(images)
    scores, owner = units.lists("scores")
    positive, _ = units.lists("positive", bool)
    references: ListColumn = units.columns["references"]
    n = len(units)
    names = references.category_texts() if references.categories is not None else None
    tiebreak = (np.argsort(np.argsort(names, kind="stable"), kind="stable")[references.values]
                if names is not None else np.asarray(references.values).astype(str))
    order, place = ranked_lists(scores, owner, tiebreak, n)
    owner_sorted = owner[order]
    rank = first_true(positive[order], owner_sorted, place, n)
    has_results, top = top_scores(scores[order], owner_sorted, place, n)
    n_positives = units.values("n_positives", np.int64)
    outcomes = Outcomes(units.ids, n_positives > 0, rank, has_results, top)
    chosen, total = worst(outcomes, rows)
    k = k or int(np.diff(references.offsets).max(initial=0))
    missing = [str(units.ids[r]) for r, kind in chosen if kind != FALSE and rank[r] < 0]
    truth = truths(missing) if truths is not None and missing else {}
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=starts[1:])
    sheet_rows = []
    for row, kind in chosen:
        flat = order[starts[row]:starts[row + 1]][:MAX_TILES - 1]
        refs = names[references.values[flat]] if names is not None else np.asarray(references.values)[flat]
        neighbours = [(str(ref), float(scores[i]), bool(positive[i])) for ref, i in zip(refs.tolist(), flat.tolist())]
        query = str(units.ids[row])
        also = [(str(ref), None) for ref in truth.get(query, ())]
        sheet_rows.append(query_row(pictures, unit=query, query=query, query_sets=("query",), kind=kind,
                                    neighbours=neighbours, reference_sets=("reference",), k=k,
                                    true_rank=None if rank[row] < 0 else int(rank[row]), also_true=also,
                                    what="copy"))
    return Sheet(title or sheet_title(units.benchmark, units.variant, k), tuple(sheet_rows), total,
                 what="failing queries", notes=pictures.notes())
