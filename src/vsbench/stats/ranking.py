"""Ranking statistics over reweighted queries: micro AP (isc2021's uAP and recall at precision 0.9),
and Copydays' pooled trapezoidal uAP.

Each recomputes a pooled ranking metric under a block of replicate weights (how often each query
was drawn) without writing the resampled predictions out: a query drawn ``w`` times is ``w``
queries whose predictions tie copy for copy (THE contract of :mod:`vsbench.stats.statistics`). What
a pooled AP needs of the expanded ranking is, at each positive, the weight of the positives and of
the negatives ranked before it. So the predictions are sorted once per unit file, and the
negatives are aggregated once into a sparse ``(group x query)`` matrix of counts: ``M[g, q]`` is how
many negatives of query ``q`` are first ranked before the positives of group ``g`` (a group: the
positives that have the same negatives before them). For a block of replicates ``W (B x queries)``
the negatives before each group are ``cumsum(M @ W.T)``, one sparse product (work: the matrix's
non-zeros, at most the number of negatives ranked above the last positive, times B); the
positives' own weights are a gather and a cumulative sum over the positives. A positive of weight
``w`` then adds its ``w`` copies' terms, looping over ``j = 1..w`` (the largest count drawn, a
handful), never over units. Replicate blocks are cut so that no ``(positives x replicates)``
array holds more than :data:`~vsbench.stats.resample.BLOCK_CELLS` numbers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import sparse

from vsbench.stats.resample import BLOCK_CELLS
from vsbench.stats.statistics import per_count
from vsbench.stats.units import Units, UnitsError

PRECISION_TARGET = 0.9  # isc2021's recall at precision 0.9
MICRO_AP_PARTS = ("uap", "recall_at_p90")
_SLICE = 1 << 18  # predictions looked at together when counting the negatives before each group


@dataclass(frozen=True)
class RankedPositives:
    """The positives of a pooled ranking in rank order and, per group of positives, the negatives
    ranked before it (module docstring). Built once per unit file; :meth:`block` evaluates a block
    of replicate weights."""

    owner: np.ndarray  # (P,) the unit row of each positive, best rank first
    group: np.ndarray  # (P,) its group: positives with the same negatives before them
    before: sparse.csc_matrix  # (G, units): negatives counted before group g and every later group
    n_units: int

    @property
    def size(self) -> int:
        return int(self.owner.size)

    def rows_per_block(self) -> int:
        """Replicates evaluated together: bounded (positives, groups, units) x replicates arrays."""
        return max(1, BLOCK_CELLS // max(self.size, self.before.shape[0], self.n_units, 1))

    def block(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For float64 ``columns (units, B)`` (:func:`_columns`: a block of weights transposed), each
        ``(P, B)``: each positive's weight, the weight of the positives ranked before it, and the
        weight of the negatives ranked before it. Cumulative sums in place (issue 54: each
        ``(P, B)`` temporary is 10.6 MiB at 666k positives); the same sums, so the same bits."""
        if self.before.shape[0]:
            product = self.before @ columns
            np.cumsum(product, axis=0, out=product)
            negatives = product[self.group]
            del product
        else:
            negatives = np.zeros((0, columns.shape[1]))
        own = columns[self.owner]
        positives_before = np.cumsum(own, axis=0)
        positives_before -= own
        return own, positives_before, negatives


def rank_groups(owner: np.ndarray, first_group: np.ndarray, groups: int, n_units: int) -> sparse.csc_matrix:
    """``M[g, q]``: how many of query ``q``'s negatives are first counted at group ``g`` (negatives with
    ``first_group >= groups`` are ranked after every positive and are left out)."""
    keep = first_group < groups
    rows, columns = first_group[keep], owner[keep]
    del keep
    if columns.size > 1 and bool((columns[1:] < columns[:-1]).any()):  # CSC wants them by query
        order = np.argsort(columns, kind="stable")
        rows, columns = rows[order], columns[order]
        del order
    return _csc([rows], np.bincount(columns, minlength=n_units), groups)


