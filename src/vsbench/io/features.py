"""Feature files: the one on-disk format every model, shard and precomputed submission uses.

A feature file is an ``.npz`` holding ``ids`` (unicode strings, one per row) and ``features``
(float32, N x D). It is written atomically and loaded with ``allow_pickle=False``, so a feature
file can never run code. Shards of one image set concatenate in shard order.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vsbench.io.inputs import QUOTE_CHARS, InputError, WordedInputError, load_arrays
from vsbench.io.storage import atomic_write_bytes


@dataclass(frozen=True)
class ImageSet:
    """Images to embed: ids (unique) and their files, in order; a benchmark's image set."""

    ids: tuple[str, ...]
    paths: tuple[Path, ...]

    def __post_init__(self) -> None:
        if len(self.ids) != len(self.paths):
            raise ValueError(f"{len(self.ids)} ids for {len(self.paths)} paths")
        if len(set(self.ids)) != len(self.ids):
            raise ValueError("image ids must be unique within an image set")



class FeatureError(WordedInputError):
    """A feature file or array that cannot be used, with the file and the reason (an InputError,
    so the CLI and the fuzz tests treat it as the user's input problem it is)."""


@dataclass(frozen=True)
class FeatureSet:
    ids: np.ndarray  # (N,) unicode
    features: np.ndarray  # (N, D) float32, or MappedRows (read a slice at a time)

    def __post_init__(self) -> None:
        if self.features.ndim != 2:
            raise FeatureError(f"features must be 2-D, got shape {self.features.shape}")
        if len(self.ids) != len(self.features):
            raise FeatureError(f"{len(self.ids)} ids for {len(self.features)} feature rows")

    @property
    def dim(self) -> int:
        return int(self.features.shape[1])

    def __len__(self) -> int:
        return len(self.ids)

    def check_finite(self, source: str = "features", block: int = 65_536) -> None:
        """Every row finite, or an error naming the first bad one. Mapped features (MappedRows)
        check each row as it is read instead: a fill task must not read the whole gallery to check
        it, and no row reaches a computation unchecked."""
        if isinstance(self.features, MappedRows):
            return
        bad_rows = [start + np.flatnonzero(~np.isfinite(row_block(self.features, start, start + block)).all(axis=1))
                    for start in range(0, len(self), block)]
        bad = np.concatenate(bad_rows) if bad_rows else np.zeros(0, np.int64)
        if bad.size:
            row = int(bad[0])
            raise FeatureError(f"{source}: row {row} (id {self.ids[row]!r}) has NaN or infinite values "
                               f"({int(bad.size)} such rows)")

    def select(self, ids: Sequence[str], source: str = "features", *, keep_mapped: bool = False) -> FeatureSet:
        """Rows in the order of ``ids``; an id that is missing is an error naming it.

        Rows read in place (:class:`MappedRows`) are read into memory, unless ``keep_mapped`` and
        ``ids`` are the rows' own order: a FAISS search request keeps them mapped (its index step
        reads them a shard at a time), any other consumer gets an ordinary array."""
        if len(ids) == len(self.ids) and np.array_equal(self.ids, np.asarray(ids, dtype=str)):
            if keep_mapped or not isinstance(self.features, MappedRows):
                return self  # already in this order: nothing is copied
            return FeatureSet(self.ids, np.asarray(self.features))
        position = {str(i): n for n, i in enumerate(self.ids.tolist())}
        missing = [i for i in ids if i not in position]
        if missing:
            raise FeatureError(f"{source}: {len(missing)} ids have no features, e.g. {missing[:3]}")
        rows = np.fromiter((position[i] for i in ids), dtype=np.int64, count=len(ids))
        return FeatureSet(np.asarray(ids, dtype=str), self.features[rows])


def save_features(path: Path, features: FeatureSet) -> None:
    buffer = io.BytesIO()
    np.savez(buffer, ids=np.asarray(features.ids, dtype=str), features=np.ascontiguousarray(features.features,
                                                                                            dtype=np.float32))
    atomic_write_bytes(path, buffer.getvalue())


