"""The Copydays scorers' edges that mutation testing found untested (issue 49, ``make mutate``).

Why: each test here kills mutants of :mod:`vsbench.benchmarks.copydays.metrics` that survived
``test_metrics_copydays.py``: a positive at rank 1 after one at rank 0, repeated or unsigned ranks,
hits, ranks and strong flags given as numbers rather than booleans, a query without positives,
inputs of the wrong shape (each alone), zero queries, a result list longer than the number of
queries, the distances sorted in their own dtype (SSCD sorts FAISS's float32 array), and the
refusals' messages. SSCD's own ``score_ap_from_ranks_1`` and ``score_macro_AP`` (vendored in
``tests/originals``) are the oracle where no distance ties, so no sort order matters.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction as F

import numpy as np
import pytest

from tests.originals.sscd_copydays import score_ap_from_ranks_1, score_macro_AP
from vsbench.benchmarks.copydays import metrics as copydays_module
from vsbench.benchmarks.copydays.metrics import copydays_hits, copydays_metrics, trapezoid_ap_from_ranks


def refusal(call: Callable[[], object]) -> str:
    with pytest.raises(ValueError) as info:
        call()
    return str(info.value)


def _ap(ranks: list[int], n_pos: int) -> F:
    """SSCD's trapezoid by hand, in exact fractions."""
    return sum(((F(k, r) if r else F(1)) + F(k + 1, r + 1)) / 2 for k, r in enumerate(ranks)) / n_pos


@pytest.mark.parametrize(("ranks", "n_pos"), [([0, 1], 2), ([0, 1, 2], 3), ([0, 1, 4], 4), ([1, 2], 2), ([2, 5, 6], 3)])
def test_trapezoid_ap_at_small_ranks(ranks: list[int], n_pos: int) -> None:
    # [0, 1] over 2 positives: (1 + 1)/2 + (1/1 + 2/2)/2, halved = 1.0 (a perfect list).
    assert trapezoid_ap_from_ranks(ranks, n_pos) == pytest.approx(float(_ap(ranks, n_pos)), abs=1e-12)
    assert trapezoid_ap_from_ranks(ranks, n_pos) == pytest.approx(score_ap_from_ranks_1(ranks, n_pos), abs=1e-12)


def test_trapezoid_ap_equals_sscd_on_random_lists() -> None:
    rng = np.random.default_rng(0)
    for _ in range(50):
        ranks = np.flatnonzero(rng.random(30) < 0.3)
        n_pos = ranks.size + int(rng.integers(0, 3)) or 1
        assert trapezoid_ap_from_ranks(ranks, n_pos) == pytest.approx(score_ap_from_ranks_1(list(ranks), n_pos),
                                                                      abs=1e-12)


def test_trapezoid_ap_refuses_repeated_and_unsigned_descending_ranks() -> None:
    message = "positive ranks must be strictly increasing"
    assert refusal(lambda: trapezoid_ap_from_ranks([1, 1], 2)) == message
    assert refusal(lambda: trapezoid_ap_from_ranks(np.array([3, 1], dtype=np.uint8), 2)) == message  # no wrap-around
    assert refusal(lambda: trapezoid_ap_from_ranks([0], 0)) == (
        "a query needs at least one positive for its AP to be defined")


def test_copydays_hits_refuses_a_flat_list_and_keeps_zero_queries_two_dimensional() -> None:
    assert refusal(lambda: copydays_hits([4, 2], [{2}, {4}])) == "result ids of shape (2,) for 2 queries"
    assert refusal(lambda: copydays_hits([[4, 2]], [{2}, {4}])) == "result ids of shape (1, 2) for 2 queries"
    none = copydays_hits(np.zeros((0, 3), dtype=np.int64), [])
    assert none.shape == (0, 3) and none.dtype == bool


def test_a_perfect_list_of_two_positives_scores_one() -> None:
    # Positives at ranks 0 and 1: the rank-1 trapezoid's left side is 1/1, not 1/2.
    m = copydays_metrics([[True, True, False]], [[0.1, 0.2, 0.3]], [2], [True])
    assert m.strong_map == pytest.approx(1.0) and m.overall_uap == pytest.approx(float(_ap([0, 1], 1)))


def test_counts_are_queries_not_results() -> None:
    m = copydays_metrics([[True, False, False], [False, False, True]], [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], [1, 1],
                         [True, False])
    assert (m.num_queries, m.num_strong_queries) == (2, 1)
    assert m.strong_map == pytest.approx(1.0)
    assert m.overall_uap == pytest.approx(float(_ap([0, 5], 2)))


