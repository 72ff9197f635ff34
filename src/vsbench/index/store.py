"""Persisted indexes: a :class:`~vsbench.index.plan.SearchRequest` answered by separate steps (index,
then searches fanned out, then a merge: :mod:`vsbench.index.results`), each of which may run on its
own node.

Layout, one folder per (request, codec) under the index folder::

    <index>/<request>/<codec-slug>/
        train.json                       the trained codec's key (codec, metric, dims, count, ids and
                                         training rows digests) and files; written last by training
        transform-<n>.faiss              the trained transforms (PCA, L2norm...), in order
        trained.faiss                    the trained, empty final index (what each fill copies)
        train.faiss                      the training rows (score normalization only)
        reference-<j>-of-<M>.faiss       reference shard j: a copy of the trained final index
                                         holding references [start_j, stop_j)
        reference-<j>-of-<M>.json        what shard j was filled from (trained codec, bounds, ids,
                                         rows' source) and its file's digest; written after it
        merged-of-<M>.faiss              (IVF codecs, ``merge_ondisk``) the shards merged into one
        merged-of-<M>.ivfdata            index, its inverted lists on disk (vsbench.index.ondisk)
        merged-of-<M>.json               what it was merged from (each shard file's sha256) and both
                                         files' digests; written after them
        index.json                       what searches read (key, shards, every file's digest);
                                         written last, by :func:`finish_index`

The index step is three tasks so that no process holds the gallery: :func:`train_index` (once),
:func:`fill_shard` (one per reference shard, on any node, reading only its rows) and
:func:`finish_index`; :func:`build_index` runs the three in one process.

Searching these indexes, and the result files searches write, is :mod:`vsbench.index.results`.

* **Reuse**: a trained codec whose ``train.json`` key equals the request's and whose files have
  their recorded digests is reused; so is each shard whose record names that trained codec and
  these rows and whose file has its recorded digest; anything else is redone (that shard only),
  with one line naming the file and why. A re-run after a failure redoes only what is missing or damaged.
* **Checks**: a search refuses an index built for other descriptors, naming the difference
  (dimension, reference ids digest, codec, metric, shards), shard bounds that are not the ones
  ``count`` and the shard count give, and an index file whose sha256 is not the recorded one (the
  fix: re-run the index step); a merge names every missing, stale or damaged result file.
* **Large galleries**: shard index files of ``VSBENCH_MMAP_MIN_BYTES`` (default 1 GiB) or more are
  read memory-mapped on the CPU (``IO_FLAG_MMAP`` maps an IVF index's inverted lists,
  ``IO_FLAG_MMAP_IFC`` a flat or PQ index's codes), so a search's resident memory is what it touches,
  not the gallery's size. Smaller files are read whole: searching mapped lists costs page faults
  (up to 1.4x the search time of an in-memory 42 MB IVF-PQ index, bench/gallery.py), which only pays
  when the file would not fit comfortably. On a GPU they are read whole and moved there.
* **Writes are atomic** (a temporary file renamed), ``index.json`` last, so a killed step leaves no
  index that looks complete.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from vsbench import __version__
from vsbench.index.codec import (
    ENCODE_BLOCK,
    SearchError,
    TrainedCodec,
    fill,
    fill_rows,
    train_codec,
)
from vsbench.index.ondisk import merge_shards, not_mergeable, read_merged
from vsbench.index.plan import SearchRequest, array_digest, ids_digest
from vsbench.index.search import use_gpu_now, validated
from vsbench.index.settings import env_count
from vsbench.io.features import MappedRows, row_block
from vsbench.io.inputs import read_json
from vsbench.io.storage import atomic_write_json, file_sha256, remember_verified, sha256_matches

logger = logging.getLogger(__name__)

INDEX_JSON = "index.json"
FORMAT = 3  # 2: index.json records each file's size and sha256; search results carry a content digest;
# 3: trained once (train.json), filled per shard (reference-<j>-of-<M>.json), keyed per shard (shard_rows)


def codec_slug(codec: str) -> str:
    """``PCAW512,L2norm,Flat`` -> ``PCAW512_L2norm_Flat``: the codec's folder name."""
    return "".join(c if c.isalnum() else "_" for c in codec)


# Reference shard bounds fall on multiples of these where the rows allow (see shard_bounds): FAISS's
# exhaustive search computes distances in tiles of 1,024 references from the start of what it is
# given, and a BLAS product rounds a distance's last bit by where the pair sits in its tile
# (measured: one of 10,000 queries of a 1 M x 128-d Flat gallery in 4 array_split shards ordered two
# near-equal references the other way; shards starting on a tile edge give every distance one
# search's bits). 65,536 also makes a fill read whole encode blocks (codec.ENCODE_BLOCK). Query
# shards cannot be made to: a distance's bits also depend on the size of the query batch.
REFERENCE_ALIGN = (65_536, 1_024)


