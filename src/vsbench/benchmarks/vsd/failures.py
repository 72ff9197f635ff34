"""The failure sheet of one VSD evaluation (a protocol): the seeds whose similar products ranked lowest.

Read from the evaluation's units (:mod:`vsbench.benchmarks.vsd.units`: each seed's tagged pairs with
their cosine, tag and rank, and its filtered top k as scored, ``top``/``top_score``) plus the images
shown. A row is a seed, its top k (marked ``true`` where the seed's tags call the candidate similar,
``false`` where they call it not, unmarked where it is untagged: VSD knows only what was tagged),
then its positive-tagged candidates outside the top k. Worst first: seeds with a positive tag whose
best positive is missing from the top k, then ranked lowest; then seeds without any positive tag
whose top result scored highest (order and bounds: :mod:`vsbench.benchmarks.ranked_failures`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from vsbench.benchmarks.ranked_failures import Outcomes, Pictures, query_row, worst
from vsbench.io.features import ImageSet
from vsbench.reporting.sheets import MAX_TILES, Sheet
from vsbench.stats.units import Units

SETS = ("images",)


def vsd_sheet(units: Units, images: Mapping[str, tuple[ImageSet, Path]], *, rows: int,
              pictures: Pictures | None = None, title: str = "") -> Sheet:
    """The sheet of one VSD protocol's units (columns ``has_positive``, ``score``, ``label``, ``rank``,
    ``candidate``, ``top``, ``top_score``). ``images``: ``{"images": (ImageSet, the images' folder)}``."""
    pictures = pictures or Pictures(images)
    for column in ("candidate", "top", "top_score"):
        if column not in units.columns:
            raise ValueError(f"these VSD units hold no {column!r} column (written before issue 47's sheets need it)")
    n = len(units)
    labels, owner = units.lists("label", np.int64)
    ranks, _ = units.lists("rank", np.int64)
    candidates = units.columns["candidate"]
    top, top_scores = units.columns["top"], units.columns["top_score"]
    good = (labels == 1) & (ranks >= 1)
    best = np.full(n, np.iinfo(np.int64).max)
    np.minimum.at(best, owner[good], ranks[good])
    rank = np.where(best == np.iinfo(np.int64).max, -1, best - 1)  # 0-based; -1: no positive in the top k
    lengths = np.diff(np.asarray(top.offsets))
    first = np.asarray(top_scores.offsets)[:-1]
    has_results = lengths > 0
    top_score = np.full(n, np.nan)
    top_score[has_results] = np.asarray(top_scores.values, dtype=np.float64)[first[has_results]]
    outcomes = Outcomes(units.ids, units.values("has_positive", np.int64) > 0, rank, has_results, top_score)
    chosen, total = worst(outcomes, rows)
    k = int(lengths.max(initial=0))
    sheet_rows = []
    for row, kind in chosen:
        tagged = dict(zip(candidates[row].tolist(), (units.columns["label"][row] == 1).tolist()))
        ids, values = top[row].tolist(), top_scores[row].tolist()
        neighbours = [(str(i), float(v), tagged.get(str(i))) for i, v in list(zip(ids, values))[:MAX_TILES - 1]]
        in_top = set(ids)
        also = [(c, None) for c, positive in tagged.items() if positive and c not in in_top]
        seed = str(units.ids[row])
        sheet_rows.append(query_row(pictures, unit=seed, query=seed, query_sets=SETS, kind=kind, neighbours=neighbours,
                                    reference_sets=SETS, k=k, true_rank=None if rank[row] < 0 else int(rank[row]),
                                    also_true=also, what="similar product"))
    return Sheet(title or f"{units.benchmark} {units.variant}: worst seeds (similar product ranked lowest or missing "
                          f"from the top {k}; highest-scored seeds without one)", tuple(sheet_rows), total,
                 what="failing seeds", notes=pictures.notes())
