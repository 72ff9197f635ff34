"""What a retrieval benchmark asks of FAISS, said once, so that one process or many can answer it.

A benchmark that ranks with FAISS (DISC, Copydays, ABID as a gallery) states its searches as
:class:`SearchRequest` values: which descriptors are the queries, the references and the training
rows, the codecs, the metric, ``k`` and the score normalizations. The answer is a
:data:`SearchResults` mapping ``(codec, score_norm_label) -> (similarities, reference ids)`` in
FAISS's ``(n_queries, k)`` layout, rows in query order, ids -1 where fewer than ``k`` were found.

Two ways give the same answer, float for float on ``Flat`` codecs (tests/unit/test_sharded_search.py):

* :func:`search_inline` in this process (``vsbench similarity run``, ``evaluate``);
* :mod:`vsbench.index.store`: an index step persists each codec's trained index, split into
  reference shards; search steps each take one (query shard, reference shard) pair; the score
  step merges their results into the global top ``k``.

The benchmark then scores the results (its ``score`` method) without knowing which way was taken.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from vsbench.index.codec import Found, Metric
from vsbench.index.search import Candidates, candidates_from, check_settings, search_codec, use_gpu_now, validated
from vsbench.index.settings import NO_NORM_LABEL, ScoreNorm, SearchError, parse_codecs, parse_score_norms

logger = logging.getLogger("vsbench.index.search")

SearchResults = dict[tuple[str, str], Found]  # (codec, score-norm label) -> FAISS's (n_queries, k) result


@dataclass(frozen=True)
class SearchRequest:
    """One FAISS search of a benchmark: ``k`` nearest references of every query under every codec,
    unnormalized (``unnormalized``) and under each of ``score_norm``'s normalizations."""

    name: str  # unique within a benchmark: it names the request's folders ("l2", "ip", "gallery")
    queries: np.ndarray
    references: np.ndarray
    train: np.ndarray | None
    codecs: str  # FAISS index_factory strings separated by ';'
    metric: Metric
    k: int
    score_norm: str = ""  # SSCD's beta[first,last]; several separated by ';'
    unnormalized: bool = True
    search_params: str = ""  # FAISS ParameterSpace settings at search time, e.g. "nprobe=16" (IVF), "efSearch=64"
    reference_ids: tuple[str, ...] | None = None  # what a persisted index is for; it is checked against them

    def __post_init__(self) -> None:
        check_settings(self.k, None, self.metric)
        if not self.name or not all(c.isalnum() or c in "-_" for c in self.name):
            raise SearchError(f"search request name {self.name!r}: letters, digits, '-' and '_' only")
        if self.reference_ids is not None and len(self.reference_ids) != len(self.references):
            raise SearchError(f"search {self.name!r}: {len(self.reference_ids)} reference ids for "
                              f"{len(self.references)} reference rows")
        if not self.unnormalized and not self.norms:
            raise SearchError(f"search {self.name!r} asks for neither unnormalized nor normalized results")

    @property
    def ids_digest(self) -> str:
        """:func:`ids_digest` of the reference ids, computed once (a million ids take a second)."""
        if self.reference_ids is None:
            raise SearchError(f"search {self.name!r}: a persisted index needs the references' ids")
        cached = self.__dict__.get("_ids_digest")
        if cached is None:
            cached = ids_digest(self.reference_ids)
            object.__setattr__(self, "_ids_digest", cached)
        return cached

    @property
    def codec_list(self) -> list[str]:
        return parse_codecs(self.codecs)

    @property
    def norms(self) -> list[ScoreNorm]:
        return parse_score_norms(self.score_norm)

    @property
    def variants(self) -> list[tuple[str, str]]:
        """``(codec, label)`` in SSCD's disc_metrics.csv order: every codec unnormalized, then every
        codec with the first normalization, and so on."""
        labels = ([NO_NORM_LABEL] if self.unnormalized else []) + [str(norm) for norm in self.norms]
        return [(codec, label) for label in labels for codec in self.codec_list]

    @property
    def result_k(self) -> int:
        """The columns of every result: ``k``, capped at the number of references (as FAISS caps it)."""
        return min(self.k, len(self.references))

    @property
    def norm_k(self) -> int:
        """Training neighbours score normalization reads (0 without normalization)."""
        return max((norm.last + 1 for norm in self.norms), default=0)

    def checked(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Queries, references and training rows as contiguous, finite float32 of one dimension."""
        return validated(self.queries, self.references, self.train, self.norms)


def search_inline(request: SearchRequest, use_gpu: bool | None = None) -> SearchResults:
    """Answer ``request`` in this process: each codec trained once, every reference in one index."""
    q, r, t = request.checked()
    on_gpu = use_gpu_now(use_gpu)
    norms = request.norms
    for norm in norms:
        if norm.note:
            logger.warning(norm.note)
    results: SearchResults = {}
    for codec in request.codec_list:
        raw, normalized = search_codec(q, r, t, codec=codec, k=request.k, score_norms=norms,
                                        raw=request.unnormalized, metric=request.metric, on_gpu=on_gpu,
                                        search_params=request.search_params)
        if raw is not None:
            results[(codec, NO_NORM_LABEL)] = raw
        for norm, found in zip(norms, normalized):
            results[(codec, str(norm))] = found
    return {variant: results[variant] for variant in request.variants}


def search_all_inline(requests: Sequence[SearchRequest], use_gpu: bool | None) -> dict[str, SearchResults]:
    """Every request of a benchmark, answered in this process."""
    return {request.name: search_inline(request, use_gpu) for request in requests}


def as_candidates(results: SearchResults, global_cap: int | None) -> list[tuple[str, str, Candidates]]:
    """``(codec, label, candidates)`` per variant, in the results' order: candidates sorted by query,
    score descending, reference; then ``global_cap`` keeps the best over all queries."""
    check_settings(1, global_cap, "ip")
    return [(codec, label, candidates_from(similarity, ids, global_cap))
            for (codec, label), (similarity, ids) in results.items()]


def results_for(results: Mapping[str, SearchResults], request: str) -> SearchResults:
    """One request's results, or an error naming what was answered instead."""
    if request not in results:
        raise SearchError(f"no search results for {request!r} (have {sorted(results)})")
    return results[request]


def ids_digest(ids: Sequence[str]) -> str:
    """sha256 of the ids in row order, one per line: an index is for these references, in this order."""
    digest = hashlib.sha256()
    ids = ids if isinstance(ids, (list, tuple)) else list(ids)
    for start in range(0, len(ids), 1 << 18):  # one update per block: a million ids in ~20 ms
        block = ids[start:start + (1 << 18)]
        try:
            text = "\n".join(block)  # ids are strings: str() of each cost 3x the hash (60 ms a million)
        except TypeError:
            text = "\n".join(map(str, block))
        digest.update((text + "\n").encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def array_digest(array: np.ndarray | None) -> str:
    """sha256 of an array's shape and float32 bytes ("" for None): the same descriptors, the same digest."""
    if array is None:
        return ""
    values = np.ascontiguousarray(array, dtype=np.float32)
    digest = hashlib.sha256(repr(values.shape).encode())
    rows_per_block = max(1, (64 << 20) // max(1, values.strides[0]))
    for start in range(0, len(values), rows_per_block):
        digest.update(memoryview(values[start:start + rows_per_block]).cast("B"))
    return digest.hexdigest()


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
    check_settings(k, global_cap, metric)
    request = SearchRequest("search", queries, references, train=train, codecs=codecs, metric=metric, k=k,
                            score_norm=score_norm, unnormalized=unnormalized)
    return as_candidates(search_inline(request, use_gpu), global_cap)
