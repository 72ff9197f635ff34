"""The comparison tests by simulation (issue 55): their size under the null, their power against the
interval's, on one score scale and with one run's scores shifted, scaled or exponentiated, and on
units drawn in groups.

As the issue's own simulation: 400 sets of 60 DISC-like queries (one copy among 6 candidates each),
two runs per set compared by :func:`vsbench.stats.compare.compare` (1,000 resamples, seed = the set's
number). A query's difficulty is shared by both runs (what pairing removes); each run adds its own
noise. Counts are of whole sets, seeded: no timing, and every bound below is several sets away from
what is measured (the measured counts are in the comments), so a float rounding of one p-value
cannot flip a test.

Monte Carlo error: a rate near 0.05 over 400 sets has a standard error of sqrt(0.05 * 0.95 / 400) =
0.011, so a size is held to 0.05 + 3 standard errors = 0.083 (33 of 400 sets).

The interval and the ranking statistics' p-value are the expanded percentile bootstrap's
(:mod:`vsbench.stats.resample`; before it, the plain percentile's: uAP's size 0.07, 0.0775 over 20
groups, which this module measured). The other score scales are compared on the first
:data:`SCALED_SETS` sets only (common random numbers: the same sets, the same draws): their
p-values must equal the same scale's set by set, so their sizes and powers are the same scale's,
and the 100 sets (not 400) keep the module's time (issue 55: under 3 minutes for the two simulation
modules).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest

from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.stats.compare import compare
from vsbench.stats.resample import Resampling

pytestmark = pytest.mark.slow

SETS = 400
SCALED_SETS = 100  # the sets on which every other score scale is compared too (module docstring)
QUERIES = 60
CANDIDATES = 6
RESAMPLES = 1000
ALPHA = 0.05
STANDARD_ERROR = math.sqrt(ALPHA * (1 - ALPHA) / SETS)
SIZE_BOUND = ALPHA + 3 * STANDARD_ERROR  # 0.083: 33 of 400 sets
METRICS = ("uap", "recall_at_p90", "accuracy_at_1")
RANKING = ("uap", "recall_at_p90")  # one pooled ranking: the paired bootstrap's own p

SCALES: dict[str, Callable[[list[float]], list[float]]] = {
    "same scale": lambda s: s,
    "scaled": lambda s: [3.5 * x for x in s],
    "shifted": lambda s: [x - 40.0 for x in s],
    "exponentiated": lambda s: [math.exp(x) for x in s],
}


def _runs(rng: np.random.Generator, effect: float, group_size: int, group_spread: float) -> list[tuple]:
    """Two runs' predictions and ground truth on one set of queries. Queries ``group_size`` at a time
    copy one reference (``group_size`` edits of one photo); each run does better or worse on a whole
    group (``group_spread``: the run-by-photo effect that makes a group's outcomes correlate);
    the second run scores copies ``effect`` higher."""
    difficulty = rng.normal(0, 0.7, QUERIES)
    runs = []
    for run in range(2):
        per_group = rng.normal(0, group_spread, QUERIES // group_size)
        pq, pr, ps, gq, gr = [], [], [], [], []
        for q in range(QUERIES):
            copy = f"r{q // group_size}"
            gq.append(f"q{q}")
            gr.append(copy)
            for c in range(CANDIDATES):
                pq.append(f"q{q}")
                pr.append(copy if c == 0 else f"n{q}_{c}")
                mean = 0.6 + difficulty[q] + per_group[q // group_size] + effect * run if c == 0 else 0.0
                ps.append(float(rng.normal(mean, 1.0)))
        runs.append((pq, pr, ps, gq, gr))
    return runs


@functools.cache
def _simulated(effect: float, group_size: int = 1, group_spread: float = 0.0, scales: tuple[str, ...] = tuple(SCALES),
               drop_groups: bool = False) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    """(scale, metric) -> (each set's p-value, whether each set's interval excluded 0): on every set
    for the same scale, on the first :data:`SCALED_SETS` for the others."""
    rng = np.random.default_rng(12345)
    found: dict[tuple[str, str], tuple[list[float], list[bool]]] = {}
    for number in range(SETS):
        first_run, (pq, pr, ps, gq, gr) = _runs(rng, effect, group_size, group_spread)
        first = copy_detection_units(*first_run)
        for scale in scales if number < SCALED_SETS else scales[:1]:
            second = copy_detection_units(pq, pr, SCALES[scale](ps), gq, gr)
            a, b = (replace(first, clusters=None), replace(second, clusters=None)) if drop_groups else (first, second)
            for metric, difference in compare(a, b, Resampling(RESAMPLES, number)).items():
                p, excluded = found.setdefault((scale, metric), ([], []))
                p.append(difference.p_value)
                excluded.append(difference.distinguishable)
    return {key: (np.asarray(p), np.asarray(e)) for key, (p, e) in found.items()}


def _rejected(p: np.ndarray) -> float:
    return float(np.mean(p < ALPHA))


@pytest.mark.parametrize("metric", METRICS)
def test_size_under_the_null_on_every_scale(metric: str) -> None:
    """Two equally good runs: each test calls them different in at most 0.083 of the sets, the same
    sets on every scale (measured: uap 0.0575, recall_at_p90 0.035, accuracy_at_1 0.035; with the
    plain percentile bootstrap uap was 0.07). The interval beside it: uap 0.065, recall_at_p90 0.035,
    accuracy_at_1 0.05 (0.0575 plain)."""
    found = _simulated(0.0)
    same_p, same_interval = found[("same scale", metric)]
    assert same_p.size == SETS and _rejected(same_p) <= SIZE_BOUND, (metric, _rejected(same_p))
    assert same_interval.mean() <= SIZE_BOUND, (metric, same_interval.mean())
    for scale in SCALES:
        p, interval = found[(scale, metric)]
        np.testing.assert_allclose(p, same_p[:p.size], rtol=0, atol=1e-12, err_msg=f"{metric}, {scale}")
        np.testing.assert_array_equal(interval, same_interval[:p.size], err_msg=f"{metric}, {scale}")


@pytest.mark.parametrize("metric", METRICS)
def test_power_is_the_intervals_on_every_scale(metric: str) -> None:
    """The second run really better (copies +0.5): each test finds it about as often as the interval
    does, and on every scale the same sets, with the same p-values (the ranking statistics' p keeps
    each run's own ranking, so no monotone change of one run's scores moves it; the swap test the
    issue measured found 28% on one scale and 0.25-1.8% on the others).

    Measured (expanded interval; plain percentile before it in brackets): uap test 0.52 (0.54),
    interval 0.5325 (0.55); recall_at_p90 0.1125 and 0.1125 (0.1175); accuracy_at_1's exact
    permutation test 0.2975, its interval 0.3425 (0.36). That last gap is the interval's, not the
    test's: under the null the same interval excludes 0 in 0.05 of the sets (0.0575 plain) and the
    permutation test rejects 0.035 (docs/intervals.md), so accuracy_at_1 is allowed 0.08 below the
    interval."""
    found = _simulated(0.5)
    same_p, same_interval = found[("same scale", metric)]
    allowance = 0.02 if metric in RANKING else 0.08
    assert _rejected(same_p) >= same_interval.mean() - allowance, (metric, _rejected(same_p), same_interval.mean())
    assert _rejected(same_p) >= 0.1  # not the swap test's 0.25-1.8%
    for scale in SCALES:
        p, interval = found[(scale, metric)]
        assert p.size == (SETS if scale == "same scale" else SCALED_SETS)
        np.testing.assert_allclose(p, same_p[:p.size], rtol=0, atol=1e-12, err_msg=f"{metric}, {scale}")
        np.testing.assert_array_equal(interval, same_interval[:p.size], err_msg=f"{metric}, {scale}")


@pytest.mark.parametrize("metric", ["uap", "accuracy_at_1"])
def test_grouped_units_keep_the_size_that_units_drawn_alone_lose(metric: str) -> None:
    """20 photos with 3 copies each, each run better or worse on a whole photo, no real difference:
    drawn and swapped by photo, the tests reject far less often than when each query is taken as an
    independent draw (measured, of 400 sets: uap 0.065 against 0.1225; accuracy_at_1's
    permutation test 0.035 against 0.065). The exact permutation of whole groups keeps the size, and
    so now does the expanded bootstrap over 20 groups (0.065; the plain percentile bootstrap was
    0.0775, 2.5 standard errors over 0.05)."""
    grouped = _simulated(0.0, 3, 0.8, ("same scale",))[("same scale", metric)][0]
    alone = _simulated(0.0, 3, 0.8, ("same scale",), drop_groups=True)[("same scale", metric)][0]
    assert _rejected(grouped) <= _rejected(alone) - 0.025, (metric, _rejected(grouped), _rejected(alone))
    assert _rejected(grouped) <= SIZE_BOUND
