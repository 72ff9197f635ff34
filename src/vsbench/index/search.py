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

**GPU**: with ``use_gpu=True``, or ``None`` when ``faiss.get_num_gpus() > 0``, the final index is
moved to the first visible GPU (``index_cpu_to_gpu`` with a ``StandardGpuResources``; Kubernetes
exposes the pod's GPU as device 0) and trained there too (e.g. IVF k-means). One GPU rather than
SSCD's ``index_cpu_to_all_gpus``: replicas of an untrained index would each run their own k-means,
and a pod gets one GPU anyway. faiss-gpu implements only ``Flat``, ``IVF...,Flat``, ``IVF...,PQ...``,
``IVF...,SQ...`` and ``SQfp16``, and k up to 2048; for any other index (``PQ``, ``HNSW``, ``LSH``...)
or a larger k the search stays on the CPU with a warning, never fails. The transforms always run on
the CPU (FAISS has no GPU vector transforms). A faiss without GPU support (faiss-cpu) searches on
the CPU, with a warning when the GPU was asked for. The logger ``vsbench.index.search`` says where
each codec ran.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import faiss
import numpy as np

from vsbench.index.codec import (
    FAISS_METRICS,
    GPU_MAX_K,
    Found,
    Metric,
    SearchError,
    check_finite,
    fill,
    search_filled,
    train_codec,
    tune,
)

logger = logging.getLogger(__name__)

__all__ = ["GPU_MAX_K", "Candidates", "Metric", "ScoreNorm", "SearchError", "knn", "parse_codecs",
           "parse_score_norm", "parse_score_norms", "search", "search_all", "use_gpu_now"]

NO_NORM_LABEL = "none"


@dataclass(frozen=True)
class ScoreNorm:
    """SSCD's ``beta[first,last]``: subtract ``beta`` x the mean similarity of each query to its
    training-set neighbours ``first..last`` (0-based, inclusive ranks).

    As in SSCD, the ranks averaged are the Python slice ``D[:, first:last + 1]`` of the ``last + 1``
    nearest training similarities, so a negative ``first`` counts from the end: ``[-1,2]`` averages
    rank 2 only (:attr:`note` says so). A slice that selects nothing (``[2,0]``) is refused: SSCD
    would average an empty slice and score every pair NaN.
    """

    beta: float
    first: int
    last: int

    def __post_init__(self) -> None:
        if not math.isfinite(self.beta):
            raise SearchError(f"score normalization beta must be finite, got {self.beta}")
        if self.last < 0:
            raise SearchError(f"score normalization needs last >= 0 (it searches last + 1 training neighbours), "
                              f"got [{self.first},{self.last}]")
        if not self.ranks:
            raise SearchError(f"score normalization [{self.first},{self.last}] selects no neighbour rank "
                              f"(SSCD averages the empty slice D[:, {self.first}:{self.last + 1}] and scores every "
                              f"pair NaN); did you mean [{min(self.first, self.last)},{max(self.first, self.last)}]?")

    @property
    def ranks(self) -> range:
        """The neighbour ranks averaged: SSCD's slice ``first:last + 1`` of ``range(last + 1)``."""
        return range(self.last + 1)[self.first : self.last + 1]

    @property
    def note(self) -> str | None:
        """A one-line warning when SSCD's slice reads other ranks than ``first..last`` say."""
        if self.ranks == range(self.first, self.last + 1):
            return None
        return (f"score normalization {self}: SSCD's slice D[:, {self.first}:{self.last + 1}] averages neighbour "
                f"rank(s) {self.ranks.start}..{self.ranks.stop - 1} only (a negative first counts from the end); "
                f"that is what is computed; did you mean [0,{self.last}]? write "
                f"{self.beta:.2f}[{self.ranks.start},{self.ranks.stop - 1}] to say it plainly")

    def __str__(self) -> str:
        """SSCD's label, ``f"{weight:.2f}[{start},{end}]"`` (``1.00[0,2]``, as in its disc_metrics.csv)."""
        return f"{self.beta:.2f}[{self.first},{self.last}]"


def parse_score_norm(text: str) -> ScoreNorm | None:
    """One ``beta[first,last]`` as SSCD's ``ScoreNormalization.parse`` reads it; ``""``/``"none"`` -> None.

    SSCD: ``weight, spec = spec.split("[", 1)``, the rest must end with ``]``, ``first,last`` or a
    single ``i`` (meaning ``i,i``), ``float(weight)``, ``int(first)``, ``int(last)``. So ``[2,0]``
    and ``[-1,2]`` parse there; see :class:`ScoreNorm` for what they mean and which one is refused.
    Surrounding spaces are allowed here (SSCD fails on a space after ``]``).
    """
    stripped = text.strip()
    if stripped == "" or stripped.lower() == NO_NORM_LABEL:
        return None
    expected = "expected beta[first,last], e.g. '1.00[0,2]', or '' / 'none'"
    weight, bracket, spec = stripped.partition("[")
    if not bracket or not spec.endswith("]"):
        raise SearchError(f"score normalization {text!r}: {expected}")
    first, _, last = spec[:-1].partition(",")
    try:
        return ScoreNorm(float(weight), int(first), int(last if last else first))
    except ValueError as exc:
        if isinstance(exc, SearchError):
            raise SearchError(f"score normalization {text!r}: {exc}") from None
        raise SearchError(f"score normalization {text!r}: {expected}") from None


def parse_score_norms(text: str) -> list[ScoreNorm]:
    """SSCD's ``--score_norm``: several ``beta[first,last]`` separated by ``;``, each its own rows.

    ``""`` or ``"none"`` give no normalization. Two specs with the same label (``1.234[0,2]`` and
    ``1.231[0,2]`` are both ``1.23[0,2]``) are refused: SSCD would write two rows nobody can tell apart.
    """
    if text.strip() == "" or text.strip().lower() == NO_NORM_LABEL:
        return []
    norms = [parse_score_norm(part) for part in text.split(";")]
    if any(norm is None for norm in norms):
        raise SearchError(f"score normalization {text!r}: an empty or 'none' entry in a ';' list")
    labels = [str(norm) for norm in norms]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise SearchError(f"score normalization {text!r}: {repeated} would label two rows alike; "
                          "give betas that differ at two decimals")
    return [norm for norm in norms if norm is not None]


def parse_codecs(text: str) -> list[str]:
    """``"Flat;PCAW512,L2norm,Flat"`` -> ``["Flat", "PCAW512,L2norm,Flat"]``.

    Only the list is checked here (no empty or repeated entry: results are keyed by codec); each
    string is validated by ``faiss.index_factory`` when :func:`search` builds it, since that needs
    the descriptors' dimension.
    """
    codecs = [part.strip() for part in text.split(";")]
    if any(not codec for codec in codecs):
        raise SearchError(f"codecs {text!r}: expected FAISS index_factory strings separated by ';', "
                          "e.g. 'Flat;PCAW512,L2norm,Flat', with no empty entry")
    repeated = sorted({codec for codec in codecs if codecs.count(codec) > 1})
    if repeated:
        raise SearchError(f"codecs {text!r}: {repeated} listed more than once")
    return codecs


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
    _check_settings(k, global_cap, metric)
    norms = [] if score_norm is None else [score_norm]
    q, r, t = _validated(queries, references, train, norms)
    raw, normalized = _search_codec(q, r, t, codec=codec, k=k, score_norms=norms, raw=score_norm is None,
                                    metric=metric, on_gpu=use_gpu_now(use_gpu))
    similarity, ids = normalized[0] if norms else raw
    return _candidates(similarity, ids, global_cap)


def knn(queries: np.ndarray, references: np.ndarray, *, codec: str = "Flat", train: np.ndarray | None = None,
        k: int = 10, metric: Metric = "ip", use_gpu: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """FAISS's own ``(n_queries, k)`` result under ``codec``: similarities and reference ids (-1 where
    FAISS found fewer), each row in FAISS's order, ties as FAISS leaves them.

    :func:`search` re-sorts ties by reference index; a benchmark whose original scores FAISS's
    order itself (SSCD's Copydays ranks) takes this instead, so that its tie order is the original's.
    """
    _check_settings(k, None, metric)
    q, r, t = _validated(queries, references, train, [])
    found, _ = _search_codec(q, r, t, codec=codec, k=k, score_norms=[], raw=True, metric=metric,
                             on_gpu=use_gpu_now(use_gpu))
    assert found is not None
    return found


def search_all(queries: np.ndarray, references: np.ndarray, *, codecs: str, score_norm: str,
               train: np.ndarray | None, k: int, global_cap: int | None, metric: Metric,
               use_gpu: bool | None, unnormalized: bool = True) -> list[tuple[str, str, Candidates]]:
    """``(codec, score_norm_label, candidates)`` for every codec, without normalization (``"none"``,
    unless ``unnormalized=False``) and with each ``;``-separated normalization of ``score_norm``
    (labelled ``str(ScoreNorm)``, e.g. ``1.00[0,2]``).

    Rows come in SSCD's disc_metrics.csv order: every codec unnormalized, then every codec with the
    first normalization, and so on. Each codec is trained once. (A :class:`~vsbench.index.plan.SearchRequest`
    answered in this process; :mod:`vsbench.index.store` answers the same request shard by shard.)
    """
    from vsbench.index.plan import SearchRequest, as_candidates, search_inline

    _check_settings(k, global_cap, metric)
    request = SearchRequest("search", queries, references, train=train, codecs=codecs, metric=metric, k=k,
                            score_norm=score_norm, unnormalized=unnormalized)
    return as_candidates(search_inline(request, use_gpu), global_cap)


def _check_settings(k: int, global_cap: int | None, metric: str) -> None:
    if not _is_positive_int(k):
        raise SearchError(f"k must be a positive integer, got {k!r}")
    if global_cap is not None and not _is_positive_int(global_cap):
        raise SearchError(f"global_cap must be a positive integer or None, got {global_cap!r}")
    if metric not in FAISS_METRICS:
        raise SearchError(f"metric must be one of {sorted(FAISS_METRICS)}, got {metric!r}")


def _is_positive_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool) and value >= 1


def _validated(queries: np.ndarray, references: np.ndarray, train: np.ndarray | None,
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


def use_gpu_now(use_gpu: bool | None) -> bool:
    """Whether to search on GPU 0: ``None`` means "when faiss-gpu sees one"."""
    available = hasattr(faiss, "StandardGpuResources") and faiss.get_num_gpus() > 0
    if use_gpu and not available:
        logger.warning("use_gpu=True, but this faiss has no GPU support or sees no GPU: searching on the CPU")
    return available if use_gpu is None else bool(use_gpu and available)


def _candidates(similarity: np.ndarray, ids: np.ndarray, global_cap: int | None) -> Candidates:
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


def _search_codec(q: np.ndarray, r: np.ndarray, t: np.ndarray | None, *, codec: str, k: int,
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