def shard_bounds(count: int, shards: int, align: tuple[int, ...] = ()) -> list[tuple[int, int]]:
    """``[start, stop)`` of each of ``shards`` contiguous parts of ``count`` rows.

    With ``align``, the inner bounds are the nearest multiples of the first alignment that leaves
    each part at least that many rows (``count >= alignment x shards``); otherwise, and without
    ``align``, sizes differ by at most one (``numpy.array_split``'s rule). An empty part is refused."""
    if not isinstance(shards, int) or shards < 1:
        raise SearchError(f"shards must be a positive integer, got {shards!r}")
    if shards > count:
        raise SearchError(f"{shards} shards for {count} rows: every shard needs at least one row")
    for unit in align:
        if count >= unit * shards:
            cuts = [0] + [round(j * count / shards / unit) * unit for j in range(1, shards)] + [count]
            return [(cuts[j], cuts[j + 1]) for j in range(shards)]
    base, extra = divmod(count, shards)
    bounds, start = [], 0
    for shard in range(shards):
        stop = start + base + (shard < extra)
        bounds.append((start, stop))
        start = stop
    return bounds


def reference_bounds(count: int, shards: int) -> list[tuple[int, int]]:
    """The reference shards' bounds: :func:`shard_bounds` on FAISS's database tiles."""
    return shard_bounds(count, shards, REFERENCE_ALIGN)


def query_bounds(count: int, shards: int) -> list[tuple[int, int]]:
    """The query shards' bounds: :func:`shard_bounds`'s even split."""
    return shard_bounds(count, shards)


@dataclass(frozen=True)
class IndexInfo:
    """A persisted codec index: its folder and its ``index.json``."""

    folder: Path
    meta: dict[str, Any]

    @property
    def reference_shards(self) -> list[tuple[int, int]]:
        return [tuple(bounds) for bounds in self.meta["reference_shards"]]

    @property
    def inverted_lists(self) -> bool:
        """Whether the final index is an IVF one (its lists, not its codes, are what gets mapped)."""
        return "IVF" in self.meta.get("final_index", "")

    def shard_path(self, shard: int) -> Path:
        return self.folder / f"reference-{shard}-of-{len(self.reference_shards)}.faiss"

    def file_digest(self, name: str) -> str:
        return self.meta["files"][name]["sha256"]

    @property
    def merged_names(self) -> tuple[str, str] | None:
        """The merged on-disk index's ``.faiss`` and ``.ivfdata`` names, when ``index.json`` records one."""
        return merged_names(len(self.reference_shards)) if self.meta.get("merged") else None

    def read_merged(self) -> faiss.Index:
        """The merged on-disk index, refused unless both of its files have their recorded size and
        sha256 (a data file that is not the one its ``.faiss`` file was written with is never mapped)."""
        names = self.merged_names
        if names is None:
            raise SearchError(f"{self.folder / INDEX_JSON}: records no merged index; run vsbench similarity index "
                              "--finish --merge-ondisk (IVF codecs), or search without --merge-ondisk")
        faiss_path, data_path = (self._verified(name) for name in names)
        return read_merged(faiss_path, data_path)

    def read(self, name: str, *, mmap: bool, record: str = INDEX_JSON) -> faiss.Index:
        """Index file ``name`` of this folder, refused unless its size and sha256 are those
        ``index.json`` (or ``record``) records: a shard swapped, replaced or damaged after the index
        step never answers a search."""
        return _read_index(self._verified(name, record), mmap=mmap, inverted_lists=self.inverted_lists)

    def _verified(self, name: str, record: str = INDEX_JSON) -> Path:
        """The path of file ``name``, refused unless its size and sha256 are the recorded ones."""
        path = self.folder / name
        problem = _file_problem(path, self.meta["files"].get(name), record=record)
        if problem:
            raise SearchError(f"{path}: {problem}; re-run the index step (vsbench similarity index), which "
                              "rebuilds what is damaged")
        return path

    def read_transform(self, number: int, record: str = INDEX_JSON) -> faiss.VectorTransform:
        path = self._verified(f"transform-{number}.faiss", record)
        try:
            return faiss.read_VectorTransform(str(path))
        except RuntimeError as exc:
            raise SearchError(f"{path}: not a readable FAISS transform ({str(exc).strip().splitlines()[-1]})") from None


TRAIN_JSON = "train.json"
TRAINED_FAISS = "trained.faiss"


def train_key(request: SearchRequest, codec: str, *, content: bool = True) -> dict[str, Any]:
    """What a trained codec is for: the codec, the metric, the descriptors' dimension, count and
    ids, and (``content``) the training rows' digest. Two trainings with equal keys are
    interchangeable; a fill task, which has no training rows, checks the cheap part. The shard
    count is not in it: one training serves any number of shards (a re-sharded gallery is only
    filled again)."""
    key = {
        "format": FORMAT,
        "codec": codec,
        "metric": request.metric,
        "dim": int(request.references.shape[1]),
        "count": int(len(request.references)),
        "ids_digest": request.ids_digest,
        "keeps_train": bool(request.norms),
    }
    if content:
        key.update(train_digest=array_digest(request.train),
                   train_count=0 if request.train is None else int(len(request.train)))
    return key


