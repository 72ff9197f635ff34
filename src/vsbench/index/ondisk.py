"""IVF reference shards merged into one index whose inverted lists live on disk.

Why: a gallery split into M reference shards is searched by N x M tasks, each probing ``nprobe``
lists of its own shard and re-reading the coarse quantizer, the transforms and the queries; the
merge then keeps each query's top k. Every shard of an IVF codec holds a copy of one trained
codec, so its lists are the same lists, cut by rows: concatenated list by list they are the lists
of one index over every row (the shards fill whole aligned blocks, so the codes are too). FAISS's
``OnDiskInvertedLists`` keeps such lists in one file that a search maps into memory, so one search
task probes the whole gallery once, with no pod ever holding the gallery (what FAISS's own
``contrib/ondisk.py`` ``merge_ondisk`` builds).

Two files: ``<name>.ivfdata`` (every list's codes then ids, packed) and ``<name>.faiss`` (the
trained IVF index, its quantizer and the lists' sizes and offsets in that file). The ``.faiss``
file records the data file by its base name only, and :func:`read_merged` maps the data file
beside it, so the folder can be mounted anywhere (FAISS's ``IO_FLAG_ONDISK_SAME_DIR`` does the
same, but prints a line to stdout on every read).

Ids are shifted here, not by FAISS: ``merge_from_multiple(shift_ids=True)`` offsets shard i by the
offset of shard i-1 plus shard i's *own* size (faiss 1.15; measured: 1,000 rows in shards of 300,
500, 200 come out as 800 distinct ids), which is right only when every shard has the same size,
and reference shards on FAISS's tiles seldom do. Each shard's entries are written at their place in
their list with ``start_j`` added, so the merged index answers in global reference ids, the ones the
sharded search's merge gives.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import faiss
import numpy as np

from vsbench.index.settings import SearchError, env_count


def not_mergeable(index: faiss.Index) -> str | None:
    """Why ``index`` (a trained or filled final index) cannot be merged on disk, or None when it can:
    an IVF index whose inverted lists are plain arrays (not IVFPQR, whose refinement codes live
    outside its lists, nor a fast-scan IVF, whose lists are interleaved in blocks)."""
    final = faiss.downcast_index(index)  # a view: ``index`` keeps owning it
    if not isinstance(final, faiss.IndexIVF):
        return f"its final index is a {type(final).__name__}, not an IVF index"
    if isinstance(final, faiss.IndexIVFPQR):
        return "IndexIVFPQR keeps its refinement codes outside its inverted lists"
    if isinstance(final, faiss.IndexIVFFastScan):
        return "a fast-scan IVF interleaves its codes in blocks, which on-disk lists cannot hold"
    lists = faiss.downcast_InvertedLists(final.invlists)
    if not isinstance(lists, (faiss.ArrayInvertedLists, faiss.OnDiskInvertedLists)):
        return f"its inverted lists are {type(lists).__name__} (a fast-scan IVF), not arrays"
    return None


def merge_shards(trained: faiss.Index, shards: Sequence[tuple[faiss.Index, int]], faiss_path: Path,
                 data_path: Path, *, after_data: Callable[[], None] | None = None) -> int:
    """Write the merged on-disk index of ``shards`` (each a filled copy of ``trained`` and the global
    id of its first row) as ``data_path`` and ``faiss_path``; returns the vectors it holds.

    List by list, shard 0's entries come first, then shard 1's..., as one index adding the rows in
    order holds them. Both files are written under temporary names and renamed into place, the data
    file first; a process killed before both renames leaves no pair whose digests a record holds
    (the caller records them after this returns). ``after_data`` runs once the data file is written
    (tests kill the process there)."""
    index = faiss.clone_index(trained)
    ivf = faiss.extract_index_ivf(index)
    if ivf.ntotal != 0:
        raise SearchError(f"{faiss_path}: the trained index to merge into holds {ivf.ntotal} vectors, not 0")
    shard_lists = [faiss.extract_index_ivf(shard).invlists for shard, _ in shards]
    for lists in shard_lists:
        if lists.nlist != ivf.nlist or lists.code_size != ivf.invlists.code_size:
            raise SearchError(f"{faiss_path}: a shard has {lists.nlist} lists of {lists.code_size}-byte codes, "
                              f"the trained index {ivf.nlist} of {ivf.invlists.code_size}")
    pid = os.getpid()
    data_temporary = data_path.with_name(f".{data_path.name}.{pid}.tmp")
    faiss_temporary = faiss_path.with_name(f".{faiss_path.name}.{pid}.tmp")
    try:
        merged = faiss.OnDiskInvertedLists(ivf.nlist, ivf.invlists.code_size, str(data_temporary))
        ntotal = _fill_lists(merged, shard_lists, [start for _, start in shards])
        if after_data is not None:
            after_data()
        merged.filename = data_path.name  # read back beside the .faiss file (read_merged), wherever that is
        ivf.replace_invlists(merged, True)
        merged.this.disown()  # the index owns (and frees) the lists now
        index.ntotal = ivf.ntotal = ntotal
        faiss.write_index(index, str(faiss_temporary))
        del index, ivf  # unmaps the data file before it is renamed and hashed
        os.replace(data_temporary, data_path)
        os.replace(faiss_temporary, faiss_path)
    finally:
        data_temporary.unlink(missing_ok=True)
        faiss_temporary.unlink(missing_ok=True)
    return ntotal


def _fill_lists(merged: faiss.OnDiskInvertedLists, shard_lists: Sequence[faiss.InvertedLists],
                starts: Sequence[int]) -> int:
    """Lay out ``merged`` packed (each list sized to the sum of the shards' lists) and copy each
    shard's entries of each list in place, its ids shifted by its first row's global id."""
    nlist = merged.nlist
    sizes = np.zeros(nlist, dtype=np.uint64)
    per_shard = []
    for lists in shard_lists:
        counts = np.fromiter((lists.list_size(number) for number in range(nlist)), dtype=np.uint64, count=nlist)
        per_shard.append(counts)
        sizes += counts
    merged.set_all_lists_sizes(faiss.swig_ptr(sizes))
    entry = merged.code_size + 8  # each entry: its code and its int64 id
    with _faiss_chatter_to_stderr():  # FAISS prints "resizing <file> to <n> bytes" on stdout
        merged.update_totsize(max(1, int(sizes.sum()) * entry))  # FAISS maps the file: an empty one cannot be
    for number in range(nlist):
        offset = 0
        for lists, counts, start in zip(shard_lists, per_shard, starts):
            count = int(counts[number])
            if count == 0:
                continue
            ids = faiss.rev_swig_ptr(lists.get_ids(number), count).astype(np.int64) + start
            merged.update_entries(number, offset, count, faiss.swig_ptr(ids), lists.get_codes(number))
            offset += count
    return int(sizes.sum())


@contextmanager
def _faiss_chatter_to_stderr() -> Iterator[None]:
    """C-level stdout goes to stderr meanwhile: a command's stdout is its answer (tables, one line per
    index), and FAISS's progress lines are not part of it."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        yield
    finally:
        ctypes.CDLL(None).fflush(None)
        os.dup2(saved, 1)
        os.close(saved)