def test_numbers_for_hits_and_strong_flags_score_as_booleans() -> None:
    hits = np.array([[0, 1, 0], [1, 0, 1], [1, 0, 0]])
    distances = np.array([[0.1, 0.2, 0.3], [0.1, 0.4, 0.5], [0.2, 0.3, 0.6]])
    want = copydays_metrics(hits.astype(bool), distances, [1, 2, 1], [True, True, False])
    for as_given in (hits, hits.astype(np.float64)):
        for strong in ([1, 1, 0], [True, True, False]):
            got = copydays_metrics(as_given, distances, [1, 2, 1], strong)
            assert got == want  # values, counts and both tie ranges
    assert want.strong_map == pytest.approx(25 / 48) and want.num_strong_queries == 2


def test_scores_equal_sscd_without_ties() -> None:
    rng = np.random.default_rng(1)
    hits = rng.random((12, 8)) < 0.25
    hits[:, 0] |= ~hits.any(axis=1)  # every query finds something
    distances = rng.permutation(hits.size).reshape(hits.shape).astype(np.float32) / 7  # no two alike
    distances.sort(axis=1)
    num_positives = hits.sum(axis=1) + rng.integers(0, 2, size=12)
    strong = rng.random(12) < 0.5
    strong[0] = True
    m = copydays_metrics(hits, distances, num_positives, strong)
    per_query = [score_ap_from_ranks_1(list(np.flatnonzero(row)), int(n)) for row, n in zip(hits, num_positives)]
    assert m.strong_map == pytest.approx(float(np.mean(np.asarray(per_query)[strong])), abs=1e-12)
    assert m.overall_uap == pytest.approx(score_macro_AP(hits.astype(int), distances)[0], abs=1e-12)
    assert m.ties["overall_uap"].is_point and m.ties["strong_map"].is_point


class _NumpyWith:
    """numpy, with some of its functions replaced (for the scorer module's ``np`` only)."""

    def __init__(self, **replaced: Callable[..., object]) -> None:
        self.__dict__.update(replaced)

    def __getattr__(self, name: str) -> object:
        return getattr(np, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_distances_are_sorted_in_their_own_dtype(monkeypatch: pytest.MonkeyPatch, dtype: type) -> None:
    # SSCD argsorts FAISS's float32 array; a float64 copy may order its ties otherwise (see the module doc).
    sorted_dtypes: list[np.dtype] = []

    def argsort(values: np.ndarray, *args: object, **kwargs: object) -> np.ndarray:
        sorted_dtypes.append(values.dtype)
        return np.argsort(values, *args, **kwargs)

    monkeypatch.setattr(copydays_module, "np", _NumpyWith(argsort=argsort))
    m = copydays_metrics([[True, False]], np.array([[0.25, 0.5]], dtype=dtype), [1], [True])
    assert sorted_dtypes == [np.dtype(dtype)] and m.overall_uap == pytest.approx(1.0)


def test_integer_distances_are_scored() -> None:
    m = copydays_metrics([[False, True], [True, False]], np.array([[1, 3], [2, 4]], dtype=np.int32), [1, 1],
                         [True, True])
    assert m.overall_uap == pytest.approx(float(_ap([1, 2], 2)))
    assert m.strong_map == pytest.approx((0.25 + 1.0) / 2)


@pytest.mark.parametrize(
    ("hits", "distances", "num_positives", "strong", "message"),
    [
        ([True, False, True], [0.1, 0.2, 0.3], [1, 1, 1], [True, True, True],
         "shapes differ: hits (3,), distances (3,), num_positives (3,), strong (3,)"),
        ([[True, False]], [[0.1, 0.2]], [1, 1], [True],
         "shapes differ: hits (1, 2), distances (1, 2), num_positives (2,), strong (1,)"),
        ([[True, False]], [[0.1, 0.2]], [1], [True, False],
         "shapes differ: hits (1, 2), distances (1, 2), num_positives (1,), strong (2,)"),
        ([[True, False]], [[0.1, np.nan]], [1], [True], "distances contain NaN"),
        ([[True], [False]], [[0.1], [0.2]], [1, 0], [True, True],
         "every query needs at least one positive (SSCD divides by zero there)"),
        ([[True]], [[0.1]], [1], [False], "no strong query: strong mAP is undefined"),
    ],
)
def test_copydays_refusals_say_what_is_wrong(hits: list, distances: list, num_positives: list, strong: list,
                                             message: str) -> None:
    assert refusal(lambda: copydays_metrics(hits, distances, num_positives, strong)) == message