def shard_rows_key(references: np.ndarray | MappedRows, start: int, stop: int) -> str:
    """What reference rows ``[start, stop)`` are: for rows read in place from the embed step's files
    (:class:`~vsbench.io.features.MappedRows`), a digest of each file's name, its recorded sha256 and
    the rows taken, known without reading a row (the files are verified when a fill reads them);
    for rows in memory, the digest of their float32 bytes. A reused index shard is keyed on it."""
    if isinstance(references, MappedRows):
        sources = json.dumps(references.source_key(start, stop), sort_keys=True)
        return "files:" + hashlib.sha256(sources.encode("utf-8")).hexdigest()
    digest = hashlib.sha256(repr((stop - start, int(references.shape[1]))).encode())
    for lo in range(start, stop, ENCODE_BLOCK):
        digest.update(memoryview(row_block(references, lo, min(lo + ENCODE_BLOCK, stop))).cast("B"))
    return "rows:" + digest.hexdigest()


def index_key(request: SearchRequest, codec: str, reference_shards: int, *, content: bool = True) -> dict[str, Any]:
    """Everything that makes an index what it is; two builds with equal keys are interchangeable.

    ``content=False`` leaves out the digests of the descriptors themselves: what a search checks an
    index against is the cheap part (codec, metric, dimension, count, the ids' digest), while the
    index step, deciding whether to reuse, checks everything: the training rows' digest and each
    reference shard's :func:`shard_rows_key`.
    """
    key = {**train_key(request, codec, content=content), "reference_shards": reference_shards}
    if content:
        bounds = reference_bounds(len(request.references), reference_shards)
        key["shard_rows"] = [shard_rows_key(request.references, start, stop) for start, stop in bounds]
    return key


def build_index(request: SearchRequest, folder: Path, *, reference_shards: int = 1,
                use_gpu: bool | None = None, merge_ondisk: bool = False) -> list[IndexInfo]:
    """Train each codec of ``request`` once and persist it, its references split into
    ``reference_shards`` indexes: :func:`train_index`, :func:`fill_shard` for every shard, then
    :func:`finish_index` (``merge_ondisk``: with the shards merged into one on-disk IVF index), in
    this process (a pipeline runs them as separate tasks). What is already there for the same
    inputs is reused, shard by shard."""
    infos = []
    for codec in request.codec_list:
        trained = train_index(request, folder, codec, reference_shards=reference_shards, use_gpu=use_gpu)
        kept = [fill_shard(request, folder, codec, shard, reference_shards=reference_shards,
                           use_gpu=use_gpu)["kept"] for shard in range(reference_shards)]
        infos.append(finish_index(request, folder, codec, reference_shards=reference_shards,
                                  reused=trained["reused"] and all(kept), merge_ondisk=merge_ondisk))
    return infos


def _checked_train_inputs(request: SearchRequest) -> tuple[np.ndarray, np.ndarray | None]:
    """Queries and training rows checked as a search checks them; the references only for their
    shape here (the fill tasks check each row they read: the gallery is not read whole anywhere)."""
    references = request.references
    dim = int(request.queries.shape[1]) if np.ndim(request.queries) == 2 else None
    if np.ndim(references) != 2 or len(references) == 0 or references.shape[1] == 0:
        raise SearchError(f"references must be a non-empty 2-D array (rows x dims), got shape "
                          f"{getattr(references, 'shape', None)}")
    if not np.issubdtype(references.dtype, np.floating):
        raise SearchError(f"references must hold floating-point values, got dtype {references.dtype}")
    if dim is not None and references.shape[1] != dim:
        raise SearchError(f"references have {references.shape[1]} dims but queries have {dim}")
    q, _, t = validated(request.queries, references[:1], request.train, request.norms)
    return q, t


