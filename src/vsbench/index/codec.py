"""FAISS codecs as three separable acts: train, fill, search; and the exact merge of shard results.

:mod:`vsbench.index.search` searches in one call (train the codec, add every reference, search
every query); :mod:`vsbench.index.store` runs the same acts as pipeline steps, with the trained
codec and each reference shard's index on disk and the queries searched shard by shard. Both go
through the functions here, so that a sharded search computes the very floats a single search does:

* :func:`train_codec` trains the transforms (PCA, L2norm...) and the final index on the training
  descriptors (SSCD's ``project``; IVF k-means, PQ codebooks), on GPU 0 when asked and possible;
* :func:`fill` copies the trained, empty final index and adds vectors (every reference, or the
  training rows that score normalization searches); :func:`fill_rows` fills one reference shard
  from unprojected rows a block at a time, encoding whole aligned blocks (:data:`ENCODE_BLOCK`) so
  that its codes are those of one index over every row;
* :func:`search_filled` searches projected queries in a filled index: the unnormalized result and
  one per score normalization (SSCD's augmented inner-product search for ``Flat``);
* :func:`merge_found` merges the ``(n_queries, k)`` results of reference shards into the global top
  ``k`` with the ties FAISS's own search keeps, in its order (see there), so the merge equals one
  search over the whole gallery, ids and scores alike (each shard holds a copy of one trained codec,
  so this holds for IVF and PQ codecs too; not for HNSW, whose graph is built per shard).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import faiss
import numpy as np

from vsbench.index.settings import ScoreNorm, SearchError
from vsbench.io.features import MappedRows, row_block

logger = logging.getLogger("vsbench.index.search")  # one logger says where each codec ran

Metric = Literal["ip", "l2"]
FAISS_METRICS = {"ip": faiss.METRIC_INNER_PRODUCT, "l2": faiss.METRIC_L2}
# faiss-gpu's k-selection limit for CUDA builds (GPU_MAX_SELECTION_K in faiss/gpu/utils/DeviceDefs.cuh).
GPU_MAX_K = 2048

Found = tuple[np.ndarray, np.ndarray]  # (similarities, reference ids or -1), FAISS's (n_queries, k) layout


@dataclass
class TrainedCodec:
    """A codec after training: its transforms and its final index, trained and empty, on the CPU.

    ``train`` keeps the projected training rows when score normalization or nothing else needs them
    (``None`` otherwise). ``owner`` holds the object that owns the transforms (FAISS frees a chain
    with its owner).
    """

    codec: str
    metric: Metric
    dim: int
    transforms: list[faiss.VectorTransform]
    empty: faiss.Index
    train: np.ndarray | None = None
    owner: object = None

    @property
    def exhaustive_ip(self) -> bool:
        """SSCD's normalized search applies: an exact final index searched by inner product."""
        return isinstance(self.empty, faiss.IndexFlat) and self.metric == "ip"

    def project(self, x: np.ndarray, name: str) -> np.ndarray:
        """``x`` through every transform (what SSCD's ``sa_encode`` of the transforms does), in the
        blocks :func:`projected_blocks` uses, so that a slice projected alone equals the same rows of
        the whole."""
        if not self.transforms:
            return x
        return self.project_rows(x, 0, len(x), name)

    def project_rows(self, rows: np.ndarray | MappedRows, start: int, stop: int, name: str) -> np.ndarray:
        """Rows ``[start, stop)`` of ``rows`` through every transform, contiguous float32."""
        pieces = [block[keep] for _, block, keep in projected_blocks(self, rows, start, stop, name)]
        return np.ascontiguousarray(pieces[0] if len(pieces) == 1 else np.concatenate(pieces))


