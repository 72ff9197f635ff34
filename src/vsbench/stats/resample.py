"""Seeded resampling, drawn exactly as ``scipy.stats.bootstrap`` draws it, in bounded blocks.

A bootstrap replicate is a multiset of the benchmark's units (queries, questions, or clusters of
pairs) drawn with replacement. vsbench never materializes the resampled data: a replicate is a row
of *counts* (how often each unit was drawn), and every statistic in :mod:`vsbench.stats.statistics`
evaluates a whole block of such rows at once with weighted sums over data sorted once. The counts
come from ``numpy.random.default_rng(seed).integers(0, n, (resamples, n))``, the call scipy makes
for ``bootstrap(..., rng=default_rng(seed), batch=None)``, so that an interval here equals scipy's
percentile interval over the same draws (``test_interval_equals_scipy_bootstrap`` in
tests/unit/test_units_copy_detection.py and test_units_copydays.py). Blocks hold an even number
of draws: numpy's bounded 64-bit draw of a range under 2**32 uses each 64-bit word twice, and an odd
block would throw half a word away and leave the stream.

**The expanded percentile interval** (issue 55; Hesterberg 2015, "What teachers should know about
the bootstrap", section "Expanded percentile interval"). The plain percentile interval is too
narrow at small n: it is the interval of a known-variance normal with the variance divided by n,
where a t interval would divide by n - 1 and widen by Student's quantile. So vsbench takes the
percentile interval at the level whose normal quantile is ``sqrt(n / (n - 1)) * t_{n-1}`` of the
nominal one (:func:`expanded_confidence`), n the independent draws the statistic rests on (units or
groups; for a pooled ranking, the groups that hold a positive). At 20 draws a 95% interval takes the
0.0159 and 0.9841 quantiles, at 50 the 0.0212 / 0.9788, at 1,000 the 0.0248 / 0.9752: the same
replicates, a slightly wider cut, the point estimate untouched. Measured (docs/intervals.md): the
coverage of micro-AP's interval at 50 queries went from 0.9295 to 0.947 (0.905 to 0.9515 when 1
query in 5 has a copy), and the paired uAP test's size under the null from 0.07 to 0.0575 (0.0775 to
0.065 over 20 groups). It is still scipy's percentile interval, at the expanded ``confidence_level``,
over the same draws (tested), and the paired bootstrap's p-value is read on the same scale
(:func:`expanded_p_value`), so it is under 0.05 about exactly when the expanded interval excludes 0.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

RESAMPLES_ENV = "VSBENCH_RESAMPLES"
SEED_ENV = "VSBENCH_RESAMPLE_SEED"
DEFAULT_RESAMPLES = 1000
# The most replicates one interval or test draws (issue 54): 100,000 keep a 95% bound's Monte Carlo
# error far under any difference worth reporting, and bound the time and memory an environment
# variable or a run's ``ci_resamples`` param can ask for (1e8 on 20 queries took 4 min and 5 GB).
MAX_RESAMPLES = 100_000
DEFAULT_SEED = 0
CONFIDENCE = 0.95
BLOCK_CELLS = 1 << 21  # counts held at once: block rows x units (int64 draws: 16 MiB)
EXPANDED_PERCENTILE = "expanded percentile bootstrap"


@dataclass(frozen=True)
class Resampling:
    """How intervals are drawn: ``resamples`` replicates (0: no intervals), a seed, the confidence.

    ``method`` is what the tables and MLflow params say the interval is."""

    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED
    confidence: float = CONFIDENCE

    def __post_init__(self) -> None:
        if self.resamples < 0 or (0 < self.resamples < 10):
            raise ValueError(f"resamples must be 0 (no intervals) or at least 10, got {self.resamples}")
        if self.resamples > MAX_RESAMPLES:
            raise ValueError(f"resamples {self.resamples:,} is over the cap of {MAX_RESAMPLES:,} "
                             f"({RESAMPLES_ENV}, --resamples); ask for at most {MAX_RESAMPLES:,}")
        if not 0.5 <= self.confidence < 1:
            raise ValueError(f"confidence must be in [0.5, 1), got {self.confidence}")

    @property
    def enabled(self) -> bool:
        return self.resamples > 0

    @property
    def percent(self) -> int:
        return round(self.confidence * 100)

    @property
    def method(self) -> str:
        return f"{EXPANDED_PERCENTILE}, {self.resamples} resamples, seed {self.seed}"

    def params(self) -> dict[str, str]:
        """What an evaluation run's params say of its intervals."""
        if not self.enabled:
            return {"ci_method": "off"}
        return {"ci_method": EXPANDED_PERCENTILE, "ci_resamples": str(self.resamples), "ci_seed": str(self.seed),
                "ci_level": f"{self.confidence:g}",
                # issue 55: a proportion of independent units (an accuracy) gets the exact interval instead
                "ci_proportions": "Clopper-Pearson"}

    @classmethod
    def from_env(cls, resamples: int | None = None, seed: int | None = None) -> Resampling:
        """Explicit values first, then ``VSBENCH_RESAMPLES`` / ``VSBENCH_RESAMPLE_SEED``, then the defaults."""
        def read(name: str, default: int) -> int:
            text = os.environ.get(name, "").strip()
            if not text:
                return default
            try:
                return int(text)
            except ValueError:
                raise ValueError(f"{name}={text!r} is not a whole number (0 turns intervals off)") from None
        return cls(resamples=read(RESAMPLES_ENV, DEFAULT_RESAMPLES) if resamples is None else resamples,
                   seed=read(SEED_ENV, DEFAULT_SEED) if seed is None else seed)


