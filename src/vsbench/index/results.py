"""Sharded search over the persisted indexes of :mod:`vsbench.index.store`, and its result files.

Each search task (:func:`search_shard`: query shard i x reference shard j; or :func:`search_merged`:
query shard i x the merged on-disk index) writes one file per codec under the search folder::

    <search>/<request>/<codec-slug>/q<i>-of-<N>.r<j>-of-<M>.npz     (or q<i>-of-<N>.merged-of-<M>.npz)

holding each variant's ``(n_queries_i, k)`` similarities and global reference ids, its key and a
content digest; :func:`collect` merges them into each query's global top ``k``
(:func:`vsbench.index.codec.merge_found`). A result is kept when its key (the index key, the sha256
of every index file it read, the queries' digest, k, variants, search settings) matches and its
content passes :func:`_check_result`; anything else is searched again (a task) or named (the merge).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from vsbench.index.codec import (
    SearchError,
    TrainedCodec,
    check_finite,
    merge_found,
    search_filled,
    shifted,
    stored_vectors,
    to_device,
    tune,
)
from vsbench.index.plan import SearchRequest, SearchResults, array_digest
from vsbench.index.search import use_gpu_now
from vsbench.index.store import INDEX_JSON, IndexInfo, codec_slug, load_index_info, load_trained, query_bounds
from vsbench.io.inputs import load_arrays, parse_json
from vsbench.io.storage import atomic_write_bytes

logger = logging.getLogger(__name__)


def search_shard(request: SearchRequest, index_folder: Path, out_folder: Path, *, query_shard: int,
                 query_shards: int, reference_shard: int, use_gpu: bool | None = None) -> list[Path]:
    """Search queries ``query_shard`` of ``query_shards`` in reference shard ``reference_shard`` of
    every codec; writes one result file per codec (kept when already there for the same inputs)."""
    return _search(request, index_folder, out_folder, query_shard=query_shard, query_shards=query_shards,
                   reference_shard=reference_shard, use_gpu=use_gpu)


def search_merged(request: SearchRequest, index_folder: Path, out_folder: Path, *, query_shard: int,
                  query_shards: int, use_gpu: bool | None = None) -> list[Path]:
    """Search queries ``query_shard`` of ``query_shards`` in the merged on-disk index of every codec
    (``finish_index(merge_ondisk=True)``): one probe of the whole gallery, its lists mapped from disk,
    instead of one per reference shard; writes ``q<i>-of-<N>.merged-of-<M>.npz`` per codec, in global
    reference ids (kept when already there for the same inputs)."""
    return _search(request, index_folder, out_folder, query_shard=query_shard, query_shards=query_shards,
                   reference_shard=None, use_gpu=use_gpu)


def _search(request: SearchRequest, index_folder: Path, out_folder: Path, *, query_shard: int, query_shards: int,
            reference_shard: int | None, use_gpu: bool | None) -> list[Path]:
    """One search task: reference shard ``reference_shard``, or the merged index (``None``)."""
    queries = np.ascontiguousarray(request.queries, dtype=np.float32)
    start, stop = query_bounds(len(queries), query_shards)[query_shard]
    q = queries[start:stop]
    check_finite(q, f"queries {start}..{stop - 1}")
    on_gpu = use_gpu_now(use_gpu)
    written = []
    for codec in request.codec_list:
        info = load_index_info(request, index_folder, codec, reference_shard=reference_shard)
        shards = info.reference_shards
        if reference_shard is not None and not 0 <= reference_shard < len(shards):
            raise SearchError(f"reference shard {reference_shard} does not exist: the index of codec {codec!r} "
                              f"has {len(shards)} reference shard(s)")
        if reference_shard is None and info.merged_names is None:
            info.read_merged()  # refused, naming index.json and the fix
        bounds = (0, info.meta["count"]) if reference_shard is None else shards[reference_shard]
        target = _result_path(out_folder, request, codec, query_shard, query_shards, reference_shard, len(shards))
        key = _search_key(request, info, codec, start, stop, reference_shard, array_digest(q))
        _, problem = _checked_result(target, key, len(q), bounds, request)
        if problem is None:
            logger.info("search %s: kept (same inputs)", target)
            written.append(target)
            continue
        if target.exists():
            logger.warning("search %s: searched again: %s", target, problem)
        if reference_shard is None:
            cpu_index, path = info.read_merged(), info.folder / info.merged_names[0]
        else:
            cpu_index, path = info.read(info.shard_path(reference_shard).name, mmap=not on_gpu), \
                info.shard_path(reference_shard)
        shard_start, shard_stop = bounds
        if cpu_index.ntotal != shard_stop - shard_start or cpu_index.d != info.meta["projected_dim"]:
            raise SearchError(f"{path}: holds {cpu_index.ntotal} vectors of "
                              f"{cpu_index.d} dimensions, {INDEX_JSON} says {shard_stop - shard_start} of "
                              f"{info.meta['projected_dim']}; re-run the index step (vsbench similarity index)")
        trained = load_trained(info, request, cpu_index)
        # This shard's query rows through the transforms, in the blocks a search of every query
        # projects them in (see codec.projected_blocks): the floats of one search, at 1/N the work.
        projected = trained.project_rows(queries, start, stop, "queries") if trained.transforms else q
        device_k = max(request.result_k, request.norm_k)
        k = min(request.k, shard_stop - shard_start)
        references = stored_vectors(cpu_index) if request.norms and trained.exhaustive_ip else None
        index = tune(_on_device(cpu_index, on_gpu, trained, device_k), request.search_params, codec)
        train_index = _on_device(info.read("train.faiss", mmap=not on_gpu),
                                 on_gpu, trained, device_k) if request.norms else None
        raw, normalized = search_filled(trained, index, projected, k, score_norms=request.norms,
                                        raw=request.unnormalized, train_index=train_index, references=references,
                                        on_gpu=on_gpu)
        found = ([raw] if raw is not None else []) + normalized
        arrays = {}
        for number, part in enumerate(found):
            similarity, ids = shifted(part, shard_start, request.result_k)
            arrays[f"similarity_{number}"], arrays[f"ids_{number}"] = similarity, ids
        _write_npz(target, key, arrays)
        written.append(target)
    return written


def collect(request: SearchRequest, index_folder: Path, search_folder: Path, *, query_shards: int,
            merged: bool = False) -> SearchResults:
    """Merge every (query shard, reference shard) result into the request's results: for each query
    the global top ``k`` over the reference shards, the query shards one after another. Missing or
    stale shard results are an error naming each of them. ``merged``: the results are
    :func:`search_merged`'s, one per query shard, already over the whole gallery."""
    per_codec: dict[str, list[list[tuple[np.ndarray, np.ndarray]]]] = {}
    problems = []
    for codec in request.codec_list:
        info = load_index_info(request, index_folder, codec)
        reference_shards = len(info.reference_shards)
        variants = [list(v) for v in request.variants if v[0] == codec]
        merged_rows: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in variants]
        queries = np.ascontiguousarray(request.queries, dtype=np.float32)
        for query_shard, (start, stop) in enumerate(query_bounds(len(request.queries), query_shards)):
            parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in variants]
            queries_digest = array_digest(queries[start:stop])
            for reference_shard in [None] if merged else range(reference_shards):
                path = _result_path(search_folder, request, codec, query_shard, query_shards, reference_shard,
                                    reference_shards)
                if merged and info.merged_names is None:
                    info.read_merged()  # refused, naming index.json and the fix
                expected = _search_key(request, info, codec, start, stop, reference_shard, queries_digest)
                bounds = (0, info.meta["count"]) if reference_shard is None else info.reference_shards[reference_shard]
                arrays, problem = _checked_result(path, expected, stop - start, bounds, request)
                if arrays is None:
                    problems.append(f"{path} of codec {codec!r}: {problem}")
                    continue
                for number in range(len(variants)):
                    parts[number].append((arrays[f"similarity_{number}"], arrays[f"ids_{number}"]))
            if not problems:
                for number in range(len(variants)):
                    merged_rows[number].append(merge_found(parts[number], request.result_k, request.metric))
        per_codec[codec] = merged_rows
    if problems:
        raise SearchError(f"search {request.name!r}: {len(problems)} shard result(s) missing, stale or damaged: "
                          + "; ".join(problems[:8]) + ("; ..." if len(problems) > 8 else "")
                          + ". Re-run the search step for those shards (a re-run keeps the finished ones).")
    results: SearchResults = {}
    for codec, label in request.variants:
        number = [v for v in request.variants if v[0] == codec].index((codec, label))
        rows = per_codec[codec][number]
        results[(codec, label)] = (np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows]))
    return results


