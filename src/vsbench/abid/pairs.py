"""Training pairs for the siamese verification baseline.

Upstream (``verification_siamese/data_utils.py``) draws the label from Bernoulli(p); a positive
pairs the entry's image with a random image of a random object's list; a negative pairs it with
a random training image **without checking** that the two share no object, so some "negative"
pairs are really positive. :class:`SiamesePairSampler` redraws the negative until the two bins
share no asin (the fix documented in docs/abid.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Pair:
    first: int  # 0-based image index
    second: int
    label: int  # 1: the bins share an object, 0: they share none


class SiamesePairSampler:
    """Sample pairs from ``obj_verification_train.json`` rows ``[idx, [[asin, [idxs]], ...]]``.

    ``asins_by_index`` maps every training image index to the asins its bin holds (from the
    metadata); it is what the negative check needs, since a row lists only repeated objects.
    Negative partners are drawn from all of those training images (REFERENCE: "a random train
    image"), not only from the rows, which may all share an object with a given bin. ``pool``
    narrows them (bins held out of training are in ``asins_by_index`` but never partners).
    """

    def __init__(
        self,
        train_rows: Sequence[Sequence[Any]],
        asins_by_index: dict[int, frozenset[str]],
        pos_prob: float = 0.5,
        max_redraws: int = 100,
        pool: Sequence[int] | None = None,
    ) -> None:
        if not train_rows:
            raise ValueError("no training rows: obj_verification_train.json is empty")
        self.rows = train_rows
        self.asins_by_index = asins_by_index
        self.pos_prob = pos_prob
        self.max_redraws = max_redraws
        self.pool = sorted(asins_by_index) if pool is None else list(pool)

    def __len__(self) -> int:
        return len(self.rows)

    def sample(self, index: int, rng: np.random.Generator) -> Pair:
        idx, objects = self.rows[index][0], self.rows[index][1]
        if rng.random() < self.pos_prob:
            _, targets = objects[int(rng.integers(len(objects)))]
            return Pair(idx, int(targets[int(rng.integers(len(targets)))]), 1)
        return Pair(idx, self._negative_partner(idx, rng), 0)

    def _negative_partner(self, idx: int, rng: np.random.Generator) -> int:
        mine = self.asins_by_index.get(idx, frozenset())
        for _ in range(self.max_redraws):
            other = self.pool[int(rng.integers(len(self.pool)))]
            if other != idx and not (mine & self.asins_by_index[other]):
                return other
        disjoint = [other for other in self.pool if other != idx and not (mine & self.asins_by_index[other])]
        if not disjoint:
            raise ValueError(f"image {idx}: every training image shares an asin with it; no negative pair exists")
        return disjoint[int(rng.integers(len(disjoint)))]