def train_index(request: SearchRequest, folder: Path, codec: str, *, reference_shards: int = 1,
                use_gpu: bool | None = None) -> dict[str, Any]:
    """The index step's first task: train ``codec`` once on the training rows and write it,
    trained and empty (its transforms, ``trained.faiss``, and ``train.faiss`` for score
    normalization), with ``train.json`` last: the key it was trained for and each file's size and
    sha256. Reused when ``train.json`` holds the same key and every file its recorded digest.
    Returns ``train.json``'s content and ``reused``."""
    _, t = _checked_train_inputs(request)
    reference_bounds(len(request.references), reference_shards)  # a shard count the gallery cannot take is named now
    on_gpu = use_gpu_now(use_gpu)
    target = folder / request.name / codec_slug(codec)
    key = train_key(request, codec)
    existing = _read_meta(target, TRAIN_JSON)
    if existing is not None and existing.get("key") == key:
        damage = _file_damage(target, existing, _train_file_names(existing), verify=True)
        if not damage:
            logger.info("index %s: trained codec reused (same training rows)", target)
            return {**existing, "reused": True}
        logger.warning("index %s: trained again, it is not what its %s records: %s", target, TRAIN_JSON,
                       "; ".join(damage))
    # What follows is not this index until it is rewritten: no search reads it, no fill trusts it.
    (target / INDEX_JSON).unlink(missing_ok=True)
    (target / TRAIN_JSON).unlink(missing_ok=True)
    device_k = max(request.result_k, request.norm_k)
    trained = train_codec(codec, int(request.references.shape[1]), request.metric, t,
                          keep_train=bool(request.norms), on_gpu=on_gpu, k=device_k)
    target.mkdir(parents=True, exist_ok=True)
    for number, transform in enumerate(trained.transforms):
        _write(target / f"transform-{number}.faiss", lambda path, x=transform: faiss.write_VectorTransform(x, path))
    _write_index(target / TRAINED_FAISS, trained.empty)
    if request.norms:
        _write_index(target / "train.faiss", fill(trained, trained.train, on_gpu=on_gpu, k=device_k))
    meta: dict[str, Any] = {"key": key, "projected_dim": int(trained.empty.d), "transforms": len(trained.transforms),
                            "final_index": type(trained.empty).__name__, "keeps_train": bool(request.norms),
                            "trained_on": "gpu" if on_gpu else "cpu", "faiss_version": faiss.__version__,
                            "vsbench_version": _vsbench_version()}
    meta["files"] = _record_files(target, _train_file_names(meta))
    meta["trained_digest"] = _digest_of({"key": key, "files": meta["files"]})
    atomic_write_json(target / TRAIN_JSON, meta)
    return {**meta, "reused": False}


def _trained_meta(request: SearchRequest, target: Path, codec: str) -> dict[str, Any]:
    """``train.json`` of ``target``, refused unless it was trained for these descriptors (the cheap
    part of the key: a fill task has no training rows to hash)."""
    meta = _read_meta(target, TRAIN_JSON)
    if meta is None or not isinstance(meta.get("key"), dict):
        raise SearchError(f"{target / TRAIN_JSON}: no trained codec {codec!r}; run the index step's training "
                          "first (vsbench similarity index --train)")
    expected = train_key(request, codec, content=False)
    differences = [f"{field}: trained for {meta['key'].get(field)!r}, these descriptors need {value!r}"
                   for field, value in expected.items() if meta["key"].get(field) != value]
    if differences:
        raise SearchError(f"{target / TRAIN_JSON} was trained for other inputs; re-run vsbench similarity index "
                          "--train. " + "; ".join(differences))
    return meta


def _shard_name(shard: int, shards: int) -> str:
    return f"reference-{shard}-of-{shards}"


def merged_names(shards: int) -> tuple[str, str]:
    """The files of the on-disk index merged from ``shards`` reference shards: its ``.faiss`` file
    (the trained index and where each list lies) and its ``.ivfdata`` file (the lists)."""
    return f"merged-of-{shards}.faiss", f"merged-of-{shards}.ivfdata"


def fill_shard(request: SearchRequest, folder: Path, codec: str, shard: int, *, reference_shards: int = 1,
               use_gpu: bool | None = None) -> dict[str, Any]:
    """The index step's fill task for reference shard ``shard``: a copy of the trained codec holding
    that shard's rows, read from ``request.references`` a block at a time (in place from the embed
    step's files when they are :class:`~vsbench.io.features.MappedRows`), written atomically as
    ``reference-<j>-of-<M>.faiss`` and then its record ``reference-<j>-of-<M>.json`` (the trained
    codec's digest, the shard's bounds and rows key, the file's size and sha256).

    Kept when its record says it was filled from this trained codec and these rows and its file
    has the recorded digest; refilled otherwise, with one line naming the differing field. Memory
    is this shard's index and one block of rows, whatever the gallery's size. Returns the record and
    ``kept``."""
    target = folder / request.name / codec_slug(codec)
    bounds = reference_bounds(len(request.references), reference_shards)
    if not 0 <= shard < reference_shards:
        raise SearchError(f"reference shard {shard} does not exist: the index has {reference_shards} reference "
                          f"shard(s) (0..{reference_shards - 1})")
    trained_meta = _trained_meta(request, target, codec)
    start, stop = bounds[shard]
    name = _shard_name(shard, reference_shards)
    expected = {"trained_digest": trained_meta["trained_digest"], "shard": shard, "reference_shards": reference_shards,
                "bounds": [start, stop], "rows": shard_rows_key(request.references, start, stop),
                "ids_digest": _shard_ids_digest(request, start, stop),
                "count": stop - start, "projected_dim": trained_meta["projected_dim"]}
    existing = _read_meta(target, f"{name}.json")
    if existing is not None:
        differing = [field for field in expected if existing.get(field) != expected[field]]
        problem = (f"filled for other inputs ({', '.join(differing)} differ)" if differing
                   else _file_problem(target / f"{name}.faiss", existing.get("file"), record=f"{name}.json"))
        if problem is None:
            logger.info("index %s: %s.faiss kept (same trained codec and rows)", target, name)
            return {**existing, "kept": True}
        logger.warning("index %s: %s.faiss filled again: %s", target, name, problem)
    (target / INDEX_JSON).unlink(missing_ok=True)  # the index is not whole until the last task checks it again
    (target / f"{name}.json").unlink(missing_ok=True)
    on_gpu = use_gpu_now(use_gpu)
    device_k = max(request.result_k, request.norm_k)
    info = IndexInfo(target, {**trained_meta, **trained_meta["key"], "reference_shards": [list(b) for b in bounds]})
    trained = load_trained(info, request, info.read(TRAINED_FAISS, mmap=False, record=TRAIN_JSON), record=TRAIN_JSON)
    index = fill_rows(trained, request.references, start, stop, on_gpu=on_gpu, k=device_k)
    path = target / f"{name}.faiss"
    _write_index(path, index)
    del index
    record = {**expected, "file": {"bytes": path.stat().st_size, "sha256": file_sha256(path)},
              "filled_on": "gpu" if on_gpu else "cpu", "faiss_version": faiss.__version__,
              "vsbench_version": _vsbench_version()}
    remember_verified(path, record["file"]["sha256"])
    atomic_write_json(target / f"{name}.json", record)
    return {**record, "kept": False}


