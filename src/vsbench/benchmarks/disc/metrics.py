"""Copy-detection scorers with the isc2021 / SSCD semantics (DISC2021 metrics).

Inputs are pooled predictions ``(query, reference, score)`` (higher score = more likely a copy)
and ground-truth pairs ``(query, reference)``. Definitions (facebookresearch/isc2021
``isc/metrics.py``, copied into SSCD as ``sscd/datasets/isc/metrics.py``):

* **uAP** (micro average precision): all predictions sorted by score, descending; on equal scores
  the negatives go first, which gives the worst AP the tied scores allow (so a constant score
  earns nothing). ``P_i = TP_i / i``, ``R_i = TP_i / N_gt`` where ``N_gt`` counts every
  ground-truth pair, retrieved or not, and ``uAP = sum_i (R_i - R_{i-1}) * P_i``.
* **recall at precision 0.9**: the largest ``R_i`` over the points with ``P_i >= 0.9``; 0 when no
  point reaches it (isc2021 reports "None", SSCD's ``disc_eval`` writes ``recall_at_p90 or 0.0``).
* **accuracy at 1**: per ground-truth pair, rank = number of that query's predictions with a score
  ``>=`` the true reference's score, minus one (ties count against); a pair that was not predicted
  has no rank. The mean over ground-truth pairs of ``[rank == 0]``; queries without ground truth
  do not enter the mean.

The value reported is always the original's (ties resolved against the submission). Where tied
scores could be ordered otherwise, ``ties`` holds the range over tie orders (:mod:`.ties`): the best
order puts the true pairs first among equal scores and gives a query's first place to a true pair
tied at its top score.

Inputs isc2021 accepts and how they are treated here, with the same numbers:

* Ids compare as Python compares them (isc2021 keeps them in tuples and sets): the integer ``1`` and
  the string ``"1"`` are different ids, ``1`` and ``1.0`` the same one.
* Scores may be ``+inf`` or ``-inf``. NaN is refused: isc2021's tuple sort has no defined order for
  it, so its number would depend on where the NaN sits in the file.
* A ground-truth pair listed twice counts twice in ``N_gt`` and in accuracy at 1, as in isc2021
  (recall then cannot reach 1); ``ground_truth_duplicates="once"`` counts it once, and a note says so.
* Ground-truth rows whose reference is empty (queries with no copy) are not positives (isc2021's
  ``read_ground_truth`` drops them), but the predictions made for those queries, and for queries
  the ground truth does not list at all, count as false positives.

Refused because the original refuses or crashes too: a duplicate ``(query, reference)`` prediction
(isc2021 ``check_duplicates``) and a ground truth without any pair (isc2021 raises "recalls array
must be sorted" from the NaN recalls, or returns NaN for a single prediction).

:func:`copy_detection_metrics` is vectorized (sorts and binary searches; ten million predictions
in seconds); :func:`copy_detection_metrics_reference` is a literal plain-Python transcription of
the definitions, kept to check the fast one (tests and ``bench/metrics.py``); the parity tests run
isc2021's own code against both.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.ties import TieRange, tie_fields

PRECISION_TARGET = 0.9
GroundTruthDuplicates = Literal["count", "once"]
_SLICE = 1 << 18  # predictions matched at a time (bounded temporaries)


@dataclass(frozen=True)
class CopyDetectionMetrics:
    """DISC-style record. ``threshold_at_p90`` is the score at the recall-at-P90 operating point.

    ``ties`` maps ``uap``, ``accuracy_at_1`` and ``recall_at_p90`` to their range over tie orders;
    ``notes`` are one-line warnings about inputs the original scores silently (see the module doc).
    """

    uap: float
    accuracy_at_1: float
    recall_at_p90: float
    threshold_at_p90: float | None  # None when precision 0.9 is never reached
    num_predictions: int
    num_ground_truth: int
    num_true_positives: int  # predictions that are ground-truth pairs
    ties: Mapping[str, TieRange] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, float | int]:
        out: dict[str, float | int] = {
            "uap": self.uap,
            "accuracy_at_1": self.accuracy_at_1,
            "recall_at_p90": self.recall_at_p90,
            "num_predictions": self.num_predictions,
            "num_ground_truth": self.num_ground_truth,
            "num_true_positives": self.num_true_positives,
        }
        if self.threshold_at_p90 is not None:
            out["threshold_at_p90"] = self.threshold_at_p90
        out.update(tie_fields(self.ties))
        return out


# ----------------------------------------------------------------------------- vectorized


def copy_detection_metrics(
    pred_query: ArrayLike,
    pred_reference: ArrayLike,
    pred_score: ArrayLike,
    gt_query: ArrayLike,
    gt_reference: ArrayLike,
    *,
    ground_truth_duplicates: GroundTruthDuplicates = "count",
    matched: Matched | None = None,
) -> CopyDetectionMetrics:
    """uAP, accuracy at 1 and recall at precision 0.9, as isc2021 computes them (module docstring).

    A ground-truth reference equal to ``""`` (or None) marks a query without a copy and is not a
    positive. Raises ValueError on mismatched lengths, NaN scores, duplicate predictions, or when
    the ground truth holds no positive pair. ``matched``: :func:`match_predictions` of these same
    arguments, made once by a caller that builds the per-query units too (a 3M-row matching is
    the largest transient of a scoring).
    """
    m = matched or match_predictions(pred_query, pred_reference, pred_score, gt_query, gt_reference,
                                     ground_truth_duplicates=ground_truth_duplicates)
    scores, is_tp, multiplicity, n_gt = m.scores, m.is_tp, m.multiplicity, m.n_gt
    positives = np.sort(scores[is_tp])[::-1]
    negatives = np.sort(scores[~is_tp])  # the one large sort, shared by both tie orders
    uap, recall_p90, threshold = _micro_ap(positives, negatives, n_gt, negatives_first=True)
    best_uap, best_recall, _ = _micro_ap(positives, negatives, n_gt, negatives_first=False)
    acc1, best_acc1 = _accuracy_at_1(m.q_codes, scores, m.n_queries, m.gt_query_codes, m.predicted, m.gt_scores,
                                     multiplicity)
    return CopyDetectionMetrics(
        uap=uap,
        accuracy_at_1=acc1 / n_gt,
        recall_at_p90=recall_p90,
        threshold_at_p90=threshold,
        num_predictions=int(scores.size),
        num_ground_truth=n_gt,
        num_true_positives=int(np.count_nonzero(is_tp)),
        ties={"uap": TieRange(uap, best_uap), "accuracy_at_1": TieRange(acc1 / n_gt, best_acc1 / n_gt),
              "recall_at_p90": TieRange(recall_p90, best_recall)},
        notes=m.notes,
    )


@dataclass(frozen=True)
class Matched:
    """Predictions matched to the ground truth as isc2021 matches them: what the metrics (and the
    per-query units of :mod:`.units`) are computed from. Query codes are equal exactly when the ids
    are; the ``gt_*`` arrays, ``multiplicity`` and ``predicted`` hold one row per distinct ground-truth pair."""

    pred_query: np.ndarray  # the ids as the scorer compares them (numpy array or Ids)
    pred_reference: np.ndarray
    gt_query: np.ndarray  # positive pairs only
    scores: np.ndarray
    q_codes: np.ndarray  # per prediction: its query's code
    gt_codes: np.ndarray  # per positive ground-truth row: its query's code
    n_queries: int  # every code is below it
    is_tp: np.ndarray  # per prediction: it is a ground-truth pair
    gt_query_codes: np.ndarray  # per distinct pair: its query's code
    multiplicity: np.ndarray  # per distinct pair: how often it counts
    predicted: np.ndarray  # per distinct pair: whether it was predicted
    gt_scores: np.ndarray  # per distinct pair: its prediction's score (0 when not predicted)
    n_gt: int
    notes: tuple[str, ...]


def match_predictions(pred_query: ArrayLike, pred_reference: ArrayLike, pred_score: ArrayLike, gt_query: ArrayLike,
                      gt_reference: ArrayLike, *,
                      ground_truth_duplicates: GroundTruthDuplicates = "count") -> Matched:
    """The checks and the matching :func:`copy_detection_metrics` starts with (ids coded, duplicates
    refused, each prediction marked a ground-truth pair or not), shared with the per-query units so
    that both see the same positives. Raises as the scorer does."""
    if ground_truth_duplicates not in ("count", "once"):
        raise ValueError(f"ground_truth_duplicates must be 'count' or 'once', got {ground_truth_duplicates!r}")
    scores = _scores(pred_score)
    pq, pr = _ids(pred_query), _ids(pred_reference)
    if not (pq.size == pr.size == scores.size):
        raise ValueError(f"prediction columns differ in length: {pq.size}, {pr.size}, {scores.size}")
    gq, gr = _positive_pairs(_ids(gt_query), _ids(gt_reference))
    if gq.size == 0:
        raise ValueError("the ground truth holds no (query, reference) pair: uAP is undefined "
                         "(isc2021 fails on it too)")

    pq, gq = _comparable(pq, gq)
    pr, gr = _comparable(pr, gr)
    q_codes, gq_codes = _query_codes(pq, gq)
    n_queries = int(max(q_codes.max(initial=-1), gq_codes.max()) + 1)
    r_codes, gr_codes, n_refs = _reference_codes(pr, gr, n_queries)
    pred_keys = np.multiply(q_codes, n_refs, dtype=np.int64)  # one int64 per (query, reference) pair
    pred_keys += r_codes
    del r_codes  # the largest arrays of a scoring are these few: each is let go once used (issue 48)
    sorted_keys = np.sort(pred_keys)  # a sort of the keys, no argsort: the matching below searches the few in the many
    _reject_duplicates(sorted_keys, pred_keys, pq, pr)
    del sorted_keys

    gt_keys = np.multiply(gq_codes, n_refs, dtype=np.int64)  # int64: the codes may be int32
    gt_keys += gr_codes
    unique_gt, first_row, multiplicity = np.unique(gt_keys, return_index=True,
                                                   return_counts=True)
    del gt_keys
    notes: list[str] = []
    repeated = int(np.count_nonzero(multiplicity > 1))
    if repeated:
        row = int(first_row[np.flatnonzero(multiplicity > 1)[0]])
        if ground_truth_duplicates == "count":
            notes.append(f"{repeated} ground-truth pair(s) are listed more than once (e.g. query {gq[row:row + 1].tolist()[0]!r}, "
                         f"reference {gr[row:row + 1].tolist()[0]!r}); counted each time, as isc2021 does, so recall cannot reach 1; "
                         "ground_truth_duplicates='once' (--gt-duplicates once) counts each pair once")
        else:
            multiplicity = np.ones_like(multiplicity)
    n_gt = int(multiplicity.sum())

    predicted, tp_rows, is_tp = _predicted_pairs(unique_gt, pred_keys)
    del pred_keys
    gt_scores = np.zeros(unique_gt.size)
    gt_scores[predicted] = scores[tp_rows]
    gt_query_codes = gq_codes[first_row]
    return Matched(pq, pr, gq, scores, q_codes, gq_codes, n_queries, is_tp, gt_query_codes, multiplicity,
                   predicted, gt_scores, n_gt, tuple(notes))


def _ids(values: ArrayLike) -> np.ndarray:
    if _is_ids(values):
        return values  # type: ignore[return-value]
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError("id columns must be 1-D")
    return arr


def _scores(values: ArrayLike) -> np.ndarray:
    scores = np.asarray(values, dtype=np.float64)
    if scores.ndim != 1:
        raise ValueError("scores must be 1-D")
    if np.isnan(scores).any():
        bad = int(np.flatnonzero(np.isnan(scores))[0])
        raise ValueError(f"score at row {bad} is NaN: isc2021's sort has no order for NaN, so no number is defined")
    return scores


def _positive_pairs(query: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop rows with an empty reference: those queries have no copy in the database."""
    if query.size != reference.size:
        raise ValueError(f"ground-truth columns differ in length: {query.size}, {reference.size}")
    if _is_ids(reference):
        empty = reference.value_index("")  # type: ignore[attr-defined]
        return (query, reference) if empty is None else (query[reference.codes != empty],  # type: ignore[attr-defined]
                                                        reference[reference.codes != empty])  # type: ignore[attr-defined]
    keep = np.array([ref is not None and not (isinstance(ref, str) and ref == "") for ref in reference.tolist()],
                    dtype=bool)
    return query[keep], reference[keep]