def train_codec(codec: str, dim: int, metric: Metric, train: np.ndarray | None, *, keep_train: bool,
                on_gpu: bool, k: int) -> TrainedCodec:
    """Build ``codec`` for ``dim``-dim descriptors and train what needs training on ``train``.

    Each transform is trained on the training rows projected by the transforms before it (SSCD's
    ``project``); the final index (IVF, PQ...) on the fully projected rows, on GPU 0 when ``on_gpu``
    and faiss-gpu can hold it (``k`` is the largest k it will be searched with). ``keep_train``
    keeps the projected training rows (score normalization searches them).
    """
    try:
        factory = faiss.index_factory(dim, codec, FAISS_METRICS[metric])
    except RuntimeError as exc:
        raise SearchError(f"codec {codec!r} is not a FAISS index_factory string for {dim}-dim "
                          f"descriptors: {_faiss_message(exc)}") from None
    transforms, final = _split(factory)
    if not factory.is_trained:
        if train is None:
            raise SearchError(f"codec {codec!r} must be trained: pass training descriptors (train=...)")
        _check_training_size(codec, transforms, len(train))
    t = _train_transforms(codec, transforms, train, keep_train=keep_train or not final.is_trained)
    if not final.is_trained:
        device_index = to_device(final, on_gpu, codec, k)
        try:
            device_index.train(t)
        except RuntimeError as exc:
            raise SearchError(f"codec {codec!r} could not be trained on {len(t)} training rows: "
                              f"{_faiss_message(exc)}") from None
        if device_index is not final:
            final = faiss.index_gpu_to_cpu(device_index)
    return TrainedCodec(codec, metric, dim, transforms, final, t if keep_train else None, factory)


# Rows are projected and encoded in blocks of this many, aligned to row 0 of the whole gallery.
# Why: a BLAS product rounds a row's last bit differently with the shape of the matrix around it
# (faiss's PCA of rows 17..999 alone differs from the same rows inside 100,003: measured), and so do
# PQ's distance tables and IVF's coarse assignment. A fill task that projects and encodes the very
# blocks a one-pod build does, and keeps its own rows of them, writes the codes one index would.
# A multiple of faiss's own query block (4,096), so IVF assignment sees its usual blocks too.
ENCODE_BLOCK = 65_536


def projected_blocks(trained: TrainedCodec, rows: np.ndarray | MappedRows, start: int, stop: int,
                     name: str) -> Iterator[tuple[int, np.ndarray, slice]]:
    """``(block start, projected block, the slice of it inside [start, stop))`` for every
    :data:`ENCODE_BLOCK`-aligned block of ``rows`` that meets ``[start, stop)``; each block is read,
    checked finite and projected alone, so memory holds one block, not the rows."""
    count = len(rows)
    block = ENCODE_BLOCK
    for lo in range(start - start % block, stop, block):
        hi = min(lo + block, count)
        wanted = slice(max(start, lo) - lo, min(stop, hi) - lo)
        if not trained.transforms:
            x = row_block(rows, max(start, lo), min(stop, hi))
            check_finite(x, f"{name} {max(start, lo)}..{min(stop, hi) - 1}")
            yield lo, x, slice(0, len(x))
            continue
        x = row_block(rows, lo, hi)
        check_finite(x, f"{name} {lo}..{hi - 1}")
        for transform in trained.transforms:
            x = _apply(transform, x, trained.codec, name)
        yield lo, x, wanted


def fill(trained: TrainedCodec, vectors: np.ndarray, *, on_gpu: bool, k: int) -> faiss.Index:
    """A copy of the trained, empty final index holding ``vectors`` (already projected), on GPU 0
    when asked and possible, else on the CPU; encoded in :data:`ENCODE_BLOCK`-aligned blocks, as
    :func:`fill_rows` does, so that it holds the codes of the same references filled shard by shard."""
    index = to_device(faiss.clone_index(trained.empty), on_gpu, trained.codec, k)
    for lo in range(0, len(vectors), ENCODE_BLOCK):
        _add(index, vectors[lo:lo + ENCODE_BLOCK], slice(0, min(ENCODE_BLOCK, len(vectors) - lo)))
    return index


