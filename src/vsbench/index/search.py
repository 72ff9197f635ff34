"""Nearest-neighbour candidates with SSCD's codecs and score normalization, on FAISS (CPU or GPU).

Retrieval benchmarks (DISC2021, Copydays, VSD, ABID) turn descriptors into scored
``(query, reference)`` candidates here, so that every benchmark applies codecs, score
normalization, ``k`` and the global cap the same way. The semantics follow SSCD
(facebookresearch/sscd-copy-detection):

* **Codecs** (``sscd/disc_eval.py``: ``get_codecs``, ``project``): a codec is a FAISS
  ``index_factory`` string, several separated by ``;``. Its transforms (``PCAW512``, ``L2norm``...)
  are trained on the *training* descriptors only, then applied to the queries, the references and
  the training descriptors alike. A projection that is not finite is an error naming the codec and
  the array (SSCD raises ``ProjectionError``, logs it and drops that codec's row; we stop, so that a
  broken codec cannot go unnoticed in a results table). SSCD only accepts ``Flat`` or ``...,Flat`` (an
  exact search after the projection); we also accept other final indexes (``IVF...``, ``PQ...``,
  ``HNSW...``), trained on the projected training descriptors, with FAISS's default search
  parameters (IVF: ``nprobe = 1``), so their results are approximate.
* **Metric**: ``ip`` scores are inner products, ``l2`` scores negative squared L2 distances, so a
  higher score is always more similar (isc2021 ``descriptor_matching.py`` negates L2 distances the
  same way). SSCD searches its *unnormalized* runs with ``METRIC_L2`` and its *normalized* runs
  with inner products; the DISC adapter asks for exactly that (``search_all(metric="l2")`` for the
  first, ``metric="ip", unnormalized=False`` for the second), since descriptors within SSCD's loose
  unit-norm tolerance can rank differently under the two.
* **Score normalization** ``beta[first,last]`` (``disc_eval.py``: ``ScoreNormalization``,
  ``apply_score_norm``; several separated by ``;``): an index over the projected *training*
  descriptors gives each query its ``last + 1`` best similarities ``D``; the adjustment is SSCD's
  ``-beta * np.mean(D[:, first:last + 1])`` in float32 (a Python slice: ``[-1,2]`` averages rank 2
  only). It adjusts **queries only**: as in SSCD the adjustment is appended as an extra query
  coordinate and a 1 to every reference, and FAISS searches these augmented vectors by inner
  product, so scores and tie orders are SSCD's to the bit (with a ``Flat`` final index; other final
  indexes subtract the adjustment from their scores). The label is SSCD's ``f"{beta:.2f}[...]"``.
* **k and the global cap** (``sscd/datasets/disc.py`` ``retrieval_eval_splits``: k = 10 per query;
  isc2021's capped search keeps the best N predictions overall): each query keeps its ``k`` nearest
  references (``k`` is capped at the number of references), then, after normalization,
  ``global_cap`` keeps the highest-scoring candidates over all queries. isc2021's capped range search
  has no per-query limit: pass ``k`` large enough (up to the number of references) to match it.

Output order and ties are deterministic: candidates are sorted by query, then score descending,
then reference index ascending; the global cap breaks equal scores by query, then reference index
(lower first). Which references enter a query's top ``k`` when several tie at the k-th score is
FAISS's choice.

**GPU**: with ``use_gpu=True``, or ``None`` (every run's setting) when faiss-gpu sees a GPU and a
two-row test search runs on it (:func:`~vsbench.index.codec.gpu_kernels_fail`: a wheel without code
for this GPU's architecture fails there, once, instead of in every search), the final index is
moved to the first visible GPU (``index_cpu_to_gpu`` with the process's one ``StandardGpuResources``; Kubernetes
exposes the pod's GPU as device 0) and trained there too (e.g. IVF k-means). One GPU rather than
SSCD's ``index_cpu_to_all_gpus``: replicas of an untrained index would each run their own k-means,
and a pod gets one GPU anyway. faiss-gpu implements only ``Flat``, ``IVF...,Flat``, ``IVF...,PQ...``,
``IVF...,SQ...`` and ``SQfp16``, and k up to 2048; for any other index (``PQ``, ``HNSW``, ``LSH``...)
or a larger k the search stays on the CPU with a warning, never fails. The transforms always run on
the CPU (FAISS has no GPU vector transforms). A faiss without GPU support (faiss-cpu), or one that
sees no GPU, searches on the CPU, with one warning line per process when the GPU was asked for; a
faiss-gpu that sees a GPU it cannot run on warns once either way. The results are the CPU's
exactly then (tests/unit/test_index.py). The logger ``vsbench.index.search`` says where each codec ran.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import faiss
import numpy as np

from vsbench.index.codec import (
    FAISS_METRICS,
    Found,
    Metric,
    check_finite,
    fill,
    gpu_kernels_fail,
    search_filled,
    train_codec,
    tune,
)
from vsbench.index.settings import ScoreNorm, SearchError

logger = logging.getLogger(__name__)

@dataclass(frozen=True)
class Candidates:
    """Scored candidate pairs, sorted by query, then score descending, then reference."""

    query: np.ndarray  # int64 row indices into the queries array
    reference: np.ndarray  # int64 row indices into the references array
    score: np.ndarray  # float32, higher = more similar

    def __post_init__(self) -> None:
        if not self.query.ndim == self.reference.ndim == self.score.ndim == 1:
            raise SearchError("candidate columns must be 1-D")
        if not len(self.query) == len(self.reference) == len(self.score):
            raise SearchError(f"candidate columns disagree in length: {len(self.query)} queries, "
                              f"{len(self.reference)} references, {len(self.score)} scores")

    def __len__(self) -> int:
        return len(self.score)


def search(queries: np.ndarray, references: np.ndarray, *, codec: str = "Flat",
           train: np.ndarray | None = None, k: int = 10, global_cap: int | None = None,
           score_norm: ScoreNorm | None = None, metric: Metric = "ip",
           use_gpu: bool | None = None) -> Candidates:
    """The ``k`` best references of every query under ``codec`` (see the module docstring).

    ``train`` is needed when the codec must be trained (PCA, IVF, PQ...) and for ``score_norm``.
    Arrays are 2-D float arrays of one dimension, finite and non-empty; they are copied to
    contiguous float32 only where they are not already.
    """
    check_settings(k, global_cap, metric)
    norms = [] if score_norm is None else [score_norm]
    q, r, t = validated(queries, references, train, norms)
    raw, normalized = search_codec(q, r, t, codec=codec, k=k, score_norms=norms, raw=score_norm is None,
                                    metric=metric, on_gpu=use_gpu_now(use_gpu))
    similarity, ids = normalized[0] if norms else raw
    return candidates_from(similarity, ids, global_cap)


def knn(queries: np.ndarray, references: np.ndarray, *, codec: str = "Flat", train: np.ndarray | None = None,
        k: int = 10, metric: Metric = "ip", use_gpu: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's own ``(n_queries, k)`` result under ``codec``: similarities and reference ids (-1 where
    FAISS found fewer), each row in FAISS's order, ties as FAISS leaves them.

    :func:`search` re-sorts ties by reference index; a benchmark whose original scores FAISS's
    order itself (SSCD's Copydays ranks) takes this instead, so that its tie order is the original's.
    """
    check_settings(k, None, metric)
    q, r, t = validated(queries, references, train, [])
    found, _ = search_codec(q, r, t, codec=codec, k=k, score_norms=[], raw=True, metric=metric,
                             on_gpu=use_gpu_now(use_gpu))
    assert found is not None
    return found