def block_rows(n: int, total: int, width: int = 0) -> int:
    """Rows per block: about :data:`BLOCK_CELLS` cells of the widest array a block makes (the draws, or
    ``width``: the units the clusters' counts expand to), and an even number of draws per block."""
    rows = max(1, min(total, BLOCK_CELLS // max(n, width, 1)))
    if (rows * n) % 2 and rows < total:  # rows < total: one more is still within the replicates
        rows += 1
    return rows


def count_blocks(n: int, resamples: int, seed: int | np.random.Generator, *,
                 rows: int | None = None, width: int = 0) -> Iterator[np.ndarray]:
    """Blocks of replicate counts: int32 arrays ``(rows, n)``, each row summing to ``n``, drawn as
    ``default_rng(seed).integers(0, n, (resamples, n))`` draws them (row by row, the same numbers).
    ``width``: how many units a row becomes (clusters expanded to their units), so that few clusters
    of many units still make small blocks."""
    if n <= 0:
        raise ValueError("no units to resample")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    step = rows or block_rows(n, resamples, width)
    done = 0
    while done < resamples:
        size = min(step, resamples - done)
        yield _drawn_counts(rng, n, size)
        done += size


def _drawn_counts(rng: np.random.Generator, n: int, rows: int) -> np.ndarray:
    """Each row's ``np.bincount`` of ``rng.integers(0, n, (rows, n))``, as int32, without its int64 temporaries (issue 54: at 1M
    units a block's int64 draws, flat indices and bincount held ~54 MiB over the scoring's peak).
    The same numbers come out of the same generator calls: an int32 draw of a range under 2**31 goes
    through numpy's bounded 32-bit path, as the int64 draw of a range under 2**32 does, and the
    32-bit half-word buffer lives in the generator's state, so drawing row by row continues the
    stream exactly as one ``(rows, n)`` draw does (test_count_blocks_are_scipys_draws)."""
    out = np.empty((rows, n), dtype=np.int32)
    dtype = np.int32 if n < 2**31 else np.int64
    for row in range(rows):
        out[row] = np.bincount(rng.integers(0, n, n, dtype=dtype), minlength=n)
    return out


def percentile_interval(replicates: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The percentile interval of a statistic's replicates at ``confidence`` (linear interpolation, as
    scipy and numpy quantiles default to); vsbench passes :func:`expanded_confidence`'s level. Replicates where the statistic is undefined (NaN: a resample without any
    positive) are left out; none left gives (nan, nan)."""
    values = np.asarray(replicates, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return float("nan"), float("nan")
    alpha = (1 - confidence) / 2
    low, high = np.quantile(values, [alpha, 1 - alpha])
    return float(low), float(high)


def expanded_confidence(confidence: float, draws: int) -> float:
    """The level at which the percentile interval is taken so that it is Hesterberg's expanded
    percentile interval at ``confidence`` over ``draws`` independent draws (module docstring):
    ``1 - 2 * Phi(-sqrt(n / (n - 1)) * t_{n-1}(1 - alpha / 2))``. Under 2 draws there is no spread to
    estimate: the whole range of the replicates (level 1), which the interval's edge note calls rough."""
    if draws < 2:
        return 1.0
    from scipy.stats import norm, t

    z = math.sqrt(draws / (draws - 1)) * float(t.ppf(1 - (1 - confidence) / 2, draws - 1))
    return float(1 - 2 * norm.sf(z))


def expanded_p_value(tail: float, draws: int) -> float:
    """A two-sided p-value from the smaller tail share ``tail`` of a bootstrap's replicates at or beyond
    0, read on the expanded interval's scale: the ``alpha`` whose expanded interval
    (:func:`expanded_confidence` at ``1 - alpha``) has ``tail`` as its lower cut, so that p < alpha
    about exactly when that interval excludes 0 (the plain percentile reading is ``2 * tail``, which
    the expansion makes at least this large). Capped at 1."""
    if not math.isfinite(tail):
        return math.nan
    if draws < 2:
        return float(min(1.0, 2 * tail))
    from scipy.stats import norm, t

    if tail <= 0:
        return 0.0
    z = float(norm.isf(tail)) / math.sqrt(draws / (draws - 1))
    return float(min(1.0, 2 * t.sf(z, draws - 1)))