def fill_rows(trained: TrainedCodec, rows: np.ndarray | MappedRows, start: int, stop: int, *, on_gpu: bool,
              k: int, name: str = "references") -> faiss.Index:
    """A copy of the trained, empty final index holding rows ``[start, stop)`` of the unprojected
    ``rows``, read, projected and encoded one :data:`ENCODE_BLOCK`-aligned block at a time.

    Why: a fill task's memory is its shard's index plus one block, whatever the gallery's size; and
    each block is projected and encoded whole (the rows of it outside this shard too), so the codes
    are, bit for bit, those a one-pod build over every row writes."""
    index = to_device(faiss.clone_index(trained.empty), on_gpu, trained.codec, k)
    for _, block, keep in projected_blocks(trained, rows, start, stop, name):
        _add(index, block, keep)
    return index


def _add(index: faiss.Index, block: np.ndarray, keep: slice) -> None:
    """Add rows ``keep`` of the projected ``block``, encoded with the whole block: codes of the
    block's rows (``sa_encode``) then the kept ones' (``add_sa_codes``), where the index takes codes
    (flat, PQ, SQ and IVF indexes on the CPU); other indexes (HNSW, GPU) add the kept rows."""
    kept = block[keep]
    if len(kept) == 0:
        return
    if isinstance(index, (faiss.IndexFlatCodes, faiss.IndexIVF)) and not (keep.start == 0 and keep.stop == len(block)):
        codes = index.sa_encode(block)
        index.add_sa_codes(np.ascontiguousarray(codes[keep]))
    else:
        index.add(np.ascontiguousarray(kept))


def search_filled(trained: TrainedCodec, index: faiss.Index, queries: np.ndarray, k: int, *,
                  score_norms: Sequence[ScoreNorm], raw: bool, train_index: faiss.Index | None,
                  references: np.ndarray | None, on_gpu: bool) -> tuple[Found | None, list[Found]]:
    """Search projected ``queries`` in a filled ``index``: the unnormalized result (when ``raw``)
    and one per normalization, each ``(n_queries, k)``; ``k`` must not exceed ``index.ntotal``.

    With an exact (``Flat``) final index and inner products, each normalization is searched as SSCD's
    ``apply_score_norm`` does: the query gets the extra coordinate ``-beta * mean`` (float32, as SSCD
    computes it), every reference a 1, and FAISS ranks the augmented vectors, so scores and tie
    orders are SSCD's to the bit; that needs the projected ``references``. Other final indexes
    subtract the same adjustment from the unnormalized scores (SSCD has no such codecs).
    ``train_index`` holds the projected training rows (score normalization only).
    """
    codec, metric = trained.codec, trained.metric
    augmented = trained.exhaustive_ip
    unnormalized = None
    if raw or (score_norms and not augmented):
        distances, ids = index.search(queries, k)
        unnormalized = (_similarity(distances, ids, metric, codec), ids)
    if not score_norms:
        return unnormalized, []
    assert train_index is not None
    norm_k = max(norm.last + 1 for norm in score_norms)
    training = _training_similarities(train_index, queries, norm_k, metric, codec)
    normalized = []
    for norm in score_norms:
        adjustment = _norm_adjustment(training, norm)
        if augmented:
            assert references is not None
            normalized.append(_augmented_search(queries, references, adjustment, k, on_gpu, codec))
        else:
            assert unnormalized is not None
            normalized.append((unnormalized[0] + adjustment, unnormalized[1]))
    return (unnormalized if raw else None), normalized


def tune(index: faiss.Index, search_params: str, codec: str) -> faiss.Index:
    """Apply FAISS search-time settings (``"nprobe=16"``, ``"efSearch=64"``, several joined by ``,``)
    to a filled index, on the CPU or the GPU; an unknown or inapplicable setting names the codec."""
    if not search_params.strip():
        return index
    space = faiss.GpuParameterSpace() if type(index).__name__.startswith("Gpu") else faiss.ParameterSpace()
    try:
        space.set_index_parameters(index, search_params.strip())
    except RuntimeError as exc:
        raise SearchError(f"search parameters {search_params!r} do not apply to codec {codec!r}: "
                          f"{_faiss_message(exc)} (nprobe is for IVF codecs, efSearch for HNSW ones: run this "
                          "codec without them, or give codecs they apply to)") from None
    return index


