"""Bench: what a 95% bootstrap interval costs beside the metric it comes with (copy detection, Copydays).

Why: issue 45 gives every headline number an interval from a seeded bootstrap over its queries;
the goal is at most 10x the metric alone on ten million predictions. This bench times, side by
side on the same inputs, the scorer alone and the scorer + the per-query units
(:func:`vsbench.benchmarks.disc.units.copy_detection_units`) + every metric's interval
(:func:`vsbench.stats.compare.intervals`: uAP, recall at P90 and accuracy at 1 from the same draws),
at ``--resamples`` (1000 and 200 by default), on

* ``10M``: bench/metrics.py's case (100,000 queries x 100 predictions, scores in hundredths);
* ``DISC run``: 50,000 queries x k = 10 (SSCD's DISC2021 dev evaluation: 500,000 predictions);
* ``Copydays run``: 3,212 queries x k = 100 (CD10K's blocks), strong mAP, overall uAP.

Seconds are wall times of one run each (the machine may be shared: the ratios are what to read).
Peak memory is Python's traced peak (tracemalloc, numpy's buffers included) during the step, in a
second, separate pass so that tracing does not slow the timed one.

Run: ``python bench/intervals.py [--resamples 1000 200] [--skip-10m] [--json out.json]``
"""

from __future__ import annotations

import argparse
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, log, machine_info, write_json
from metrics import make_case

from vsbench.benchmarks.copydays.metrics import copydays_metrics
from vsbench.benchmarks.copydays.units import copydays_units
from vsbench.benchmarks.disc.metrics import copy_detection_metrics
from vsbench.benchmarks.disc.units import copy_detection_units
from vsbench.stats.compare import intervals
from vsbench.stats.resample import Resampling


def copydays_case(queries: int = 3212, k: int = 100, seed: int = 0) -> tuple:
    """Copydays-shaped results: each query's original at a random rank (or missed), float32 distances."""
    rng = np.random.default_rng(seed)
    distances = np.sort(rng.random((queries, k)), axis=1).astype(np.float32)
    hits = np.zeros((queries, k), dtype=bool)
    found = rng.random(queries) < 0.9
    hits[np.flatnonzero(found), np.minimum(rng.geometric(0.5, found.sum()) - 1, k - 1)] = True
    blocks = np.asarray(["original", "strong", "jpegqual/30", "crops/50"])[rng.integers(0, 4, queries)]
    return [f"{b}/{n}" for n, b in enumerate(blocks)], hits, distances, np.ones(queries), blocks


def run_case(name: str, metric: Callable[[], Any], units: Callable[[], Any], resamples: list[int],
             predictions: int) -> list[dict[str, Any]]:
    """The metric alone, then per resample count: metric + units + intervals (timed), then the same
    again under tracemalloc for the peaks."""
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    metric()
    alone = time.perf_counter() - started
    peak_alone = traced(metric)
    log(f"{name}: metric alone {alone:.2f} s")
    for count in resamples:
        times: dict[str, float] = {}
        started = time.perf_counter()
        metric()
        times["metric"] = time.perf_counter() - started
        started = time.perf_counter()
        built = units()
        times["units"] = time.perf_counter() - started
        started = time.perf_counter()
        found = intervals(built, Resampling(count, 0))
        times["intervals"] = time.perf_counter() - started
        del built
        total = sum(times.values())

        def everything(count: int = count) -> None:
            metric()
            intervals(units(), Resampling(count, 0))

        peak = traced(everything)
        log(f"{name}, {count} resamples: {total:.2f} s ({total / alone:.1f}x)")
        rows.append({"case": name, "predictions": predictions, "resamples": count, "metric_alone_s": alone,
                     **{f"{k}_s": v for k, v in times.items()}, "total_s": total, "ratio": total / alone,
                     "peak_alone_mib": peak_alone, "peak_total_mib": peak,
                     "intervals": {m: [i.low, i.high] for m, i in found.items()}})
    return rows


def traced(step: Callable[[], Any]) -> float:
    """Peak traced memory of ``step`` in MiB (numpy reports its buffers to tracemalloc)."""
    tracemalloc.start()
    try:
        step()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, nargs="+", default=[1000, 200])
    parser.add_argument("--skip-10m", action="store_true", help="Leave out the 10M-prediction case.")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    rows: list[dict[str, Any]] = []
    cases = [] if args.skip_10m else [("10M", 100_000, 100)]
    cases.append(("DISC run", 50_000, 10))
    for name, queries, per_query in cases:
        case = make_case(queries, per_query)
        rows += run_case(name, lambda case=case: copy_detection_metrics(*case),
                         lambda case=case: copy_detection_units(*case), args.resamples, case[0].size)
        del case
    ids, hits, distances, positives, blocks = copydays_case()
    rows += run_case("Copydays run", lambda: copydays_metrics(hits, distances, positives, blocks == "strong"),
                     lambda: copydays_units(ids, hits, distances, positives, blocks), args.resamples, hits.size)

    print(format_table(
        ["case (predictions)", "resamples", "metric s", "+units s", "+intervals s", "total s", "x metric",
         "peak MiB metric", "peak MiB total"],
        [[f"{r['case']} ({r['predictions']:,})", r["resamples"], f"{r['metric_alone_s']:.2f}", f"{r['units_s']:.2f}",
          f"{r['intervals_s']:.2f}", f"{r['total_s']:.2f}", f"{r['ratio']:.1f}", f"{r['peak_alone_mib']:.0f}",
          f"{r['peak_total_mib']:.0f}"] for r in rows]))
    for r in rows:
        shown = ", ".join(f"{m} [{low:.4f}, {high:.4f}]" for m, (low, high) in r["intervals"].items())
        print(f"{r['case']}, {r['resamples']} resamples: {shown}")
    write_json(args.json, {"machine": machine_info(), "rows": rows})


if __name__ == "__main__":
    main()
