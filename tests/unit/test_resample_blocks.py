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


@pytest.mark.parametrize("run", [1, 3, 1 << 16])
def test_cluster_numbers_are_numpy_uniques(monkeypatch: pytest.MonkeyPatch, run: int) -> None:
    """What is resampled is each cluster's place among the sorted labels (``np.unique``'s inverse):
    ``sorted_codes`` must number them the same, across its runs of the sorted order."""
    import vsbench.stats.units as units_module

    monkeypatch.setattr(units_module, "_RUN", run)
    rng = np.random.default_rng(5)
    pool = np.array(["", "a", "A", "ab", "b", "unit:Q000001", "source:R1", "source:R10", "\u00e9", "z\u00e9"])
    for n in (0, 1, 2, 7, 40, 301):
        labels = pool[rng.integers(0, pool.size, n)]
        index, distinct = units_module.sorted_codes(labels)
        expected, inverse = np.unique(labels, return_inverse=True)
        assert np.array_equal(index, inverse.ravel()) and distinct == expected.size
    clustered = units_module.Units("query", "copy-detection", np.array(["q0", "q1", "q2"]), {}, {},
                                   np.array(["source:b", "unit:q1", "source:b"], dtype=object))
    assert [a.tolist() if hasattr(a, "tolist") else a for a in clustered.cluster_index()] == [[0, 1, 0], 2]