def load_features(path: Path) -> FeatureSet:
    try:
        data = load_arrays(path)  # size and headers checked before any array is read
        ids, features = data["ids"], data["features"]
    except InputError as exc:  # already names the file
        raise FeatureError(str(exc)) from None
    except (OSError, ValueError, KeyError) as exc:
        raise FeatureError(f"{path}: not a vsbench feature file ({str(exc)[:QUOTE_CHARS]})") from None
    if ids.ndim != 1 or not (ids.dtype.kind in "US" or ids.size == 0):
        raise FeatureError(f"{path}: ids must be a 1-D array of strings, got {ids.shape} {ids.dtype}")
    if not (np.issubdtype(features.dtype, np.number) or features.dtype == np.bool_):
        raise FeatureError(f"{path}: features must be numbers, got dtype {features.dtype}")
    try:
        return FeatureSet(ids.astype(str), features.astype(np.float32, copy=False))
    except FeatureError as exc:
        raise FeatureError(f"{path}: {exc}") from None


def concatenate(parts: Sequence[FeatureSet]) -> FeatureSet:
    if not parts:
        raise FeatureError("no feature shards to concatenate")
    dims = {p.dim for p in parts}
    if len(dims) != 1:
        raise FeatureError(f"shards disagree on the feature dimension: {sorted(dims)}")
    return FeatureSet(np.concatenate([p.ids for p in parts]), np.concatenate([p.features for p in parts]))


def map_npz_member(path: Path, name: str) -> np.ndarray:
    """Member ``name`` of an ``.npz`` file as a read-only memory map, when it is stored uncompressed
    (``np.savez``, which :func:`save_features` uses); a compressed member is read whole.

    Why: a gallery of 10 M descriptors is 10 GB; a step that needs a slice of it (one reference
    shard) must not read the rest. numpy maps ``.npy`` files but not ``.npz`` members, so the member's
    data offset is found from its ZIP local header and its ``.npy`` header.
    """
    import zipfile

    member = f"{name}.npy"
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo(member)
            if info.compress_type != zipfile.ZIP_STORED:
                return np.asarray(load_arrays(path)[name])
        with open(path, "rb") as handle:
            handle.seek(info.header_offset)
            local = handle.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ValueError("bad ZIP local header")
            name_length, extra_length = int.from_bytes(local[26:28], "little"), int.from_bytes(local[28:30], "little")
            handle.seek(info.header_offset + 30 + name_length + extra_length)
            version = np.lib.format.read_magic(handle)
            reader = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = reader(handle)
            offset = handle.tell()
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise FeatureError(f"{path}: no readable {name!r} array ({str(exc)[:QUOTE_CHARS]})") from None
    if fortran or dtype.hasobject or len(shape) != 2:
        raise FeatureError(f"{path}: {name!r} is not a C-ordered 2-D numeric array")
    expected = offset + int(np.prod(shape)) * dtype.itemsize
    if path.stat().st_size < expected:
        raise FeatureError(f"{path}: truncated ({path.stat().st_size} bytes, its {name!r} array needs {expected})")
    if shape[0] == 0:
        return np.zeros(shape, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=tuple(shape))


@dataclass(frozen=True)
class RowSource:
    """One file whose rows a :class:`MappedRows` reads, as its maker vouched for it: the file's
    name and sha256 (what a reused index shard is keyed on) and a check run before its first read."""

    name: str
    sha256: str
    verify: object = None  # a callable () -> None raising FeatureError, run once before the first read


