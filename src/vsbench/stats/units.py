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
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, StringConstraints, ValidationError, model_validator

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
    # When set, ``values`` are integer codes into these texts: 3M reference ids of seven characters
    # are 12 MB of int32 codes and the distinct ids, not 84 MB of numpy ``U7`` (issue 48). The
    # Parquet column is then dictionary-encoded, and is read back the same way. Numpy or Arrow
    # text: a reader's distinct ids stay Arrow (issue 54: a million references are 28 MiB of ``U7``,
    # 11 MB as Arrow, and as Python objects when read back, ~60 MB more).
    categories: Any = None

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
        """Unit ``i``'s list (as text for a coded column)."""
        values = self.values[self.offsets[i]:self.offsets[i + 1]]
        return values if self.categories is None else _texts_at(self.categories, values)

    def owner(self) -> np.ndarray:
        """The unit row of each value (int32 where the units fit: half the memory of a 10M-value column)."""
        return np.repeat(np.arange(len(self), dtype=code_type(len(self))), np.diff(self.offsets))

    def texts(self) -> np.ndarray:
        """The values as text: the categories of coded values, else the values themselves."""
        return self.values if self.categories is None else self.category_texts()[self.values]

    def category_texts(self) -> np.ndarray:
        """The categories as a numpy text array (``U``), Arrow ones converted without a Python str each."""
        if self.categories is None:
            raise ValueError("a list column without categories")
        return _numpy_text(self.categories)

    @classmethod
    def coded(cls, texts: Any, offsets: np.ndarray) -> ListColumn:
        """A text list column kept as int32 codes into its distinct texts (``categories``)."""
        categories, codes = np.unique(np.asarray(texts), return_inverse=True)
        return cls(codes.ravel().astype(code_type(categories.size)), offsets, categories)

    def take(self, rows: np.ndarray) -> ListColumn:
        lengths = np.diff(self.offsets)[rows]
        starts = self.offsets[:-1][rows]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
        return ListColumn(self.values[index], offsets, self.categories)


@dataclass(frozen=True, eq=False)
class Labels:
    """Each unit's cluster label kept as a number: ``codes[i]`` is unit ``i``'s label's place among the
    distinct labels in sorted order (what :func:`sorted_codes` gives their texts, so what
    :meth:`Units.cluster_index` returns as it is), and ``parts`` spell the distinct labels in that
    order: pieces ``(prefix, texts)`` (Arrow or numpy text), label ``k`` being the ``k``-th of their
    concatenation, each text after its piece's prefix.

    Why: at a million copy-detection queries the labels were 56 MiB of numpy ``U14`` held from the
    units to the end, and ~220 MiB more while :func:`groups_of` built them (issue 54). The texts are
    spelled only where they are written or shown (:meth:`arrow`), from the few distinct ones. Reads
    like the 1-D text array it stands for: ``len``, ``np.asarray(labels, dtype=str)``, ``tolist()``."""

    codes: np.ndarray  # int32 while the labels fit, one per unit
    count: int  # distinct labels; every code below it is used
    parts: tuple[tuple[str, Any], ...]

    @classmethod
    def from_texts(cls, texts: Any) -> Labels:
        """Labels of a text array (the numbering :func:`sorted_codes` gives it)."""
        texts = np.asarray(texts, dtype=str).ravel()
        index, count = sorted_codes(texts)
        distinct = np.empty(count, dtype=texts.dtype)
        distinct[index] = texts
        return cls(_narrow(index, count), count, (("", distinct),))

    def __len__(self) -> int:
        return int(self.codes.size)

    def categories(self) -> Any:
        """The distinct labels in code order, as one Arrow text array (large_string)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        pieces = []
        for prefix, texts in self.parts:
            piece = texts if isinstance(texts, (pa.Array, pa.ChunkedArray)) else pa.array(np.asarray(texts, dtype=str))
            piece = piece.cast(pa.large_string())
            if isinstance(piece, pa.ChunkedArray):
                piece = piece.combine_chunks()
            if prefix:
                text = pa.large_string()
                piece = pc.binary_join_element_wise(pa.scalar(prefix, text), piece, pa.scalar("", text))
            pieces.append(piece)
        return pa.concat_arrays(pieces) if pieces else pa.array([], type=pa.large_string())

    def arrow(self) -> Any:
        """Each unit's label as one Arrow ``string`` array (the unit file's ``cluster`` column): the
        distinct labels taken by code, with no Python str per unit."""
        import pyarrow as pa

        return _one_chunk(self.categories().take(pa.array(self.codes)).cast(pa.string()))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        from vsbench.io.ids import numpy_texts

        texts = numpy_texts(self.categories())[self.codes] if self.count else np.zeros(len(self), dtype="U1")
        return texts if dtype is None else texts.astype(dtype, copy=False)

    def tolist(self) -> list[str]:
        return self.arrow().to_pylist()

    def __getitem__(self, key: Any) -> Any:
        """One unit's label (text), or the labels of a selection (text array)."""
        if isinstance(key, (int, np.integer)):
            return self.categories()[int(self.codes[key])].as_py()
        return np.asarray(self)[key]

    def take(self, rows: np.ndarray) -> Labels:
        """These rows' labels, numbered among the labels they use (as :func:`sorted_codes` would)."""
        import pyarrow as pa

        codes = self.codes[np.asarray(rows, dtype=np.int64)]
        used = np.zeros(self.count, dtype=bool)
        used[codes] = True
        renumber = np.cumsum(used) - 1
        count = int(np.count_nonzero(used))
        return Labels(_narrow(renumber[codes], count), count,
                      (("", self.categories().filter(pa.array(used))),))