def _csc(rows: list[np.ndarray], per_unit: np.ndarray, groups: int) -> sparse.csc_matrix:
    """The ``(groups x units)`` count matrix, built as CSC directly from its row indices in column
    order (``rows``, in pieces) and each column's number of entries (``per_unit``): a 1.0 an entry,
    int32 indices where they fit. Why not COO then ``tocsc``: that held the matrix about three times
    over (float64 ones, COO's int32 copies of both index arrays, then the CSC arrays), the largest
    transient of a 3M-prediction interval (issue 54). Equal entries of one column are left
    unsummed: a product adds them one by one instead of at once, and since every count and every
    replicate weight is a whole number, each sum is exact in float64 whatever its order, so the
    result is the same to the bit."""
    n_units = int(per_unit.size)
    nnz = int(sum(part.size for part in rows))
    index = index_type(groups, n_units, nnz)
    indptr = np.zeros(n_units + 1, dtype=index)
    np.cumsum(per_unit, out=indptr[1:])
    indices = np.empty(nnz, dtype=index)
    done = 0
    for part in rows:
        indices[done:done + part.size] = part
        done += part.size
    return sparse.csc_matrix((np.ones(nnz), indices, indptr), shape=(groups, n_units), copy=False)


def index_type(*sizes: int) -> type[np.signedinteger]:
    """int32 for sparse indices while every size fits (half the memory of int64), else int64."""
    return np.int32 if max(sizes) < 2**31 - 1 else np.int64


def _weights(weights: np.ndarray, n_units: int) -> np.ndarray:
    w = np.asarray(weights)
    if w.ndim != 2 or w.shape[1] != n_units:
        raise UnitsError(f"weights of shape {w.shape} for {n_units} units")
    return w


def _columns(weights: np.ndarray) -> np.ndarray:
    """A block of weights ``(B, units)`` as float64 ``(units, B)``, the layout a sparse product streams,
    converted and transposed in one copy (issue 54: a float64 copy and then its transpose held two
    16 MiB arrays at 1M units)."""
    out = np.empty((weights.shape[1], weights.shape[0]))
    out[...] = weights.T
    return out


