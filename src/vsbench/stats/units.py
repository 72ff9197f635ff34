"""Per-unit outcomes of one evaluation: the rows a benchmark averages or ranks over, kept as Parquet.

A benchmark's headline number is a function of its units: DISC's uAP of its queries' predictions,
ABID's accuracy of its questions, a patch-pair AP of its pairs. :class:`Units` keeps, one row per
unit, just what that function needs (each query's scores and labels, each question's answer and
truth), and names, per metric of the record, the *statistic* that recomputes the metric from any
reweighting of the rows (:mod:`vsbench.stats.statistics`). That is what a bootstrap interval and a
paired comparison of two runs need, and all they need: the rows, not the images or the features.

Columns: ``unit`` (the unit's id, text, unique), optionally ``cluster`` (the unit's cluster, text:
the resampled entity when units are correlated, e.g. a patch pair's sequence), then the statistic's
own columns (numbers, booleans, or lists of them). The file's schema metadata holds
``vsbench.units``: a JSON object with ``kind`` (``query``, ``question``, ``pair``, ``seed``),
``benchmark``, ``variant``, ``metrics`` (metric -> statistic spec) and ``version``.

A unit file is written atomically and named in the evaluation's record with its SHA-256; whoever
reads it back (``vsbench compare``, the nightly check) verifies that digest first, and a file whose
bytes differ is refused naming it, never used.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

METADATA_KEY = b"vsbench.units"
VERSION = 1
UNIT = "unit"
CLUSTER = "cluster"
KINDS = ("query", "question", "pair", "seed")


@dataclass(frozen=True)
class ListColumn:
    """A variable-length list per unit, kept flat: unit ``i`` owns ``values[offsets[i]:offsets[i + 1]]``
    (a million queries' predictions are two arrays, not a million)."""

    values: np.ndarray
    offsets: np.ndarray  # int64, len = units + 1, offsets[0] = 0, non-decreasing

    @classmethod
    def from_lists(cls, lists: Any, dtype: Any = np.float64) -> ListColumn:
        arrays = [np.asarray(v, dtype=dtype).ravel() for v in lists]
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
        return cls(values.astype(dtype, copy=False), offsets)

    @classmethod
    def from_owner(cls, values: np.ndarray, owner: np.ndarray, units: int) -> ListColumn:
        """Values grouped by their unit row ``owner`` (any order; kept stable within a unit)."""
        order = np.argsort(owner, kind="stable")
        counts = np.bincount(owner, minlength=units)
        return cls(np.asarray(values)[order], np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i]:self.offsets[i + 1]]

    def owner(self) -> np.ndarray:
        return np.repeat(np.arange(len(self), dtype=np.int64), np.diff(self.offsets))

    def take(self, rows: np.ndarray) -> ListColumn:
        lengths = np.diff(self.offsets)[rows]
        starts = self.offsets[:-1][rows]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return ListColumn(self.values[index], offsets)


class UnitsError(ValueError):
    """A unit file that cannot be used: wrong digest, missing metadata, unknown statistic."""

    one_line = True


