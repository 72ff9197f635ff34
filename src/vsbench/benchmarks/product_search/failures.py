"""The failure sheet of one product-search evaluation: the queries whose wanted product ranked lowest.

Read from the evaluation's units (:mod:`vsbench.benchmarks.product_search.units`: each query's
candidates' cosines and fulfil labels, in the queries file's order) plus what the adapter read once
(each query's source image and its candidates' gallery ids) and the images shown. A row is a query's
source image and its candidates ranked by cosine (ties by gallery id), those that fulfil the request
marked ``true``, the others ``false``; a fulfilling candidate past the shown ones comes last with its
rank. Worst first: the best fulfilling candidate ranked lowest; then queries without one whose top
candidate scored highest (order and bounds: :mod:`vsbench.benchmarks.ranked_failures`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from vsbench.benchmarks.ranked_failures import (
    Outcomes,
    Pictures,
    first_true,
    query_row,
    ranked_lists,
    top_scores,
    worst,
)
from vsbench.io.features import ImageSet
from vsbench.reporting.sheets import MAX_TILES, Sheet
from vsbench.stats.units import Units


def product_search_sheet(units: Units, images: Mapping[str, tuple[ImageSet, Path]], *, rows: int,
                         query_images: Sequence[str], candidates: Sequence[Sequence[str]],
                         pictures: Pictures | None = None, title: str = "") -> Sheet:
    """The sheet of one product-search evaluation's units (columns ``score``, ``label``, ``has_positive``).
    ``images``: ``{"query": ..., "gallery": ...}`` as ``(ImageSet, folder)``; ``query_images``: each
    unit's source image id; ``candidates``: each unit's candidates' gallery ids, in the order of its
    ``score`` list."""
    pictures = pictures or Pictures(images)
    n = len(units)
    if len(query_images) != n or len(candidates) != n:
        raise ValueError(f"{len(query_images)} query images and {len(candidates)} candidate lists for {n} queries")
    scores, owner = units.lists("score")
    labels, _ = units.lists("label", np.int64)
    names = np.asarray([str(c) for ids in candidates for c in ids], dtype=str)
    if names.size != scores.size:
        raise ValueError(f"{names.size} candidate ids for {scores.size} candidate scores")
    order, place = ranked_lists(scores, owner, names, n)
    owner_sorted = owner[order]
    rank = first_true(labels[order] == 1, owner_sorted, place, n)
    has_results, top = top_scores(scores[order], owner_sorted, place, n)
    outcomes = Outcomes(units.ids, units.values("has_positive", np.int64) > 0, rank, has_results, top)
    chosen, total = worst(outcomes, rows)
    starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=n), out=starts[1:])
    sheet_rows = []
    for row, kind in chosen:
        ranked = order[starts[row]:starts[row + 1]]
        neighbours = [(str(names[i]), float(scores[i]), bool(labels[i] == 1)) for i in ranked[:MAX_TILES - 1].tolist()]
        also = [(str(names[i]), place_) for place_, i in enumerate(ranked.tolist())
                if labels[i] == 1 and place_ >= MAX_TILES - 1][:1]
        sheet_rows.append(query_row(pictures, unit=f"line {units.ids[row]}", query=str(query_images[row]),
                                    query_sets=("query",), kind=kind, neighbours=neighbours,
                                    reference_sets=("gallery",), k=int(ranked.size),
                                    true_rank=None if rank[row] < 0 else int(rank[row]), also_true=also,
                                    what="wanted product"))
    return Sheet(title or f"{units.benchmark} {units.variant}: worst queries (wanted product ranked lowest; "
                          "highest-scored queries without one)", tuple(sheet_rows), total, what="failing queries",
                 notes=pictures.notes())