def _search_key(request: SearchRequest, info: IndexInfo, codec: str, start: int, stop: int,
                reference_shard: int | None, queries_digest: str) -> dict[str, Any]:
    """What a search result is for: the index, the sha256 of every index file the search read (the
    transforms, its reference shard or both merged files, the training rows), the query rows and their
    digest, k, the variants and the search-time settings (JSON-normalized, as it is read back)."""
    names = [f"transform-{n}.faiss" for n in range(info.meta["transforms"])]
    names += info.merged_names if reference_shard is None else [info.shard_path(reference_shard).name]
    if request.norms:
        names.append("train.faiss")
    key = {"index": info.meta["key"], "index_files": {name: info.file_digest(name) for name in names},
           "queries": [start, stop], "queries_digest": queries_digest, "k": request.k,
           "variants": [list(v) for v in request.variants if v[0] == codec], "search_params": request.search_params}
    return json.loads(json.dumps(key))


def _checked_result(path: Path, key: dict[str, Any], rows: int, bounds: Sequence[int],
                    request: SearchRequest) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """(the arrays, None) when the search result at ``path`` is for ``key`` and sound, else
    (None, what is wrong with it)."""
    if not path.exists():
        return None, "missing"
    loaded = _read_npz(path)
    if loaded is None:
        return None, "unreadable, or its content is not what its digest records"
    stored, arrays = loaded
    if stored != key:
        differing = sorted(field for field in set(key) | set(stored) if key.get(field) != stored.get(field))
        return None, f"for other inputs ({', '.join(differing)} differ)"
    problem = _check_result(arrays, key["variants"], rows, bounds, request)
    return (None, problem) if problem else (arrays, None)


