"""Per-query outcomes of product search: each query's candidate scores, labels and AP.

Units are queries, resampled independently. mAP is the mean of the per-query APs over the queries
with a fulfilling candidate, so it is a ratio: ``sum(w * ap) / sum(w * has_positive)``, where a
query without a fulfilling candidate keeps ``ap`` 0 and ``has_positive`` 0 (it is left out of the
mean, as :func:`~vsbench.benchmarks.product_search.metrics.product_search_metrics` leaves it out;
its AP is stored as 0 rather than NaN so that a weighted sum stays a number). A query's AP does not
depend on any other query, so a query drawn twice simply counts twice. Each query also keeps its
candidates' cosines (``score``) and labels (``label``), in the queries file's order, so that a
failure sheet or another per-query metric can be computed from the units alone.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.product_search.metrics import _unit_rows
from vsbench.benchmarks.product_search.readers import ProductQuery
from vsbench.benchmarks.vsd.metrics import binary_average_precision
from vsbench.stats.outcomes import Outcomes, Shown, first_true_rank, number
from vsbench.stats.units import ListColumn, Units

NAME = "product_search"


def query_ids(queries: Sequence[ProductQuery]) -> list[str]:
    """A query's unit id: its line in the queries file (``line 3`` -> ``"3"``), the same for every run
    that reads the same file, which is what pairs two runs."""
    return [str(query.line) for query in queries]


def product_search_units(query_features: ArrayLike, gallery_features: ArrayLike,
                         candidate_rows: Sequence[ArrayLike], candidate_labels: Sequence[ArrayLike], *,
                         ids: Sequence[str] | None = None, variant: str = "") -> Units:
    """Units from the arguments :func:`~vsbench.benchmarks.product_search.metrics.product_search_metrics`
    takes, scored the same way (the same cosines, the same AP); ``ids`` default to the row numbers."""
    queries = _unit_rows(np.asarray(query_features, dtype=np.float64), "query_feature")
    gallery = _unit_rows(np.asarray(gallery_features, dtype=np.float64), "gallery_feature")
    n = queries.shape[0]
    if len(candidate_rows) != n or len(candidate_labels) != n:
        raise ValueError(f"{n} query features for {len(candidate_rows)} candidate lists and "
                         f"{len(candidate_labels)} label lists")
    scores, labels = [], []
    ap = np.zeros(n)
    has_positive = np.zeros(n, dtype=np.int8)
    for i, (rows, y) in enumerate(zip(candidate_rows, candidate_labels)):
        y = np.asarray(y, dtype=np.int8)
        s = gallery[np.asarray(rows, dtype=np.int64)] @ queries[i]
        scores.append(s)
        labels.append(y)
        if y.size and y.any():
            ap[i] = binary_average_precision(y, s)
            has_positive[i] = 1
    unit_ids = np.asarray([str(i) for i in (ids if ids is not None else range(n))], dtype=str)
    if unit_ids.size != n:
        raise ValueError(f"{unit_ids.size} ids for {n} queries")
    columns = {"ap": ap, "has_positive": has_positive, "score": ListColumn.from_lists(scores),
               "label": ListColumn.from_lists(labels, np.int8)}
    metrics = {"map": {"statistic": "ratio", "num": "ap", "den": "has_positive"}}
    return Units("query", NAME, unit_ids, columns, metrics, None, variant)


def product_search_outcomes(units: Units) -> Outcomes:
    """Each query right or wrong (issue 47's compare sheet): right when its top-scored candidate (the
    first in the queries file's order among equal scores) fulfils it. A query without a fulfilling
    candidate is left unjudged (mAP leaves it out too). Severity: the place of its first fulfilling
    candidate by score. ``ap``: each judged query's own AP, recomputed from its ``score`` and ``label``
    lists as mAP's was (the file's ``ap`` column is checked only through its mean): what a comparison
    by ranking lists (issue 55 item 8), a fulfilling candidate climbing from rank 3 to 1 moves mAP
    while the top candidate stays wrong or right."""
    judged = units.values("has_positive") > 0
    ap = units.values("ap")
    scores, labels = units.columns["score"], units.columns["label"]

    def order(row: int) -> np.ndarray:
        return np.argsort(-np.asarray(scores[row], dtype=np.float64), kind="stable")

    right = np.zeros(len(units), dtype=bool)
    severity = np.zeros(len(units))
    own_ap = np.full(len(units), np.nan)  # nan: not judged
    for row in np.flatnonzero(judged).tolist():
        rank = first_true_rank(np.asarray(labels[row]) == 1, order(row))
        right[row] = rank == 1
        severity[row] = 0 if rank == 1 else (rank if rank is not None else len(labels[row]) + 1)
        try:
            own_ap[row] = binary_average_precision(np.asarray(labels[row]) == 1, np.asarray(scores[row], dtype=np.float64))
        except ValueError as exc:  # a unit file that says a positive but holds none, or a NaN score
            raise ValueError(f"product-search query {units.ids[row]}: its AP cannot be computed: {exc}") from None

    def answer(row: int) -> str:
        o = order(row)
        if not o.size:
            return "no candidate"
        top = int(o[0])
        rank = first_true_rank(np.asarray(labels[row]) == 1, o)
        fits = "fulfils" if labels[row][top] == 1 else "does not fulfil"
        return (f"top candidate #{top + 1} ({number(scores[row][top])}) {fits}; first fulfilling at rank {rank}; "
                f"AP {number(ap[row])}")

    def shows(row: int) -> tuple[Shown, ...]:
        o = order(row)
        if not o.size:
            return ()
        top = int(o[0])
        return (Shown(str(top), (f"candidate #{top + 1}", f"top 1, {number(scores[row][top])}"),
                      "true" if labels[row][top] == 1 else "false", "candidate"),)

    return Outcomes(units, right, judged, severity, "right: the top-scored candidate fulfils the query; queries "
                    "without a fulfilling candidate are not judged", answer, shows, ap=own_ap)