def finish_index(request: SearchRequest, folder: Path, codec: str, *, reference_shards: int = 1,
                 reused: bool = False, merge_ondisk: bool = False) -> IndexInfo:
    """The index step's last task: check that every shard was filled from this trained codec and
    these references, then write ``index.json`` (what searches read: the key, the shard bounds,
    every file's size and sha256). A shard that is missing, or filled from other features or another
    trained codec, is refused naming its record and the differing field; nothing is read but the
    records and the training rows (their digest is part of the key).

    ``merge_ondisk`` (IVF codecs only) also merges the shards' inverted lists into one on-disk
    index (:func:`merge_ondisk_shards`), which ``index.json`` then records beside the shards, so that one
    search task probes the whole gallery (:func:`search_merged`)."""
    target = folder / request.name / codec_slug(codec)
    bounds = reference_bounds(len(request.references), reference_shards)
    key = index_key(request, codec, reference_shards)
    trained_meta = _read_meta(target, TRAIN_JSON)
    if trained_meta is None or trained_meta.get("key") != train_key(request, codec):
        raise SearchError(f"{target / TRAIN_JSON}: missing or trained for other inputs; re-run the index step's "
                          "training (vsbench similarity index --train), then its fills")
    if merge_ondisk:
        reason = not_mergeable(_trained_view(target, trained_meta).read(TRAINED_FAISS, mmap=False, record=TRAIN_JSON))
        if reason:
            raise SearchError(f"--merge-ondisk applies to IVF codecs only: codec {codec!r} is not one ({reason}); "
                              "drop --merge-ondisk, or index with an IVF codec (e.g. IVF1024,Flat)")
    problems = _file_damage(target, trained_meta, _train_file_names(trained_meta), verify=False)
    files = dict(trained_meta["files"])
    shard_ids = [_shard_ids_digest(request, start, stop) for start, stop in bounds]
    for shard, (start, stop) in enumerate(bounds):
        name = _shard_name(shard, reference_shards)
        record = _read_meta(target, f"{name}.json")
        if record is None:
            problems.append(f"{target / name}.json: missing (shard {shard} was not filled); run vsbench similarity "
                            f"index --fill --shard {shard}")
            continue
        expected = {"trained_digest": trained_meta["trained_digest"], "bounds": [start, stop],
                    "rows": key["shard_rows"][shard], "ids_digest": shard_ids[shard],
                    "projected_dim": trained_meta["projected_dim"]}
        differing = [field for field in expected if record.get(field) != expected[field]]
        if differing:
            why = {"trained_digest": "another trained codec", "rows": "other features", "bounds": "other bounds",
                   "projected_dim": "another dimension", "ids_digest": "other ids"}
            problems.append(f"{target / name}.json: filled from {' and '.join(why[f] for f in differing)} "
                            f"({', '.join(differing)} differ); run vsbench similarity index --fill --shard {shard}")
            continue
        problem = _file_problem(target / f"{name}.faiss", record.get("file"), digest=False, record=f"{name}.json")
        if problem:
            problems.append(f"{target / name}.faiss: {problem}; run vsbench similarity index --fill --shard {shard}")
            continue
        files[f"{name}.faiss"] = record["file"]
    if problems:
        raise SearchError(f"index {target}: " + "; ".join(problems[:8]) + ("; ..." if len(problems) > 8 else ""))
    layout = {"transforms": trained_meta["transforms"], "reference_shards": bounds,
              "keeps_train": trained_meta["keeps_train"]}
    if merge_ondisk:
        record = merge_ondisk_shards(target, trained_meta, bounds, files)
        files.update(record["files"])
        layout["merged"] = {"count": record["count"], "record": f"{_merged_stem(reference_shards)}.json"}
    meta = {"key": key, **{k: v for k, v in key.items() if k != "shard_rows"},
            "projected_dim": trained_meta["projected_dim"], "transforms": trained_meta["transforms"],
            "final_index": trained_meta["final_index"], "reference_shards": [list(b) for b in bounds],
            "faiss_version": faiss.__version__, "vsbench_version": _vsbench_version(),
            "shard_ids_digests": shard_ids,
            "trained_on": trained_meta["trained_on"], "files": {name: files[name] for name in _file_names(layout)}}
    if merge_ondisk:
        meta["merged"] = layout["merged"]
    existing = _read_meta(target)
    if existing != meta:
        atomic_write_json(target / INDEX_JSON, meta)
    return IndexInfo(target, {**meta, "reused": reused})


