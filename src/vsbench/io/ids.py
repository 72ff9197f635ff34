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

import mmap
from array import array
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

CHUNK_ROWS = 1 << 13  # rows a column holds as Python strings before packing them (under 2**16: 2-byte numbers)
BLOCK = 1 << 12  # ids a step of :meth:`IdColumn.finish` looks at together
SEGMENT_BYTES = 1 << 16  # text :meth:`IdColumn.finish` moves at a time (16 bytes of index a byte: 1 MiB)


def text_array(texts: Iterable[str]) -> pa.LargeStringArray:
    """Arrow text from Python strings, built from two buffers (the UTF-8 bytes and their offsets).

    ``pa.array(list_of_str)`` left the process ~4.5x the array's size resident whatever the
    allocator (65,536 ids at a time: 70 MB for 15 MB of ids); these buffers cost what they hold."""
    encoded = [text.encode() for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def numpy_texts(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Arrow text as the numpy ``U`` array ``np.asarray(values.to_pylist(), dtype=str)`` gives, without
    a Python str per value (issue 54: a million query ids are 28 MB of ``U7``, and were ~90 MB of str
    objects on the way). ASCII text is copied byte by byte into a fixed-width array and widened;
    other text (and nulls) take the plain way."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], type=values.type)
    count = len(values)
    if not count or values.null_count:
        return np.asarray(values.to_pylist(), dtype=str)
    text = values.cast(pa.large_string())
    buffers = text.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64, count=count + 1, offset=text.offset * 8)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, dtype=np.uint8)
    if offsets[-1] > offsets[0] and int(data[offsets[0]:offsets[-1]].max()) >= 128:
        return np.asarray(values.to_pylist(), dtype=str)
    lengths = np.diff(offsets)
    width = max(1, int(lengths.max()))
    fixed = np.zeros((count, width), dtype=np.uint8)
    for place in range(width):
        rows = np.flatnonzero(lengths > place)
        fixed[rows, place] = data[offsets[rows] + place]
    return fixed.view(f"S{width}").ravel().astype(f"U{width}")


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
_MALLOC_POOL = pa.system_memory_pool()  # temporaries from malloc: malloc_trim hands them back, Arrow's own pool kept them


def _sort_order(values: pa.Array) -> np.ndarray:
    """Indices that sort ``values``, 4 bytes each while they can be (Arrow gives 8), with Arrow's
    8-byte ones handed back before anything else is allocated."""
    indices = pc.array_sort_indices(values, memory_pool=_MALLOC_POOL)
    order = _fresh_array(len(values), np.int64 if len(values) >= 2**31 else np.int32)
    order[:] = indices.to_numpy()
    del indices
    release_memory()
    return order


