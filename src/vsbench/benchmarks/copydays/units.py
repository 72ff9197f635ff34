"""Per-query outcomes of a Copydays evaluation: what strong mAP, overall uAP and each block's mAP
are recomputed from under any resample of the queries.

One unit per Copydays query (every image of every block): its result list as searched (distances,
whether each result is a positive, the index ids), its number of positives, its trapezoidal AP and
its block. Overall uAP pools every query's results and sorts them by distance with numpy's default
(unstable) sort, whose order of tied distances depends on the numpy build; each result's place in
that sort, computed here with the very call :func:`~vsbench.benchmarks.copydays.metrics.copydays_metrics`
makes, is kept (``pooled_rank``), so the statistic orders ties as the recorded value did, on any
machine, and copies of a query's results sit side by side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from vsbench.benchmarks.copydays.metrics import _row_aps
from vsbench.stats.outcomes import Outcomes, Shown, first_true_rank, number
from vsbench.stats.units import ListColumn, Units, groups_of

STRONG_MAP = "strong_map"
OVERALL_UAP = "overall_uap"


def copydays_units(query_ids: Sequence[str], hits: ArrayLike, distances: ArrayLike, num_positives: ArrayLike,
                   blocks: Sequence[str], *, strong_block: str = "strong", block_metrics: Mapping[str, str] | None = None,
                   result_ids: Sequence[Sequence[str]] | np.ndarray | None = None, benchmark: str = "copydays",
                   variant: str = "", originals: Sequence[Iterable[str]] | None = None) -> Units:
    """The queries of one Copydays scoring as :class:`~vsbench.stats.units.Units` (kind ``query``).

    ``hits``, ``distances`` and ``num_positives`` are what
    :func:`~vsbench.benchmarks.copydays.metrics.copydays_metrics` takes (distances in the search's
    dtype); ``blocks`` each query's block, ``strong_block`` the one strong mAP averages over;
    ``block_metrics`` maps a record key to a block whose mAP it holds (``map_original``:
    ``original``); ``result_ids`` the index id at each place of each result list (text)."""
    hit = np.asarray(hits, dtype=bool)
    dist = np.asarray(distances)
    if not np.issubdtype(dist.dtype, np.floating):
        dist = dist.astype(np.float64)  # as copydays_metrics does
    n_pos = np.asarray(num_positives, dtype=np.float64)
    block = np.asarray(blocks, dtype=str)
    n, k = hit.shape
    if dist.shape != hit.shape or n_pos.shape != (n,) or block.shape != (n,) or len(query_ids) != n:
        raise ValueError(f"shapes differ: hits {hit.shape}, distances {dist.shape}, num_positives {n_pos.shape}, "
                         f"blocks {block.shape}, {len(query_ids)} query ids")
    pooled_rank = np.empty(hit.size, dtype=np.int64)
    pooled_rank[np.argsort(dist.ravel())] = np.arange(hit.size)  # SSCD: np.reshape(dis, (-1)).argsort()
    ap = _row_aps(hit, n_pos)
    strong = (block == strong_block).astype(np.float64)
    offsets = np.arange(n + 1, dtype=np.int64) * k
    columns: dict[str, Any] = {
        "distances": ListColumn(dist.ravel(), offsets),
        "hits": ListColumn(hit.ravel(), offsets),
        "pooled_rank": ListColumn(pooled_rank, offsets),
        "n_positives": n_pos,
        "ap": ap,
        "strong": strong,
        "strong_ap": ap * strong,
        "block": block,
    }
    if result_ids is not None:
        ids = np.asarray(result_ids, dtype=str)
        if ids.shape != hit.shape:
            raise ValueError(f"result ids of shape {ids.shape} for results of shape {hit.shape}")
        columns["references"] = ListColumn(ids.ravel(), offsets)
    metrics: dict[str, dict[str, Any]] = {
        STRONG_MAP: {"statistic": "ratio", "num": "strong_ap", "den": "strong"},
        OVERALL_UAP: {"statistic": "copydays_uap"},
    }
    for metric, name in (block_metrics or {}).items():
        metrics[metric] = {"statistic": "ratio", "num": "ap", "where": "block", "equals": name}
    ids = np.asarray(query_ids, dtype=str)
    clusters = None
    if originals is not None:
        if len(originals) != n:
            raise ValueError(f"{len(originals)} lists of originals for {n} queries")
        sources = [(row, str(o)) for row, names in enumerate(originals) for o in names]
        clusters = groups_of(n, [r for r, _ in sources], [o for _, o in sources], unit_ids=ids, prefix="original:")
    return Units("query", benchmark, ids, columns, metrics, clusters=clusters, variant=variant)


def copydays_outcomes(units: Units) -> Outcomes:
    """Each Copydays query right or wrong (issue 47's compare sheet): right when its nearest result
    (smallest distance; the search's order among ties) is a positive. A query without a positive
    is left unjudged. Severity: the place of its first positive (none retrieved: past the last).
    ``ap``: each judged query's own trapezoidal AP, recomputed from its ``hits`` and ``n_positives``
    with the formula strong mAP averages (not read from the file's ``ap`` column, which no logged
    metric checks row by row): what a comparison by ranking lists (issue 55 item 8), since overall
    uAP and strong mAP move when a positive climbs from rank 3 to 1, which right/wrong at rank 1 and
    a query's first positive alone do not see (a strong query has several originals)."""
    n_pos = units.values("n_positives")
    distances, hits = units.columns["distances"], units.columns["hits"]
    references = units.columns.get("references")

    def ranked(row: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        d = np.asarray(distances[row], dtype=np.float64)
        order = np.argsort(d, kind="stable")
        refs = None if references is None else np.asarray(references[row], dtype=str)[order]
        return d[order], np.asarray(hits[row], dtype=bool)[order], refs

    judged = n_pos > 0
    right = np.zeros(len(units), dtype=bool)
    severity = np.zeros(len(units))
    ap = np.full(len(units), np.nan)  # nan: not judged
    for row in np.flatnonzero(judged).tolist():
        _, h, _ = ranked(row)
        rank = first_true_rank(h, np.arange(h.size))
        right[row] = rank == 1
        severity[row] = 0 if rank == 1 else (rank if rank is not None else h.size + 1)
        ap[row] = _row_aps(np.asarray(hits[row], dtype=bool)[None, :], n_pos[row:row + 1])[0]  # search order

    def answer(row: int) -> str:
        d, h, refs = ranked(row)
        if not d.size:
            return "no result"
        rank = first_true_rank(h, np.arange(h.size))
        nearest = f"nearest {refs[0]} " if refs is not None else "nearest "
        where = f"first positive at rank {rank}" if rank is not None else "no positive retrieved"
        return f"{nearest}(d={number(d[0])}, {'true' if h[0] else 'false'}); {where}"

    def shows(row: int) -> tuple[Shown, ...]:
        d, h, refs = ranked(row)
        if refs is None or not d.size:
            return ()
        return (Shown(str(refs[0]), (str(refs[0]), f"nearest, d={number(d[0])}"), "true" if h[0] else "false"),)

    return Outcomes(units, right, judged, severity, "right: the nearest result is a positive", answer, shows, ap=ap)
