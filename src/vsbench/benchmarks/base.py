"""What a benchmark is to vsbench: image sets to embed, and a scorer over their features.

An adapter reads a benchmark's native files (``load(root, **options)``) and exposes:

* ``image_sets()``: named lists of (id, image path) to embed, e.g. ``query``, ``reference``,
  ``train``; paths come from the dataset, so adapters build them with ``storage.safe_join``;
* ``evaluate(features, settings)``: the benchmark's own metrics from one FeatureSet per image
  set (and, for retrieval benchmarks, the search vsbench.index provides), as flat result records
  (one per codec / variant), with MLflow-safe keys, plus optional figures, and, per record, its
  per-unit outcomes (:class:`vsbench.stats.units.Units`: the queries, pairs or questions the
  record's metrics are computed over, and the statistic that recomputes each metric from them).
  The runner writes those as Parquet, adds each metric's 95% interval to its record
  (``<metric>_ci95_low``, ``<metric>_ci95_high``) and logs them with the evaluation; a benchmark
  that gives no units gets numbers without intervals (docs/intervals.md). Optionally, a
  ``failure_sheet`` that draws a record's worst units as a picture (docs/failures.md).

Benchmarks that rank with FAISS (DISC, Copydays, ABID as a gallery) split ``evaluate`` in two, so
that index, search and score can be pipeline steps of their own (:mod:`vsbench.retrieval.engine`):

* ``search_requests(features, settings)``: the searches it needs, as
  :class:`vsbench.index.plan.SearchRequest` values (queries, references, training rows, codecs,
  metric, k, score normalizations);
* ``score(features, settings, results)``: its metrics from the answers, however they were searched
  (in one process, or persisted indexes searched shard by shard and merged: the same floats).

Benchmarks that score files without any model (``vsbench score ...``) use the same scorers in
``vsbench.metrics``.

A benchmark plugin (docs/plugins.md) imports what an adapter deals in from here,
:data:`__all__`: wherever those types live inside vsbench, this module keeps naming them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from vsbench.io.features import FeatureSet, ImageSet
from vsbench.reporting.sheets import Row, Sheet, Tile, image_in_root
from vsbench.stats.units import ListColumn, Units

__all__ = ["Benchmark", "EvalResult", "EvalSettings", "FeatureSet", "ImageSet", "ListColumn", "Row", "Sheet", "Tile",
           "Units", "image_in_root", "option_path", "unit_rows"]


@dataclass(frozen=True)
class EvalSettings:
    """Search settings shared by retrieval benchmarks (copy detection, Copydays, VSD, ABID)."""

    codecs: str = "Flat"  # FAISS index_factory strings separated by ';'
    k: int = 10  # neighbours per query
    global_cap: int | None = None  # keep at most this many predictions in total (ISC: 500,000)
    score_norm: str = "1.00[0,2]"  # beta[first,last]; "" disables
    use_gpu: bool | None = None  # None: faiss-gpu when present
    search_params: str = ""  # FAISS search-time settings for every codec, e.g. "nprobe=16" for IVF codecs


@dataclass
class EvalResult:
    records: list[dict[str, Any]]  # one flat record per (codec, variant): numbers and short strings
    csv_name: str = ""  # e.g. "disc_metrics.csv": the original benchmark's table, written by the runner
    csv_columns: tuple[str, ...] = ()
    csv_rows: list[dict[str, Any]] | None = None  # rows under the original column names; None: derived from records
    figures: dict[str, Any] = field(default_factory=dict)  # artifact name -> matplotlib Figure
    # Per record (same order as ``records``), its per-unit outcomes, or None; empty: none at all.
    units: list[Units | None] = field(default_factory=list)
    # Set by the runner: per record, the unit file it wrote (vsbench.stats.records.add_intervals) or None.
    unit_files: list[dict[str, Any] | None] = field(default_factory=list)
    # Optional: ``failure_sheet(record index, rows)``, the record's failure sheet of at most ``rows`` rows
    # (a :class:`~vsbench.reporting.sheets.Sheet`, drawn from its units and the images shown), or None
    # for none. The runner writes it beside the units and logs it with the evaluation; a benchmark
    # that leaves this None has no sheet, and nothing says so (docs/failures.md).
    failure_sheet: Callable[[int, int], Sheet | None] | None = None


class Benchmark(Protocol):
    name: str

    def image_sets(self) -> dict[str, ImageSet]: ...

    def evaluate(self, features: dict[str, FeatureSet], settings: EvalSettings) -> EvalResult: ...


def option_path(root: Path, value: str | Path) -> Path:
    """A path given as a loader option. Options are the operator's, not the dataset's: absolute
    paths are allowed, relative ones are under ``root`` (paths read from dataset files go through
    ``storage.safe_join`` instead)."""
    path = Path(value)
    return path if path.is_absolute() else root / path


def unit_rows(features: np.ndarray, what: str) -> np.ndarray:
    """float64 unit rows, so that pair cosines are exact and tie exactly when features are equal."""
    values = features.astype(np.float64)
    norms = np.linalg.norm(values, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(f"{what} features: row {int(np.flatnonzero(norms.ravel() == 0)[0])} is all zeros, "
                         "which has no cosine")
    return values / norms


class SearchedBenchmark:
    """A benchmark that ranks with FAISS (DISC, Copydays, ABID as a gallery): it declares its
    ``search_requests`` and its ``score``; ``evaluate`` is those searches answered in this process,
    where the engine answers the same requests from persisted, sharded indexes instead."""

    def evaluate(self, features: dict[str, FeatureSet], settings: EvalSettings) -> EvalResult:
        from vsbench.index.plan import search_all_inline  # faiss: imported only when scoring

        requests = self.search_requests(features, settings)  # type: ignore[attr-defined]
        return self.score(features, settings, search_all_inline(requests, settings.use_gpu))  # type: ignore[attr-defined]
