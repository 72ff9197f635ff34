"""Language-assisted product search scorer (2022 Amazon Alexa challenge).

Each query comes with about 50 annotated candidate products, each labelled as fulfilling the
feedback (1) or not (0). The candidates are ranked by cosine similarity between the query feature
and their gallery features; the query's AP is computed on that ranking against the labels, and
``map`` is the mean over queries.

Decisions the challenge text leaves open, fixed here:

* AP is sklearn's ``average_precision_score`` (``sum_n (R_n - R_{n-1}) P_n``); tied cosines form
  one threshold, so the order of tied candidates does not change the number.
* A query with no fulfilling candidate has no AP: it is left out of the mean and counted in
  ``num_queries_without_positive`` (its entry in ``per_query_ap`` is NaN).
* Cosine is computed from the features as given (dot product over the norms), so slightly
  unnormalized rows rank exactly as their normalized versions would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.vsd.metrics import binary_average_precision


@dataclass(frozen=True)
class ProductSearchMetrics:
    mean_average_precision: float
    per_query_ap: np.ndarray  # NaN for a query without a fulfilling candidate
    num_queries: int  # queries that entered the mean
    num_queries_without_positive: int

    def as_dict(self) -> dict[str, float | int]:
        return {"map": self.mean_average_precision, "num_queries": self.num_queries,
                "num_queries_without_positive": self.num_queries_without_positive}


def _unit_rows(features: np.ndarray, name: str) -> np.ndarray:
    norms = np.linalg.norm(features, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"{name} has an all-zero row {int(np.flatnonzero(norms.ravel() == 0)[0])}")
    return features / norms


def product_search_metrics(query_features: ArrayLike, gallery_features: ArrayLike,
                           candidate_rows: Sequence[ArrayLike], candidate_labels: Sequence[ArrayLike]
                           ) -> ProductSearchMetrics:
    """mAP over queries of the AP of each query's annotated candidates ranked by cosine.

    ``candidate_rows[i]`` are the gallery rows of query i's candidates, ``candidate_labels[i]``
    their 0/1 fulfil labels (same length).
    """
    queries = np.asarray(query_features, dtype=np.float64)
    gallery = np.asarray(gallery_features, dtype=np.float64)
    if queries.ndim != 2 or gallery.ndim != 2 or queries.shape[1] != gallery.shape[1]:
        raise ValueError(f"feature shapes {queries.shape} and {gallery.shape} do not match")
    if len(candidate_rows) != queries.shape[0] or len(candidate_labels) != queries.shape[0]:
        raise ValueError(f"{queries.shape[0]} query features for {len(candidate_rows)} candidate lists "
                         f"and {len(candidate_labels)} label lists")
    queries, gallery = _unit_rows(queries, "query_feature"), _unit_rows(gallery, "gallery_feature")
    aps = np.full(queries.shape[0], np.nan)
    for i, (rows, labels) in enumerate(zip(candidate_rows, candidate_labels)):
        y = np.asarray(labels)
        if y.size and y.any():
            aps[i] = binary_average_precision(y, gallery[np.asarray(rows, dtype=np.int64)] @ queries[i])
    scored = ~np.isnan(aps)
    if not scored.any():
        raise ValueError("no query has a fulfilling candidate: mAP is undefined")
    return ProductSearchMetrics(
        mean_average_precision=float(aps[scored].mean()),
        per_query_ap=aps,
        num_queries=int(scored.sum()),
        num_queries_without_positive=int((~scored).sum()),
    )
