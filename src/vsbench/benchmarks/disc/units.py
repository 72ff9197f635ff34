"""Per-query outcomes of a copy-detection evaluation (DISC2021, ``vsbench score copy-detection``).

One unit per query: its predictions (reference ids, scores, whether each is a ground-truth pair),
its number of ground-truth pairs as isc2021 counts them (retrieved or not; a pair listed twice
counts twice unless ``ground_truth_duplicates="once"``) and how many of those isc2021 ranks first.
That is all uAP, recall at precision 0.9 (:func:`vsbench.stats.ranking.micro_ap`) and accuracy at 1
(:func:`vsbench.stats.statistics.ratio`) need to be recomputed from any resample of the queries,
with the positives matched exactly as :func:`~vsbench.benchmarks.disc.metrics.copy_detection_metrics`
matches them (the same :func:`~vsbench.benchmarks.disc.metrics.match_predictions`).

Queries are the units whatever they hold: a query with predictions and no copy (its predictions
are false positives), a query whose copy was never retrieved (it holds ground truth and no true
positive), and, when named (``queries``, the ground truth's rows with an empty reference), a query
with neither, which changes no number but is drawn like the others.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.disc.metrics import (
    GroundTruthDuplicates,
    Matched,
    _ids,
    _is_ids,
    _positive_pairs,
    match_predictions,
    rank_zero_pairs,
)
from vsbench.stats.outcomes import Outcomes, Shown, first_true_rank, number
from vsbench.stats.units import Labels, ListColumn, Units, coded_groups, groups_of

# record key -> the statistic that recomputes it from the units
COPY_DETECTION_METRICS: dict[str, dict[str, Any]] = {
    "uap": {"statistic": "micro_ap", "part": "uap"},
    "accuracy_at_1": {"statistic": "ratio", "num": "correct_at_1", "den": "n_positives"},
    "recall_at_p90": {"statistic": "micro_ap", "part": "recall_at_p90"},
}


def copy_detection_units(
    pred_query: ArrayLike,
    pred_reference: ArrayLike,
    pred_score: ArrayLike,
    gt_query: ArrayLike,
    gt_reference: ArrayLike,
    *,
    ground_truth_duplicates: GroundTruthDuplicates = "count",
    queries: Iterable[str] | Any | None = None,
    benchmark: str = "disc",
    variant: str = "",
    matched: Matched | None = None,
) -> Units:
    """The queries of one copy-detection scoring as :class:`~vsbench.stats.units.Units` (kind ``query``).

    Takes exactly what :func:`~vsbench.benchmarks.disc.metrics.copy_detection_metrics` takes (and
    raises where it raises); ``queries`` names every query of the evaluation (the query images; for a
    file, the ground truth reader's ``listed_queries``), so that those with neither a prediction nor
    a copy are units too; ground-truth rows with an empty reference given here name theirs. Unit ids
    are the query ids as text; units follow ``queries``' order, then the other queries in id order
    (codes order: isc2021's id order for text ids). Columns: ``scores``, ``positive`` and ``references`` (lists,
    one entry per prediction), ``n_positives`` and ``correct_at_1`` (per query). ``matched``: the
    scorer's own :func:`~vsbench.benchmarks.disc.metrics.match_predictions` of these arguments, when
    the caller made it already."""
    matched = matched or match_predictions(pred_query, pred_reference, pred_score, gt_query, gt_reference,
                                           ground_truth_duplicates=ground_truth_duplicates)
    n_codes = matched.n_queries
    used = np.zeros(n_codes, dtype=bool)
    used[matched.q_codes] = True
    used[matched.gt_codes] = True
    codes = np.flatnonzero(used)
    if all(_is_ids(column) for column in (matched.pred_query, matched.gt_query, gt_query, gt_reference)) and (
            queries is None or _is_ids(queries)):
        ids, rows = _arrow_unit_ids(matched, codes, queries, gt_query, gt_reference)
    else:
        ids, rows = _python_unit_ids(matched, codes, queries, gt_query, gt_reference)
    n = len(ids)
    row_of = np.full(n_codes, -1, dtype=np.int32 if n < 2**31 else np.int64)  # 4 bytes a prediction
    row_of[codes] = rows
    del rows

    unit = row_of[matched.q_codes]
    gt_unit = row_of[matched.gt_query_codes]
    n_positives = np.bincount(gt_unit, weights=matched.multiplicity, minlength=n).astype(np.int64)
    first = rank_zero_pairs(matched)
    correct = np.bincount(gt_unit[first], weights=matched.multiplicity[first], minlength=n).astype(np.int64)
    del gt_unit, first
    order: np.ndarray | slice
    if unit.size < 2 or bool((unit[1:] >= unit[:-1]).all()):
        order = slice(None)  # a file grouped by query in unit order: the lists are views, not copies (issue 54)
    else:
        order = np.argsort(unit, kind="stable")  # by unit, the given order within one (one sort for every list)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(unit, minlength=n), out=offsets[1:])
    columns = {
        "scores": ListColumn(matched.scores[order], offsets),
        "positive": ListColumn(matched.is_tp[order], offsets),
        "references": _coded(matched.pred_reference, order, offsets),
        "n_positives": n_positives,
        "correct_at_1": correct,
    }
    return Units("query", benchmark, ids, columns, COPY_DETECTION_METRICS, clusters=copy_groups(
        matched, row_of, ids, gt_query, gt_reference), variant=variant)


def copy_groups(matched: Matched, row_of: np.ndarray, ids: np.ndarray, gt_query: ArrayLike,
                gt_reference: ArrayLike) -> Labels | None:
    """Each query's group (issue 55): the queries that copy one reference were drawn together (the
    generators make 5 edits of each photo; DISC's copies of one reference share its content), so they
    are one group, named ``source:<reference id>``; queries linked through a reference they share are
    one group too (the connected components of the ground truth's pairs). A query with no copy is its
    own group. None when every group holds one query: resampled query by query, as before.

    A reader's id column gives its references as codes into its sorted distinct ids, which number
    the groups without a text per query (issue 54); other columns are spelled first."""
    _, references = _positive_pairs(_ids(gt_query), _ids(gt_reference))
    linked = row_of[matched.gt_codes]
    if _is_ids(references) and _plain_sorted(references.values):
        return coded_groups(len(ids), linked, references.codes, references.values, unit_ids=ids, prefix="source:")
    return groups_of(len(ids), linked, _texts(references, np.arange(matched.gt_codes.size)),
                     unit_ids=ids, prefix="source:")


def _plain_sorted(values: Any) -> bool:
    """Whether Arrow text ``values`` are strictly ascending, without nulls or NUL characters: then
    their order is numpy's (which drops a trailing NUL) and their codes can stand for them."""
    import pyarrow.compute as pc

    if values.null_count:
        return False
    if len(values) > 1 and not pc.all(pc.greater(values[1:], values[:-1])).as_py():
        return False
    return not pc.any(pc.match_substring(values, "\x00")).as_py()


def _python_unit_ids(matched: Matched, codes: np.ndarray, queries: Any, gt_query: ArrayLike,
                     gt_reference: ArrayLike) -> tuple[np.ndarray, Any]:
    """The unit ids (``queries``, the no-copy queries, then the others by code) and the unit row of
    each code in ``codes``, for id columns of any kind (numbers, numpy text)."""
    texts = _code_texts(matched, codes)
    if queries is not None and _is_ids(queries):
        queries = queries.tolist()
    named = [str(q) for q in queries] if queries is not None else []
    ids = list(dict.fromkeys([*named, *_no_copy_queries(gt_query, gt_reference)]))
    position = {text: row for row, text in enumerate(ids)}
    for text in texts:
        if text not in position:
            position[text] = len(ids)
            ids.append(text)
    return np.asarray(ids, dtype=str), [position[t] for t in texts]


def _arrow_unit_ids(matched: Matched, codes: np.ndarray, queries: Any, gt_query: Any,
                    gt_reference: Any) -> tuple[np.ndarray, np.ndarray]:
    """What :func:`_python_unit_ids` gives, in the same order, for the readers' ``Ids`` columns, in
    Arrow (issue 54): a million queries once cost a Python str, a dict entry and a list slot each
    (over 400 MB at the peak); here their text is held once, as Arrow and as the ``U`` array of ids.
    Codes number the two query columns' merged distinct ids, so a code's text is one lookup, and
    distinct codes have distinct texts. The named queries are found among those ids by binary
    search over their sorted bytes (:func:`_sorted_unit_ids`); hashing a million texts three times
    (unique, is_in, index_in) held ~200 MB at once, the units' peak."""
    from vsbench.io.ids import merged_fixed, merged_values, numpy_texts, release_memory

    empty = gt_reference.value_index("")
    sources = [] if queries is None else [(queries.values, queries.codes)]
    if empty is not None:
        sources.append((gt_query.values, gt_query.codes[gt_reference.codes == empty]))
    known = merged_fixed(matched.pred_query, matched.gt_query)  # type: ignore[arg-type]
    found = None if known is None else _sorted_unit_ids(known, codes, sources)
    if found is None:
        return _hashed_unit_ids(merged_values(matched.pred_query, matched.gt_query), codes,  # type: ignore[arg-type]
                                sources)
    ids, rows = found
    del known, sources
    unit_ids = numpy_texts(ids)
    del ids
    release_memory()  # the texts above: Arrow's pool keeps freed pages otherwise
    return unit_ids, rows


def _sorted_unit_ids(known: np.ndarray, codes: np.ndarray,
                     sources: list[tuple[Any, np.ndarray]]) -> tuple[Any, np.ndarray] | None:
    """The unit ids (Arrow) and each used code's unit row, by keys instead of texts: a text of the
    merged ids (``known``: sorted fixed-width bytes, a code's text at its code) is keyed by its
    code, a named query absent from them (first source only) by ``len(known)`` plus its place among
    that source's values, so that a key is also its place in ``known`` followed by those values.
    None where sorted bytes cannot stand for the texts (:func:`vsbench.io.ids.fixed_bytes`), and
    the caller hashes."""
    from vsbench.io.ids import fixed_bytes, text_of_fixed

    size = known.size
    keyed, extra = [], None
    for source, (values, rows) in enumerate(sources):
        texts = fixed_bytes(values)
        if texts is None or (texts.size > 1 and not bool((texts[1:] > texts[:-1]).all())):
            return None
        place = np.searchsorted(known, texts)
        inside = place < size
        inside[inside] = known[place[inside]] == texts[inside]
        if source and not inside.all():  # only the first source's own texts are keyed past `known`
            return None
        if not source:
            extra = texts
        key = np.where(inside, place, size + np.arange(texts.size))
        keyed.append(key[rows])
    sequence = np.concatenate(keyed) if keyed else np.zeros(0, dtype=np.int64)
    del keyed
    distinct, first_seen = np.unique(sequence, return_index=True)
    named = distinct[np.argsort(first_seen, kind="stable")]  # first-seen order
    del sequence, distinct, first_seen
    row_of = np.full(size, -1, dtype=np.int64)
    in_merged = named < size
    row_of[named[in_merged]] = np.flatnonzero(in_merged)
    others = codes[row_of[codes] < 0]  # the other queries, in code order
    row_of[others] = named.size + np.arange(others.size)
    keys = np.concatenate([named, others])
    if extra is not None and not in_merged.all():
        width = max(known.itemsize, extra.itemsize)
        ids = np.concatenate([known.astype(f"S{width}"), extra.astype(f"S{width}")])[keys]
    else:
        ids = known[keys]
    return text_of_fixed(ids), row_of[codes]


def _hashed_unit_ids(merged: Any, codes: np.ndarray, sources: list[tuple[Any, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_sorted_unit_ids`' result through Arrow's hash tables, for texts it cannot sort as bytes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from vsbench.io.ids import numpy_texts, release_memory

    text = pa.large_string()
    texts = merged.take(pa.array(codes))
    parts = [values.cast(text).take(pa.array(rows)) for values, rows in sources]
    named = pc.unique(pa.chunked_array(parts, type=text)) if parts else pa.array([], type=text)  # first-seen order
    others = texts.filter(pc.invert(pc.is_in(texts, value_set=named)))
    ids = pa.concat_arrays([named, others])
    del named, others
    rows = pc.index_in(texts, value_set=ids).to_numpy(zero_copy_only=False)
    del texts
    unit_ids = numpy_texts(ids)
    del ids
    release_memory()  # the hash tables and texts above: Arrow's pool keeps freed pages otherwise
    return unit_ids, rows


def _code_texts(matched: Any, codes: np.ndarray) -> list[str]:
    """The id of each query code, as text: read from a prediction naming it, else a ground-truth row.
    Two ids that print alike but are different ids for isc2021 (``1`` and ``"1"``) get their repr."""
    row = np.full(matched.n_queries, -1, dtype=np.int64)
    row[matched.gt_codes[::-1]] = np.arange(matched.gt_codes.size, dtype=np.int64)[::-1]
    from_gt = row[codes]
    row[:] = -1
    row[matched.q_codes[::-1]] = np.arange(matched.q_codes.size, dtype=np.int64)[::-1]
    from_pred = row[codes]
    values: list[Any] = [None] * codes.size
    in_pred = np.flatnonzero(from_pred >= 0)
    in_gt = np.flatnonzero(from_pred < 0)
    for places, source, rows in ((in_pred, matched.pred_query, from_pred), (in_gt, matched.gt_query, from_gt)):
        if places.size:
            for place, value in zip(places.tolist(), source[rows[places]].tolist()):
                values[place] = value
    texts = [str(v) for v in values]
    if len(set(texts)) < len(texts):
        texts = [repr(v) for v in values]
    return texts


def _coded(ids: Any, rows: np.ndarray | slice, offsets: np.ndarray) -> ListColumn:
    """Rows ``rows`` of an id column as a coded text list column: a reader's :class:`~vsbench.io.ids.Ids`
    gives its own codes and distinct values (no text per row is ever made); other arrays are coded here."""
    if _is_ids(ids):
        distinct = ids.values  # Arrow, shared with the reader: no copy, no numpy U (issue 54: 28 MiB at 1M)
        codes = ids.codes[rows]
        return ListColumn(codes.astype(np.int32 if len(distinct) < 2**31 else np.int64, copy=False), offsets, distinct)
    return ListColumn.coded(_texts(ids, rows), offsets)


def _texts(ids: Any, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` of an id column as a numpy text array, each distinct id converted once (ten
    million integer ids: a lookup table over their range, or over their distinct values)."""
    if _is_ids(ids):
        distinct = np.asarray(ids.values.to_numpy(zero_copy_only=False), dtype=str)
        return distinct[ids.codes[rows]]
    values = np.asarray(ids)[rows]
    if values.dtype.kind in "US":
        return values.astype(str)
    if values.dtype.kind in "iu" and values.size:
        low, high = int(values.min()), int(values.max())
        width = max(len(str(low)), len(str(high)))
        if high - low <= 4 * values.size:
            return np.arange(low, high + 1).astype(f"U{width}")[values - low]
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct.astype(f"U{width}")[inverse.ravel()]
    return np.asarray([str(v) for v in values.tolist()], dtype=str)


def _no_copy_queries(gt_query: ArrayLike, gt_reference: ArrayLike) -> list[str]:
    """Queries the ground truth lists with an empty reference (isc2021: no copy in the database)."""
    query, reference = _ids(gt_query), _ids(gt_reference)
    if _is_ids(reference):
        empty = reference.value_index("")  # type: ignore[attr-defined]
        if empty is None:
            return []
        return [str(q) for q in query[reference.codes == empty].tolist()]  # type: ignore[attr-defined]
    rows = [n for n, ref in enumerate(reference.tolist()) if ref is None or (isinstance(ref, str) and ref == "")]
    return [str(q) for q in query[np.asarray(rows, dtype=np.int64)].tolist()] if rows else []


def copy_detection_outcomes(units: Units) -> Outcomes:
    """Each query right or wrong (issue 47's compare sheet): a query with a copy is right when its
    top-scored prediction is a true copy (``correct_at_1`` > 0: what accuracy at 1 counts). A query
    without a copy in the reference set is left unjudged: isc2021 scores it only through the false
    positives it adds to uAP, and no threshold it is held to is in its unit file. Severity: the
    place of the first true copy among the query's predictions (missing: past the last). ``rank``:
    that place for every query with a copy (inf: not predicted), what a comparison of uAP or recall at
    p90 lists when a copy climbs from rank 3 to 1 (right/wrong at rank 1 does not see it)."""
    n_pos = units.values("n_positives")
    correct = units.values("correct_at_1")
    scores, positive, references = units.columns["scores"], units.columns["positive"], units.columns["references"]
    judged = n_pos > 0
    right = judged & (correct > 0)

    def ranked(row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s = np.asarray(scores[row], dtype=np.float64)
        order = np.argsort(-s, kind="stable")
        return s[order], np.asarray(positive[row], dtype=bool)[order], np.asarray(references[row], dtype=str)[order]

    severity = np.zeros(len(units))
    ranks = np.full(len(units), np.nan)  # the first true copy's rank (inf: not predicted; nan: no copy)
    for row in np.flatnonzero(judged).tolist():
        s, p, _ = ranked(row)
        rank = first_true_rank(p, np.arange(p.size))
        ranks[row] = rank if rank is not None else np.inf
        if not right[row]:
            severity[row] = rank if rank is not None else p.size + 1

    def answer(row: int) -> str:
        s, p, r = ranked(row)
        if not s.size:
            return "no prediction"
        rank = first_true_rank(p, np.arange(p.size))
        where = (f"true copy at rank {rank}" if rank is not None else
                 "true copy not predicted" if n_pos[row] > 0 else "no copy exists")
        return f"top {r[0]} ({number(s[0])}, {'true' if p[0] else 'false'}); {where}"

    def shows(row: int) -> tuple[Shown, ...]:
        s, p, r = ranked(row)
        if not s.size:
            return ()
        return (Shown(str(r[0]), (str(r[0]), f"top 1, {number(s[0])}"), "true" if p[0] else "false"),)

    return Outcomes(units, right, judged, severity,
                    "right: the top-scored prediction is a true copy; queries without a copy are not judged",
                    answer, shows, rank=ranks)