def code_type(count: int) -> type[np.signedinteger]:
    """The integer type of numbers below ``count`` (codes, rows): int32 while ``count`` fits (4 bytes
    a unit, half of int64's), else int64. One rule for every code array of a unit file."""
    return np.int32 if count < 2**31 else np.int64


def _narrow(codes: np.ndarray, count: int) -> np.ndarray:
    """Codes as :func:`code_type` of ``count``, not copied when they are so already."""
    return codes.astype(code_type(count), copy=False)


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
    clusters: np.ndarray | Labels | None = None  # cluster id per unit (text or Labels), or None: each unit its own
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

    def forget(self) -> None:
        """Drop what the statistics derived and kept (sorted rankings, owner arrays): a caller done
        with resampling hands that memory back before writing the file."""
        self._cache.clear()

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
            # One owner array per offsets array: a query's scores and labels share theirs.
            shared = self._cache.setdefault("owners", [])
            owner = next((o for offsets, o in shared if offsets is column.offsets), None)
            if owner is None:
                owner = column.owner()
                shared.append((column.offsets, owner))
            self._cache[key] = (np.asarray(column.values, dtype=dtype), owner)
        return self._cache[key]

    def _column(self, name: str) -> Any:
        if name not in self.columns:
            raise UnitsError(f"{self.benchmark} units have no column {name!r} (columns: {', '.join(self.columns)})")
        return self.columns[name]

    def cluster_index(self) -> tuple[np.ndarray, int]:
        """(each unit's cluster number, the number of clusters): what is resampled."""
        if self.clusters is None:
            return np.arange(len(self.ids)), len(self.ids)
        if isinstance(self.clusters, Labels):  # numbered so already (issue 54: no text sorted)
            return self.clusters.codes, self.clusters.count
        return sorted_codes(np.asarray(self.clusters, dtype=str))

    def take(self, rows: np.ndarray) -> Units:
        """These units in another order (or a subset): rows of every column."""
        rows = np.asarray(rows, dtype=np.int64)
        columns = {name: values.take(rows) if isinstance(values, ListColumn) else np.asarray(values)[rows]
                   for name, values in self.columns.items()}
        clusters = (None if self.clusters is None else self.clusters.take(rows) if isinstance(self.clusters, Labels)
                    else np.asarray(self.clusters)[rows])
        return Units(self.kind, self.benchmark, np.asarray(self.ids)[rows], columns, self.metrics, clusters,
                     self.variant)

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
                offsets = np.concatenate([first.offsets, second.offsets[1:] + first.offsets[-1]])
                if first.categories is None and second.categories is None:
                    columns[name] = ListColumn(np.concatenate([first.values, second.values]), offsets)
                else:
                    columns[name] = ListColumn.coded(np.concatenate([first.texts(), second.texts()]), offsets)
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

        sink = pa.BufferOutputStream()
        self._write_parquet(sink)
        return sink.getvalue().to_pybytes()

    def write(self, path: Path) -> str:
        """Write atomically, streamed to the file (never whole in memory: at a million queries the
        file's growing buffer and its copy as bytes were ~100 MB, issue 54); returns the SHA-256 of
        the bytes written (what the record names the file by): those of :meth:`to_parquet_bytes`."""
        from vsbench.io.storage import atomic_writer

        with atomic_writer(Path(path)) as out:
            self._write_parquet(out)
        return out.hexdigest()

    def _write_parquet(self, sink: Any) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        ids = np.asarray(self.ids)  # a numpy text array goes over without a Python str per unit (issue 54)
        arrays: dict[str, Any] = {UNIT: _one_chunk(pa.array(ids, type=pa.string())) if ids.dtype.kind == "U"
                                  else pa.array([str(i) for i in self.ids], type=pa.string())}
        if isinstance(self.clusters, Labels):
            arrays[CLUSTER] = self.clusters.arrow()  # spelled here only, from the distinct labels (issue 54)
        elif self.clusters is not None:
            clusters = np.asarray(self.clusters)
            arrays[CLUSTER] = (_one_chunk(pa.array(clusters, type=pa.string())) if clusters.dtype.kind == "U"
                               else pa.array([str(c) for c in self.clusters], type=pa.string()))
        for name, values in self.columns.items():
            if isinstance(values, ListColumn):
                flat = _one_chunk(pa.array(np.asarray(values.values)))
                if values.categories is not None:
                    flat = pa.DictionaryArray.from_arrays(flat, _arrow_text(values.categories))
                arrays[name] = pa.LargeListArray.from_arrays(pa.array(values.offsets, type=pa.int64()), flat)
            else:
                arrays[name] = pa.array(np.asarray(values))
        table = pa.table(arrays).replace_schema_metadata({METADATA_KEY: json.dumps(self.metadata(), sort_keys=True)})
        # Dictionary pages only for text: a dictionary of 3M float scores costs the writer a hash
        # table as large as the column and saves nothing. Parquet names a list's values by their leaf
        # path (``name.list.element``): given the bare name, a coded list (DISC's reference ids) was
        # written without its dictionary, 35% larger (issue 56's mutants found the name unused).
        texts = [_leaf(name, column.type) for name, column in arrays.items()
                 if pa.types.is_string(_flat_type(column.type)) or pa.types.is_dictionary(_flat_type(column.type))]
        del arrays
        pq.write_table(table, sink, compression="zstd", write_statistics=False, use_dictionary=texts)