# Descriptor sizes a codec string is tried on before the model's own is known (a run checks its
# codecs before any image is embedded, and a model's dimension costs building it): 2^6*3*5 and
# 2^7*3*5*7 divide by every usual PQ and OPQ sub-quantizer count, and stay small enough that the
# empty index (a PQ codebook of 256 x d floats, say) costs a few MB. A string that fails on every
# one is malformed whatever the model; one that only fits some sizes is checked on the features'
# own size when the index is trained (train_codec), with that size in the message.
CHECK_DIMS = (960, 13440)


def check_codec(codec: str, search_params: str = "") -> None:
    """A SearchError when ``codec`` is no FAISS index_factory string (for any descriptor size of
    :data:`CHECK_DIMS`, by either metric), or when ``search_params`` do not apply to it; nothing is
    trained or filled, so this takes milliseconds."""
    first = ""
    for dim in CHECK_DIMS:
        for metric in FAISS_METRICS.values():
            try:
                factory = faiss.index_factory(dim, codec, metric)
            except RuntimeError as exc:
                first = first or _faiss_message(exc)
                continue
            tune(_split(factory)[1], search_params, codec)  # the final index, as the search step tunes it
            return
    raise SearchError(f"codec {codec!r} is not a FAISS index_factory string: {first}; e.g. 'Flat', "
                      "'PCAW512,L2norm,Flat', 'IVF1024,PQ32'")


def stored_vectors(index: faiss.Index) -> np.ndarray:
    """The vectors an exact (``Flat``) CPU index holds, as added (SSCD's augmented search needs them)."""
    return index.reconstruct_n(0, index.ntotal)


def shifted(found: Found, offset: int, k: int) -> Found:
    """A reference shard's result with global ids (``offset`` added) and padded to ``k`` columns
    (score -inf, id -1) when the shard held fewer than ``k`` references."""
    similarity, ids = found
    ids = np.where(ids >= 0, ids + offset, -1).astype(np.int64)
    missing = k - ids.shape[1]
    if missing > 0:
        similarity = np.pad(similarity, ((0, 0), (0, missing)), constant_values=-np.inf)
        ids = np.pad(ids, ((0, 0), (0, missing)), constant_values=-1)
    return similarity, ids


def merge_found(parts: Sequence[Found], k: int, metric: Metric) -> Found:
    """The global top ``k`` of reference shards' results (global ids, as :func:`shifted` makes them),
    in the order one FAISS search over every reference gives; slots no shard filled stay id -1.

    FAISS's exhaustive search scans references in id order and replaces a kept result only by a
    strictly better one, so of equal scores at the k-th place it keeps the lower ids; each shard
    does the same, so keeping the lower ids across shards gives the same set. Its heaps then order
    equal scores by id: descending for inner products (a min-heap), ascending for L2 (a max-heap);
    the merge orders them so too. One part is returned as it is (FAISS's own order).
    """
    if len(parts) == 1:
        similarity, ids = parts[0]
        return similarity[:, :k], ids[:, :k]
    similarity = np.concatenate([part[0] for part in parts], axis=1)
    ids = np.concatenate([part[1] for part in parts], axis=1)
    empty = ids < 0
    key_score = np.where(empty, np.inf, -similarity.astype(np.float64))
    chosen = np.lexsort((np.where(empty, np.iinfo(np.int64).max, ids), key_score), axis=-1)[:, :k]
    similarity, ids = np.take_along_axis(similarity, chosen, axis=1), np.take_along_axis(ids, chosen, axis=1)
    if metric == "ip":  # equal scores: the higher id first, as FAISS's min-heap leaves them
        empty = ids < 0
        order = np.lexsort((np.where(empty, np.iinfo(np.int64).max, -ids),
                            np.where(empty, np.inf, -similarity.astype(np.float64))), axis=-1)
        similarity, ids = np.take_along_axis(similarity, order, axis=1), np.take_along_axis(ids, order, axis=1)
    return similarity, ids