def _merged_stem(shards: int) -> str:
    return merged_names(shards)[0].removesuffix(".faiss")


def _trained_view(target: Path, trained_meta: dict[str, Any], files: dict[str, Any] | None = None) -> IndexInfo:
    """An :class:`IndexInfo` over ``target`` whose recorded files are the trained codec's (and ``files``):
    what reads them before ``index.json`` exists checks them against their own records."""
    return IndexInfo(target, {**trained_meta, "files": {**trained_meta["files"], **(files or {})}})


def merge_ondisk_shards(target: Path, trained_meta: dict[str, Any], bounds: Sequence[tuple[int, int]],
                        files: dict[str, Any]) -> dict[str, Any]:
    """Merge the filled reference shards of ``target`` into one on-disk IVF index
    (``merged-of-<M>.faiss`` and ``merged-of-<M>.ivfdata``, :func:`vsbench.index.ondisk.merge_shards`)
    and write its record ``merged-of-<M>.json`` after them: the trained codec's digest, the shard
    bounds, the sha256 of each shard file it was merged from, and both files' size and sha256.

    Kept when its record says it was merged from these very shard files and both files have their
    recorded digests; merged again otherwise, with one line saying why (``index.json`` is removed
    first: no search reads the index while its merged files are rewritten). Memory is the merged
    index's quantizer and one list at a time: the shards are read memory-mapped."""
    shards = len(bounds)
    stem = _merged_stem(shards)
    faiss_name, data_name = merged_names(shards)
    shard_names = [f"{_shard_name(shard, shards)}.faiss" for shard in range(shards)]
    expected = {"trained_digest": trained_meta["trained_digest"], "bounds": [list(b) for b in bounds],
                "shards": {name: files[name]["sha256"] for name in shard_names}}
    existing = _read_meta(target, f"{stem}.json")
    if existing is not None:
        differing = [field for field in expected if existing.get(field) != expected[field]]
        recorded = existing.get("files") if isinstance(existing.get("files"), dict) else {}
        problem = (f"merged from other shards ({', '.join(differing)} differ)" if differing else
                   next((f"{name}: {why}" for name in (faiss_name, data_name)
                         if (why := _file_problem(target / name, recorded.get(name), record=f"{stem}.json"))), None))
        if problem is None:
            logger.info("index %s: %s kept (merged from the same shards)", target, faiss_name)
            return existing
        logger.warning("index %s: %s merged again: %s", target, faiss_name, problem)
    (target / INDEX_JSON).unlink(missing_ok=True)
    (target / f"{stem}.json").unlink(missing_ok=True)
    view = _trained_view(target, trained_meta, files)
    trained = view.read(TRAINED_FAISS, mmap=False, record=TRAIN_JSON)
    opened = []
    for name, (start, stop) in zip(shard_names, bounds):
        path = view._verified(name, f"{name.removesuffix('.faiss')}.json")
        try:  # mapped whatever its size: the merge reads each list once, and no pod holds the gallery
            shard = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY)
        except RuntimeError as exc:
            raise SearchError(f"{path}: not a readable FAISS index ({str(exc).strip().splitlines()[-1]}); re-run "
                              "its fill") from None
        if shard.ntotal != stop - start:
            raise SearchError(f"{path}: holds {shard.ntotal} vectors, its bounds say {stop - start}; re-run its fill")
        opened.append((shard, start))
    count = merge_shards(trained, opened, target / faiss_name, target / data_name)
    del opened
    record = {**expected, "count": count, "files": _record_files(target, [faiss_name, data_name]),
              "faiss_version": faiss.__version__, "vsbench_version": _vsbench_version()}
    atomic_write_json(target / f"{stem}.json", record)
    return record


def _shard_ids_digest(request: SearchRequest, start: int, stop: int) -> str:
    """The digest of reference shard ``[start, stop)``'s ids: what a search task of that shard checks."""
    if request.reference_ids is None:
        raise SearchError(f"search {request.name!r}: a persisted index needs the references' ids")
    return ids_digest(request.reference_ids[start:stop])