_RUN = 1 << 16  # sorted labels compared together by :func:`sorted_codes`


def sorted_codes(labels: np.ndarray) -> tuple[np.ndarray, int]:
    """``np.unique(labels, return_inverse=True)``'s inverse (each label's place among the distinct
    labels, sorted) and the number of distinct labels, without a sorted copy of the labels: an
    argsort, then neighbours compared a run of the sorted order at a time. Why: at 1M copy-detection
    queries the labels are 56 MiB of numpy text, and ``np.unique`` held a sorted copy of them plus
    its masks and index arrays at once, the scoring's largest transient (issue 54). The numbering
    is the same (the same comparisons of the same texts), so the bootstrap draws stay the same."""
    labels = labels.ravel()
    n = labels.size
    if n == 0:
        return np.zeros(0, dtype=np.int64), 0
    order = np.argsort(labels)
    rank = np.zeros(n, dtype=np.int64)  # 1 where a sorted label differs from the one before
    for start in range(1, n, _RUN):
        stop = min(n, start + _RUN)
        rank[start:stop] = labels[order[start:stop]] != labels[order[start - 1:stop - 1]]
    np.cumsum(rank, out=rank)
    distinct = int(rank[-1]) + 1
    index = np.empty(n, dtype=np.int64)
    index[order] = rank
    return index, distinct


