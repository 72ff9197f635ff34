"""The statistics that recompute a metric from reweighted units, a whole block of replicates at once.

A statistic is ``fn(units, weights, **params) -> values``: ``weights`` is an integer array
``(replicates, units)`` (how often each unit was drawn; 0/1 masks for a permutation), ``values`` the
metric of each replicate, ``(replicates,)`` float64. The contract that makes an interval mean what it
says: with the weights of a draw, the statistic equals the benchmark's own scorer run on the drawn
units written out one copy per draw (a query drawn twice is two queries), up to float rounding; and
with all weights 1 it is the scorer's number. Each statistic's tests check exactly that against the
original scorer.

Statistics are found by name in the ``STATISTICS`` dict of the modules in :data:`MODULES`; a name
holding ``:`` is a ``module:function`` reference, for a benchmark plugin's own (docs/plugins.md).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vsbench.stats.units import Units, UnitsError

Statistic = Callable[..., np.ndarray]

# Modules whose STATISTICS dicts are looked in, in order (imported on first use).
MODULES = ("vsbench.stats.statistics", "vsbench.stats.ranking", "vsbench.stats.curves")


def ratio(units: Units, weights: np.ndarray, *, num: str, den: str | None = None, transform: str = "",
          where: str | None = None, equals: Any = None) -> np.ndarray:
    """``sum(w * num) / sum(w * den)`` (``den`` left out: 1 per unit, a plain mean); ``transform``
    ``sqrt`` takes its square root (RMSE from squared errors); ``where``/``equals`` keep only the units
    whose column ``where`` equals ``equals`` (a class's accuracy, a Copydays block's mAP), computed on
    those rows alone, so that all the groups of a column together cost one pass. Accuracy, accuracy at
    1 (correct pairs over pairs per query), mAP (per-query AP), HR@k and MRR@k are all such ratios. A
    replicate whose denominator is 0 is NaN (the metric is undefined there)."""
    if transform not in ("", "sqrt"):
        raise UnitsError(f"ratio: unknown transform {transform!r} (expected '' or 'sqrt')")
    w = np.asarray(weights)
    top_values = units.values(num)
    bottom_values = units.values(den) if den else None
    if where is not None:
        rows = _rows_where(units, where, equals)
        w, top_values = w[:, rows], top_values[rows]
        bottom_values = None if bottom_values is None else bottom_values[rows]
    w = w.astype(np.float64)
    top = w @ top_values
    bottom = w @ bottom_values if bottom_values is not None else w.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1), np.nan)
    return np.sqrt(value) if transform == "sqrt" else value


def _rows_where(units: Units, column: str, equals: Any) -> np.ndarray:
    """The rows whose ``column`` equals ``equals``, found once per unit file (cached)."""
    key = f"rows:{column}={equals!r}"
    if key not in units._cache:
        values = units.values(column, dtype=object)
        units._cache[key] = np.flatnonzero(np.fromiter((v == equals for v in values), dtype=bool, count=len(values)))
    return units._cache[key]


STATISTICS: dict[str, Statistic] = {"ratio": ratio}


def find(name: str) -> Statistic:
    """The statistic called ``name`` (see the module docstring); an unknown name is a UnitsError."""
    if ":" in name:
        module, _, attribute = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError) as exc:
            raise UnitsError(f"statistic {name!r} cannot be imported ({exc})") from None
    known: list[str] = []
    for module_name in MODULES:
        try:
            table = importlib.import_module(module_name).STATISTICS
        except ImportError:
            continue
        if name in table:
            return table[name]
        known += list(table)
    raise UnitsError(f"unknown statistic {name!r}; known: {', '.join(sorted(known))}")


def evaluate(units: Units, weights: np.ndarray, metrics: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, np.ndarray]:
    """Every metric of ``units`` (or those named) under each row of ``weights``."""
    specs = units.metrics if metrics is None else metrics
    out: dict[str, np.ndarray] = {}
    for metric, spec in specs.items():
        params = {k: v for k, v in spec.items() if k != "statistic"}
        out[metric] = np.asarray(find(str(spec["statistic"]))(units, weights, **params), dtype=np.float64)
    return out
