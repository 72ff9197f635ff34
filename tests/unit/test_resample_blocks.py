"""The replicate counts are scipy's draws: ``count_blocks`` drawn row by row in int32 (issue 54's
memory) must give exactly what one ``default_rng(seed).integers(0, n, (resamples, n))`` gives,
and leave the generator where that call leaves it."""

from __future__ import annotations

import numpy as np
import pytest

from vsbench.stats.resample import count_blocks


def _reference(n: int, resamples: int, seed: int) -> np.ndarray:
    draws = np.random.default_rng(seed).integers(0, n, (resamples, n))
    return np.stack([np.bincount(row, minlength=n) for row in draws])


@pytest.mark.parametrize(("n", "resamples", "rows"), [(7, 13, 3), (8, 10, 4), (1001, 11, 2), (5, 9, None)])
def test_count_blocks_are_scipys_draws(n: int, resamples: int, rows: int | None) -> None:
    blocks = list(count_blocks(n, resamples, 3, rows=rows))
    assert all(block.dtype == np.int32 for block in blocks)
    assert np.array_equal(np.concatenate(blocks), _reference(n, resamples, 3))


def test_count_blocks_leave_the_stream_where_one_draw_does() -> None:
    # odd n and odd rows: numpy's 32-bit half-word buffer must carry across rows and blocks
    rng, expected = np.random.default_rng(11), np.random.default_rng(11)
    list(count_blocks(9, 7, rng, rows=3))
    expected.integers(0, 9, (7, 9))
    assert np.array_equal(rng.integers(0, 1000, 5), expected.integers(0, 1000, 5))