class MappedRows:
    """float32 rows spread over memory-mapped files, read a slice at a time.

    Why: a fill task of the index step reads only its reference shard's rows, straight from the
    embed step's shard files; nothing needs the whole gallery in memory, nor a merged copy of it on
    disk. It behaves as a 2-D array where the code reads it: ``shape``, ``len``, slices and row
    lists return ordinary arrays of just those rows, and ``numpy.asarray`` reads it all (so code
    that needs every row, a small benchmark's search in one process, still works unchanged).
    """

    def __init__(self, parts: Sequence[np.ndarray], sources: Sequence[RowSource]) -> None:
        if not parts or len(parts) != len(sources):
            raise FeatureError(f"{len(parts)} row parts for {len(sources)} sources")
        widths = {int(part.shape[1]) for part in parts}
        if len(widths) != 1 or any(part.ndim != 2 for part in parts):
            raise FeatureError(f"row parts disagree on the feature dimension: {sorted(widths)}")
        self.parts, self.sources = list(parts), list(sources)
        self.starts = np.cumsum([0] + [len(part) for part in parts])
        self.shape = (int(self.starts[-1]), widths.pop())
        self._verified = [source.verify is None for source in sources]

    ndim = 2
    dtype = np.dtype(np.float32)

    def __len__(self) -> int:
        return self.shape[0]

    def _part(self, number: int) -> np.ndarray:
        if not self._verified[number]:
            self.sources[number].verify()  # type: ignore[operator]
            self._verified[number] = True
        return self.parts[number]

    def _checked(self, number: int, first: int, rows: np.ndarray) -> np.ndarray:
        """``rows`` (from row ``first`` of part ``number``), refused naming the file and row when
        one is not finite: the check every row passes as it is read."""
        finite = np.isfinite(rows).all(axis=1)
        if not finite.all():
            where = f"row {first + int(np.flatnonzero(~finite)[0])}" if first >= 0 else "a row"
            raise FeatureError(f"{self.sources[number].name}: {where} has NaN or infinite values "
                               f"({int((~finite).sum())} such rows read); re-run the embed step")
        return rows

    def spans(self, start: int, stop: int) -> list[tuple[int, int, int]]:
        """``(part, first row, end row)`` of the parts that rows ``[start, stop)`` lie in."""
        spans = []
        for number in range(len(self.parts)):
            lo, hi = max(start, int(self.starts[number])), min(stop, int(self.starts[number + 1]))
            if lo < hi:
                spans.append((number, lo - int(self.starts[number]), hi - int(self.starts[number])))
        return spans

    def source_key(self, start: int, stop: int) -> list[list[Any]]:
        """What rows ``[start, stop)`` are, without reading them: per file, its name, its recorded
        sha256 and the rows taken (a reused index shard is keyed on it)."""
        return [[self.sources[n].name, self.sources[n].sha256, lo, hi] for n, lo, hi in self.spans(start, stop)]

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows ``[start, stop)`` as one contiguous float32 array (read from the files now)."""
        start, stop = max(0, start), min(stop, len(self))
        pieces = []
        for n, lo, hi in self.spans(start, stop):
            pieces.append(self._checked(n, lo, np.array(self._part(n)[lo:hi], dtype=np.float32)))  # a copy
            _release(self.parts[n], lo, hi)
        if not pieces:
            return np.zeros((0, self.shape[1]), np.float32)
        return np.ascontiguousarray(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))

    def __getitem__(self, key: Any) -> np.ndarray:
        if isinstance(key, slice):
            start, stop, step = key.indices(len(self))
            block = self.rows(start, stop) if stop > start else np.zeros((0, self.shape[1]), np.float32)
            return block if step == 1 else block[::step]
        rows = np.asarray(key)
        if rows.dtype == bool:
            rows = np.flatnonzero(rows)
        if rows.ndim == 0:
            return self.rows(int(rows) % len(self), int(rows) % len(self) + 1)[0]
        rows = np.where(rows < 0, rows + len(self), rows).astype(np.int64)
        out = np.empty((len(rows), self.shape[1]), np.float32)
        part_of = np.searchsorted(self.starts, rows, side="right") - 1
        for number in np.unique(part_of):
            chosen = part_of == number
            out[chosen] = self._checked(int(number), -1, self._part(int(number))[rows[chosen] - self.starts[number]])
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        whole = self.rows(0, len(self))
        return whole if dtype is None else whole.astype(dtype, copy=False)

    def astype(self, dtype: Any, copy: bool = True) -> MappedRows | np.ndarray:
        """float32 stays mapped (FeatureSet's loader calls this); anything else is read."""
        return self if np.dtype(dtype) == self.dtype else np.asarray(self).astype(dtype)


def _release(part: np.ndarray, lo: int, hi: int) -> None:
    """Drop the mapped pages of rows ``[lo, hi)`` from this process's resident set once copied
    (``MADV_DONTNEED``; the file's pages stay in the page cache). Why: a fill task reads its rows a
    block at a time, and the pages it has read would otherwise count towards its memory until the
    kernel reclaims them, making a shard-sized task look gallery-sized. Best effort."""
    import mmap

    mapping = getattr(part, "_mmap", None)
    if mapping is None or not hasattr(mapping, "madvise") or not hasattr(mmap, "MADV_DONTNEED"):
        return
    row_bytes = part.shape[1] * part.dtype.itemsize
    first = part.offset % mmap.ALLOCATIONGRANULARITY + lo * row_bytes
    last = part.offset % mmap.ALLOCATIONGRANULARITY + hi * row_bytes
    first -= first % mmap.PAGESIZE
    try:
        mapping.madvise(mmap.MADV_DONTNEED, first, min(last, len(mapping)) - first)
    except (OSError, ValueError):
        pass


def row_block(rows: np.ndarray | MappedRows, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of an array or :class:`MappedRows` as contiguous float32."""
    if isinstance(rows, MappedRows):
        return rows.rows(start, stop)
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(rows[start:stop], dtype=np.float32)
