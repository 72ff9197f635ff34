"""Bench: ``vsbench.index.search`` vs calling FAISS directly, and what score normalization costs.

Why: every retrieval benchmark searches through ``vsbench.index.search``, which adds input checks
(finiteness, dims), explicit projection through the codec's transforms (to check them, as SSCD
does), and a flatten + sort into candidate triples. This bench shows that those cost little next
to the search itself: on the same random unit-norm descriptors it times, per codec,

* **faiss**: ``index_factory(d, codec, METRIC_INNER_PRODUCT)``, ``train`` on the training set when
  the codec needs it, ``add`` the references, ``search`` the queries for k neighbours;
* **vsbench**: ``search(queries, references, codec=..., train=..., k=...)``;
* **vsbench + norm**: the same with SSCD's default score normalization ``1.00[0,2]`` (a second
  search, of the queries over the projected training set).

and checks that vsbench returns FAISS's neighbours and scores (1e-4). Methods are interleaved
within each round and the best of ``--repeat`` rounds is kept, since the machine may be shared.
Each time is given twice: wall clock, and the CPU seconds of this process (all threads), which
other processes on a loaded machine disturb far less; the 1-minute load average is printed with the
sizes. Defaults take about a minute on 2 idle cores (a 10k-query Flat search over 100k x 512 alone
takes ~20 s there, hence 2,000 queries).

Run: ``python bench/index.py [--references 100000] [--queries 2000] [--train 20000] [--dim 512]
[--k 10] [--codecs 'Flat;PCAW256,L2norm,Flat'] [--repeat 2] [--json out.json]``
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faiss
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table, log, machine_info, write_json

from vsbench.index.search import Candidates, search
from vsbench.index.settings import ScoreNorm, parse_codecs

SCORE_NORM = ScoreNorm(1.0, 0, 2)
TOLERANCE = 1e-4


def unit_rows(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim), dtype=np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def faiss_direct(queries: np.ndarray, references: np.ndarray, train: np.ndarray, codec: str,
                 k: int) -> tuple[np.ndarray, np.ndarray]:
    """The plain FAISS calls that vsbench wraps: factory, train, add, search."""
    index = faiss.index_factory(queries.shape[1], codec, faiss.METRIC_INNER_PRODUCT)
    if not index.is_trained:
        index.train(train)
    index.add(references)
    return index.search(queries, k)


def disagreement(direct: tuple[np.ndarray, np.ndarray], ours: Candidates, k: int) -> tuple[float, float]:
    """(fraction of queries whose neighbour set differs, max |score difference|)."""
    distances, ids = direct
    our_ids, our_scores = ours.reference.reshape(-1, k), ours.score.reshape(-1, k)
    differing = np.mean([set(a) != set(b) for a, b in zip(ids.tolist(), our_ids.tolist(), strict=True)])
    return float(differing), float(np.abs(np.sort(distances, 1) - np.sort(our_scores, 1)).max())


def timed(function: Callable[[], Any]) -> tuple[float, float, Any]:
    """(wall seconds, CPU seconds of this process, all threads, result)."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--references", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--train", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--codecs", default="Flat;PCAW256,L2norm,Flat")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    codecs = parse_codecs(args.codecs)
    rng = np.random.default_rng(0)
    counts = (args.references, args.queries, args.train)
    references, queries, train = (unit_rows(rng, n, args.dim) for n in counts)
    sizes = {"references": args.references, "queries": args.queries, "train": args.train, "dim": args.dim,
             "k": args.k, "faiss_threads": faiss.omp_get_max_threads(), "load_average_1m": os.getloadavg()[0]}
    print("sizes: " + ", ".join(f"{name} {value:,}" for name, value in sizes.items()))

    best: dict[tuple[str, str, str], float] = {}
    checks: dict[str, tuple[float, float]] = {}
    for round_number in range(args.repeat):
        for codec in codecs:
            log(f"round {round_number + 1}/{args.repeat}, {codec} ...")
            runs = {
                "faiss": lambda c=codec: faiss_direct(queries, references, train, c, args.k),
                "vsbench": lambda c=codec: search(queries, references, codec=c, train=train, k=args.k,
                                                  use_gpu=False),
                "vsbench + norm": lambda c=codec: search(queries, references, codec=c, train=train, k=args.k,
                                                         score_norm=SCORE_NORM, use_gpu=False),
            }
            results = {}
            for method, run in runs.items():
                wall, cpu, results[method] = timed(run)
                for clock, seconds in (("wall", wall), ("cpu", cpu)):
                    best[codec, method, clock] = min(seconds, best.get((codec, method, clock), float("inf")))
            checks[codec] = disagreement(results["faiss"], results["vsbench"], args.k)
            if checks[codec][0] > 0 or checks[codec][1] > TOLERANCE:
                raise SystemExit(f"{codec}: vsbench disagrees with faiss: {checks[codec]}")

    rows = []
    records = []
    for codec in codecs:
        record: dict[str, Any] = {"codec": codec}
        for clock in ("wall", "cpu"):
            direct, ours, normed = (best[codec, m, clock] for m in ("faiss", "vsbench", "vsbench + norm"))
            rows.append([codec, clock, direct, ours, ours / direct, normed, normed - ours])
            record |= {f"faiss_{clock}_s": direct, f"vsbench_{clock}_s": ours,
                       f"overhead_ratio_{clock}": ours / direct, f"vsbench_norm_{clock}_s": normed,
                       f"score_norm_cost_{clock}_s": normed - ours}
        records.append(record | {"max_score_diff": checks[codec][1], "queries_differing": checks[codec][0]})
    print(format_table(["codec", "clock", "faiss s", "vsbench s", "ratio", f"+ norm {SCORE_NORM} s",
                        "norm cost s"], rows))
    print("vsbench returned FAISS's neighbours for every query; max |score difference|: "
          + ", ".join(f"{codec} {checks[codec][1]:.1e}" for codec in codecs))
    write_json(args.json, {"sizes": sizes, "repeat": args.repeat, "results": records,
                           "machine": machine_info()})


if __name__ == "__main__":
    main()
