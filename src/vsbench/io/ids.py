"""Id columns of big tables held as codes into their distinct values, never a Python object a row.

Why: ``vsbench score copy-detection`` on ten million predictions (a 280 MB file) once took over
6 GB and died: a Python str costs ~50 bytes more than its text, and a numpy ``U`` array 4 bytes per
character of the *longest* id in every cell. Here a row costs one integer code; each distinct id
is kept once, as Arrow text (its UTF-8 bytes and an offset). pandas' Categorical would do the same
on paper, but builds a Python string per distinct id to check its categories (90 bytes each).

The distinct values are sorted (code point order, as Python and numpy compare strings), so the
codes order as the ids do: a scorer factorizing them gets the codes ``np.unique`` gave it before,
so its numbers, and the example a message quotes, stay the same.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHUNK_ROWS = 1 << 16  # rows a column holds as Python strings before packing them


def text_array(texts: Iterable[str]) -> pa.LargeStringArray:
    """Arrow text from Python strings, built from two buffers (the UTF-8 bytes and their offsets).

    ``pa.array(list_of_str)`` left the process ~4.5x the array's size resident whatever the
    allocator (65,536 ids at a time: 70 MB for 15 MB of ids); these buffers cost what they hold."""
    encoded = [text.encode() for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def release_memory() -> None:
    """Hand freed memory back to the system now (Arrow's allocator, and glibc's heap where there is
    one): both keep freed pages for reuse, and a sort's temporaries left that way counted as much as
    the live columns in a read's peak."""
    pa.default_memory_pool().release_unused()
    if _TRIM is not None:
        _TRIM(0)


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on other C libraries."""
    import ctypes
    import ctypes.util

    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim  # type: ignore[no-any-return]
    except (OSError, AttributeError):
        return None


_TRIM = _malloc_trim()


def _sorted(codes: np.ndarray, values: pa.Array) -> Ids:
    """``Ids`` whose row ``i`` is ``values[codes[i]]``, with the values sorted."""
    order = pc.array_sort_indices(values).to_numpy()
    rank = np.empty(order.size, dtype=np.int32 if order.size < 2**31 else np.int64)
    rank[order] = np.arange(order.size, dtype=rank.dtype)
    return Ids(rank[codes], values.take(pa.array(order)))


@dataclass(frozen=True)
class Ids:
    """A column of text ids: ``codes`` (an integer a row) into ``values`` (the distinct ids, sorted,
    as Arrow strings; some may be used by no row once rows are selected). Reads like a 1-D array of
    str where the scorers and tests need it: ``len``, ``size``, ``tolist()``, ``ids[i]``, slices and
    masks."""

    codes: np.ndarray
    values: pa.Array  # string or large_string
    ndim = 1

    @classmethod
    def from_strings(cls, texts: Iterable[str]) -> Ids:
        """Small columns (tests, image ids): ``Ids`` of any iterable of str."""
        column = IdColumn()
        for text in texts:
            column.append(str(text))
        return column.finish()

    def __len__(self) -> int:
        return int(self.codes.size)

    @property
    def size(self) -> int:
        return int(self.codes.size)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            return self.values[int(self.codes[key])].as_py()
        return Ids(self.codes[key], self.values)

    def tolist(self) -> list[str]:
        return self.values.take(pa.array(self.codes)).to_pylist()

    def value_index(self, text: str) -> int | None:
        """The code of ``text``, or None when no value is it."""
        found = pc.index(self.values, text).as_py()
        return None if found < 0 else found

    def isin(self, texts: Iterable[str] | pa.Array) -> np.ndarray:
        """Row mask: the row's id is one of ``texts`` (hashed once per distinct id, not per row)."""
        value_set = texts if isinstance(texts, pa.Array) else text_array(texts)
        known = pc.is_in(self.values, value_set=value_set.cast(self.values.type)).to_numpy(zero_copy_only=False)
        return known[self.codes]

    def used(self) -> pa.Array:
        """The distinct ids some row uses, sorted."""
        used = np.zeros(len(self.values), dtype=bool)
        used[self.codes] = True
        return self.values if used.all() else self.values.filter(pa.array(used))

    def batches(self, size: int = CHUNK_ROWS) -> Iterator[tuple[int, list[str]]]:
        """(first value number, values as Python strings) a few thousand at a time."""
        for start in range(0, len(self.values), size):
            yield start, self.values[start:start + size].to_pylist()

    def mapped(self, change: Callable[[str], str]) -> Ids:
        """The ids with ``change`` applied to each distinct one (two may become one: codes merge)."""
        changed = pa.chunked_array([text_array([change(v) for v in values]) for _, values in self.batches()],
                                   type=pa.large_string())
        values = pc.unique(changed)
        where = pc.index_in(changed, value_set=values).to_numpy(zero_copy_only=False)
        return _sorted(where.astype(np.int64)[self.codes], values)

    def marked(self, test: Callable[[str], bool]) -> np.ndarray:
        """Row mask: ``test`` of each row's id, called once per distinct id."""
        marks = np.zeros(len(self.values), dtype=bool)
        for start, values in self.batches():
            marks[start:start + len(values)] = [test(v) for v in values]
        return marks[self.codes]