def groups_of(n_units: int, linked_units: Any, linked_sources: Any, *, unit_ids: Any = None,
              prefix: str = "") -> Labels | None:
    """Each unit's group: units linked to a common source are one group (the connected components of
    the unit-source links), so that a bootstrap or a paired test draws them together (issue 55: the
    5 edited copies of one photo are one draw of a photo, not five independent queries).

    ``linked_units[i]`` (a unit row) was drawn from ``linked_sources[i]`` (any text: a reference id,
    an original's name); a unit with no link is its own group. A group is named by the smallest
    source in it (``prefix`` + source), a lone unit by its id (``unit_ids``; else its row) with the
    prefix ``unit:``, so the two never collide. None when every group holds one unit: the units are
    then resampled one by one, with exactly the draws of an unclustered file (no digit changes)."""
    rows = np.asarray(linked_units, dtype=np.int64).ravel()
    sources = np.asarray(linked_sources, dtype=str).ravel()
    if rows.size != sources.size:
        raise ValueError(f"{rows.size} linked units for {sources.size} sources")
    names, source_row = np.unique(sources, return_inverse=True)
    return coded_groups(n_units, rows, source_row.ravel(), names, unit_ids=unit_ids, prefix=prefix)


def coded_groups(n_units: int, linked_units: Any, source_codes: np.ndarray, names: Any, *, unit_ids: Any = None,
                 prefix: str = "") -> Labels | None:
    """:func:`groups_of` with the sources given as codes into their distinct texts ``names`` (numpy or
    Arrow text, sorted: code order is text order; some may be linked to no unit), as a reader's id
    column holds them. The groups come back as :class:`Labels`, numbered as their texts would be,
    without spelling them (issue 54: the text labels of a million queries held ~220 MiB while they
    were made): with ``prefix`` below ``unit:`` (``source:``, ``original:``), every group named by a
    source sorts before every lone unit, so a group's number is its smallest source's place among
    the groups' sources, and a lone unit's is the groups' count plus its id's place among the lone
    units' ids. Another prefix (one that ``unit:`` starts, or starts with) spells the labels."""
    rows = np.asarray(linked_units).ravel()
    source_codes = np.asarray(source_codes).ravel()
    if rows.size != source_codes.size:
        raise ValueError(f"{rows.size} linked units for {source_codes.size} sources")
    if rows.size and (rows.min() < 0 or rows.max() >= n_units):
        raise ValueError(f"a linked unit row is outside 0..{n_units - 1}")
    if rows.size == 0 or np.bincount(rows, minlength=n_units).max() <= 1 and np.bincount(source_codes).max() <= 1:
        return None  # every unit its own group
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n_names = len(names)
    size = n_units + n_names  # nodes: the units, then the sources
    graph = coo_matrix((np.ones(rows.size, dtype=np.int8), (rows, n_units + source_codes.astype(np.int64))),
                       shape=(size, size))
    _, component = connected_components(graph, directed=False)
    del graph
    if np.bincount(component[:n_units], minlength=size).max(initial=0) <= 1:
        return None
    # each component's name: its smallest source (sources are sorted, so the first seen in order)
    first_source = np.full(size, -1, dtype=np.int64)
    first_source[component[n_units:][::-1]] = np.arange(n_names)[::-1]
    unit_source = first_source[component[:n_units]]  # -1: a unit linked to no source
    del component, first_source
    has_source = unit_source >= 0
    ids = np.asarray(unit_ids if unit_ids is not None else np.arange(n_units), dtype=str)
    below = _sorts_before(prefix, LONE_PREFIX)
    if below is None:  # labels of the two kinds could meet: spelled, and numbered as texts
        labels = np.char.add(LONE_PREFIX, ids).astype(object)
        labels[has_source] = np.char.add(prefix, np.asarray(_subset(names, unit_source[has_source]), dtype=str))
        return Labels.from_texts(labels.astype(str))
    used = np.zeros(n_names, dtype=bool)
    used[unit_source[has_source]] = True
    n_sourced = int(np.count_nonzero(used))
    lone = np.flatnonzero(~has_source)
    lone_ids = ids[lone]
    lone_code, n_lone = sorted_codes(lone_ids)
    lone_names = np.empty(n_lone, dtype=lone_ids.dtype)
    lone_names[lone_code] = lone_ids
    del lone_ids
    codes = np.empty(n_units, dtype=code_type(n_sourced + n_lone))
    place = np.cumsum(used) - 1  # a source's place among the groups' sources
    codes[has_source] = place[unit_source[has_source]] + (0 if below else n_lone)
    del place, unit_source
    codes[lone] = lone_code + (n_sourced if below else 0)
    parts = ((prefix, _subset(names, used)), (LONE_PREFIX, lone_names))
    return Labels(codes, n_sourced + n_lone, parts if below else parts[::-1])