def _bounds_sound(meta: dict[str, Any]) -> bool:
    shards, count = meta.get("reference_shards"), meta.get("count")
    return (isinstance(shards, list) and isinstance(count, int) and 0 < len(shards) <= count
            and [list(b) for b in reference_bounds(count, len(shards))] == shards)


def _train_file_names(meta: dict[str, Any]) -> list[str]:
    """The files a trained codec's folder holds besides ``train.json``."""
    names = [f"transform-{n}.faiss" for n in range(meta.get("transforms", 0))] + [TRAINED_FAISS]
    if meta.get("keeps_train"):
        names.append("train.faiss")
    return names


def _record_files(target: Path, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Each file's size and sha256, remembered as verified (the next reader skips the hash)."""
    files = {}
    for name in names:
        files[name] = {"bytes": (target / name).stat().st_size, "sha256": file_sha256(target / name)}
        remember_verified(target / name, files[name]["sha256"])
    return files


def _digest_of(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def _file_damage(folder: Path, meta: dict[str, Any], names: Sequence[str], *, verify: bool) -> list[str]:
    files = meta.get("files") if isinstance(meta.get("files"), dict) else {}
    problems = []
    for name in names:
        problem = _file_problem(folder / name, files.get(name), digest=verify)
        if problem:
            problems.append(f"{folder / name}: {problem}")
    return problems


def load_index_info(request: SearchRequest, folder: Path, codec: str, *,
                    reference_shard: int | None = None) -> IndexInfo:
    """The persisted index of ``codec`` for ``request``, checked to be for these descriptors.

    With ``reference_shard``, the ids checked are that shard's (``shard_ids_digests``): a search
    task reads one shard, and hashing every id of a 10 M gallery in each of its N x M tasks would
    cost more than a small task's search (the merge checks all of them, once)."""
    target = folder / request.name / codec_slug(codec)
    meta = _read_meta(target)
    if meta is None:
        raise SearchError(f"no index for codec {codec!r} of search {request.name!r} in {target}: "
                          "run the index step (vsbench similarity index) first")
    expected = {"format": FORMAT, "codec": codec, "metric": request.metric, "dim": int(request.references.shape[1]),
                "count": int(len(request.references)), "keeps_train": bool(request.norms)}
    shard_digests = meta.get("shard_ids_digests")
    bounds = meta.get("reference_shards")
    if (reference_shard is not None and isinstance(shard_digests, list) and isinstance(bounds, list)
            and len(shard_digests) == len(bounds) and 0 <= reference_shard < len(bounds)
            and meta.get("count") == expected["count"] and _bounds_sound(meta)):
        start, stop = bounds[reference_shard]
        if request.reference_ids is None:
            raise SearchError(f"search {request.name!r}: a persisted index needs the references' ids")
        whole = (start, stop) == (0, expected["count"])  # one shard: the request's own digest, hashed once
        ids = request.ids_digest if whole else ids_digest(request.reference_ids[start:stop])
        if shard_digests[reference_shard] != ids:
            expected["ids_digest"] = f"{ids} (the ids of reference shard {reference_shard})"
            meta = {**meta, "ids_digest": shard_digests[reference_shard]}
    else:
        expected["ids_digest"] = request.ids_digest
    differences = [f"{field}: index has {meta.get(field)!r}, these descriptors need {expected[field]!r}"
                   for field in expected if meta.get(field) != expected[field]]
    if differences:
        raise SearchError(f"{target / INDEX_JSON} was built for other inputs; rebuild it with the index step. "
                          + "; ".join(differences))
    damage = _damage(target, meta, verify=False)
    if damage:
        raise SearchError("; ".join(damage) + "; re-run the index step (vsbench similarity index), which rebuilds "
                          "what is damaged")
    return IndexInfo(target, meta)


def load_trained(info: IndexInfo, request: SearchRequest, final: faiss.Index, *,
                  record: str = INDEX_JSON) -> TrainedCodec:
    """The codec as the index step trained it: its transforms, and ``final`` (a shard's index, or
    the trained empty one) for its kind; ``record`` names the file whose digests they are checked against."""
    transforms = [info.read_transform(n, record=record) for n in range(info.meta["transforms"])]
    return TrainedCodec(info.meta["codec"], request.metric, info.meta["dim"], transforms, final)


def mmap_min_bytes() -> int:
    """Index files at least this large are memory-mapped (``VSBENCH_MMAP_MIN_BYTES``, default 1 GiB)."""
    return env_count("VSBENCH_MMAP_MIN_BYTES", 1 << 30, "bytes")


def _read_index(path: Path, *, mmap: bool, inverted_lists: bool) -> faiss.Index:
    """A persisted index, memory-mapped when ``mmap`` and the file is at least :func:`mmap_min_bytes`:
    an IVF index's inverted lists (``IO_FLAG_MMAP``; ``inverted_lists``), or a flat or PQ index's
    codes (``IO_FLAG_MMAP_IFC``); FAISS refuses the two flags together on IVF indexes."""
    flags = faiss.IO_FLAG_READ_ONLY
    if mmap and path.is_file() and path.stat().st_size >= mmap_min_bytes():
        flags |= faiss.IO_FLAG_MMAP if inverted_lists else faiss.IO_FLAG_MMAP_IFC
    try:
        index = faiss.read_index(str(path), flags)  # already of its own class (IndexFlatL2, IndexIVFPQ...)
    except RuntimeError as exc:
        raise SearchError(f"{path}: not a readable FAISS index ({str(exc).strip().splitlines()[-1]})") from None
    return index


def _write_index(path: Path, index: faiss.Index) -> None:
    """A filled index to disk; one that lives on a GPU is copied back to the CPU first."""
    if type(index).__name__.startswith("Gpu"):
        index = faiss.index_gpu_to_cpu(index)
    _write(path, lambda target: faiss.write_index(index, target))


def _write(path: Path, writer) -> None:
    """Write through FAISS to a temporary file beside ``path``, then rename it into place. A failed
    write (a full disk) is an OSError naming ``path``, not the temporary: FAISS says only
    "write error in .x.123.tmp: ... (No space left on device)" in a RuntimeError."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        writer(str(temporary))
        os.replace(temporary, path)
    except RuntimeError as exc:
        found = re.search(r"write error in .*\(([^()]+)\)\s*$", str(exc).strip())
        if found is None:
            raise
        reason = found.group(1)
        code = next((number for number in (errno.ENOSPC, errno.EDQUOT, errno.EIO) if os.strerror(number) == reason),
                    errno.EIO)
        raise OSError(code, reason, str(path)) from None
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
    finally:
        temporary.unlink(missing_ok=True)


def _file_names(meta: dict[str, Any]) -> list[str]:
    """Every file an index folder holds besides ``index.json`` (and the tasks' records)."""
    names = [f"transform-{n}.faiss" for n in range(meta.get("transforms", 0))] + [TRAINED_FAISS]
    shards = len(meta.get("reference_shards", []))
    names += [f"reference-{j}-of-{shards}.faiss" for j in range(shards)]
    if meta.get("keeps_train"):
        names.append("train.faiss")
    if meta.get("merged"):
        names += merged_names(shards)
    return names


def _file_problem(path: Path, recorded: Any, *, digest: bool = True, record: str = INDEX_JSON) -> str | None:
    """None when ``path`` has the size and (``digest``) the sha256 recorded for it, else what differs.

    The sha256 is computed again only when the file is not the one last verified: the folder's
    ``.verified.json`` holds, per file, the (inode, size, mtime, ctime) it had when its bytes last
    hashed to the recorded digest. Any write, truncation, swap or rename changes that stat (the
    ctime cannot be set back), so it stands for the file's bytes the way git's index does; hashing
    a 256 MB shard on every search task was a quarter of the search's time (bench/integrity.py).
    """
    if not isinstance(recorded, dict) or not isinstance(recorded.get("sha256"), str):
        return f"{record} records no digest for it"
    try:
        stat = path.stat()
    except OSError:
        return "missing"
    if stat.st_size != recorded.get("bytes"):
        return f"{stat.st_size} bytes, {record} records {recorded.get('bytes')}"
    if not digest:
        return None
    if not sha256_matches(path, recorded["sha256"]):
        return f"its sha256 is not the one {record} records (damaged or replaced after the index step)"
    return None


def _damage(folder: Path, meta: dict[str, Any], *, verify: bool) -> list[str]:
    """What is wrong with an index folder against its ``index.json``: shard bounds other than the
    ones ``count`` and the shard count give, files missing or of another size, and (``verify``)
    files whose sha256 is not the recorded one. Empty when sound."""
    shards = meta.get("reference_shards")
    count = meta.get("count")
    if not isinstance(shards, list) or not shards or not isinstance(count, int) or len(shards) > count:
        return [f"{folder / INDEX_JSON}: no usable reference shards"]
    if [list(b) for b in reference_bounds(count, len(shards))] != shards:
        return [f"{folder / INDEX_JSON}: records shard bounds {shards}, not the ones {count} references in "
                f"{len(shards)} shard(s) give"]
    files = meta.get("files")
    if not isinstance(files, dict):
        return [f"{folder / INDEX_JSON}: records no file digests (written by an older vsbench)"]
    problems = []
    for name in _file_names(meta):
        problem = _file_problem(folder / name, files.get(name), digest=verify)
        if problem:
            problems.append(f"{folder / name}: {problem}")
    return problems


def _read_meta(folder: Path, name: str = INDEX_JSON) -> dict[str, Any] | None:
    try:
        meta = read_json(folder / name)
    except (OSError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _vsbench_version() -> str:

    return __version__


__all__: Sequence[str] = ["IndexInfo", "build_index", "codec_slug", "load_index_info", "load_trained",
                          "merge_ondisk_shards", "shard_bounds"]