def _by_column(rows: int, flat_index: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Sums of ``values`` per replicate (column) of a C-ordered ``(P, rows)`` array's flat indices."""
    return np.bincount(flat_index % rows, weights=values, minlength=rows)


def _cached_block(units: Units, name: str, weights: np.ndarray,
                  compute: Callable[[np.ndarray], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """All parts of one statistic for this block of weights, computed once: ``evaluate`` asks for uAP
    and recall at P90 with the same weights array, and both come out of one pass. The weights are
    known by their content (shape, type and a BLAKE2b digest of their bytes), not by the array: a
    caller that refills one array in place for the next block must not get the last block's values
    back. A digest, not a copy: the copy was 8 MiB at 1M units (issue 54)."""
    key = f"ranking:{name}:last"
    content = _content(weights)
    last = units._cache.get(key)
    if last is not None and last[0] == content:
        return last[1]
    out = compute(weights)
    units._cache[key] = (content, out)
    return out


def _content(weights: np.ndarray) -> tuple[tuple[int, ...], str, bytes]:
    """What tells two weight arrays apart: shape, dtype and a 256-bit digest of the bytes."""
    array = np.ascontiguousarray(weights)
    return array.shape, array.dtype.str, hashlib.blake2b(array, digest_size=32).digest()


# ----------------------------------------------------------------------------- micro AP (DISC)


def _micro_ap_ranking(units: Units) -> RankedPositives:
    """Positives by score descending; a group per distinct positive score; a negative is before a
    group when its score is ``>=`` the group's (isc2021: negatives first on ties)."""
    key = "ranking:micro_ap"
    if key not in units._cache:
        scores, owner = units.lists("scores")
        positive, _ = units.lists("positive", bool)
        if np.isnan(scores).any():
            raise UnitsError(f"{units.benchmark} units: a NaN score has no rank")
        rows = np.flatnonzero(positive)
        order = rows[np.argsort(-scores[rows], kind="stable")]
        ranked = scores[order]
        new = np.ones(ranked.size, dtype=bool)
        new[1:] = ranked[1:] != ranked[:-1]
        group = np.cumsum(new) - 1
        distinct_ascending = np.ascontiguousarray(ranked[new][::-1])
        groups = int(distinct_ascending.size)
        # the first group each negative precedes (the number of positive scores strictly above its
        # own), a slice of the predictions at a time: no full-length int64 temporaries (issue 54)
        parts, per_unit = [], np.zeros(len(units), dtype=np.int64)
        index = index_type(groups)
        for start in range(0, scores.size, _SLICE):
            negatives = np.flatnonzero(~positive[start:start + _SLICE])
            negatives += start
            first = np.searchsorted(distinct_ascending, scores[negatives], side="right")
            np.subtract(groups, first, out=first)
            before = first < groups  # a negative ranked after every positive counts nowhere
            parts.append(first[before].astype(index))
            # units' lists are stored unit by unit: the owners come in column order already
            per_unit += np.bincount(owner[negatives[before]], minlength=len(units))
        units._cache[key] = RankedPositives(owner[order], group, _csc(parts, per_unit, groups), len(units))
    return units._cache[key]


def _micro_ap_parts(units: Units, weights: np.ndarray, precision: float) -> dict[str, np.ndarray]:
    ranking = _micro_ap_ranking(units)
    truth = units.values("n_positives")
    w_all = _weights(weights, len(units))
    uap = np.empty(w_all.shape[0])
    recall = np.empty(w_all.shape[0])
    step = ranking.rows_per_block()
    for start in range(0, w_all.shape[0], step):
        block = w_all[start:start + step]
        if step >= FEW_ROWS:  # small units: the whole block at once (a replicate alone is mostly overhead)
            uap[start:start + block.shape[0]], recall[start:start + block.shape[0]] = _micro_ap_block(
                ranking, truth, block, precision)
            continue
        # Few rows a block: one replicate at a time (issue 54: every (P, B) float64 array below is
        # 10.6 MiB at 666k positives and B = 2), each summed as its block of B would sum it: numpy
        # adds a (P, B > 1) array's rows one after another and a (P, 1) array pairwise, so the bits
        # stay the same.
        in_order = block.shape[0] > 1
        for row in range(block.shape[0]):
            uap[start + row:start + row + 1], recall[start + row:start + row + 1] = _micro_ap_block(
                ranking, truth, block[row:row + 1], precision, in_order)
    return {"uap": uap, "recall_at_p90": recall}


FEW_ROWS = 4  # under this many replicates a block, they are taken one at a time (memory, issue 54)


def _micro_ap_block(ranking: RankedPositives, truth: np.ndarray, weights: np.ndarray, precision: float,
                    in_order: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """uAP and recall at ``precision`` of a block of replicates (``weights``: one row each);
    ``in_order``: a single row's precisions summed one after another (as numpy sums a column of a
    wider block) rather than pairwise (issue 54's one-at-a-time path keeps the block's bits)."""
    columns = _columns(weights)
    rows = columns.shape[1]
    # sums of whole numbers (weights times counts, far under 2**53): exact in any order
    n_gt = truth @ columns
    own, before, negatives = ranking.block(columns)
    del columns
    # copy j of a positive is true positive number before + j, with every tied negative ahead of it;
    # the first copies, most of the work, in whole arrays, the few later ones by index. In place
    # where the next step no longer needs an array
    found = before + 1.0
    precision_one = found + negatives
    np.divide(found, precision_one, out=precision_one)
    del found
    precision_one[own < 1] = 0.0
    if in_order and rows == 1 and precision_one.size:
        np.cumsum(precision_one, axis=0, out=precision_one)
        total = precision_one[-1].copy()
    else:
        total = precision_one.sum(axis=0)
    del precision_one
    own, before, negatives = own.ravel(), before.ravel(), negatives.ravel()
    index = np.flatnonzero(own >= 2)
    j = 2
    while index.size:
        found = before[index] + j
        total += _by_column(rows, index, found / (found + negatives[index]))
        j += 1
        index = index[own[index] >= j]
    # precision grows over a positive's copies: its last copy is the one to test, at recall `through`
    through = before
    through += own
    negatives += through
    with np.errstate(invalid="ignore", divide="ignore"):
        np.divide(through, negatives, out=negatives)
        reached = negatives >= precision
    del negatives
    reached &= own > 0
    through[~reached] = 0.0
    del reached
    best = through.reshape(-1, rows).max(axis=0, initial=0.0)
    del own, before, through
    return per_count(total, n_gt), per_count(best, n_gt)


def micro_ap(units: Units, weights: np.ndarray, *, part: str = "uap", precision: float = PRECISION_TARGET) -> np.ndarray:
    """isc2021's micro AP (``part="uap"``) or recall at precision 0.9 (``part="recall_at_p90"``) of
    the pooled predictions of the drawn queries.

    Columns: ``scores`` and ``positive`` (list columns: each prediction's score and whether it is a
    ground-truth pair) and ``n_positives`` (the query's ground-truth pairs, retrieved or not, as the
    scorer counts them). Scores descending, negatives first on ties; the t-th true positive with
    ``NB`` negatives at or above its score has precision ``t / (t + NB)``; uAP is their sum over the
    ground-truth count, recall at P90 the largest ``t / N_gt`` whose precision reaches 0.9 (0 when
    none does). A replicate without any ground-truth pair is NaN (isc2021 refuses such an input)."""
    if part not in MICRO_AP_PARTS:
        raise UnitsError(f"micro_ap: unknown part {part!r} (expected one of {', '.join(MICRO_AP_PARTS)})")
    parts = _cached_block(units, f"micro_ap:{precision!r}", weights,
                          lambda w: _micro_ap_parts(units, w, precision))
    return parts[part]


# ----------------------------------------------------------------------------- Copydays pooled uAP


def _pooled_ranking(units: Units) -> RankedPositives:
    """Results by distance ascending, ties in the original's pooled order (``pooled_rank``: each
    result's place in SSCD's sort, machine-independent once recorded); every positive is its own group."""
    key = "ranking:copydays_uap"
    if key not in units._cache:
        distances, owner = units.lists("distances")
        hits, _ = units.lists("hits", bool)
        if np.isnan(distances).any():
            raise UnitsError(f"{units.benchmark} units: a NaN distance has no rank")
        if "pooled_rank" in units.columns:
            order = np.lexsort((units.lists("pooled_rank", np.int64)[0], distances))
        else:
            order = np.argsort(distances, kind="stable")
        ranked_hits = hits[order]
        places = np.flatnonzero(ranked_hits)
        misses = np.flatnonzero(~ranked_hits)
        first = np.searchsorted(places, misses)  # positives ranked before the miss: it precedes the next one
        units._cache[key] = RankedPositives(owner[order[places]], np.arange(places.size),
                                            rank_groups(owner[order[misses]], first, places.size, len(units)),
                                            len(units))
    return units._cache[key]


def copydays_uap(units: Units, weights: np.ndarray) -> np.ndarray:
    """Copydays' ``overall_uAP`` (SSCD ``score_macro_AP``) of the drawn queries: every (query, result)
    pair pooled and ranked by distance, the k-th positive (0-based) at 0-based rank r adding
    ``(p_left + p_right) / 2`` with ``p_left = k / r`` (1 at r = 0) and ``p_right = (k + 1) / (r + 1)``,
    the sum divided by the number of queries (upstream's choice of denominator).

    Columns: ``distances`` and ``hits`` (list columns), optionally ``pooled_rank`` (the result's place
    in the original's pooled sort, which orders tied distances as the recorded value did). Copies of
    a result are adjacent; a replicate without any query is NaN."""
    ranking = _pooled_ranking(units)
    w_all = _weights(weights, len(units))
    out = np.empty(w_all.shape[0])
    step = ranking.rows_per_block()
    for start in range(0, w_all.shape[0], step):
        columns = _columns(w_all[start:start + step])
        rows = columns.shape[1]
        queries = columns.sum(axis=0)  # whole numbers: exact in any order
        own, before, negatives = (a.ravel() for a in ranking.block(columns))
        del columns
        total = np.zeros(rows)
        index = np.flatnonzero(own >= 1)
        j = 0
        while index.size:
            found = before[index] + j  # positives before this copy
            rank = found + negatives[index]
            left = np.where(rank == 0, 1.0, found / np.maximum(rank, 1.0))
            right = (found + 1.0) / (rank + 1.0)
            total += _by_column(rows, index, (left + right) / 2.0)
            j += 1
            index = index[own[index] >= j + 1]
        out[start:start + rows] = per_count(total, queries)
    return out


# ----------------------------------------------------------------------------- mean within a group


STATISTICS: dict[str, Callable[..., np.ndarray]] = {
    "micro_ap": micro_ap,
    "copydays_uap": copydays_uap,
}
