"""`vsbench.stats.compare`'s unpaired comparison, permutation p-values, McNemar's counts and the words
each says, against independent computations (issue 56: `make mutate` found `_unpaired`,
`permutation_p_values`, `unpaired_reason` and `Difference.as_dict` reached by no fast test or checked
only for their sign). Each test was seen failing with its mutant planted."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from vsbench.stats.compare import Difference, compare, mcnemar, permutation_p_values, replicates, unpaired_reason
from vsbench.stats.resample import Resampling, expanded_confidence, expanded_p_value, percentile_interval
from vsbench.stats.units import Units

MEAN = {"score": {"statistic": "ratio", "num": "x"}}


def _units(ids: list[str], x: list[float], clusters: list[str] | None = None, kind: str = "query") -> Units:
    return Units(kind, "toy", np.array(ids), {"x": np.asarray(x, dtype=np.float64)}, MEAN,
                 None if clusters is None else np.array(clusters))


def test_why_two_runs_are_not_paired() -> None:
    a = _units(["a", "b", "c"], [1, 2, 3])
    assert unpaired_reason(a, _units(["c", "a", "b"], [1, 2, 3])) == ""
    assert unpaired_reason(a, _units(["a", "a", "c"], [1, 2, 3])) == "a unit id is listed twice"
    assert unpaired_reason(_units(["a", "a", "c"], [1, 2, 3]), a) == "a unit id is listed twice"
    assert unpaired_reason(a, _units(["a", "b", "d", "e"], [1, 2, 3, 4])) == (
        "they scored different units (2 shared of 3 and 4)")
    many = _units([f"u{i}" for i in range(1500)], list(range(1500)))
    assert unpaired_reason(many, a) == "they scored different units (0 shared of 1,500 and 3)"


def test_an_unpaired_difference_is_the_two_bootstraps_apart() -> None:
    """Second run drawn with seed + 1, its replicates minus the first's; expanded by the rougher run's
    draws (the smaller count of groups); the p-value on that scale; kind "group" when either is grouped."""
    rng = np.random.default_rng(0)
    first = _units([f"a{i}" for i in range(30)], rng.random(30).tolist(), [f"g{i // 2}" for i in range(30)])
    second = _units([f"b{i}" for i in range(12)], (rng.random(12) + 0.3).tolist())
    resampling = Resampling(200, 3)
    found = compare(first, second, resampling)["score"]
    a = replicates(first, resampling)["score"]
    b = replicates(second, Resampling(200, 4))["score"]
    d = b - a
    draws = 12  # min(15 groups, 12 queries)
    level = expanded_confidence(0.95, draws)
    assert (found.low, found.high) == percentile_interval(d, level)
    assert found.p_value == expanded_p_value(min(float(np.mean(d <= 0)), float(np.mean(d >= 0))), draws)
    assert not found.paired and found.draws == draws and found.level == level
    assert found.dropped == 0 and found.resamples == 200 and found.kind == "group"
    assert found.first == pytest.approx(np.mean(first.values("x"))) and found.second == pytest.approx(
        np.mean(second.values("x")))
    assert found.difference == found.second - found.first
    assert found.test == ("unpaired bootstrap (200 resamples each): they scored different units "
                          "(0 shared of 30 and 12)")
    plain = compare(_units(["a", "b"], [1, 2], kind="pair"), _units(["c", "d", "e"], [1, 2, 3]), resampling,
                    unpaired_because="ground truths differ")["score"]
    assert plain.kind == "pair" and plain.test.endswith("each): ground truths differ")
    assert compare(second, first, resampling)["score"].kind == "group"


def test_an_unpaired_difference_leaves_out_undefined_replicates() -> None:
    """A class of one unit in a run of three: a third of the resamples hold none of it (NaN)."""
    spec = {"cls_acc": {"statistic": "ratio", "num": "x", "where": "c", "equals": "p"}}
    first = Units("query", "toy", np.array(["a", "b", "c"]), {"x": np.array([1.0, 0.0, 1.0]),
                                                             "c": np.array(["p", "q", "q"])}, spec)
    second = Units("query", "toy", np.array(["d", "e", "f"]), {"x": np.array([0.0, 1.0, 1.0]),
                                                              "c": np.array(["p", "p", "q"])}, spec)
    found = compare(first, second, Resampling(100, 1))["cls_acc"]
    a = replicates(first, Resampling(100, 1))["cls_acc"]
    b = replicates(second, Resampling(100, 2))["cls_acc"]
    nan = int(np.count_nonzero(np.isnan(b - a)))
    assert 0 < nan < 100 and found.dropped == nan and found.resamples == 100


def _brute_p(first: np.ndarray, second: np.ndarray, swaps: np.ndarray, extra: int) -> float:
    """The two-sided permutation p-value of mean(second) - mean(first), each row of ``swaps`` exchanging
    the two runs' values of the units it marks."""
    observed = second.mean() - first.mean()
    stats = []
    for row in swaps.astype(bool):
        a, b = np.where(row, second, first), np.where(row, first, second)
        stats.append(b.mean() - a.mean())
    t = np.asarray(stats)
    gamma = abs(observed) * 100 * np.finfo(np.float64).eps
    less, greater = np.count_nonzero(t <= observed + gamma), np.count_nonzero(t >= observed - gamma)
    return min(1.0, 2 * min((less + extra) / (len(t) + extra), (greater + extra) / (len(t) + extra)))