LONE_PREFIX = "unit:"  # a unit linked to no source is a group named by its id, after this


def _sorts_before(first: str, second: str) -> bool | None:
    """Whether every text starting with ``first`` sorts before every text starting with ``second``
    (True), after it (False), or neither (None: one prefix starts the other)."""
    for a, b in zip(first, second):
        if a != b:
            return a < b
    return None


def _subset(names: Any, rows: np.ndarray) -> Any:
    """``names[rows]`` (a mask or indices) for numpy or Arrow text."""
    import pyarrow as pa

    if isinstance(names, (pa.Array, pa.ChunkedArray)):
        return names.filter(pa.array(rows)) if rows.dtype == bool else names.take(pa.array(rows))
    return np.asarray(names)[rows]


def _is_arrow(values: Any) -> bool:
    return type(values).__module__.startswith("pyarrow")


def _numpy_text(values: Any) -> np.ndarray:
    """Numpy or Arrow text as a numpy text array."""
    if _is_arrow(values):
        from vsbench.io.ids import numpy_texts

        return numpy_texts(values)
    return np.asarray(values)


def _texts_at(categories: Any, codes: np.ndarray) -> np.ndarray:
    """``categories[codes]`` as numpy text, for numpy or Arrow categories (a few codes: one unit's)."""
    if _is_arrow(categories):
        import pyarrow as pa

        return np.asarray(categories.take(pa.array(codes)).to_numpy(zero_copy_only=False), dtype=str)
    return np.asarray(categories)[codes]


def _arrow_text(values: Any) -> Any:
    """Numpy or Arrow text as one Arrow ``string`` array (what ``pa.array`` makes of numpy ``U``)."""
    import pyarrow as pa

    if _is_arrow(values):
        return _one_chunk(values).cast(pa.string())
    return _one_chunk(pa.array(np.asarray(values)))


def _flat_type(kind: Any) -> Any:
    """The value type of a (large) list type, else the type itself."""
    import pyarrow as pa

    return kind.value_type if pa.types.is_list(kind) or pa.types.is_large_list(kind) else kind


def _leaf(name: str, kind: Any) -> str:
    """The Parquet leaf path of column ``name`` (what ``write_table``'s ``use_dictionary`` matches):
    a (large) list's values are ``name.list.element`` (pyarrow's compliant nested names)."""
    return f"{name}.list.element" if kind is not _flat_type(kind) else name


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
    meta = parse_metadata(raw, where)
    import pyarrow as pa

    columns: dict[str, Any] = {}
    for name in table.column_names:
        if name in (UNIT, CLUSTER):
            continue
        column = table.column(name)
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            lists = column.combine_chunks()
            offsets = np.asarray(lists.offsets, dtype=np.int64)
            flat, categories = lists.values, None
            if pa.types.is_dictionary(flat.type):
                flat, categories = flat.indices, flat.dictionary  # Arrow text, no Python str a value
            flat = flat.to_numpy(zero_copy_only=False)
            columns[name] = ListColumn(flat[offsets[0]:offsets[-1]], offsets - offsets[0], categories)
        else:
            columns[name] = column.to_numpy(zero_copy_only=False)
    clusters = _read_labels(table.column(CLUSTER)) if CLUSTER in table.column_names else None
    if UNIT not in table.column_names:
        raise UnitsError(f"{where}: no {UNIT!r} column; not a vsbench unit file")
    try:
        return Units(meta.kind, meta.benchmark, table.column(UNIT).to_numpy(zero_copy_only=False), columns,
                     {m: spec.model_dump() for m, spec in meta.metrics.items()}, clusters, meta.variant)
    except UnitsError as exc:
        raise UnitsError(f"{where}: {exc}") from None