class IdColumn:
    """Ids appended a row at a time; every :data:`CHUNK_ROWS` rows the chunk's distinct ids go, as
    UTF-8, into one growing buffer, and each row keeps an int32 (its id's place in that buffer);
    :meth:`finish` sorts the buffer's ids once into :class:`Ids`.

    Why these shapes: a few large buffers grown in place leave nothing behind, where one Arrow
    array per chunk (``pa.array``) left ~4.5x its size resident and interleaved small blocks kept
    freed heap pages; and sorting, not hashing (``unify_dictionaries``, ~60 bytes a distinct id),
    merges the chunks, since a ground truth names each query once (nearly every id distinct)."""

    def __init__(self) -> None:
        self._text = bytearray()  # the distinct ids of each chunk, UTF-8, one after the other
        self._lengths = array("i")  # bytes of each of them (a line is at most 4 MiB)
        self._rows = array("i")  # each row: its id's place among them (a 1 GiB file has fewer than 2**31)
        self._pending: list[str] = []

    def append(self, text: str) -> None:
        self._pending.append(text)
        if len(self._pending) >= CHUNK_ROWS:
            self._pack()

    def _pack(self) -> None:
        if self._pending:
            first_row: dict[str, int] = {}
            start = len(self._lengths)
            self._rows.extend(first_row.setdefault(text, start + len(first_row)) for text in self._pending)
            encoded = [text.encode() for text in first_row]
            self._text += b"".join(encoded)
            self._lengths.extend(map(len, encoded))
            self._pending = []

    def finish(self) -> Ids:
        """Every chunk's distinct ids, sorted once; equal neighbours are one id."""
        self._pack()
        count = len(self._lengths)
        small = len(self._text) < 2**31  # 4-byte offsets while they can address the text
        offsets = np.zeros(count + 1, dtype=np.int32 if small else np.int64)
        np.cumsum(np.frombuffer(self._lengths, dtype=np.int32), out=offsets[1:])
        self._lengths = array("i")
        kind = pa.StringArray if small else pa.LargeStringArray
        values = kind.from_buffers(count, pa.py_buffer(offsets), pa.py_buffer(self._text))
        order = pc.array_sort_indices(values).to_numpy().astype(np.int64 if count >= 2**31 else np.int32)
        ordered = values.take(pa.array(order))
        del values, offsets
        self._text = bytearray()
        new = np.ones(count, dtype=bool)
        if count > 1:
            new[1:] = pc.not_equal(ordered.slice(1), ordered.slice(0, count - 1)).to_numpy(zero_copy_only=False)
        distinct = ordered.filter(pa.array(new))
        del ordered
        rank = np.cumsum(new, dtype=order.dtype)
        rank -= 1
        del new
        code_of = np.empty_like(rank)
        code_of[order] = rank  # place among the chunks' ids -> code
        del order, rank
        codes = code_of[np.frombuffer(self._rows, dtype=np.int32)] if len(self._rows) else code_of[:0]
        self._rows = array("i")
        release_memory()
        return Ids(codes, distinct)


def shared_codes(first: Ids, second: Ids) -> tuple[np.ndarray, np.ndarray, int]:
    """Codes of two id columns in one numbering (their values merged, sorted) and its size: equal
    codes exactly when the ids are equal, ordered as the ids are."""
    merged = pc.unique(pa.chunked_array([ids.values.cast(pa.large_string()) for ids in (first, second)]))
    merged = merged.take(pc.array_sort_indices(merged))
    codes = [pc.index_in(ids.values.cast(pa.large_string()), value_set=merged)
             .to_numpy(zero_copy_only=False).astype(np.int64)[ids.codes] for ids in (first, second)]
    return codes[0], codes[1], len(merged)
