"""Bench: DISC2021 micro AP on millions of predictions — vectorized scorer vs the plain-Python loop.

Why: isc2021 scores with Python-level sorts and loops (``argsort`` over a list of tuples, a dict
of lists per query); ISC track 1 caps a submission at 500,000 predictions, and SSCD evaluates
k * n_queries of them per codec and score normalization. vsbench's
``copy_detection_metrics`` does the same arithmetic with numpy sorts and cumulative sums. This
bench times both on the same random predictions, with heavily tied scores (two decimals, so the
worst-case tie order matters), and checks that uAP, accuracy at 1 and recall at P90 agree to 1e-9.

Data: ``--queries`` queries with ``--per-query`` predictions each (distinct references per query),
half of the queries with a true copy; 80% of those copies are among the query's predictions and
score higher on average. The reference loop runs on the first ``--reference-predictions``
predictions (all by default); when that is a prefix, the vectorized scorer is timed on the same
prefix too, so the comparison is always on identical inputs.

Run: ``python bench/metrics.py [--queries 100000] [--per-query 100] [--reference-predictions N]
[--repeat 1] [--json out.json]``
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, log, machine_info, write_json

from vsbench.benchmarks.disc.metrics import (
    CopyDetectionMetrics,
    copy_detection_metrics,
    copy_detection_metrics_reference,
)

Case = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
TOLERANCE = 1e-9


def make_case(n_queries: int, per_query: int, seed: int = 0) -> Case:
    """Predictions (query, reference, score) and ground-truth pairs, as int64 / float64 arrays."""
    rng = np.random.default_rng(seed)
    n_refs = 1_000_000
    stride = n_refs // (per_query + 1)  # distinct references within a query
    query = np.repeat(np.arange(n_queries, dtype=np.int64), per_query)
    slot = np.tile(np.arange(per_query, dtype=np.int64), n_queries)
    base = rng.integers(0, n_refs, n_queries)
    reference = (base[query] + slot * stride) % n_refs
    gt_query = np.sort(rng.choice(n_queries, n_queries // 2, replace=False))
    retrieved = rng.random(gt_query.size) < 0.8
    gt_slot = np.where(retrieved, rng.integers(0, per_query, gt_query.size), per_query)  # slot per_query: unseen
    gt_reference = (base[gt_query] + gt_slot * stride) % n_refs
    score = rng.random(query.size)
    true_rows = gt_query[retrieved] * per_query + gt_slot[retrieved]
    score[true_rows] += 0.5
    return query, reference, np.round(score, 2), gt_query, gt_reference


def prefix(case: Case, n: int) -> Case:
    query, reference, score, gt_query, gt_reference = case
    return query[:n], reference[:n], score[:n], gt_query, gt_reference


def timed(scorer: Callable[..., CopyDetectionMetrics], case: Case,
          repeat: int) -> tuple[float, CopyDetectionMetrics]:
    """Best wall time over ``repeat`` runs (the machine may be shared) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = scorer(*case)
        best = min(best, time.perf_counter() - started)
    assert result is not None
    return best, result


def max_difference(a: CopyDetectionMetrics, b: CopyDetectionMetrics) -> float:
    return max(abs(a.uap - b.uap), abs(a.accuracy_at_1 - b.accuracy_at_1), abs(a.recall_at_p90 - b.recall_at_p90))


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux reports KiB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=100_000)
    parser.add_argument("--per-query", type=int, default=100)
    parser.add_argument("--reference-predictions", type=int, default=None,
                        help="Run the plain-Python loop on this many predictions (default: all).")
    parser.add_argument("--repeat", type=int, default=1,
                        help="Timed runs of the vectorized scorer, best counts (the loop runs once).")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    case = make_case(args.queries, args.per_query)
    total = case[0].size
    log(f"{total:,} predictions, {case[3].size:,} ground-truth pairs, "
        f"{np.unique(case[2]).size} distinct scores")
    fast_full_s, fast_full = timed(copy_detection_metrics, case, args.repeat)
    log(f"vectorized on {total:,}: {fast_full_s:.2f} s")

    n_ref = min(args.reference_predictions or total, total)
    ref_case = case if n_ref == total else prefix(case, n_ref)
    if n_ref == total:
        fast_s, fast = fast_full_s, fast_full
    else:
        fast_s, fast = timed(copy_detection_metrics, ref_case, args.repeat)
    log(f"plain-Python reference on {n_ref:,} ...")
    slow_s, slow = timed(copy_detection_metrics_reference, ref_case, 1)
    difference = max_difference(fast, slow)

    rows = [
        [f"vectorized ({total:,})", fast_full_s, fast_full.uap, fast_full.accuracy_at_1, fast_full.recall_at_p90],
        [f"vectorized ({n_ref:,})", fast_s, fast.uap, fast.accuracy_at_1, fast.recall_at_p90],
        [f"plain Python ({n_ref:,})", slow_s, slow.uap, slow.accuracy_at_1, slow.recall_at_p90],
    ]
    if n_ref == total:
        rows.pop(1)
    print(format_table(["method (predictions)", "seconds", "uAP", "acc@1", "R@P90"],
                       [[r[0], r[1], f"{r[2]:.9f}", f"{r[3]:.9f}", f"{r[4]:.9f}"] for r in rows]))
    print(f"speed-up on {n_ref:,} predictions: {slow_s / fast_s:,.0f}x")
    identical = difference <= TOLERANCE and fast.threshold_at_p90 == slow.threshold_at_p90
    print(f"values identical to {TOLERANCE:g}: {'yes' if identical else 'NO'} (max difference {difference:.2e})")
    print(f"peak resident memory: {peak_rss_gib():.1f} GiB")
    write_json(args.json, {
        "machine": machine_info(),
        "predictions": total,
        "reference_predictions": n_ref,
        "vectorized_seconds_full": fast_full_s,
        "vectorized_seconds": fast_s,
        "reference_seconds": slow_s,
        "speedup": slow_s / fast_s,
        "max_difference": difference,
        "identical": identical,
        "metrics": fast_full.as_dict(),
    })
    if not identical:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
