"""Per-seed outcomes of a VSD evaluation: what recomputes HR@k, MRR@k, ROC-AUC and PR-AUC from a resample.

Units are seeds (the queries), resampled independently. A seed keeps its tagged pairs (cosine score,
tag, rank of the candidate in the seed's filtered list) and its contributions to the hit rates:

* ``hr_at_k`` = (its positives ranked within k) / k and ``mrr_at_k`` = (sum of their 1/rank) / H_k,
  with ``has_positive`` 1 when the seed has a positive tag. ``HR@k = sum_P [rank <= k] / (k |S|)``
  is then ``sum(w * hr_at_k) / sum(w * has_positive)``, a ratio, and so is MRR@k: a seed drawn twice
  is two seeds of ``S`` with their tags twice, as :func:`~vsbench.benchmarks.vsd.metrics.vsd_metrics`
  counts them. A seed without a positive tag adds to neither (its negatives still count for the AUCs).
* ``roc_auc`` / ``pr_auc``: :func:`vsbench.stats.curves.tagged_roc_auc` and
  :func:`~vsbench.stats.curves.tagged_average_precision` over the ``score`` / ``label`` list
  columns, each pair weighted by its seed's draw count.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.vsd.metrics import DEFAULT_KS
from vsbench.stats.outcomes import Outcomes, number
from vsbench.stats.units import ListColumn, Units

NAME = "vsd"


def harmonic(k: int) -> float:
    """``H_k`` exactly as :mod:`vsbench.benchmarks.vsd.metrics` computes it."""
    return float(np.sum(1.0 / np.arange(1, k + 1)))


def vsd_units(seeds: Sequence[Hashable], labels: ArrayLike, ranks: ArrayLike, scores: ArrayLike,
              ks: Sequence[int] = DEFAULT_KS, *, variant: str = "", candidates: Sequence[str] | None = None,
              neighbours: Mapping[str, tuple[Sequence[str], Sequence[float]]] | None = None) -> Units:
    """Units from the arguments :func:`~vsbench.benchmarks.vsd.metrics.vsd_metrics` takes (one entry per
    tagged pair); one unit per seed, in order of first appearance, its id the seed's name.

    For the failure sheet (:mod:`vsbench.benchmarks.vsd.failures`), and used by no metric:
    ``candidates``, each tagged pair's candidate image (column ``candidate``, beside ``score``), and
    ``neighbours``, each seed's ranked list as scored (its filtered top k: image ids and cosines;
    columns ``top`` and ``top_score``)."""
    y = np.asarray(labels, dtype=np.int8)
    r = np.asarray(ranks, dtype=np.int64)
    s = np.asarray(scores, dtype=np.float64)
    if not (y.shape == r.shape == s.shape == (len(seeds),)):
        raise ValueError("seeds, labels, ranks and scores must have one entry per tagged pair")
    names, owner = np.unique(np.asarray([str(seed) for seed in seeds], dtype=str), return_inverse=True)
    first = np.full(names.size, len(seeds))
    np.minimum.at(first, owner, np.arange(len(seeds)))
    order = np.argsort(first, kind="stable")  # seeds in order of first appearance
    row = np.empty_like(order)
    row[order] = np.arange(order.size)
    owner = row[owner]
    n = names.size
    positive = y == 1
    columns: dict[str, object] = {"has_positive": (np.bincount(owner, weights=positive, minlength=n) > 0).astype(np.int8)}
    for k in ks:
        inside = positive & (r >= 1) & (r <= k)
        columns[f"hr_at_{k}"] = np.bincount(owner[inside], minlength=n) / k
        columns[f"mrr_at_{k}"] = np.bincount(owner[inside], weights=1.0 / r[inside], minlength=n) / harmonic(k)
    columns["score"] = ListColumn.from_owner(s, owner, n)
    columns["label"] = ListColumn.from_owner(y, owner, n)
    columns["rank"] = ListColumn.from_owner(r, owner, n)
    if candidates is not None:
        if len(candidates) != len(seeds):
            raise ValueError(f"{len(candidates)} candidates for {len(seeds)} tagged pairs")
        grouped = ListColumn.from_owner(np.arange(len(seeds)), owner, n)
        columns["candidate"] = ListColumn.coded(np.asarray([str(c) for c in candidates], dtype=str)[grouped.values],
                                                grouped.offsets)
    if neighbours is not None:
        lists = [neighbours.get(str(name), ((), ())) for name in names[order]]
        columns["top"] = ListColumn.coded(np.asarray([str(i) for ids, _ in lists for i in ids], dtype=str),
                                          np.concatenate([[0], np.cumsum([len(ids) for ids, _ in lists])]).astype(np.int64))
        columns["top_score"] = ListColumn.from_lists([np.asarray(values, dtype=np.float64) for _, values in lists])
    metrics: dict[str, dict[str, object]] = {}
    for k in ks:
        metrics[f"hr_at_{k}"] = {"statistic": "ratio", "num": f"hr_at_{k}", "den": "has_positive"}
        metrics[f"mrr_at_{k}"] = {"statistic": "ratio", "num": f"mrr_at_{k}", "den": "has_positive"}
    metrics["roc_auc"] = {"statistic": "tagged_roc_auc", "score": "score", "label": "label"}
    metrics["pr_auc"] = {"statistic": "tagged_average_precision", "score": "score", "label": "label"}
    return Units("seed", NAME, names[order], columns, metrics, None, variant)


def vsd_outcomes(units: Units) -> Outcomes:
    """Each seed right or wrong (issue 47's compare sheet): right when a positive candidate holds rank
    1 of its filtered list (what HR@1 counts). A seed without a positive tag is left unjudged.
    Severity: the best rank of a positive (none ranked: past the seed's largest rank). ``rank``: that
    best rank for every judged seed (inf: no positive in its filtered list), what a comparison by
    ranking lists (issue 55 item 8): HR@k and MRR@k move when a positive climbs from rank 3 to 1, which
    right/wrong at rank 1 sees only for the one that reaches it. A seed's unit file holds no AP (its
    list's untagged candidates are neither true nor false), so its best positive's rank is the value."""
    has_positive = units.values("has_positive") > 0
    scores, labels, ranks = units.columns["score"], units.columns["label"], units.columns["rank"]

    def best(row: int) -> tuple[int | None, float]:
        y, r, s = np.asarray(labels[row]) == 1, np.asarray(ranks[row], dtype=np.int64), np.asarray(scores[row])
        ranked = y & (r >= 1)
        if not ranked.any():
            return None, float("nan")
        at = np.flatnonzero(ranked)[np.argmin(r[ranked])]
        return int(r[at]), float(s[at])

    right = np.zeros(len(units), dtype=bool)
    severity = np.zeros(len(units))
    best_rank = np.full(len(units), np.nan)  # inf: no positive ranked; nan: not judged
    for row in np.flatnonzero(has_positive).tolist():
        rank, _ = best(row)
        best_rank[row] = rank if rank is not None else np.inf
        right[row] = rank == 1
        largest = int(np.max(np.asarray(ranks[row]), initial=0))
        severity[row] = 0 if rank == 1 else (rank if rank is not None else largest + 1)

    def answer(row: int) -> str:
        rank, score = best(row)
        return f"best positive at rank {rank} ({number(score)})" if rank is not None else "no positive ranked"

    return Outcomes(units, right, has_positive, severity, "right: a positive at rank 1; seeds without a positive "
                    "are not judged", answer, rank=best_rank)