def test_exact_permutation_p_values_enumerate_every_swap() -> None:
    x1 = np.array([0.2, 0.5, 0.1, 0.9, 0.4, 0.3])
    x2 = np.array([0.6, 0.7, 0.2, 0.8, 0.9, 0.5])
    ids = [f"u{i}" for i in range(6)]
    p, test = permutation_p_values(_units(ids, x1.tolist()), _units(ids, x2.tolist()), MEAN, Resampling(100, 0))
    swaps = np.array(list(itertools.product((0, 1), repeat=6)))
    assert p["score"] == pytest.approx(_brute_p(x1, x2, swaps, 0), abs=1e-12)
    assert test == "exact paired permutation test (64 swaps)"
    grouped = [f"g{i // 2}" for i in range(6)]
    p, test = permutation_p_values(_units(ids, x1.tolist(), grouped), _units(ids, x2.tolist(), grouped), MEAN,
                                   Resampling(100, 0))
    assert test == "exact paired permutation test (8 swaps of 3 groups, each swapped whole)"
    whole = np.repeat(np.array(list(itertools.product((0, 1), repeat=3))), 2, axis=1)
    assert p["score"] == pytest.approx(_brute_p(x1, x2, whole, 0), abs=1e-12)


def test_random_permutation_p_values_add_one_to_each_count() -> None:
    rng = np.random.default_rng(9)
    x1, x2 = rng.random(20), rng.random(20) + 0.15
    ids = [f"u{i}" for i in range(20)]
    p, test = permutation_p_values(_units(ids, x1.tolist()), _units(ids, x2.tolist()), MEAN, Resampling(300, 5))
    assert test == "paired permutation test (300 random swaps, seed 5)"
    swaps = np.random.default_rng(5).integers(0, 2, (300, 20), dtype=np.int32)
    assert p["score"] == pytest.approx(_brute_p(x1, x2, swaps, 1), abs=1e-12)
    assert 0 < p["score"] < 1


@pytest.mark.parametrize(("first_only", "second_only", "both"), [(5, 0, 3), (0, 5, 1), (7, 2, 0), (3, 3, 4), (1, 0, 0)])
def test_mcnemar_counts_and_scipys_two_sided_binomial_p(first_only: int, second_only: int, both: int) -> None:
    first = [1] * first_only + [0] * second_only + [1] * both + [0, 0]
    second = [0] * first_only + [1] * second_only + [1] * both + [0, 0]
    a, b, p = mcnemar(np.array(first), np.array(second))
    assert (a, b) == (first_only, second_only)
    assert p == pytest.approx(binomtest(first_only, first_only + second_only, 0.5).pvalue, abs=1e-12)
    assert mcnemar(np.array([1, 0]), np.array([1, 0])) == (0, 0, 1.0)


def test_a_difference_as_a_dictionary() -> None:
    plain = Difference("uap", 0.5, 0.6, 0.1, 0.05, 0.15, 0.01, True, "t", draws=50, kind="query")
    assert plain.as_dict() == {"metric": "uap", "first": 0.5, "second": 0.6, "difference": 0.1, "ci_low": 0.05,
                               "ci_high": 0.15, "p_value": 0.01, "paired": True, "test": "t"}
    weak = Difference("acc", 0.5, 0.6, 0.1, 0.05, 0.15, 0.2, True, "m", (4, 1, 0.375), draws=3, dropped=2,
                      resamples=100, kind="group")
    assert weak.as_dict() == {"metric": "acc", "first": 0.5, "second": 0.6, "difference": 0.1, "ci_low": 0.05,
                              "ci_high": 0.15, "p_value": 0.2, "paired": True, "test": "m",
                              "interval_note": weak.note,
                              "mcnemar": {"first_only": 4, "second_only": 1, "p_value": 0.375}}
    assert weak.note.startswith("only 3 groups (under 20)") and "2 of 100 resamples left out" in weak.note
    assert math.isnan(Difference("m", 1, 1, 0, math.nan, math.nan, math.nan, False, "").p_value)


def test_a_class_mcnemar_says_which_units() -> None:
    spec = {"acc_p": {"statistic": "ratio", "num": "x", "where": "c", "equals": "p"}}
    ids = np.array([f"u{i}" for i in range(6)])
    cls = np.array(["p", "p", "p", "q", "q", "p"])
    first = Units("question", "toy", ids, {"x": np.array([1.0, 1, 0, 1, 0, 1]), "c": cls}, spec)
    second = Units("question", "toy", ids, {"x": np.array([0.0, 0, 1, 0, 1, 1]), "c": cls}, spec)
    found = compare(first, second, Resampling(50, 0))["acc_p"]
    assert found.test == "exact McNemar test on the units whose c is 'p': 2 right only in the first, 1 only in the second"
    plain = compare(Units("question", "toy", ids, {"x": first.values("x")}, {"acc": {"statistic": "ratio", "num": "x"}}),
                    Units("question", "toy", ids, {"x": second.values("x")}, {"acc": {"statistic": "ratio", "num": "x"}}),
                    Resampling(50, 0))["acc"]
    assert plain.test == "exact McNemar test on every unit: 3 right only in the first, 2 only in the second"