def _check_result(arrays: dict[str, np.ndarray], variants: Sequence[Any], rows: int, bounds: Sequence[int],
                  request: SearchRequest) -> str | None:
    """None when each variant's arrays are what :func:`search_shard` writes: ``(rows, columns)``
    float32 similarities and int64 ids, ids -1 (an empty slot, score -inf) or inside the shard's
    ``[start, stop)``, and every filled slot's score finite."""
    start, stop = bounds
    columns = max(request.result_k, min(request.k, stop - start))
    count = len(variants)
    names = {f"{kind}_{n}" for n in range(count) for kind in ("similarity", "ids")}
    if not names <= set(arrays):
        return f"arrays {sorted(names - set(arrays))} missing"
    for number in range(count):
        similarity, ids = arrays[f"similarity_{number}"], arrays[f"ids_{number}"]
        if similarity.dtype != np.float32 or ids.dtype != np.int64:
            return f"variant {number}: {similarity.dtype} scores and {ids.dtype} ids, not float32 and int64"
        if similarity.ndim != 2 or similarity.shape != ids.shape or similarity.shape != (rows, columns):
            return f"variant {number}: arrays of shape {similarity.shape} and {ids.shape}, expected ({rows}, {columns})"
        filled = ids >= 0
        if ((ids < -1) | (filled & ((ids < start) | (ids >= stop)))).any():
            return f"variant {number}: ids outside -1 and this shard's {start}..{stop - 1}"
        if not np.isfinite(similarity[filled]).all() or np.isnan(similarity).any():
            return f"variant {number}: NaN or infinite scores"
    return None


def _on_device(index: faiss.Index, on_gpu: bool, trained: TrainedCodec, k: int) -> faiss.Index:
    return to_device(index, on_gpu, trained.codec, k)


def _result_path(folder: Path, request: SearchRequest, codec: str, query_shard: int, query_shards: int,
                 reference_shard: int | None, reference_shards: int) -> Path:
    part = f"merged-of-{reference_shards}" if reference_shard is None else f"r{reference_shard}-of-{reference_shards}"
    return folder / request.name / codec_slug(codec) / f"q{query_shard}-of-{query_shards}.{part}.npz"


def _content_digest(key_json: str, arrays: dict[str, np.ndarray]) -> str:
    """sha256 over a search result's key and arrays (names, dtypes, shapes, bytes)."""
    digest = hashlib.sha256(key_json.encode("utf-8"))
    for name in sorted(arrays):
        array = np.ascontiguousarray(arrays[name])
        digest.update(f"\n{name}|{array.dtype.str}|{array.shape}\n".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


def _write_npz(path: Path, key: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    import io

    key_json = json.dumps(key, sort_keys=True)
    buffer = io.BytesIO()
    np.savez(buffer, key=np.asarray(key_json), content_sha256=np.asarray(_content_digest(key_json, arrays)),
             **arrays)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, buffer.getvalue())


def _read_npz(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """A search result file, or None when missing, unreadable, or not what its content digest says
    (it is then searched again, or named by the merge)."""
    try:
        data = load_arrays(path)
        key_json, recorded = str(data.pop("key")), str(data.pop("content_sha256"))
        if _content_digest(key_json, data) != recorded:
            return None
        key = parse_json(path, key_json)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (key, data) if isinstance(key, dict) else None


def shard_tasks(query_shards: int, reference_shards: int) -> list[tuple[int, int]]:
    """The (query shard, reference shard) pairs a search fans out over, task ``t`` being
    ``divmod(t, reference_shards)``."""
    return [divmod(task, reference_shards) for task in range(query_shards * reference_shards)]
