"""The ABID demo's scores over training seeds (and kernels): how far one run's digits are from the next.

``vsbench demo`` prints one run's scores; on another CPU, or with another seed, they differ (issue
39: an Intel Xeon printed counting 0.4724 where this machine prints 0.5039). Re-running the whole
demo per seed costs ~9 minutes each on 2 cores, most of it the same data generation, upload,
download and resize. This bench reuses a finished demo's data (its ``data/tasks`` and
``data/bin-images-resize``, seed 0) and repeats only what a seed changes: the two trainings, the
quantity answers and the scorer, through the very step functions the pipeline's components call
(``vsbench.steps.abid``), with the demo profile and tracking off. So seed N here is the demo's
training with seed N on the demo's seed-0 split, not ``vsbench demo --seed N`` (which would also
generate other bins and another split).

Kernels: run it again under ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` to see what
another instruction set does to the same seed on the same CPU (recorded with the machine's tags).

    vsbench demo --out /tmp/demo --no-track                     # once: data and the seed-0 scores
    python bench/demo_spread.py --demo /tmp/demo --seeds 1 2 --json seeds.json
    python bench/demo_spread.py --summarize seeds.json kernels.json --demo-scores /tmp/demo
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import format_table, log, machine_info

METRICS = ("counting_accuracy", "counting_rmse", "verification_accuracy", "quantity_accuracy")


def train_and_score(demo: Path, seed: int, out: Path) -> dict[str, float]:
    """The demo's steps after resize, for one training seed, into ``out`` (resumable: a finished
    training is not redone)."""
    from vsbench.steps.abid import (
        abid_quantity_step,
        abid_score_step,
        abid_train_counting_step,
        abid_train_siamese_step,
    )

    tasks, images = str(demo / "data" / "tasks"), str(demo / "data" / "bin-images-resize")
    abid_train_counting_step(tasks, images, str(out / "counting"), profile="demo", seed=seed, progress=False)
    abid_train_siamese_step(tasks, images, str(out / "siamese"), profile="demo", seed=seed, progress=False)
    abid_quantity_step(tasks, str(out / "counting" / "counting_result.txt"), str(out / "quantity"))
    scored = abid_score_step(tasks, str(out / "counting" / "counting_result.txt"),
                             str(out / "siamese" / "obj_verification_result.txt"),
                             str(out / "quantity" / "obj_num_verification_result.txt"))
    return {name: float(scored.metrics[name]) for name in METRICS}


def demo_scores(demo: Path) -> dict[str, float]:
    """The scores ``vsbench demo`` itself wrote (its score step's result files, scored again)."""
    from vsbench.steps.abid import abid_score_step

    runs = demo / "data" / "runs"
    scored = abid_score_step(str(demo / "data" / "tasks"), str(runs / "counting" / "counting_result.txt"),
                             str(runs / "siamese" / "obj_verification_result.txt"),
                             str(runs / "quantity" / "obj_num_verification_result.txt"))
    return {name: float(scored.metrics[name]) for name in METRICS}


def summarize(rows: list[dict[str, Any]]) -> str:
    """A table of each run, then mean / min / max / spread (max - min) per metric."""
    table = [[row["label"], row["seed"], *(f"{row['scores'][m]:.4f}" for m in METRICS)] for row in rows]
    lines = [format_table(["kernels", "seed", *METRICS], table), ""]
    stats = []
    for metric in METRICS:
        values = [row["scores"][metric] for row in rows]
        stats.append([metric, f"{statistics.fmean(values):.4f}", f"{min(values):.4f}", f"{max(values):.4f}",
                      f"{max(values) - min(values):.4f}", len(values)])
    lines.append(format_table(["metric", "mean", "min", "max", "spread", "runs"], stats))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, help="a finished `vsbench demo --out` folder (its data is reused)")
    parser.add_argument("--seeds", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--label", default=os.environ.get("ATEN_CPU_CAPABILITY", "default"),
                        help="names the kernels of this run in the table (default: $ATEN_CPU_CAPABILITY)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/vsbench-bench/demo-spread"))
    parser.add_argument("--json", type=Path, help="append each seed's scores here as it finishes (JSON lines)")
    parser.add_argument("--summarize", type=Path, nargs="*", help="only print the table of these JSON-lines files")
    parser.add_argument("--demo-scores", type=Path, help="with --summarize: add this demo folder's own run (seed 0)")
    args = parser.parse_args(argv)
    os.environ["VSBENCH_NO_TRACK"] = "1"

    if args.summarize is not None:
        rows = [json.loads(line) for path in args.summarize for line in path.read_text().splitlines() if line.strip()]
        if args.demo_scores:
            rows.insert(0, {"label": "demo", "seed": 0, "scores": demo_scores(args.demo_scores)})
        print(summarize(rows))
        return 0
    if args.demo is None:
        parser.error("--demo is required unless --summarize")
    rows = []
    for seed in args.seeds:
        started = time.perf_counter()
        log(f"seed {seed} ({args.label}): training counting and siamese ...")
        scores = train_and_score(args.demo, seed, args.workdir / f"{args.label}-seed{seed}")
        row = {"label": args.label, "seed": seed, "scores": scores, "seconds": round(time.perf_counter() - started, 1),
               "machine": machine_info()}
        log(f"  {json.dumps(scores)} in {row['seconds']} s")
        rows.append(row)
        if args.json:
            with args.json.open("a") as handle:
                handle.write(json.dumps(row) + "\n")
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