def read_merged(faiss_path: Path, data_path: Path) -> faiss.Index:
    """The merged index of ``faiss_path``, its inverted lists mapped read-only from ``data_path``
    (the caller has checked both files' digests: the lists' offsets in the one must fit the other)."""
    try:
        index = faiss.read_index(str(faiss_path), faiss.IO_FLAG_READ_ONLY | faiss.IO_FLAG_SKIP_IVF_DATA)
    except RuntimeError as exc:
        raise SearchError(f"{faiss_path}: not a readable FAISS index ({str(exc).strip().splitlines()[-1]})") from None
    ivf = faiss.extract_index_ivf(index)
    lists = faiss.downcast_InvertedLists(ivf.invlists)
    if not isinstance(lists, faiss.OnDiskInvertedLists):
        raise SearchError(f"{faiss_path}: holds {type(lists).__name__}, not on-disk inverted lists; re-run the "
                          "index step's finish with --merge-ondisk")
    size = data_path.stat().st_size
    if lists.totsize != size:
        raise SearchError(f"{data_path}: {size} bytes, {faiss_path.name} maps {lists.totsize}; re-run the index "
                          "step's finish with --merge-ondisk")
    lists.filename = str(data_path)
    lists.read_only = True
    lists.prefetch_nthread = prefetch_threads()
    lists.do_mmap()
    return index


def prefetch_threads() -> int:
    """Threads FAISS starts on each search to read the probed lists ahead of the scan
    (``VSBENCH_ONDISK_PREFETCH_THREADS``, default 0: none).

    Why 0: FAISS's default, 32, reads every probed list once more beside the search; with the data
    file in the page cache that is the scan's memory traffic twice, on the search's own cores (1 M x
    128-d IVF1024,Flat, nprobe 16, 2 cores: the merged search at 0.83x the 4-shard one with it, see
    docs/scale.md). Set it on a volume where a list's first read waits for the network or a disk."""
    return env_count("VSBENCH_ONDISK_PREFETCH_THREADS", 0, "threads")