def check_finite(a: np.ndarray, what: str, block: int = 65_536) -> None:
    """Block by block, so that a million 512-d rows never need a 512 MB mask."""
    for start in range(0, len(a), block):
        bad = ~np.isfinite(a[start:start + block]).all(axis=1)
        if bad.any():
            row = start + int(np.flatnonzero(bad)[0])
            raise SearchError(f"{what}: row {row} has NaN or infinite values (as float32)")



def _training_similarities(index: faiss.Index, q: np.ndarray, norm_k: int, metric: Metric,
                           codec: str) -> np.ndarray:
    """Each query's ``norm_k`` best similarities to the training rows, by a copy of the codec's trained
    index holding them (SSCD: a fresh ``IndexFlatIP`` over the training set, the same thing)."""
    distances, ids = index.search(q, norm_k)
    if (ids < 0).any():
        raise SearchError(f"codec {codec!r}: the training index returned fewer than {norm_k} neighbours "
                          "for some queries, which score normalization needs; use an exhaustive codec")
    return _similarity(distances, ids, metric, codec)



def _norm_adjustment(training: np.ndarray, norm: ScoreNorm) -> np.ndarray:
    """SSCD's ``-weight * np.mean(D[:, start:end + 1], axis=1, keepdims=True)``, float32 as there, with
    ``D`` the ``end + 1`` best training similarities (so a negative start slices as SSCD's does)."""
    neighbours = np.ascontiguousarray(training[:, : norm.last + 1])
    return -norm.beta * np.mean(neighbours[:, norm.first : norm.last + 1], axis=1, keepdims=True)



def _augmented_search(q: np.ndarray, r: np.ndarray, adjustment: np.ndarray, k: int, on_gpu: bool,
                      codec: str) -> Found:
    """SSCD's normalized search: ``[q, adjustment] . [r, 1]`` by exact inner product."""
    queries = np.ascontiguousarray(np.concatenate([q, adjustment.astype(np.float32)], axis=1))
    references = np.ascontiguousarray(np.concatenate([r, np.ones_like(r[:, :1])], axis=1))
    index = to_device(faiss.IndexFlatIP(queries.shape[1]), on_gpu, codec, k)
    index.add(references)
    distances, ids = index.search(queries, k)
    return _similarity(distances, ids, "ip", codec), ids



def _train_transforms(codec: str, transforms: list[faiss.VectorTransform], t: np.ndarray | None, *,
                      keep_train: bool) -> np.ndarray | None:
    """Train each transform on the (already transformed) training rows, as SSCD's ``project`` does;
    the training rows are transformed only as far as a later step needs them (``keep_train``: the
    final index or score normalization)."""
    for number, transform in enumerate(transforms):
        if not transform.is_trained:
            try:
                transform.train(t)
            except RuntimeError as exc:
                raise SearchError(f"codec {codec!r}: training transform {number} on {len(t)} rows failed: "
                                  f"{_faiss_message(exc)}") from None
        later_training = any(not later.is_trained for later in transforms[number + 1:])
        t = _apply(transform, t, codec, "train") if t is not None and (keep_train or later_training) else None
    return t


def _split(index: faiss.Index) -> tuple[list[faiss.VectorTransform], faiss.Index]:
    """The transforms (PCA, L2norm...) and the final index of an index_factory result."""
    index = faiss.downcast_index(index)
    if not isinstance(index, faiss.IndexPreTransform):
        return [], index
    chain = [faiss.downcast_VectorTransform(index.chain.at(i)) for i in range(index.chain.size())]
    return chain, faiss.downcast_index(index.index)



