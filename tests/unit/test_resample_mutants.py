"""`vsbench.stats.resample`'s edges, pinned (issue 56: the unit-file tests reach every function here
but never ask for a block size, an environment value that is not a number, or a p-value's edges).

Each test was seen failing with its mutant planted."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vsbench.stats.resample as resample
from vsbench.stats.resample import (
    Resampling,
    block_rows,
    count_blocks,
    expanded_confidence,
    expanded_p_value,
    percentile_interval,
)


@pytest.mark.parametrize(("n", "total", "width", "cells", "rows"), [
    (10, 1000, 0, 100, 10),     # BLOCK_CELLS // n
    (10, 1000, 25, 100, 4),     # the width is the widest: 100 // 25
    (10, 3, 0, 100, 3),         # never more rows than replicates
    (7, 1000, 0, 100, 14),      # 14 x 7 is even already
    (7, 1000, 0, 90, 12),       # 12 x 7 even: kept
    (7, 1000, 0, 80, 12),       # 11 x 7 is odd: one more row
    (7, 12, 0, 80, 12),         # 11 + 1 = 12 replicates: still within them
    (7, 11, 0, 80, 11),         # all 11 replicates in one block: odd is fine (rows == total)
    (7, 13, 0, 84, 12),         # 12 x 7 even
    (7, 12, 0, 77, 12),         # 11 rows odd, 12 <= 12: one more
    (3, 1000, 0, 1, 2),         # 0 rows at first: at least 1, then made even
    (3, 1, 0, 1, 1),            # one replicate in all
    (0, 5, 0, 100, 5),          # no units: the cells are not divided by 0
    (1, 1000, 0, 100, 100),     # one unit: 100 rows of it
])
def test_block_rows(n: int, total: int, width: int, cells: int, rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resample, "BLOCK_CELLS", cells)
    assert block_rows(n, total, width) == rows


def test_count_blocks_sizes_and_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(resample, "BLOCK_CELLS", 40)
    sizes = [block.shape for block in count_blocks(10, 9, 0)]
    assert sizes == [(4, 10), (4, 10), (1, 10)]
    assert [block.shape[0] for block in count_blocks(10, 9, 0, width=20)] == [2, 2, 2, 2, 1]
    assert [block.shape[0] for block in count_blocks(10, 5, 0, rows=3)] == [3, 2]
    with pytest.raises(ValueError, match="^no units to resample$"):
        next(count_blocks(0, 5, 0))
    assert np.array_equal(np.concatenate(list(count_blocks(1, 3, 0))), np.ones((3, 1)))  # one unit, drawn each time


def test_the_environment_is_read_strictly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(resample.RESAMPLES_ENV, raising=False)
    monkeypatch.delenv(resample.SEED_ENV, raising=False)
    assert Resampling.from_env() == Resampling(1000, 0)
    monkeypatch.setenv(resample.RESAMPLES_ENV, " 200 ")
    monkeypatch.setenv(resample.SEED_ENV, "7")
    assert Resampling.from_env() == Resampling(200, 7)
    assert Resampling.from_env(50, 3) == Resampling(50, 3)  # explicit values first
    monkeypatch.setenv(resample.RESAMPLES_ENV, "  ")
    assert Resampling.from_env().resamples == 1000  # blank: the default
    monkeypatch.setenv(resample.SEED_ENV, "x1")
    with pytest.raises(ValueError) as caught:
        Resampling.from_env()
    assert str(caught.value) == "VSBENCH_RESAMPLE_SEED='x1' is not a whole number (0 turns intervals off)"
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_params_say_how_the_intervals_were_made() -> None:
    assert Resampling(0, 5).params() == {"ci_method": "off"}
    assert Resampling(200, 5, 0.9).params() == {
        "ci_method": "expanded percentile bootstrap", "ci_resamples": "200", "ci_seed": "5", "ci_level": "0.9",
        "ci_proportions": "Clopper-Pearson"}
    assert Resampling(200, 5).method == "expanded percentile bootstrap, 200 resamples, seed 5"
    assert Resampling(200, 5, 0.9).percent == 90 and not Resampling(0, 5).enabled and Resampling(10, 5).enabled


@pytest.mark.parametrize("value", [-1, 1, 9, resample.MAX_RESAMPLES + 1])
def test_resamples_out_of_bounds_are_refused(value: int) -> None:
    with pytest.raises(ValueError, match="resamples"):
        Resampling(value, 0)
    Resampling(10, 0), Resampling(resample.MAX_RESAMPLES, 0)


def test_the_confidence_is_in_half_open_one_half_to_one() -> None:
    assert Resampling(10, 0, 0.5).percent == 50 and Resampling(10, 0, 0.999).percent == 100
    for confidence in (0.4999, 1.0, 1.5):
        with pytest.raises(ValueError) as caught:
            Resampling(10, 0, confidence)
        assert str(caught.value) == f"confidence must be in [0.5, 1), got {confidence}"


@pytest.mark.parametrize("draws", [2, 5, 30])
@pytest.mark.parametrize("tail", [0.001, 0.01, 0.0234, 0.1, 0.2])
def test_the_p_value_is_the_level_whose_expanded_interval_cuts_at_the_tail(draws: int, tail: float) -> None:
    """p is the alpha whose expanded interval's lower cut is ``tail``: expanded_confidence(1 - p)
    cuts (1 - level) / 2 = tail from each side (where p is under its cap of 1)."""
    p = expanded_p_value(tail, draws)
    assert 2 * tail <= p < 1
    assert (1 - expanded_confidence(1 - p, draws)) / 2 == pytest.approx(tail, rel=1e-9)


def test_the_p_values_edges() -> None:
    assert math.isnan(expanded_p_value(math.nan, 10)) and math.isnan(expanded_p_value(math.inf, 10))
    assert expanded_p_value(0.2, 1) == pytest.approx(0.4) and expanded_p_value(0.7, 1) == 1.0
    assert expanded_p_value(0.2, 0) == pytest.approx(0.4)
    assert expanded_p_value(0.0, 10) == 0.0 and expanded_p_value(-0.1, 10) == 0.0
    assert expanded_p_value(0.5, 2) == 1.0  # capped
    assert expanded_p_value(0.5, 1000) == pytest.approx(1.0)


def test_expanded_confidence_edges() -> None:
    assert expanded_confidence(0.95, 1) == 1.0 and expanded_confidence(0.95, 0) == 1.0
    assert 0.95 < expanded_confidence(0.95, 3) < expanded_confidence(0.95, 2) <= 1.0
    assert expanded_confidence(0.95, 10**6) == pytest.approx(0.95, abs=1e-5)


def test_percentile_interval_leaves_out_undefined_replicates() -> None:
    values = np.array([np.nan, 1.0, 2.0, 3.0, 4.0, np.nan])
    assert percentile_interval(values, 0.5) == (1.75, 3.25)
    low, high = percentile_interval([np.nan, np.nan])
    assert math.isnan(low) and math.isnan(high)
    assert percentile_interval(np.arange(101.0)) == pytest.approx((2.5, 97.5))