def check_settings(k: int, global_cap: int | None, metric: str) -> None:
    if not _is_positive_int(k):
        raise SearchError(f"k must be a positive integer, got {k!r}")
    if global_cap is not None and not _is_positive_int(global_cap):
        raise SearchError(f"global_cap must be a positive integer or None, got {global_cap!r}")
    if metric not in FAISS_METRICS:
        raise SearchError(f"metric must be one of {sorted(FAISS_METRICS)}, got {metric!r}")


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1


def validated(queries: np.ndarray, references: np.ndarray, train: np.ndarray | None,
               score_norms: Sequence[ScoreNorm]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    q = _as_matrix("queries", queries)
    r = _as_matrix("references", references, q.shape[1])
    t = None if train is None else _as_matrix("train", train, q.shape[1])
    for score_norm in score_norms:
        if t is None:
            raise SearchError(f"score normalization {score_norm} needs training descriptors (train=...)")
        if len(t) <= score_norm.last:
            raise SearchError(f"score normalization {score_norm} needs at least {score_norm.last + 1} "
                              f"training rows, got {len(t)}")
    return q, r, t


def _as_matrix(name: str, array: np.ndarray, dim: int | None = None) -> np.ndarray:
    """Contiguous float32 (what FAISS takes), after checking shape, dtype and finiteness."""
    a = np.asarray(array)
    if a.ndim != 2:
        raise SearchError(f"{name} must be a 2-D array (rows x dims), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.floating):
        raise SearchError(f"{name} must hold floating-point values, got dtype {a.dtype}")
    if a.shape[0] == 0 or a.shape[1] == 0:
        raise SearchError(f"{name} is empty (shape {a.shape})")
    if dim is not None and a.shape[1] != dim:
        raise SearchError(f"{name} have {a.shape[1]} dims but queries have {dim}")
    with np.errstate(over="ignore"):  # float64 beyond float32's range becomes inf, reported just below
        a = np.ascontiguousarray(a, dtype=np.float32)
    check_finite(a, name)
    return a


_said: set[tuple[str, bool]] = set()  # (reason, asked) already said: one line per process, not one per codec


def gpu_unavailable() -> str:
    """Why faiss cannot search on GPU 0 here, in words, or "" when it can: a CPU build (no
    ``StandardGpuResources``), no visible GPU, or GPU kernels that do not run on this GPU
    (:func:`~vsbench.index.codec.gpu_kernels_fail`)."""
    if not hasattr(faiss, "StandardGpuResources"):
        return "this faiss has no GPU support (a faiss-cpu build)"
    if faiss.get_num_gpus() < 1:
        return "this faiss-gpu sees no GPU"
    failure = gpu_kernels_fail()
    return f"faiss-gpu cannot run on GPU 0 ({failure})" if failure else ""


def use_gpu_now(use_gpu: bool | None) -> bool:
    """Whether to search on GPU 0: ``None`` means "when faiss-gpu can". Falling back to the CPU is
    said in one warning line per process when the GPU was asked for, or when a faiss-gpu that sees a
    GPU cannot use it (``None``: a CPU build or no GPU is the ordinary CPU case, said at INFO)."""
    if use_gpu is False:
        return False
    reason = gpu_unavailable()
    asked = bool(use_gpu) or "cannot run" in reason
    if reason and (reason, asked) not in _said:
        _said.add((reason, asked))
        logger.log(logging.WARNING if asked else logging.INFO, "%s%s: searching on the CPU",
                   "use_gpu=True, but " if use_gpu else "", reason)
    return not reason


def candidates_from(similarity: np.ndarray, ids: np.ndarray, global_cap: int | None) -> Candidates:
    """Flatten FAISS's (n_queries, k) results, drop missing (-1) slots, sort and cap."""
    found = ids >= 0
    query = np.broadcast_to(np.arange(len(ids), dtype=np.int64)[:, None], ids.shape)[found]
    reference = ids[found].astype(np.int64, copy=False)
    score = similarity[found]
    order = np.lexsort((reference, -score, query))
    query, reference, score = query[order], reference[order], score[order]
    if global_cap is not None and global_cap < len(score):
        # Stable on (query, reference)-sorted rows: equal scores keep the lower query, then reference.
        keep = np.sort(np.argsort(-score, kind="stable")[:global_cap])
        query, reference, score = query[keep], reference[keep], score[keep]
    return Candidates(query, reference, score)


def search_codec(q: np.ndarray, r: np.ndarray, t: np.ndarray | None, *, codec: str, k: int,
                  score_norms: Sequence[ScoreNorm], raw: bool, metric: Metric,
                  on_gpu: bool, search_params: str = "") -> tuple[Found | None, list[Found]]:
    """Train ``codec``, add every reference, search every query (:mod:`vsbench.index.codec`'s three
    acts in one process): the unnormalized results (when ``raw``) and one per normalization."""
    k = min(k, len(r))
    norm_k = max((norm.last + 1 for norm in score_norms), default=0)
    device_k = max(k, norm_k)
    trained = train_codec(codec, q.shape[1], metric, t, keep_train=bool(score_norms), on_gpu=on_gpu, k=device_k)
    q, r = trained.project(q, "queries"), trained.project(r, "references")
    index = tune(fill(trained, r, on_gpu=on_gpu, k=device_k), search_params, codec)
    train_index = fill(trained, trained.train, on_gpu=on_gpu, k=device_k) if score_norms else None
    return search_filled(trained, index, q, k, score_norms=score_norms, raw=raw, train_index=train_index,
                         references=r, on_gpu=on_gpu)
