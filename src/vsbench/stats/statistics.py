"""The statistics that recompute a metric from reweighted units, a whole block of replicates at once.

A statistic is ``fn(units, weights, **params) -> values``: ``weights`` is an integer array
``(replicates, units)`` (how often each unit was drawn; 0/1 masks for a permutation), ``values`` the
metric of each replicate, ``(replicates,)`` float64. The contract that makes an interval mean what it
says: with the weights of a draw, the statistic equals the benchmark's own scorer run on the drawn
units written out one copy per draw (a query drawn twice is two queries), up to float rounding; and
with all weights 1 it is the scorer's number. Each statistic's tests check exactly that against the
original scorer.

Statistics are found by name in a fixed registry (issue 54): vsbench's own, in the ``STATISTICS``
dicts of :data:`BUILTIN_MODULES`, and a plugin's, each registered through the
``vsbench.statistics`` entry point of the distribution that installed it (``name = "pkg.mod:fn"``,
docs/plugins.md). A unit file is data written by whoever could write the run, so the name it holds
only *selects* among those: it is never imported, evaluated or looked up as a path. A name that is
not registered (``this:x``, ``builtins:print``, a typo) is a :class:`UnitsError`, and nothing runs.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

import numpy as np

from vsbench.stats.units import Units, UnitsError

Statistic = Callable[..., np.ndarray]

# vsbench's own modules whose STATISTICS dicts make the built-in registry: fixed names, in code.
BUILTIN_MODULES = ("vsbench.stats.statistics", "vsbench.stats.ranking", "vsbench.stats.curves")
ENTRY_POINT_GROUP = "vsbench.statistics"
# What a statistic's name may look like: a plain identifier, dots allowed (``colour_match.median``).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,99}")


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
    value = per_count(top, bottom)
    return np.sqrt(value) if transform == "sqrt" else value


def per_count(total: np.ndarray, count: np.ndarray) -> np.ndarray:
    """``total / count`` per replicate, NaN where the count is not positive (nothing drawn: a replicate
    without a ground-truth pair, a query, a class's unit has no value). One IEEE division, the bits of
    ``total / count``, and no 0/0 computed to be thrown away."""
    return np.divide(total, count, out=np.full(np.shape(total), np.nan), where=count > 0)


def _rows_where(units: Units, column: str, equals: Any) -> np.ndarray:
    """The rows whose ``column`` equals ``equals``, found once per unit file (cached)."""
    key = f"rows:{column}={equals!r}"
    if key not in units._cache:
        values = units.values(column, dtype=object)
        units._cache[key] = np.flatnonzero(np.fromiter((v == equals for v in values), dtype=bool, count=len(values)))
    return units._cache[key]


STATISTICS: dict[str, Statistic] = {"ratio": ratio}


@functools.cache
def builtin() -> dict[str, Statistic]:
    """vsbench's own statistics, name -> function (imports only vsbench's modules, by fixed name)."""
    table: dict[str, Statistic] = {}
    for module in BUILTIN_MODULES:
        table.update(importlib.import_module(module).STATISTICS)
    return table


def plugin_names() -> dict[str, str]:
    """name -> ``module:function`` of every statistic an installed plugin registers (nothing loaded)."""
    return {entry.name: entry.value for entry in entry_points(group=ENTRY_POINT_GROUP)}


def known() -> list[str]:
    """Every registered statistic's name, built-ins first."""
    names = list(builtin())
    return names + sorted(n for n in plugin_names() if n not in names)


def check_name(name: Any) -> str:
    """``name`` when it is a registered statistic's; else a one-line :class:`UnitsError`. Nothing is
    imported on the way: the name is compared with the registry's names as text."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise UnitsError(f"statistic {str(name)[:60]!r} is not a statistic's name (vsbench runs only registered "
                         f"statistics, never a module path from a file); known: {', '.join(known())}")
    if name not in builtin() and name not in plugin_names():
        raise UnitsError(f"unknown statistic {name!r}; known: {', '.join(known())} (a plugin registers its own "
                         f"through the {ENTRY_POINT_GROUP!r} entry point)")
    return name


def find(name: Any) -> Statistic:
    """The registered statistic called ``name`` (see the module docstring); anything else is a
    UnitsError. A built-in name always means the built-in: a plugin cannot replace one."""
    name = check_name(name)
    table = builtin()
    if name in table:
        return table[name]
    matches = list(entry_points(group=ENTRY_POINT_GROUP, name=name))
    entry = matches[0]
    distribution = entry.dist.name if entry.dist else entry.module.partition(".")[0]
    try:
        function = entry.load()
    except Exception as exc:  # whatever the installed plugin raised: one line naming it
        raise UnitsError(f"statistic {name!r} ({entry.value}, from {distribution}) cannot be loaded: "
                         f"{type(exc).__name__}: {exc}; fix or uninstall {distribution}") from None
    if not callable(function):
        raise UnitsError(f"statistic {name!r} ({entry.value}, from {distribution}) is not a function")
    return function


def check_units(units: Units) -> None:
    """Every statistic ``units`` names is registered (a UnitsError naming the first that is not)."""
    for metric, spec in units.metrics.items():
        try:
            check_name(spec.get("statistic"))
        except UnitsError as exc:
            raise UnitsError(f"metric {metric!r}: {exc}") from None


def evaluate(units: Units, weights: np.ndarray, metrics: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, np.ndarray]:
    """Every metric of ``units`` (or those named) under each row of ``weights``."""
    specs = units.metrics if metrics is None else metrics
    out: dict[str, np.ndarray] = {}
    for metric, spec in specs.items():
        params = {k: v for k, v in spec.items() if k != "statistic"}
        statistic = find(spec.get("statistic"))
        try:
            out[metric] = np.asarray(statistic(units, weights, **params), dtype=np.float64)
        except (TypeError, KeyError, IndexError) as exc:  # params a unit file got wrong, not a crash
            raise UnitsError(f"metric {metric!r}: statistic {spec.get('statistic')!r} cannot use the params "
                             f"{sorted(params)} on these units ({type(exc).__name__}: {str(exc)[:120]})") from None
    return out
