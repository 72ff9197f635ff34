"""pairs_per_row: several fresh pairs per training row per epoch, upstream's sampling at 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from vsbench.abid.data import SiamesePairs, image_path
from vsbench.abid.pairs import Pair


class RecordingSampler:
    """Three rows; records which row each draw was for and hands out the generator's first draw."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, float]] = []

    def __len__(self) -> int:
        return 3

    def sample(self, index: int, rng: np.random.Generator) -> Pair:
        self.calls.append((index, float(rng.random())))
        return Pair(index, (index + 1) % 3, index % 2)


def _images(root: Path) -> Path:
    for idx in range(3):
        path = image_path(root, idx)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (8, 8), (idx * 80, 0, 0)).save(path)
    return root


def test_each_row_gets_pairs_per_row_fresh_draws(tmp_path: Path) -> None:
    sampler = RecordingSampler()
    dataset = SiamesePairs(_images(tmp_path), sampler, 8, seed=4, pairs_per_row=3)
    assert len(dataset) == 9
    for item in range(len(dataset)):
        first, second, label = dataset[item]
        assert first.shape == second.shape == (3, 8, 8)
    rows = [row for row, _ in sampler.calls]
    assert rows == [0, 1, 2] * 3
    draws = [draw for _, draw in sampler.calls]
    assert len(set(draws)) == 9  # every repeat of a row is its own draw


def test_one_pair_per_row_is_upstreams_sampling(tmp_path: Path) -> None:
    """At 1 (the full profile) item k is row k drawn from (seed, epoch, k), as before the option."""
    sampler = RecordingSampler()
    dataset = SiamesePairs(_images(tmp_path), sampler, 8, seed=4)
    dataset.epoch = 2
    for item in range(len(dataset)):
        dataset[item]
    expected = [(k, float(np.random.default_rng([4, 2, k]).random())) for k in range(3)]
    assert sampler.calls == expected