# Kinds whose values compare equal across two arrays exactly when numpy's concatenation keeps them
# equal: strings with strings, bytes with bytes, and integers of one signedness.
_SAME_KIND_SAFE = frozenset("USiub")
_FAMILY = {"U": "str", "S": "bytes", "b": "number", "i": "number", "u": "number", "f": "number", "c": "number"}


def shared_codes(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes for the ids of two arrays, equal exactly when Python's ``==`` says the ids are.

    isc2021 matches predictions to the ground truth with tuples in a set, so ``1`` never matches
    ``"1"``; ``np.concatenate`` would turn both into the string ``"1"``. Arrays of one safe kind are
    factorized with numpy; ids of different families (text against numbers) share no code; anything
    else (object arrays, mixed numbers) goes through a Python dict, which is Python's own equality.
    """
    kind_a, kind_b = first.dtype.kind, second.dtype.kind
    if first.size == 0 or second.size == 0:
        only = first if second.size == 0 else second
        if only.dtype.kind != "O":  # an object array may mix ids numpy cannot sort (1 and "1"): the dict below
            _, codes = np.unique(only, return_inverse=True) if only.size else (None, np.zeros(0, dtype=np.int64))
            codes = codes.astype(np.int64).ravel()
            empty = np.zeros(0, dtype=np.int64)
            return (codes, empty) if second.size == 0 else (empty, codes)
    elif kind_a == kind_b and kind_a in _SAME_KIND_SAFE:
        _, codes = np.unique(np.concatenate([first, second]), return_inverse=True)
        codes = codes.astype(np.int64).ravel()
        return codes[: first.size], codes[first.size :]
    family_a, family_b = _FAMILY.get(kind_a), _FAMILY.get(kind_b)
    if family_a is not None and family_b is not None and family_a != family_b:
        _, codes_a = np.unique(first, return_inverse=True)
        _, codes_b = np.unique(second, return_inverse=True)
        codes_a = codes_a.astype(np.int64).ravel()
        return codes_a, codes_b.astype(np.int64).ravel() + int(codes_a.max(initial=-1)) + 1
    table: dict = {}
    codes = [table.setdefault(value, len(table)) for value in (*first.tolist(), *second.tolist())]
    all_codes = np.asarray(codes, dtype=np.int64)
    return all_codes[: first.size], all_codes[first.size :]


def _is_ids(values: object) -> bool:
    """Whether ``values`` is a reader's :class:`~vsbench.io.ids.Ids` (codes, no Python object a row).
    Checked by name so that importing the scorers does not import pyarrow."""
    return type(values).__name__ == "Ids" and hasattr(values, "codes") and hasattr(values, "values")


def _comparable(first: object, second: object) -> tuple:
    """Two id columns in forms the code functions take: both ``Ids`` (a text column beside them
    becomes one), or both numpy arrays (``Ids`` beside numbers become the ``U`` array the readers
    gave before, so ``1`` still never equals ``"1"``)."""
    if _is_ids(first) == _is_ids(second):
        return first, second
    swap = not _is_ids(first)
    ids, other = (second, first) if swap else (first, second)
    if isinstance(other, np.ndarray) and other.dtype.kind == "U":
        other = type(ids).from_strings(other.tolist())
    else:
        ids = np.asarray(ids.tolist(), dtype=str)  # type: ignore[attr-defined]
    return (other, ids) if swap else (ids, other)


def _query_codes(first: np.ndarray, second: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Codes for query ids: :func:`shared_codes`, or the integer ids themselves shifted to start at 0.

    The codes size per-query arrays, so the shift is taken only while the ids' span stays within a
    few times their count (dense ids, as FAISS rows and numbered queries are); factorizing ten
    million integers is a sort, and the shift is not.
    """
    if _is_ids(first):
        from vsbench.io.ids import shared_codes as shared_id_codes

        return shared_id_codes(first, second)[:2]  # type: ignore[arg-type]
    span = _integer_span(first, second)
    if span is not None and span <= 4 * (first.size + second.size) + 1024:
        low = int(min(first.min(), second.min()))
        return first.astype(np.int64) - low, second.astype(np.int64) - low
    return shared_codes(first, second)


def _integer_span(first: np.ndarray, second: np.ndarray) -> int | None:
    """``max - min + 1`` over two non-empty integer arrays of one kind whose values fit in int62."""
    if not (first.size and second.size and first.dtype.kind == second.dtype.kind and first.dtype.kind in "iu"):
        return None
    low = int(min(first.min(), second.min()))
    high = int(max(first.max(), second.max()))
    if low < -(2**62) or high >= 2**62:
        return None
    return high - low + 1


def _reference_codes(first: np.ndarray, second: np.ndarray,
                     n_queries: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Codes for reference ids and their count (an upper bound); they only enter the pair key.

    Integer ids (FAISS row ids, say) are used as they are, shifted to start at 0, when the pair key
    still fits in int64: that skips the sort that factorizing ten million ids costs.
    """
    if _is_ids(first):
        from vsbench.io.ids import shared_codes as shared_id_codes

        return shared_id_codes(first, second)  # type: ignore[arg-type]
    span = _integer_span(first, second)
    if span is not None and span * n_queries < 2**62:
        low = int(min(first.min(), second.min()))
        return first.astype(np.int64) - low, second.astype(np.int64) - low, span
    first_codes, second_codes = shared_codes(first, second)
    return first_codes, second_codes, int(max(first_codes.max(initial=-1), second_codes.max()) + 1)


def _reject_duplicates(sorted_keys: np.ndarray, keys: np.ndarray, query: np.ndarray, reference: np.ndarray) -> None:
    repeated = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
    if repeated.size:
        first, second = np.flatnonzero(keys == sorted_keys[repeated[0]])[:2].tolist()
        q, r = query[first:first + 1].tolist()[0], reference[first:first + 1].tolist()[0]  # plain Python ids
        raise ValueError(f"duplicate prediction pair (query {q!r}, reference {r!r}) "
                         f"at rows {first} and {second} (isc2021 refuses duplicates too)")


def _predicted_pairs(unique_gt: np.ndarray, pred_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Which ground-truth pairs were predicted, the prediction row of each (in ground-truth order),
    and per prediction whether it is a ground-truth pair.

    Each prediction's key is looked up in the sorted distinct ground-truth keys, a slice at a time:
    no argsort of the predictions (8 bytes a prediction, and their sorted keys beside it, were the
    matching's peak, issue 54). The predictions' keys are unique once duplicates are refused, so a
    ground-truth pair is found at most once.
    """
    predicted = np.zeros(unique_gt.size, dtype=bool)
    row_of_pair = np.zeros(unique_gt.size, dtype=np.int64)
    is_tp = np.zeros(pred_keys.size, dtype=bool)
    last = unique_gt.size - 1
    for start in range(0, pred_keys.size, _SLICE):
        keys = pred_keys[start:start + _SLICE]
        pos = np.searchsorted(unique_gt, keys)
        np.minimum(pos, last, out=pos)
        hit = unique_gt[pos] == keys
        is_tp[start:start + keys.size] = hit
        pairs = pos[hit]
        predicted[pairs] = True
        row_of_pair[pairs] = np.flatnonzero(hit) + start
    return predicted, row_of_pair[predicted], is_tp


def _micro_ap(positives: np.ndarray, negatives: np.ndarray, n_gt: int, *,
              negatives_first: bool) -> tuple[float, float, float | None]:
    """uAP, recall at precision 0.9 and the score there, from the positives' ranks alone.

    With negatives first on ties (isc2021's order; ``negatives_first=False`` is the best order) the
    j-th true positive (0-based, best score first) sits at rank ``i = j + 1 + #{negatives with
    score >= its score}`` (``>`` in the best order), whatever the order among tied positives.
    Precision and recall only matter there: uAP adds ``P_i / N_gt`` at each true positive
    (``R_i - R_{i-1}`` is 0 elsewhere), and a negative rank has the recall of the positive before
    it with a lower precision, so the best recall at precision >= 0.9 is reached at a positive
    (isc2021's ``argmax`` picks that first point too). So sorting the positives' and the negatives'
    scores (and no ranking of the whole list) is enough: ``positives`` sorted descending,
    ``negatives`` ascending.
    """
    side = "left" if negatives_first else "right"
    negatives_before = negatives.size - np.searchsorted(negatives, positives, side=side)
    n_tp = np.arange(1, positives.size + 1)
    precision = n_tp / (n_tp + negatives_before)
    uap = float(precision.sum() / n_gt)
    valid = np.flatnonzero(precision >= PRECISION_TARGET)
    if valid.size == 0:
        return uap, 0.0, None
    best = int(valid[-1])  # recall grows with j: the last valid positive has the best recall
    return uap, float(n_tp[best] / n_gt), float(positives[best])


def _accuracy_at_1(q_codes: np.ndarray, scores: np.ndarray, n_queries: int, gt_q_codes: np.ndarray,
                   predicted: np.ndarray, gt_scores: np.ndarray, multiplicity: np.ndarray) -> tuple[int, int]:
    """Ground-truth entries at rank 0: (isc2021's count, the best count over tie orders).

    isc2021: a pair has rank 0 exactly when its score is its query's maximum and no other prediction
    ties it. Best order: a query whose top score is shared by one of its true pairs can put that pair
    first (only one pair per query; a pair listed k times in the ground truth counts k times).
    """
    on_top, alone = _top_pairs(q_codes, scores, n_queries, gt_q_codes, predicted, gt_scores)
    worst = int(multiplicity[alone].sum())
    per_query = np.zeros(n_queries, dtype=np.int64)
    np.maximum.at(per_query, gt_q_codes[on_top], multiplicity[on_top])
    return worst, int(per_query.sum())


def _top_pairs(q_codes: np.ndarray, scores: np.ndarray, n_queries: int, gt_q_codes: np.ndarray,
               predicted: np.ndarray, gt_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per distinct ground-truth pair: predicted with its query's top score (``on_top``), and that
    with no other prediction of the query tying it (``alone``: isc2021's rank 0)."""
    best = np.full(n_queries, -np.inf)
    np.maximum.at(best, q_codes, scores)
    # How many predictions of each query score its top: a count of the tied ones (no float weights:
    # two arrays as large as the predictions fewer, issue 48's memory bound).
    at_best = np.bincount(q_codes[scores == best[q_codes]], minlength=n_queries)
    on_top = predicted & (gt_scores == best[gt_q_codes])
    return on_top, on_top & (at_best[gt_q_codes] == 1)


def rank_zero_pairs(matched: Matched) -> np.ndarray:
    """Per distinct ground-truth pair of ``matched``: isc2021 ranks it first (what accuracy at 1 counts)."""
    return _top_pairs(matched.q_codes, matched.scores, matched.n_queries, matched.gt_query_codes, matched.predicted,
                      matched.gt_scores)[1]


# ------------------------------------------------------------------- plain-Python reference


def copy_detection_metrics_reference(
    pred_query: Iterable,
    pred_reference: Iterable,
    pred_score: Iterable,
    gt_query: Iterable,
    gt_reference: Iterable,
    *,
    ground_truth_duplicates: GroundTruthDuplicates = "count",
) -> CopyDetectionMetrics:
    """The original's values written as the definitions read, with loops; slow, for checking only.

    No tie ranges: it computes what isc2021 computes and nothing else.
    """
    queries, references = _as_list(pred_query), _as_list(pred_reference)
    scores = [float(s) for s in pred_score]
    if any(s != s for s in scores):
        raise ValueError("a score is NaN")
    gt_pairs = [(q, r) for q, r in zip(_as_list(gt_query), _as_list(gt_reference))
                if r is not None and not (isinstance(r, str) and r == "")]
    if ground_truth_duplicates == "once":
        gt_pairs = list(dict.fromkeys(gt_pairs))
    if not gt_pairs:
        raise ValueError("the ground truth holds no (query, reference) pair: uAP is undefined")
    positives = set(gt_pairs)
    seen: set[tuple] = set()
    for q, r in zip(queries, references):
        if (q, r) in seen:
            raise ValueError(f"duplicate prediction pair ({q!r}, {r!r})")
        seen.add((q, r))
    labels = [(q, r) in positives for q, r in zip(queries, references)]
    uap, recall_p90, threshold = _reference_micro_ap(scores, labels, len(gt_pairs))
    repeated = sum(1 for count in Counter(gt_pairs).values() if count > 1)
    return CopyDetectionMetrics(
        uap=uap,
        accuracy_at_1=_reference_accuracy_at_1(queries, references, scores, gt_pairs),
        recall_at_p90=recall_p90,
        threshold_at_p90=threshold,
        num_predictions=len(scores),
        num_ground_truth=len(gt_pairs),
        num_true_positives=sum(labels),
        notes=(f"{repeated} ground-truth pair(s) are listed more than once",) if repeated else (),
    )


def _as_list(values: Iterable) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _reference_micro_ap(scores: list[float], labels: list[bool], n_gt: int) -> tuple[float, float, float | None]:
    # Sort by (score, not label) and reverse: descending score, negatives first on ties (isc2021).
    ranked = sorted(zip(scores, labels), key=lambda row: (row[0], not row[1]), reverse=True)
    uap = previous_recall = 0.0
    best_recall, threshold = 0.0, None
    true_pos = 0
    for i, (score, label) in enumerate(ranked, start=1):
        true_pos += label
        precision, recall = true_pos / i, true_pos / n_gt
        uap += (recall - previous_recall) * precision
        previous_recall = recall
        if precision >= PRECISION_TARGET and (threshold is None or recall > best_recall):
            best_recall, threshold = recall, score
    return uap, best_recall, threshold


def _reference_accuracy_at_1(queries: list, references: list, scores: list[float], gt_pairs: list[tuple]) -> float:
    by_query: dict = defaultdict(dict)
    for q, r, s in zip(queries, references, scores):
        by_query[q][r] = s
    correct = 0
    for q, r in gt_pairs:
        predicted = by_query.get(q, {})
        if r in predicted:
            rank = sum(1 for s in predicted.values() if s >= predicted[r]) - 1
            correct += rank == 0
    return correct / len(gt_pairs)
