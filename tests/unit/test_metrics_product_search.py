"""Product-search mAP on a hand-worked case; ties scored as one threshold (sklearn semantics)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from vsbench.benchmarks.product_search.metrics import product_search_metrics

GALLERY = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]])
QUERIES = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])


def test_map_by_hand() -> None:
    # q0 = (1, 0): candidates g1 (cos 0, yes), g0 (cos 1, no), g2 (cos .6, yes), g3 (cos -1, no)
    #   ranked g0 no | g2 yes | g1 yes | g3 no -> AP = (1/2 + 2/3) / 2 = 7/12
    # q1: no fulfilling candidate -> no AP, left out
    # q2 = (.6, .8): g2 (cos 1, yes), g3 (cos -.6, no) -> AP = 1
    m = product_search_metrics(QUERIES, GALLERY, [[1, 0, 2, 3], [0, 1], [2, 3]], [[1, 0, 1, 0], [0, 0], [1, 0]])
    assert m.per_query_ap[0] == pytest.approx(7 / 12)
    sklearn_ap = average_precision_score([1, 0, 1, 0], GALLERY[[1, 0, 2, 3]] @ QUERIES[0])
    assert m.per_query_ap[0] == pytest.approx(sklearn_ap)
    assert np.isnan(m.per_query_ap[1]) and m.per_query_ap[2] == pytest.approx(1.0)
    assert m.mean_average_precision == pytest.approx((7 / 12 + 1) / 2)
    assert m.as_dict() == {"map": pytest.approx(19 / 24), "num_queries": 2, "num_queries_without_positive": 1}


def test_tied_candidates_form_one_threshold() -> None:
    gallery = np.array([[1.0, 0.0], [1.0, 0.0]])
    for labels in ([0, 1], [1, 0]):
        assert product_search_metrics([[1.0, 0.0]], gallery, [[0, 1]], [labels]).mean_average_precision == 0.5


def test_cosine_ignores_row_scale() -> None:
    base = product_search_metrics(QUERIES[:1], GALLERY, [[0, 1, 2]], [[0, 1, 1]])
    scaled = product_search_metrics(QUERIES[:1] * 3, GALLERY * 0.5, [[0, 1, 2]], [[0, 1, 1]])
    assert base.mean_average_precision == scaled.mean_average_precision


def test_rejects_mismatches_and_all_negative() -> None:
    with pytest.raises(ValueError, match="candidate lists"):
        product_search_metrics(QUERIES, GALLERY, [[0]], [[1]])
    with pytest.raises(ValueError, match="mAP is undefined"):
        product_search_metrics(QUERIES[:1], GALLERY, [[0, 1]], [[0, 0]])
    with pytest.raises(ValueError, match="all-zero row"):
        product_search_metrics(QUERIES[:1], np.zeros((2, 2)), [[0, 1]], [[1, 0]])
