"""`vsbench.stats.compare`'s unpaired comparison, permutation p-values, McNemar's counts and the words
each says, against independent computations (issue 56: `make mutate` found `_unpaired`,
`permutation_p_values`, `unpaired_reason` and `Difference.as_dict` reached by no fast test or checked
only for their sign). Each test was seen failing with its mutant planted."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest
from scipy.stats import binomtest

from vsbench.stats.compare import (
    Difference,
    align,
    choose_test,
    compare,
    grouped,
    interval_fields,
    intervals,
    mcnemar,
    paired_clusters,
    permutation_p_values,
    replicates,
    same_units,
    unpaired_reason,
)
from vsbench.stats.proportions import BOOTSTRAP, CLOPPER_PEARSON
from vsbench.stats.resample import Resampling, count_blocks, expanded_confidence, expanded_p_value, percentile_interval
from vsbench.stats.statistics import evaluate
from vsbench.stats.units import Units, UnitsError

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
    assert found.paired is False and found.metric == "score" and found.draws == draws and found.level == level
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
    return _two_sided(np.asarray(stats), observed, extra)


def _two_sided(t: np.ndarray, observed: float, extra: int) -> float:
    """The two-sided p-value of ``observed`` among the statistics ``t`` of the swaps: the smaller tail
    at or beyond it (within 100 eps of it), ``extra`` added to each count when the swaps were drawn."""
    gamma = abs(observed) * 100 * np.finfo(np.float64).eps
    less, greater = np.count_nonzero(t <= observed + gamma), np.count_nonzero(t >= observed - gamma)
    return min(1.0, 2 * min((less + extra) / (len(t) + extra), (greater + extra) / (len(t) + extra)))


def test_exact_permutation_p_values_enumerate_every_swap() -> None:
    x1 = np.array([0.2, 0.5, 0.1, 0.9, 0.4, 0.3])
    x2 = np.array([0.6, 0.3, 0.2, 0.8, 0.9, 0.1])  # differences of both signs: a p-value inside (0, 1)
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


def _brute_ratio_p(n1: np.ndarray, d1: np.ndarray, n2: np.ndarray, d2: np.ndarray, swaps: np.ndarray) -> float:
    """The exact two-sided permutation p-value of sum(num)/sum(den) (second minus first), by brute force."""
    def stat(num: np.ndarray, den: np.ndarray) -> float:
        return float(num.sum() / den.sum())

    observed = stat(n2, d2) - stat(n1, d1)
    t = np.array([stat(np.where(r, n1, n2), np.where(r, d1, d2)) - stat(np.where(r, n2, n1), np.where(r, d2, d1))
                  for r in swaps.astype(bool)])
    return _two_sided(t, observed, 0)


def test_a_ratio_with_a_denominator_is_permuted_unit_by_unit() -> None:
    """Not linear in the swaps, unlike a mean: a swap counted twice (weights 0/2) moves its p-value."""
    spec = {"r": {"statistic": "ratio", "num": "x", "den": "n"}}
    ids = np.array([f"u{i}" for i in range(7)])
    n1, d1 = np.array([4.0, 0, 1, 1, 1, 4, 5]), np.array([7.0, 1, 2, 3, 3, 7, 7])
    n2, d2 = np.array([1.0, 0, 4, 4, 0, 0, 2]), np.array([3.0, 4, 7, 6, 2, 3, 5])
    first = Units("query", "toy", ids, {"x": n1, "n": d1}, spec)
    second = Units("query", "toy", ids, {"x": n2, "n": d2}, spec)
    p, test = permutation_p_values(first, second, spec, Resampling(100, 0))
    swaps = np.array(list(itertools.product((0, 1), repeat=7)))
    assert p["r"] == pytest.approx(_brute_ratio_p(n1, d1, n2, d2, swaps), abs=1e-12) and 0 < p["r"] < 1
    assert test == "exact paired permutation test (128 swaps)"


def test_twelve_groups_are_still_enumerated_and_thirteen_are_drawn_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    x1, x2 = np.linspace(0, 1, 12), np.linspace(0.2, 0.9, 12)[::-1]
    ids = [f"u{i}" for i in range(12)]
    assert permutation_p_values(_units(ids, x1.tolist()), _units(ids, x2.tolist()), MEAN,
                                Resampling(100, 0))[1] == "exact paired permutation test (4096 swaps)"
    rng = np.random.default_rng(2)
    y1, y2 = rng.random(13), rng.random(13) + 0.1
    ids = [f"u{i}" for i in range(13)]
    # 1 << 20 cells a block over 2 x 13 pooled units: 20164 rows; 100000 swaps are five blocks
    p, test = permutation_p_values(_units(ids, y1.tolist()), _units(ids, y2.tolist()), MEAN, Resampling(100_000, 4))
    assert test == "paired permutation test (100000 random swaps, seed 4)"
    swaps = np.random.default_rng(4).integers(0, 2, (100_000, 13), dtype=np.int32)
    diff = y2 - y1
    t = ((1 - 2 * swaps) * diff).sum(axis=1) / 13
    assert p["score"] == pytest.approx(_two_sided(t, diff.sum() / 13, 1), abs=1e-12)
    back, _ = permutation_p_values(_units(ids, y2.tolist()), _units(ids, y1.tolist()), MEAN, Resampling(100_000, 4))
    assert back["score"] == pytest.approx(p["score"], abs=1e-12)  # the other tail: every block counted there too


def test_runs_with_numeric_and_text_ids_are_paired_by_the_ids_as_text() -> None:
    """A run's ids as numbers (in memory) and the other's as text (read back from its file): the same
    units, paired unit for unit, whatever order each holds them in."""
    x1 = np.array([0.1, 0.9, 0.4, 0.7, 0.2])
    numeric = Units("query", "toy", np.array([10, 9, 100, 7, 8]), {"x": x1}, MEAN)
    order = [2, 0, 4, 1, 3]
    x2 = np.array([0.5, 0.3, 0.8, 0.6, 0.0])  # second's values, for units 10, 9, 100, 7, 8
    text = Units("query", "toy", np.array(["10", "9", "100", "7", "8"])[order], {"x": x2[order]}, MEAN)
    assert same_units(numeric, text) and same_units(text, numeric) and unpaired_reason(numeric, text) == ""
    assert align(numeric, text).values("x").tolist() == x2.tolist()
    assert align(text, numeric).values("x").tolist() == x1[order].tolist()
    swaps = np.array(list(itertools.product((0, 1), repeat=5)))
    for first, second, a, b in ((numeric, text, x1, x2), (text, numeric, x2, x1)):
        found = compare(first, second, Resampling(100, 0))["score"]
        assert found.paired and found.difference == pytest.approx(b.mean() - a.mean())
        assert found.p_value == pytest.approx(_brute_p(a, b, swaps, 0), abs=1e-12)
    grouped_a = replace(numeric, clusters=np.array([1, 1, 2, 2, 3]))
    grouped_b = replace(text, clusters=np.array(["1", "1", "2", "2", "3"])[order])
    assert paired_clusters(grouped_a, align(grouped_a, grouped_b)).tolist() == ["1", "1", "2", "2", "3"]


def test_only_the_metrics_asked_are_computed() -> None:
    """A metric this vsbench cannot compute (a plugin's, not installed here) does not stop the
    comparison of the others, paired or not, nor a single run's intervals."""
    specs = {**MEAN, "plugin_metric": {"statistic": "not_installed_here"}}
    a = Units("query", "toy", np.array(["a", "b", "c"]), {"x": np.array([0.1, 0.5, 0.9])}, specs)
    b = Units("query", "toy", np.array(["a", "b", "c"]), {"x": np.array([0.3, 0.4, 1.0])}, specs)
    c = Units("query", "toy", np.array(["d", "e"]), {"x": np.array([0.3, 0.4])}, specs)
    assert set(compare(a, b, Resampling(50, 0), ["score"])) == {"score"}
    assert set(compare(a, c, Resampling(50, 0), ["score"])) == {"score"}
    found = intervals(a, Resampling(50, 0), ["score"])
    assert set(found) == {"score"} and found["score"].metric == "score" and found["score"].method == BOOTSTRAP
    with pytest.raises(UnitsError) as caught:
        intervals(a, Resampling(50, 0), ["score", "nope", "zz"])
    assert str(caught.value) == "toy units carry no statistic for nope, zz"


def test_metrics_computed_differently_are_not_compared() -> None:
    ids = np.array(["a", "b"])
    a = Units("query", "toy", ids, {"x": np.array([1.0, 0.0]), "y": np.array([1.0, 2.0])},
              {"s": {"statistic": "ratio", "num": "x"}, "t": {"statistic": "ratio", "num": "y"}})
    b = Units("query", "toy", ids, {"x": np.array([1.0, 1.0]), "y": np.array([1.0, 2.0])},
              {"s": {"statistic": "ratio", "num": "x"}, "t": {"statistic": "ratio", "num": "x"}})
    assert set(compare(a, b, Resampling(50, 0))) == {"s"}
    c = Units("query", "toy", ids, {"x": np.array([1.0, 1.0])}, {"s": {"statistic": "ratio", "num": "x", "den": "x"}})
    with pytest.raises(UnitsError) as caught:
        compare(a, c, Resampling(50, 0))
    assert str(caught.value) == "the two evaluations share no metric computed the same way"


def test_intervals_off_in_a_comparison_take_the_default_resamples() -> None:
    rng = np.random.default_rng(1)
    a = _units([f"q{i}" for i in range(30)], rng.random(30).tolist())
    b = _units([f"r{i}" for i in range(30)], rng.random(30).tolist())
    assert compare(a, b, Resampling(0, 0))["score"].test.startswith("unpaired bootstrap (1000 resamples each)")


def test_interval_objects_say_what_they_are() -> None:
    units = Units("question", "toy", np.array(["a", "b", "c"]), {"x": np.array([1.0, 0.0, 1.0]),
                                                                 "y": np.array([0.5, 0.1, 0.9])},
                  {"acc": {"statistic": "ratio", "num": "x"}, "m": {"statistic": "ratio", "num": "y"}})
    off = intervals(units, Resampling(0, 0))
    assert list(off) == ["acc", "m"] and all(v.metric == k and math.isnan(v.low) and math.isnan(v.high)
                                             for k, v in off.items())
    on = intervals(units, Resampling(50, 0))
    assert on["acc"].metric == "acc" and on["acc"].method == CLOPPER_PEARSON and on["acc"].units == 3
    assert on["acc"].kind == "question" and on["m"].method == BOOTSTRAP and on["m"].metric == "m"
    assert interval_fields(on) == {"acc_ci95_low": on["acc"].low, "acc_ci95_high": on["acc"].high,
                                   "m_ci95_low": on["m"].low, "m_ci95_high": on["m"].high}
    half = {"h": replace(on["m"], high=math.nan), "l": replace(on["m"], low=math.nan)}
    assert interval_fields(half) == {}


def test_which_test_and_which_word() -> None:
    ratio = {"statistic": "ratio", "num": "x"}
    ones = _units(["a", "b"], [1, 0])
    fractions = _units(["a", "b"], [0.5, 1])
    own_groups = _units(["a", "b"], [1, 0], ["g1", "g2"])
    shared = _units(["a", "b"], [1, 0], ["g", "g"])
    assert choose_test(ratio) == "mcnemar" and choose_test(ratio, ones) == "mcnemar"
    assert choose_test(ratio, ones, ones) == "mcnemar" and choose_test(ratio, ones, own_groups) == "mcnemar"
    assert choose_test(ratio, ones, fractions) == "permutation"
    assert choose_test(ratio, ones, shared) == "permutation" and choose_test(ratio, shared, ones) == "permutation"
    assert choose_test({**ratio, "den": "x"}) == "permutation" and choose_test({"statistic": "micro_ap"}) == "bootstrap"
    assert not grouped(own_groups) and grouped(shared) and not grouped(ones)


def test_a_paired_comparison_says_how_it_drew() -> None:
    from tests.unit.test_units_copy_detection import _case, _own_references
    from vsbench.benchmarks.disc.units import copy_detection_units

    first = copy_detection_units(*_own_references(_case(11, every_query_has_a_copy=True)))  # no two share a copy
    found = compare(first, first, Resampling(40, 2), ["uap"])["uap"]
    assert found.metric == "uap" and found.kind == "query" and found.paired
    assert found.test == "paired bootstrap of the difference (40 resamples, seed 2; each run ranked by its own scores)"
    grouped_disc = copy_detection_units(*_case(20, every_query_has_a_copy=True))
    n_groups = grouped_disc.cluster_index()[1]
    assert 1 < n_groups < len(grouped_disc)
    found = compare(grouped_disc, grouped_disc, Resampling(40, 2), ["uap"])["uap"]
    assert found.kind == "group" and found.test == (
        f"paired bootstrap of the difference (40 resamples, seed 2, drawing {n_groups} groups whole; "
        "each run ranked by its own scores)")
    ids = np.array([f"u{i}" for i in range(6)])
    groups = np.array(["g0", "g0", "g1", "g1", "g2", "g2"])
    a = Units("query", "toy", ids, {"x": np.array([1.0, 0, 1, 1, 0, 1])}, {"acc": {"statistic": "ratio", "num": "x"}})
    b = Units("query", "toy", ids, {"x": np.array([0.0, 0, 1, 0, 1, 1])}, {"acc": {"statistic": "ratio", "num": "x"}},
              groups)
    found = compare(a, b, Resampling(40, 2))["acc"]  # one run groups its units: the pair draws those groups
    assert found.kind == "group" and found.draws == 3
    assert found.test == ("exact paired permutation test (8 swaps of 3 groups, each swapped whole); not McNemar's "
                          "exact test, which counts the units of one group as independent draws")
    w = np.concatenate(list(count_blocks(3, 40, 2)))[:, [0, 0, 1, 1, 2, 2]]
    d = evaluate(b, w)["acc"] - evaluate(a, w)["acc"]
    assert (found.low, found.high) == percentile_interval(d, expanded_confidence(0.95, 3))


def test_an_unpaired_p_value_counts_replicates_at_exactly_0_in_both_tails() -> None:
    """Right/wrong answers of a few units: many replicate differences are exactly 0."""
    first = _units(["a", "b", "c", "d"], [1, 0, 1, 0])
    second = _units(["e", "f", "g", "h"], [0, 1, 1, 0])
    found = compare(first, second, Resampling(200, 0))["score"]
    d = replicates(second, Resampling(200, 1))["score"] - replicates(first, Resampling(200, 0))["score"]
    assert np.count_nonzero(d == 0) > 20
    assert found.p_value == expanded_p_value(min(float(np.mean(d <= 0)), float(np.mean(d >= 0))), 4)


def test_why_runs_with_numeric_and_text_ids_are_not_paired_counts_the_shared_as_text() -> None:
    numeric = Units("query", "toy", np.array([1, 2, 3]), {"x": np.zeros(3)}, MEAN)
    text = Units("query", "toy", np.array(["2", "3", "4"]), {"x": np.zeros(3)}, MEAN)
    assert unpaired_reason(numeric, text) == "they scored different units (2 shared of 3 and 3)"
    assert unpaired_reason(text, numeric) == "they scored different units (2 shared of 3 and 3)"


def test_a_paired_interval_is_drawn_at_the_confidence_asked() -> None:
    """The same replicates at 80% and at 95%: the 80% interval is the narrower one, at the expanded
    80% level (a paired interval once ignored the level and was drawn at the default 95%: found by
    the 2026-12-07 clean-clone `make mutate`)."""
    rng = np.random.default_rng(4)
    ids = [f"q{i}" for i in range(60)]
    first, second = _units(ids, rng.random(60).tolist()), _units(ids, (rng.random(60) + 0.1).tolist())
    wide = compare(first, second, Resampling(400, 2, 0.95))["score"]
    narrow = compare(first, second, Resampling(400, 2, 0.80))["score"]
    assert wide.paired and narrow.paired and narrow.level == expanded_confidence(0.80, 60) < wide.level
    assert wide.low < narrow.low < narrow.high < wide.high


def test_each_swaps_statistic_is_the_swapped_runs_difference() -> None:
    """The statistic of every swap, not only the p-value they add up to: with the second run's weights
    `2 - s` for `1 - s` the statistics moved (-0.05 to -0.017) and the p-values of the tests above did
    not (found by the 2026-12-07 clean-clone `make mutate`)."""
    from vsbench.stats import compare as module

    x1 = np.array([0.2, 0.5, 0.1, 0.9, 0.4, 0.3])
    x2 = np.array([0.6, 0.3, 0.2, 0.8, 0.9, 0.1])
    first, second = _units([f"u{i}" for i in range(6)], x1.tolist()), _units([f"u{i}" for i in range(6)], x2.tolist())
    cluster, _ = first.cluster_index()
    swaps = np.array(list(itertools.product((0, 1), repeat=6)), dtype=np.int32)
    found = module._swapped(first.concat(second), swaps, cluster, MEAN)["score"]
    expected = [np.where(r, x1, x2).mean() - np.where(r, x2, x1).mean() for r in swaps.astype(bool)]
    np.testing.assert_allclose(found, expected, rtol=0, atol=1e-12)


def test_a_grouped_ratio_without_a_denominator_is_counted_in_groups() -> None:
    """A class accuracy (a ratio with no `den`) of grouped units is drawn in groups: its word is `group`;
    only a ratio with a denominator counts units (found by the 2026-12-07 clean-clone `make mutate`)."""
    spec = {"cls_acc": {"statistic": "ratio", "num": "x", "where": "c", "equals": "p"}}
    ids, groups = np.array([f"u{i}" for i in range(8)]), np.array([f"g{i // 2}" for i in range(8)])
    classes = np.array(["p", "q"] * 4)
    first = Units("query", "toy", ids, {"x": np.array([1.0, 0, 1, 0, 0, 1, 1, 0]), "c": classes}, spec, groups)
    second = Units("query", "toy", ids, {"x": np.array([0.0, 0, 1, 1, 1, 1, 0, 0]), "c": classes}, spec, groups)
    assert compare(first, second, Resampling(50, 0))["cls_acc"].kind == "group"
    for units in (first, second):
        assert intervals(units, Resampling(50, 0))["cls_acc"].kind == "group"
    ungrouped = Units("query", "toy", ids, {"x": first.values("x"), "c": classes}, spec)
    assert compare(ungrouped, ungrouped, Resampling(50, 0))["cls_acc"].kind == "query"
    assert intervals(ungrouped, Resampling(50, 0))["cls_acc"].kind == "query"


def test_two_runs_sharing_no_metric_are_refused_in_those_words() -> None:
    """Not "toy units have no column 'x'" from evaluating the first run's metrics on the second (the
    shared-spec filter was skipped when the runs shared no metric name: found by the 2026-12-07
    clean-clone `make mutate`, whose `&` -> `|` mutant gave the better message)."""
    ids = np.array(["a", "b", "c"])
    a = Units("query", "toy", ids, {"x": np.array([1.0, 0, 1])}, {"s1": {"statistic": "ratio", "num": "x"}})
    b = Units("query", "toy", ids, {"y": np.array([1.0, 0, 1])}, {"s2": {"statistic": "ratio", "num": "y"}})
    other = Units("query", "toy", ids, {"x": np.array([1.0, 0, 1]), "y": np.array([1.0, 1, 1])},
                  {"s1": {"statistic": "ratio", "num": "y"}})
    for second in (b, other):
        with pytest.raises(UnitsError, match="^the two evaluations share no metric computed the same way$"):
            compare(a, second, Resampling(20, 0))
    assert set(compare(a, a, Resampling(20, 0))) == {"s1"}


def test_only_a_metric_mcnemar_would_judge_carries_the_not_mcnemar_note() -> None:
    """A ratio with a denominator of right-or-wrong values is tested by permutation, and McNemar's test
    was never the one for it: no note saying why it is not McNemar's (found by the 2026-12-07
    clean-clone `make mutate`: the note's `and` -> `or` survived)."""
    spec = {"r": {"statistic": "ratio", "num": "x", "den": "d"}}
    ids = np.array([f"u{i}" for i in range(10)])
    a = Units("query", "toy", ids, {"x": np.array([1.0, 0, 1, 0, 1, 0, 1, 1, 0, 0]), "d": np.ones(10)}, spec)
    b = Units("query", "toy", ids, {"x": np.array([1.0, 1, 1, 0, 1, 1, 1, 1, 0, 1]), "d": np.ones(10)}, spec)
    assert choose_test(spec["r"]) == "permutation"
    assert compare(a, b, Resampling(50, 0))["r"].test == "exact paired permutation test (1024 swaps)"