@dataclass(frozen=True)
class Units:
    """One evaluation's per-unit outcomes and, per metric, the statistic that recomputes it.

    ``columns`` maps a column name to a 1-D numpy array (one value per unit) or to a
    :class:`ListColumn` (a variable-length list per unit, e.g. a query's scores). ``metrics`` maps a record's
    metric name to its statistic spec: ``{"statistic": name, **params}``."""

    kind: str
    benchmark: str
    ids: np.ndarray  # unit ids, text
    columns: Mapping[str, Any]
    metrics: Mapping[str, Mapping[str, Any]]
    clusters: np.ndarray | None = None  # cluster id per unit (text), or None: each unit its own
    variant: str = ""
    _cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise UnitsError(f"unit kind {self.kind!r}: expected one of {', '.join(KINDS)}")
        n = len(self.ids)
        for name, values in self.columns.items():
            if name in (UNIT, CLUSTER):
                raise UnitsError(f"column name {name!r} is reserved")
            if len(values) != n:
                raise UnitsError(f"column {name!r} has {len(values)} rows for {n} units")
        if self.clusters is not None and len(self.clusters) != n:
            raise UnitsError(f"{len(self.clusters)} cluster labels for {n} units")
        for metric, spec in self.metrics.items():
            if "statistic" not in spec:
                raise UnitsError(f"metric {metric!r}: its spec names no statistic")

    def __len__(self) -> int:
        return len(self.ids)

    # ------------------------------------------------------------------ columns as statistics read them

    def values(self, name: str, dtype: Any = np.float64) -> np.ndarray:
        """A scalar column as a numpy array of ``dtype``."""
        key = f"v:{name}:{np.dtype(dtype).str}"
        if key not in self._cache:
            self._cache[key] = np.asarray(self._column(name), dtype=dtype)
        return self._cache[key]

    def lists(self, name: str, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
        """A list column flattened: ``(values, owner)``, ``owner[i]`` the unit row of ``values[i]``."""
        key = f"l:{name}:{np.dtype(dtype).str}"
        if key not in self._cache:
            column = self._column(name)
            if not isinstance(column, ListColumn):
                raise UnitsError(f"{self.benchmark} units: column {name!r} is not a list column")
            self._cache[key] = (np.asarray(column.values, dtype=dtype), column.owner())
        return self._cache[key]

    def _column(self, name: str) -> Any:
        if name not in self.columns:
            raise UnitsError(f"{self.benchmark} units have no column {name!r} (columns: {', '.join(self.columns)})")
        return self.columns[name]

    def cluster_index(self) -> tuple[np.ndarray, int]:
        """(each unit's cluster number, the number of clusters): what is resampled."""
        if self.clusters is None:
            return np.arange(len(self.ids)), len(self.ids)
        _, index = np.unique(np.asarray(self.clusters, dtype=str), return_inverse=True)
        return index.ravel(), int(index.max(initial=-1) + 1)

    def take(self, rows: np.ndarray) -> Units:
        """These units in another order (or a subset): rows of every column."""
        rows = np.asarray(rows, dtype=np.int64)
        columns = {name: values.take(rows) if isinstance(values, ListColumn) else np.asarray(values)[rows]
                   for name, values in self.columns.items()}
        return Units(self.kind, self.benchmark, np.asarray(self.ids)[rows], columns, self.metrics,
                     None if self.clusters is None else np.asarray(self.clusters)[rows], self.variant)

    def concat(self, other: Units) -> Units:
        """These units followed by ``other``'s (same columns): the pool a permutation test reweights."""
        if set(self.columns) != set(other.columns):
            raise UnitsError(f"units with other columns cannot be pooled: {sorted(self.columns)} vs {sorted(other.columns)}")
        columns: dict[str, Any] = {}
        for name, first in self.columns.items():
            second = other.columns[name]
            if isinstance(first, ListColumn) != isinstance(second, ListColumn):
                raise UnitsError(f"column {name!r} is a list in one unit file and not in the other")
            if isinstance(first, ListColumn):
                columns[name] = ListColumn(np.concatenate([first.values, second.values]),
                                           np.concatenate([first.offsets, second.offsets[1:] + first.offsets[-1]]))
            else:
                columns[name] = np.concatenate([np.asarray(first), np.asarray(second)])
        clusters = (None if self.clusters is None or other.clusters is None
                    else np.concatenate([np.asarray(self.clusters, dtype=str), np.asarray(other.clusters, dtype=str)]))
        ids = np.concatenate([np.asarray(self.ids, dtype=str), np.asarray(other.ids, dtype=str)])
        return Units(self.kind, self.benchmark, ids, columns, self.metrics, clusters, self.variant)

    def metadata(self) -> dict[str, Any]:
        return {"kind": self.kind, "benchmark": self.benchmark, "variant": self.variant,
                "metrics": {k: dict(v) for k, v in self.metrics.items()}, "version": VERSION}

    # ------------------------------------------------------------------ Parquet

    def to_parquet_bytes(self) -> bytes:
        """The units as one Parquet file (zstd), the same bytes for the same units."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        arrays: dict[str, Any] = {UNIT: pa.array([str(i) for i in self.ids], type=pa.string())}
        if self.clusters is not None:
            arrays[CLUSTER] = pa.array([str(c) for c in self.clusters], type=pa.string())
        for name, values in self.columns.items():
            if isinstance(values, ListColumn):
                arrays[name] = pa.LargeListArray.from_arrays(pa.array(values.offsets, type=pa.int64()),
                                                             _one_chunk(pa.array(np.asarray(values.values))))
            else:
                arrays[name] = pa.array(np.asarray(values))
        table = pa.table(arrays).replace_schema_metadata({METADATA_KEY: json.dumps(self.metadata(), sort_keys=True)})
        buffer = io.BytesIO()
        pq.write_table(table, buffer, compression="zstd", write_statistics=False)
        return buffer.getvalue()

    def write(self, path: Path) -> str:
        """Write atomically; returns the file's SHA-256 (what the record names it by)."""
        from vsbench.io.storage import atomic_write_bytes

        data = self.to_parquet_bytes()
        atomic_write_bytes(Path(path), data)
        return hashlib.sha256(data).hexdigest()


def _one_chunk(array: Any) -> Any:
    """``array`` as one Arrow array: pyarrow converts a numpy string array of more than ~64 MB into a
    ChunkedArray (3M DISC reference ids do), which a list array cannot take as its values; past 2 GB
    of text the values become large strings, which one chunk can hold."""
    import pyarrow as pa

    if not isinstance(array, pa.ChunkedArray):
        return array
    try:
        return array.combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowCapacityError):
        return array.cast(pa.large_string()).combine_chunks()


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_units(path: Path, sha256: str | None = None) -> Units:
    """A unit file read back, its bytes checked against ``sha256`` first when given (refused naming
    the file when they differ: the units are not the ones the evaluation scored)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnitsError(f"{path}: cannot read the unit file ({exc.strerror or exc})") from None
    if sha256 and digest_of(data) != sha256:
        raise UnitsError(f"{path}: its bytes are not those the evaluation wrote (sha256 {digest_of(data)[:12]}..., "
                         f"recorded {sha256[:12]}...); score the run again to write them anew")
    return units_from_bytes(data, str(path))


def units_from_bytes(data: bytes, where: str = "unit file") -> Units:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(io.BytesIO(data))
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        raise UnitsError(f"{where}: not a Parquet file ({type(exc).__name__}: {exc})") from None
    raw = (table.schema.metadata or {}).get(METADATA_KEY)
    if raw is None:
        raise UnitsError(f"{where}: no {METADATA_KEY.decode()} metadata; not a vsbench unit file")
    meta = json.loads(raw)
    if meta.get("version") != VERSION:
        raise UnitsError(f"{where}: unit file version {meta.get('version')!r}, this vsbench reads {VERSION}")
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for name in table.column_names:
        if name in (UNIT, CLUSTER):
            continue
        column = table.column(name)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            lists = column.combine_chunks()
            offsets = np.asarray(lists.offsets, dtype=np.int64)
            flat = lists.values.to_numpy(zero_copy_only=False)
            columns[name] = ListColumn(flat[offsets[0]:offsets[-1]], offsets - offsets[0])
        else:
            columns[name] = column.to_numpy(zero_copy_only=False)
    clusters = table.column(CLUSTER).to_numpy(zero_copy_only=False) if CLUSTER in table.column_names else None
    return Units(meta["kind"], meta["benchmark"], table.column(UNIT).to_numpy(zero_copy_only=False), columns,
                 meta["metrics"], clusters, meta.get("variant", ""))
