"""Tie ranges: the lowest and highest value a metric takes over every order of tied scores.

The originals break ties one fixed way (isc2021: negatives first, the worst case; SSCD's Copydays:
numpy's unstable argsort; VSD: ``torch.topk``'s order). vsbench reports the original's value, and
next to it the range that other tie orders would give, so that a reader sees when a number rests on
a tie-break rather than on the scores. Records carry ``<metric>_worst`` and ``<metric>_best`` only
for the metrics whose range is not a single point.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class TieRange:
    """The worst and best value of one metric over the orders of tied scores (worst <= best)."""

    worst: float
    best: float

    @property
    def is_point(self) -> bool:
        return self.worst == self.best


def tie_fields(ranges: Mapping[str, TieRange]) -> dict[str, float]:
    """``{"uap_worst": ..., "uap_best": ...}`` for the metrics whose tie range is not a point."""
    out: dict[str, float] = {}
    for name, span in ranges.items():
        if not span.is_point:
            out[f"{name}_worst"] = span.worst
            out[f"{name}_best"] = span.best
    return out