def _codes_and_offsets(order: np.ndarray, new: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From the sort's ``order`` and ``new`` (the first of equal neighbours): each id's code (its
    rank among the distinct ids) by place, and the offsets of the distinct ids' text in code order;
    a block at a time, so no full-length temporary."""
    code_of = _fresh_array(order.size, order.dtype)
    sorted_offsets = _fresh_array(int(np.count_nonzero(new)) + 1, offsets.dtype)
    sorted_offsets[0] = 0
    seen = 0  # distinct ids before the block
    for start in range(0, order.size, BLOCK):
        firsts, chosen = new[start:start + BLOCK], order[start:start + BLOCK]
        rank = np.cumsum(firsts, dtype=order.dtype)
        rank += seen - 1
        code_of[chosen] = rank
        kept = chosen[firsts]
        lengths = np.cumsum(offsets[kept + 1] - offsets[kept], dtype=np.int64)
        sorted_offsets[seen + 1:seen + 1 + kept.size] = lengths + sorted_offsets[seen]
        seen += kept.size
    return code_of, sorted_offsets


def _differs_from_previous(values: pa.Array, chosen: np.ndarray) -> np.ndarray:
    """For each of ``values[chosen]`` but the first: it is not equal to the one before it."""
    block = pc.take(values, pa.array(chosen), memory_pool=_MALLOC_POOL)
    return pc.not_equal(block.slice(1), block.slice(0, len(block) - 1), memory_pool=_MALLOC_POOL).to_numpy(zero_copy_only=False)


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


def _anonymous(size: int) -> mmap.mmap:
    """Private anonymous memory (a shared one could not grow: pages past its first size fault), in
    small pages (a 2 MiB huge page would be resident whole at a region's growing end)."""
    memory = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # 4 KiB pages: resident as written, whatever the system's huge page policy
        memory.madvise(mmap.MADV_NOHUGEPAGE)
    return memory


def _fresh_array(count: int, dtype: type[np.generic] | np.dtype) -> np.ndarray:
    """An uninitialized array in memory of its own, handed back to the system the moment the array
    goes: a big temporary from the C allocator could stay resident after it was freed, and count
    in the next step's peak."""
    size = count * np.dtype(dtype).itemsize
    return np.frombuffer(_anonymous(max(size, 1)), dtype=dtype, count=count)


class _Region:
    """Bytes appended to an anonymous memory map that grows in place (``mremap``, doubling).

    Why not a bytearray or ``array``: growing those reallocates on the heap, where a copy of the
    old block coexists with the new one and freed blocks stay resident; that, not the ids, was a
    third of a big ground truth's peak. Here growth copies nothing, only the pages written are
    resident, and the whole map goes back to the system when its last view is dropped."""

    def __init__(self, size: int = 1 << 16) -> None:
        self.map = _anonymous(size)
        self.used = 0
        self.released = 0  # bytes at the start handed back (release_before)

    def extend(self, data: bytes | memoryview) -> None:
        end = self.used + len(data)
        if end > len(self.map):
            size = max(end, 2 * len(self.map))
            try:
                self.map.resize(size)
            except (OSError, SystemError, ValueError):  # no mremap (not Linux): a new map, one copy
                grown = _anonymous(size)
                grown[:self.used] = self.map[:self.used]
                self.map = grown
        self.map[self.used:end] = data
        self.used = end

    def array(self, dtype: type[np.generic]) -> np.ndarray:
        """What was written, as a (writable) numpy view of the map."""
        return np.frombuffer(self.map, dtype=dtype, count=self.used // np.dtype(dtype).itemsize)

    def release_before(self, end: int) -> None:
        """Hand the whole pages before byte ``end`` back to the system (they read as zeros after)."""
        end -= end % mmap.PAGESIZE
        if end > self.released and hasattr(self.map, "madvise"):
            self.map.madvise(mmap.MADV_DONTNEED, self.released, end - self.released)
            self.released = end


class IdColumn:
    """Ids appended a row at a time. Every :data:`CHUNK_ROWS` rows the chunk's distinct ids go, as
    UTF-8, into one growing text region and their lengths into another; each row keeps a 2-byte
    number (its id among the chunk's distinct ids), or nothing when every id of its chunk is new to
    the chunk (a ground truth names each query once). :meth:`finish` sorts all chunks' ids once
    into :class:`Ids`.

    Why these shapes: memory regions grown in place leave nothing behind (see :class:`_Region`);
    the lengths become the Arrow offsets in place; and sorting, not hashing
    (``unify_dictionaries``, ~60 bytes a distinct id), merges the chunks, since in a ground truth
    nearly every id is distinct. A big file's read then peaks under 3x its size
    (docs/reliability.md, 'Limits')."""

    def __init__(self) -> None:
        self._text = _Region()  # the distinct ids of each chunk, UTF-8, one after the other
        self._lengths = _Region()  # int32: 0, then the bytes of each of them (a line is at most 4 MiB)
        self._lengths.extend(bytes(4))
        self._count = 0  # ids in the text region
        self._rows = _Region()  # uint16: each row of a chunk that repeats an id, its id's number in its chunk
        self._chunks = array("q")  # per chunk: its first id's number, its rows, where its row numbers start (-1: none)
        self._pending: list[str] = []

    def append(self, text: str) -> None:
        self._pending.append(text)
        if len(self._pending) >= CHUNK_ROWS:
            self._pack()

    def _pack(self) -> None:
        if not self._pending:
            return
        first_row: dict[str, int] = {}
        local = [first_row.setdefault(text, len(first_row)) for text in self._pending]
        if len(first_row) == len(local):
            self._chunks.extend((self._count, len(local), -1))
        else:
            self._chunks.extend((self._count, len(local), self._rows.used // 2))
            self._rows.extend(memoryview(np.array(local, dtype=np.uint16)).cast("B"))
        encoded = [text.encode() for text in first_row]
        self._text.extend(b"".join(encoded))
        self._lengths.extend(memoryview(np.fromiter(map(len, encoded), dtype=np.int32, count=len(encoded))).cast("B"))
        self._count += len(encoded)
        self._pending = []

    def finish(self) -> Ids:
        """Every chunk's distinct ids, sorted once; equal neighbours are one id.

        Memory: the text is moved into sorted order a segment at a time, each segment of the
        unsorted text handed back as soon as it is copied, so the text is held about once, not
        twice; beside it a 4-byte number per id (the sort's order, then each id's code) and the
        sort's own indices, freed before anything else is allocated."""
        self._pack()
        count = self._count
        values, offsets = self._values()
        order = _sort_order(values)
        new = _fresh_array(count, np.bool_)  # the first of equal neighbours in sorted order
        new[:1] = True
        for start in range(0, count - 1, BLOCK):
            new[start + 1:start + BLOCK + 1] = _differs_from_previous(values, order[start:start + BLOCK + 1])
        del values
        release_memory()
        code_of, sorted_offsets = _codes_and_offsets(order, new, offsets)
        del order, new
        release_memory()
        text = self._move_sorted(offsets, code_of, sorted_offsets)
        del offsets
        self._text, self._lengths = _Region(), _Region()  # their maps go back to the system
        codes = self._codes(code_of)
        del code_of
        self._rows, self._chunks = _Region(), array("q")
        release_memory()
        kind = pa.LargeStringArray if sorted_offsets.dtype == np.int64 else pa.StringArray
        return Ids(codes, kind.from_buffers(sorted_offsets.size - 1, pa.py_buffer(sorted_offsets), pa.py_buffer(text)))

    def _values(self) -> tuple[pa.Array, np.ndarray]:
        """The text region's ids as an Arrow string array, without copying the text, and its offsets."""
        offsets = self._lengths.array(np.int32)
        if self._text.used < 2**31:  # the lengths become 4-byte offsets in place
            np.cumsum(offsets, out=offsets)
            kind: Any = pa.StringArray
        else:
            offsets, kind = np.cumsum(offsets, dtype=np.int64), pa.LargeStringArray
        values = kind.from_buffers(self._count, pa.py_buffer(offsets), pa.py_buffer(self._text.array(np.uint8)))
        return values, offsets

    def _move_sorted(self, offsets: np.ndarray, code_of: np.ndarray, sorted_offsets: np.ndarray) -> np.ndarray:
        """The distinct ids' text in code order: each id of the text region is copied to where its
        code puts it (equal ids write the same bytes), a segment of about :data:`SEGMENT_BYTES` at a
        time, and each segment handed back once copied."""
        source = self._text.array(np.uint8)
        moved = _fresh_array(int(sorted_offsets[-1]), np.uint8)
        start = 0
        while start < self._count:
            stop = start + int(np.searchsorted(offsets[start:], offsets[start] + SEGMENT_BYTES, side="right")) - 1
            stop = min(max(stop, start + 1), self._count)
            first, last = int(offsets[start]), int(offsets[stop])
            targets = sorted_offsets[code_of[start:stop]].astype(np.int64)
            if stop == start + 1:  # one id (perhaps a long one): a plain copy
                moved[targets[0]:targets[0] + last - first] = source[first:last]
            else:
                where = np.repeat(targets - offsets[start:stop], offsets[start + 1:stop + 1] - offsets[start:stop])
                where += np.arange(first, last)
                moved[where] = source[first:last]
            self._text.release_before(last)
            self._lengths.release_before(stop * offsets.itemsize)
            start = stop
        return moved

    def _codes(self, code_of: np.ndarray) -> np.ndarray:
        """Each row's code, chunk by chunk (``code_of`` itself when no chunk repeats an id)."""
        chunks = np.frombuffer(self._chunks, dtype=np.int64).reshape(-1, 3) if self._chunks else np.zeros((0, 3), int)
        if (chunks[:, 2] < 0).all():
            return code_of
        codes = _fresh_array(int(chunks[:, 1].sum()), code_of.dtype)
        local = self._rows.array(np.uint16)
        row = 0
        for first, rows, at in chunks.tolist():
            codes[row:row + rows] = code_of[first:first + rows] if at < 0 else code_of[local[at:at + rows].astype(np.int64) + first]
            row += rows
        return codes


def merged_values(first: Ids, second: Ids) -> pa.Array:
    """The distinct ids of two columns, sorted: what :func:`shared_codes`' codes number (code ``c`` is
    the text ``merged_values(first, second)[c]``)."""
    fixed = merged_fixed(first, second)
    if fixed is None:
        merged = pc.unique(pa.chunked_array([ids.values.cast(pa.large_string()) for ids in (first, second)]))
        return merged.take(pc.array_sort_indices(merged))
    return text_of_fixed(fixed)


def merged_fixed(first: Ids, second: Ids) -> np.ndarray | None:
    """:func:`merged_values` as fixed-width bytes (:func:`fixed_bytes`; None where those cannot stand
    for the texts): 8 bytes a value fewer than Arrow text, and searchable with numpy."""
    a, b = fixed_bytes(first.values), fixed_bytes(second.values)
    if a is None or b is None:
        return None
    merge = _sorted_merge(a, b)
    if merge is None:
        return None
    first_codes, second_codes, size = merge
    merged = np.empty(size, dtype=a.dtype if a.itemsize >= b.itemsize else b.dtype)
    merged[first_codes] = a
    merged[second_codes] = b  # a value in both lands where it already is
    return merged


def text_of_fixed(fixed: np.ndarray) -> pa.Array:
    """Fixed-width UTF-8 bytes back as Arrow text (the NUL padding dropped, as numpy drops it)."""
    return pa.array(fixed, type=pa.binary(), from_pandas=False).cast(pa.large_string())


def shared_codes(first: Ids, second: Ids) -> tuple[np.ndarray, np.ndarray, int]:
    """Codes of two id columns in one numbering (their values merged, sorted) and its size: equal
    codes exactly when the ids are equal, ordered as the ids are. int32 while the numbering fits:
    a caller combining codes into wider keys says ``dtype=np.int64`` (NumPy keeps int32 arithmetic
    in int32)."""
    a, b = fixed_bytes(first.values), fixed_bytes(second.values)
    merge = None if a is None or b is None else _sorted_merge(a, b)
    del a, b
    if merge is None:
        merged = merged_values(first, second)
        size = len(merged)
        mappings = [pc.index_in(ids.values.cast(pa.large_string()), value_set=merged).to_numpy(zero_copy_only=False)
                    for ids in (first, second)]
        del merged
        release_memory()  # the merge's hash tables: Arrow's pool keeps freed pages otherwise
    else:
        mappings, size = [merge[0], merge[1]], merge[2]
        release_memory()  # the searches' temporaries, before the per-row codes are made
    kind = np.int32 if size < 2**31 else np.int64  # 4 bytes a row while they fit (issue 54: 3M rows, 12 MB saved)
    codes = [mapping.astype(kind)[ids.codes] for mapping, ids in zip(mappings, (first, second))]
    return codes[0], codes[1], size


def _sorted_merge(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """For two sorted arrays of distinct texts (what :class:`Ids` keeps), as :func:`fixed_bytes`: the
    code of each value in their sorted union, and the union's size; None where the values are not
    strictly ascending, and the caller hashes instead (so do callers whose texts fixed-width bytes
    cannot stand for: nulls, a NUL byte, lengths so uneven that the width would cost far more
    than the text).

    Why: hashing a million distinct ids to merge them (``pc.unique``, then ``index_in``) held about
    100 MB of hash tables for 11 MB of text, the peak of a 3M-prediction scoring (issue 54). Both
    lists are sorted already, so binary searches over their UTF-8 bytes (whose order is the code
    point order Python and Arrow sort by) number the union with 8 bytes a value."""
    for values in (a, b):
        if values.size > 1 and not bool((values[1:] > values[:-1]).all()):
            return None
    position = np.searchsorted(a, b)  # a's values below each of b's
    found = position < a.size
    found[found] = a[position[found]] == b[found]
    new_before = np.zeros(b.size + 1, dtype=np.int64)  # b's values missing from a, before each place in b
    np.cumsum(~found, out=new_before[1:])
    first_codes = np.arange(a.size, dtype=np.int64)
    first_codes += new_before[np.searchsorted(b, a)]
    second_codes = position + new_before[:-1]
    second_codes[found] = first_codes[position[found]]
    return first_codes, second_codes, int(a.size + new_before[-1])


def fixed_bytes(values: pa.Array) -> np.ndarray | None:
    """Arrow text as numpy fixed-width bytes (``S<longest>``), or None (see :func:`_sorted_merge`).
    Ids of one length (the usual ``Q000123``) are a view of Arrow's own bytes; others are copied a
    block of rows at a time, so that no full-length index array is made."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks else pa.array([], type=values.type)
    count = len(values)
    if values.null_count or not (pa.types.is_string(values.type) or pa.types.is_large_string(values.type)):
        return None
    if not count:
        return np.zeros(0, dtype="S1")
    buffers = values.buffers()
    wide = np.int64 if pa.types.is_large_string(values.type) else np.int32
    offsets = np.frombuffer(buffers[1], dtype=wide, count=count + 1, offset=values.offset * np.dtype(wide).itemsize)
    data = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, dtype=np.uint8)
    data = data[int(offsets[0]):int(offsets[-1])]
    lengths = np.diff(offsets)
    shortest, width = int(lengths.min()), max(1, int(lengths.max()))
    if count * width > 4 * data.size + (1 << 20) or (data.size and not data.all()):  # numpy drops trailing NULs
        return None
    if shortest == width:
        return data.reshape(count, width).view(f"S{width}").ravel()
    fixed = np.zeros((count, width), dtype=np.uint8)
    for start in range(0, count, BLOCK * 16):
        block_lengths = lengths[start:start + BLOCK * 16]
        starts = offsets[start:start + block_lengths.size].astype(np.int64) - int(offsets[0])
        for place in range(width):
            rows = np.flatnonzero(block_lengths > place)
            fixed[start + rows, place] = data[starts[rows] + place]
    return fixed.view(f"S{width}").ravel()