def _read_labels(column: Any) -> Labels | np.ndarray:
    """A unit file's ``cluster`` column as :class:`Labels`: each row's dense rank among the distinct
    labels (Arrow sorts text by its UTF-8 bytes, the code point order numpy sorts by) and the
    distinct labels as Arrow text. Why: read as Python objects, a million labels held ~56 MiB more
    than their text (issue 54). Labels with a NUL character (numpy drops a trailing one, so two labels
    Arrow tells apart would be one cluster) or a null keep the numpy way."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    if (len(texts) == 0 or texts.null_count or not (pa.types.is_string(texts.type) or pa.types.is_large_string(texts.type))
            or pc.any(pc.match_substring(texts, "\x00")).as_py()):
        return texts.to_numpy(zero_copy_only=False)
    rank = pc.rank(texts, sort_keys="ascending", tiebreaker="dense").to_numpy()  # 1-based, uint64
    count = int(rank.max())
    codes = _narrow(rank, count)
    del rank
    codes -= 1
    first = np.empty(count, dtype=np.int64)  # a row of each label
    first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)
    return Labels(codes, count, (("", texts.take(pa.array(first))),))


class StatisticSpec(BaseModel):
    """One metric's statistic as a unit file names it: the statistic's *name* (looked up in the fixed
    registry, :mod:`vsbench.stats.statistics`, never imported) and its keyword params, plain JSON
    values under identifier keys (``units`` and ``weights`` are the statistic's own arguments)."""

    model_config = ConfigDict(extra="allow", strict=True)
    statistic: Annotated[str, StringConstraints(min_length=1, max_length=100)]

    @model_validator(mode="after")
    def _plain_params(self) -> StatisticSpec:
        for key, value in (self.model_extra or {}).items():
            if not key.isidentifier() or key in ("units", "weights"):
                raise ValueError(f"param {key[:40]!r} is not a statistic's keyword")
            if not _plain(value):
                raise ValueError(f"param {key!r} is not a number, text, boolean or list of them")
        return self


def _plain(value: Any, depth: int = 0) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, list) and depth < 2 and all(_plain(v, depth + 1) for v in value)


class UnitsMetadata(BaseModel):
    """A unit file's ``vsbench.units`` metadata, parsed strictly: it is data written by whoever wrote
    the run, so every field is checked and anything else is refused (issue 54)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    kind: Literal["query", "question", "pair", "seed"]
    benchmark: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    variant: Annotated[str, StringConstraints(max_length=1000)] = ""
    metrics: dict[Annotated[str, StringConstraints(min_length=1, max_length=250)], StatisticSpec]
    version: Literal[1]


def parse_metadata(raw: bytes, where: str) -> UnitsMetadata:
    """The metadata of the unit file ``where`` (a run and an artifact, or a path), or one line saying
    what is wrong with it: broken JSON, another version, a missing or malformed field."""
    try:
        meta = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise UnitsError(f"{where}: its {METADATA_KEY.decode()} metadata is not JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise UnitsError(f"{where}: its {METADATA_KEY.decode()} metadata is not a JSON object")
    if meta.get("version") != VERSION:
        raise UnitsError(f"{where}: unit file version {str(meta.get('version'))[:20]!r}, this vsbench reads {VERSION}")
    try:
        return UnitsMetadata.model_validate(meta)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "metadata"
        raise UnitsError(f"{where}: its {METADATA_KEY.decode()} metadata is broken: {field}: "
                         f"{first['msg']} ({exc.error_count()} problem(s)); score the run again to write it anew"
                         ) from None
