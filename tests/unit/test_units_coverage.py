"""Do the intervals and the paired test mean what they say? Simulated patch pairs with a known truth.

Each dataset: 40 positive and 40 negative pairs; a pair has a difficulty ``z ~ N(0, 1)`` shared by the
two runs (what makes them paired), and each run adds its own descriptor noise ``N(0, 0.5^2)``:
positive distance ``z + noise``, negative ``1 + z + noise``. The balanced ROC AUC estimates
``P(positive distance < negative distance) = Phi(1 / sqrt(2 (1 + 0.5^2)))`` (Mann-Whitney, unbiased).
The second run's positives are ``delta`` closer, which raises its true AUC to
``Phi((1 + delta) / sqrt(2 (1 + 0.5^2)))``.

Everything is seeded (datasets and resamples), so the test is deterministic; the tolerances say what
a correct method would pass with high probability over the seeds, so that a change that breaks the
method (wrong draws, no pairing, a biased statistic) fails while a harmless one (another summation
order) does not. 200 datasets, 200 resamples each: about 3 s.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import norm

from vsbench.benchmarks.patch_pairs.units import patch_pair_units
from vsbench.stats.compare import compare, intervals
from vsbench.stats.resample import Resampling

DATASETS = 200
RESAMPLES = 200
PAIRS = 40
MARGIN = 1.0
NOISE = 0.5
DELTA = 0.45


def _auc(margin: float) -> float:
    return float(norm.cdf(margin / np.sqrt(2 * (1 + NOISE**2))))


def _runs(k: int, delta: float):
    rng = np.random.default_rng([45, k])
    z_pos, z_neg = rng.normal(size=PAIRS), rng.normal(size=PAIRS)
    first = patch_pair_units({"easy": z_pos + NOISE * rng.normal(size=PAIRS)},
                             {"diffseq": MARGIN + z_neg + NOISE * rng.normal(size=PAIRS)})["easy_diffseq"]
    second = patch_pair_units({"easy": z_pos + NOISE * rng.normal(size=PAIRS) - delta},
                              {"diffseq": MARGIN + z_neg + NOISE * rng.normal(size=PAIRS)})["easy_diffseq"]
    return first, second


def test_coverage_power_and_false_alarms_of_the_auc() -> None:
    """* Coverage of the 95% percentile interval over 200 datasets in [0.90, 0.99]: with the true rate
      0.95 the count is Binomial(200, 0.95), SD 1.5 points, so the band is over 3 SD wide on each
      side, and leaves room for the percentile bootstrap's known slight under-coverage at n = 80.
    * Power of the paired test (p < 0.05) against the planted shift within 0.15 of the power a
      two-sided z-test would have with the *true* sampling SD of the AUC difference (the SD of the 200
      observed differences, which does not come from the bootstrap): about 0.67 here; 0.15 covers the
      binomial noise of a rate over 200 (SD 0.035), the 200-swap permutation p-value's own noise and
      the normal approximation.
    * Without a shift (the two runs exchangeable) the false alarm rate is at most 0.10 (nominal 0.05,
      SD 0.015 over 200 datasets).
    """
    truth_first, truth_second = _auc(MARGIN), _auc(MARGIN + DELTA)
    covered = detected = false_alarms = 0
    differences = []
    for k in range(DATASETS):
        first, second = _runs(k, DELTA)
        resampling = Resampling(RESAMPLES, k)
        interval = intervals(first, resampling, ["roc_auc"])["roc_auc"]
        covered += interval.low <= truth_first <= interval.high
        shift = compare(first, second, resampling, ["roc_auc"])["roc_auc"]
        assert shift.paired
        detected += shift.p_value < 0.05
        differences.append(shift.difference)
        null_first, null_second = _runs(k + DATASETS, 0.0)
        false_alarms += compare(null_first, null_second, resampling, ["roc_auc"])["roc_auc"].p_value < 0.05
    coverage, power, false_alarm_rate = covered / DATASETS, detected / DATASETS, false_alarms / DATASETS
    z = (truth_second - truth_first) / np.std(differences, ddof=1)
    expected_power = norm.cdf(z - 1.96) + norm.cdf(-z - 1.96)
    assert abs(np.mean(differences) - (truth_second - truth_first)) < 0.01  # the estimate is unbiased
    assert 0.90 <= coverage <= 0.99, coverage
    assert abs(power - expected_power) <= 0.15, (power, expected_power)
    assert 0.4 <= expected_power <= 0.9  # the shift is one a test can miss: the rate says something
    assert false_alarm_rate <= 0.10, false_alarm_rate


def test_identical_runs_differ_by_zero_with_p_one() -> None:
    first, _ = _runs(0, DELTA)
    same = compare(first, first, Resampling(RESAMPLES, 0), ["roc_auc", "pr_ap"])
    for difference in same.values():
        assert difference.difference == 0.0 and difference.p_value == 1.0
        assert difference.low == difference.high == 0.0
