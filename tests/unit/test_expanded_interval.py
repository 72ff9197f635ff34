"""The expanded percentile interval (issue 55; Hesterberg 2015): the level it takes, and the draws it
counts for each kind of metric.

The formula is checked by hand against scipy's t and normal quantiles; the draws by hand-counted
units and groups (a DISC set where only some queries have a copy, two of them copying one photo; an
ABID class); and the interval itself against numpy's quantile of the same replicates at that level.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm, t

from vsbench.abid.units import counting_units
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.stats.compare import compare, intervals, replicates
from vsbench.stats.proportions import draws_behind
from vsbench.stats.resample import Resampling, expanded_confidence
from vsbench.stats.units import Units


@pytest.mark.parametrize(("draws", "cut"), [(20, 0.0159), (50, 0.0212), (127, 0.0235), (1000, 0.0248)])
def test_the_level_is_hesterbergs(draws: int, cut: float) -> None:
    """z' = sqrt(n / (n - 1)) t_{n-1}(0.975); the percentile cut Phi(-z'), as resample.py's docstring
    quotes it (and always under the plain 0.025)."""
    z = math.sqrt(draws / (draws - 1)) * t.ppf(0.975, draws - 1)
    level = expanded_confidence(0.95, draws)
    assert level == pytest.approx(1 - 2 * norm.sf(z), abs=1e-14)
    assert (1 - level) / 2 == pytest.approx(cut, abs=5e-5)
    assert expanded_confidence(0.95, 1) == 1.0  # one draw: nothing to estimate, the whole range


def _disc() -> Units:
    """Six queries with two predictions each: q0 and q1 copy photo A (one group), q2 copies B, q3-q5
    have no copy (each its own group): 5 groups, 2 of them holding a copy."""
    pq = [f"q{i}" for i in range(6) for _ in range(2)]
    pr = ["A", "x0", "A", "x1", "B", "x2", "x3", "x4", "x5", "x6", "x7", "x8"]
    ps = [0.9, 0.2, 0.4, 0.6, 0.8, 0.3, 0.7, 0.1, 0.5, 0.2, 0.35, 0.05]
    return copy_detection_units(pq, pr, ps, ["q0", "q1", "q2"], ["A", "A", "B"],
                                queries=[f"q{i}" for i in range(6)])


def test_the_draws_are_the_groups_holding_what_the_metric_rests_on() -> None:
    units = _disc()
    assert units.cluster_index()[1] == 5
    # uAP and recall at P90 rest on the copies, accuracy at 1 on the queries with a ground-truth pair:
    # 3 such queries, in 2 groups
    assert {m: draws_behind(units, spec) for m, spec in units.metrics.items()} == {
        "uap": 2, "recall_at_p90": 2, "accuracy_at_1": 2}
    truth = np.array([0, 1, 1, 2, 2, 2, 2])
    abid = counting_units(np.zeros(7, dtype=np.int64), truth, [str(i) for i in range(7)])
    assert draws_behind(abid, abid.metrics["rmse"]) == 7
    assert draws_behind(abid, abid.metrics["rmse_class_2"]) == 4  # that class's questions


def _random_disc(seed: int, n: int = 40) -> Units:
    """``n`` queries with 4 predictions each, about 2 in 5 with a copy of their own photo (one group
    each), its score shifted up: a uAP with many distinct replicate values."""
    rng = np.random.default_rng(seed)
    has_copy = rng.random(n) < 0.4
    pq = [f"q{i}" for i in range(n) for _ in range(4)]
    pr = [f"r{i}" if c == 0 else f"x{i}_{c}" for i in range(n) for c in range(4)]
    ps = rng.normal(size=4 * n) + np.where((np.arange(4 * n) % 4 == 0) & np.repeat(has_copy, 4), 1.2, 0.0)
    gq = [f"q{i}" for i in np.flatnonzero(has_copy)]
    return copy_detection_units(pq, pr, ps.tolist(), gq, [f"r{q[1:]}" for q in gq], queries=[f"q{i}" for i in range(n)])


def test_the_interval_is_the_replicates_quantile_at_the_expanded_level() -> None:
    units = _random_disc(7)
    resampling = Resampling(400, 3)
    copies = int(np.count_nonzero(units.values("n_positives")))
    assert 5 < copies < len(units) and units.clusters is None
    found = intervals(units, resampling, ["uap"])["uap"]
    level = expanded_confidence(0.95, copies)
    values = replicates(units, resampling, ["uap"])["uap"]
    values = values[~np.isnan(values)]
    assert found.level == level
    assert (found.low, found.high) == tuple(np.quantile(values, [(1 - level) / 2, (1 + level) / 2]))
    # wider than the plain percentile interval of the same replicates, on both sides
    assert found.low < float(np.quantile(values, 0.025)) and found.high > float(np.quantile(values, 0.975))


def test_the_paired_difference_is_expanded_on_the_same_draws() -> None:
    units = _disc()
    other = copy_detection_units([f"q{i}" for i in range(6) for _ in range(2)],
                                 ["A", "x0", "A", "x1", "B", "x2", "x3", "x4", "x5", "x6", "x7", "x8"],
                                 [0.3, 0.2, 0.9, 0.6, 0.8, 0.85, 0.7, 0.1, 0.5, 0.2, 0.35, 0.05],
                                 ["q0", "q1", "q2"], ["A", "A", "B"], queries=[f"q{i}" for i in range(6)])
    difference = compare(units, other, Resampling(400, 3), ["uap"])["uap"]
    assert difference.paired and difference.draws == 2 and difference.level == expanded_confidence(0.95, 2)


def test_an_unpaired_difference_is_expanded_by_the_rougher_run() -> None:
    """Two sets of different queries (no pairing): the difference's interval takes the smaller run's
    draws (its copies), and its p-value is read on that scale."""
    small, large = _random_disc(7, 30), _random_disc(8, 60)
    large = type(large)(large.kind, large.benchmark, np.char.add("other", large.ids), large.columns, large.metrics,
                        large.clusters, large.variant)
    copies = [int(np.count_nonzero(u.values("n_positives"))) for u in (small, large)]
    assert copies[0] < copies[1]
    found = compare(small, large, Resampling(300, 2), ["uap"])["uap"]
    assert not found.paired and found.draws == copies[0] and found.level == expanded_confidence(0.95, copies[0])
