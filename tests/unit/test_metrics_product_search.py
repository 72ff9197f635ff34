"""Product-search mAP on a hand-worked case; ties scored as one threshold (sklearn semantics)."""

from __future__ import annotations

import re

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


# ------------------------------------------------- edges found by mutation testing (issue 49)


def exactly(message: str) -> str:
    """A ``match`` pattern for this message and nothing around it."""
    return "^" + re.escape(message) + "$"


@pytest.mark.parametrize(("queries", "gallery", "message"), [
    (QUERIES, np.ones((4, 3)), "feature shapes (3, 2) and (4, 3) do not match"),
    (QUERIES[0], GALLERY, "feature shapes (2,) and (4, 2) do not match"),
    (QUERIES, GALLERY[0], "feature shapes (3, 2) and (2,) do not match"),
])
def test_rejects_feature_shapes_with_their_message(queries: np.ndarray, gallery: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        product_search_metrics(queries, gallery, [[0]] * len(queries), [[1]] * len(queries))


@pytest.mark.parametrize(("rows", "labels", "message"), [
    ([[0]] * 3, [[1]], "3 query features for 3 candidate lists and 1 label lists"),
    ([[0]], [[1]] * 3, "3 query features for 1 candidate lists and 3 label lists"),
])
def test_rejects_one_short_list_with_its_message(rows: list, labels: list, message: str) -> None:
    with pytest.raises(ValueError, match=exactly(message)):
        product_search_metrics(QUERIES, GALLERY, rows, labels)


def test_names_the_first_all_zero_row_of_each_side() -> None:
    queries = QUERIES.copy()
    queries[1] = 0.0
    with pytest.raises(ValueError, match=exactly("query_feature has an all-zero row 1")):
        product_search_metrics(queries, GALLERY, [[0]] * 3, [[1]] * 3)
    gallery = GALLERY.copy()
    gallery[2] = 0.0
    with pytest.raises(ValueError, match=exactly("gallery_feature has an all-zero row 2")):
        product_search_metrics(QUERIES, gallery, [[0]] * 3, [[1]] * 3)


def test_all_negative_message_exactly() -> None:
    with pytest.raises(ValueError, match=exactly("no query has a fulfilling candidate: mAP is undefined")):
        product_search_metrics(QUERIES[:1], GALLERY, [[0, 1]], [[0, 0]])


def test_ranks_by_cosine_not_by_dot_product() -> None:
    # q = (.6, .8): g0 = (10, 0) has cosine .6 but dot 6, g1 = (0, 1) cosine .8 and dot .8. The
    # positive g1 ranks first by cosine (AP 1); by a dot product, or any one scale for all rows, second.
    gallery = np.array([[10.0, 0.0], [0.0, 1.0]])
    assert product_search_metrics([[0.6, 0.8]], gallery, [[0, 1]], [[0, 1]]).mean_average_precision == 1.0


def test_float32_gallery_is_normalized_in_float64() -> None:
    # |(1, 1e-4)| = sqrt(1 + 1e-8) is 1.0 in float32, so a float32 normalization would tie g1's cosine
    # with g0's (1.0) and give AP 1/2; in float64 the cosine is 1 - 5e-9 and the positive g0 is alone first.
    gallery = np.array([[1.0, 0.0], [1.0, 1e-4]], dtype=np.float32)
    assert product_search_metrics([[1.0, 0.0]], gallery, [[0, 1]], [[1, 0]]).mean_average_precision == 1.0