def _check_training_size(codec: str, transforms: list[faiss.VectorTransform], rows: int) -> None:
    """FAISS's PCA cannot output more dims than it has training rows, and whitening (PCAW) with no
    more rows than dims divides by a zero eigenvalue; FAISS's own messages for both are cryptic or
    absent. Other shortfalls (IVF, PQ k-means) are reported by FAISS when it trains."""
    for transform in transforms:
        if isinstance(transform, faiss.PCAMatrix) and not transform.is_trained:
            if transform.d_out > transform.d_in:
                raise SearchError(f"codec {codec!r}: PCA cannot output {transform.d_out} dims "
                                  f"from {transform.d_in}")
            whitened = transform.eigen_power != 0
            needed = transform.d_out + whitened
            if rows < needed:
                what = f"{'whitened ' if whitened else ''}PCA to {transform.d_out} dims"
                raise SearchError(f"codec {codec!r} needs at least {needed} training rows ({what}), "
                                  f"got {rows}")



def _apply(transform: faiss.VectorTransform, x: np.ndarray, codec: str, name: str) -> np.ndarray:
    """One transform over ``x``; non-finite output is SSCD's ProjectionError."""
    projected = transform.apply(x)
    check_finite(projected, f"codec {codec!r}: projected {name}")
    return projected



@functools.cache
def gpu_resources() -> faiss.StandardGpuResources:
    """One ``StandardGpuResources`` per process: each holds a cuBLAS handle, streams and a temporary
    memory pool on GPU 0 (hundreds of MB), which every index moved to the GPU can share; one per
    codec and shard would allocate them again each time."""
    return faiss.StandardGpuResources()


@functools.cache
def gpu_kernels_fail() -> str:
    """Why faiss-gpu cannot run a search on GPU 0, or "" when a tiny one runs and answers right.

    A faiss-gpu wheel holds kernels for some GPU architectures only: faiss-gpu-cu12 1.14's for
    sm_70 and sm_80, none for an H100's sm_90 and no PTX to build them, so every GPU search there
    fails with "no kernel image is available". Asked once per process, before the first index moves."""
    try:
        index = faiss.index_cpu_to_gpu(gpu_resources(), 0, faiss.IndexFlatIP(2))
        index.add(np.asarray([[1, 0], [0, 1]], dtype=np.float32))
        _, found = index.search(np.asarray([[0, 1]], dtype=np.float32), 1)
    except Exception as exc:  # noqa: BLE001 - a CUDA error surfaces as RuntimeError or worse
        return _faiss_message(exc) if isinstance(exc, RuntimeError) else f"{type(exc).__name__}: {exc}"
    return "" if int(found[0, 0]) == 1 else f"a test search on GPU 0 answered {int(found[0, 0])}, not 1"


def to_device(index: faiss.Index, on_gpu: bool, codec: str, k: int) -> faiss.Index:
    """The index on GPU 0 when asked and faiss-gpu can hold it with this k; otherwise the CPU index."""
    kind = type(index).__name__
    if on_gpu and k > GPU_MAX_K:
        logger.warning("codec %r: k = %d exceeds faiss-gpu's limit of %d; searching %s on the CPU",
                       codec, k, GPU_MAX_K, kind)
    elif on_gpu:
        try:
            # The GPU index keeps its own reference to the resources: the provider may go.
            gpu_index = faiss.index_cpu_to_gpu(gpu_resources(), 0, index)
        except RuntimeError as exc:
            logger.warning("codec %r: faiss-gpu cannot hold %s (%s); searching on the CPU",
                           codec, kind, _faiss_message(exc))
        else:
            logger.info("codec %r: %s on GPU 0", codec, kind)
            return gpu_index
    logger.info("codec %r: %s on the CPU", codec, kind)
    return index



def _similarity(distances: np.ndarray, ids: np.ndarray, metric: Metric, codec: str) -> np.ndarray:
    """Higher is more similar for both metrics; huge descriptors can overflow float32 in FAISS."""
    similarity = distances if metric == "ip" else -distances
    if not np.isfinite(similarity[ids >= 0]).all():
        raise SearchError(f"codec {codec!r}: scores overflow float32; rescale the descriptors")
    return similarity



def _faiss_message(exc: RuntimeError) -> str:
    """FAISS's message without the C++ location prefix ('Error in ... at file:line: ')."""
    return str(exc).rsplit(": ", 1)[-1].strip() if " at " in str(exc) else str(exc).strip()
