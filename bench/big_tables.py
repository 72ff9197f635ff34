"""Bench: reading big copy-detection tables, the readers before issue 39 against now.

Why: ``vsbench score copy-detection`` held 15-35x a prediction file's size in memory (a list of
tuples of Python strings a row, then numpy ``U`` arrays sized by the longest id): 10M predictions
(280 MB) died with MemoryError at 6.4 GB. The readers now keep ids as codes into their distinct
values (``vsbench.io.ids``). This bench writes a DISC-shaped prediction file (20 references a
query out of a million, scores as Python writes float32 values) and a ground truth naming each
query once (a third without a copy), reads each with both versions in a fresh interpreter, and
prints rows/s and the peak resident memory the read added (VmHWM, imports excluded) over the
file's size, side by side. Both versions must return the same rows, scores and notes.

The old readers are taken from git (``--old-ref``, the commit before the change) with
``git archive``, so the bench needs this checkout's history.

Run: ``python bench/big_tables.py [--rows 2500000] [--old-ref c8c45c9] [--json out.json]``

``--score 3000000,10000000`` measures the whole command instead (issue 48): ``vsbench score
copy-detection`` on a prediction file of each size (20 predictions a query, a ground truth naming
each query once, a third without a copy, the rest with a copy among its predictions), intervals on
(1000 resamples), in a fresh interpreter; it prints the peak resident memory over the interpreter's
own (the same command on a file of 20 predictions: every import it makes, nothing to hold) against
the file's size. The goal: at most 3x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import hashlib, json, sys, time
from vsbench.benchmarks.disc import readers

def status(field):  # this process's own peak (ru_maxrss would keep a forking parent's size across exec)
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":")) * 1024

before = status("VmRSS")
started = time.perf_counter()
table = getattr(readers, sys.argv[2])(sys.argv[1])
seconds = time.perf_counter() - started
peak = status("VmHWM") - before
digest = hashlib.sha256()
for column in ("query_ids", "reference_ids", "scores"):
    if hasattr(table, column):
        values = getattr(table, column)
        digest.update(repr(values.tolist()).encode())
digest.update(repr(list(table.notes)).encode())
print(json.dumps({"seconds": seconds, "peak": peak, "rows": len(table.query_ids), "digest": digest.hexdigest()}))
"""


def write_predictions(path: Path, rows: int) -> None:
    rng = np.random.default_rng(0)
    queries = np.arange(rows) // 20
    references = (np.arange(rows) * 7919 + queries) % 1_000_000
    scores = rng.random(rows).astype(np.float32).astype(np.float64)
    with path.open("w") as out:
        out.write("query_id,reference_id,score\n")
        for start in range(0, rows, 1 << 20):
            stop = min(start + (1 << 20), rows)
            out.writelines(f"Q{q:06d},R{r:06d},{s!r}\n" for q, r, s in zip(
                queries[start:stop].tolist(), references[start:stop].tolist(), scores[start:stop].tolist()))


def write_ground_truth(path: Path, rows: int) -> None:
    with path.open("w") as out:
        out.write("query_id,reference_id\n")
        out.writelines(f"Q{q:07d},{'' if q % 3 == 0 else f'R{q * 7 % 1_000_003:07d}'}\n" for q in range(rows))


def old_source(ref: str, into: Path) -> Path:
    """``src/`` of ``ref``, extracted from git."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "src"], capture_output=True, check=True).stdout
    archive_path = into / "old.tar"
    archive_path.write_bytes(archive)
    with tarfile.open(archive_path) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def measure(src: Path, path: Path, reader: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(path), reader], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout.splitlines()[-1])


_SCORE_CHILD = """
import sys
def status(field):
    with open("/proc/self/status") as lines:
        return next(int(line.split()[1]) for line in lines if line.startswith(field + ":")) * 1024
import vsbench.benchmarks.disc.metrics, vsbench.benchmarks.disc.readers, vsbench.benchmarks.disc.units
import vsbench.cli.score, vsbench.io.ids, vsbench.stats.compare, vsbench.stats.ranking
from vsbench.cli.app import main
sys.argv = ["vsbench", "score", "copy-detection", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print(status("VmHWM"), file=sys.stderr)
"""


def write_score_ground_truth(path: Path, rows: int) -> None:
    """One row per query of :func:`write_predictions`' file: a third without a copy, the others with
    their third prediction as the copy."""
    with path.open("w") as out:
        out.write("query_id,reference_id\n")
        out.writelines(f"Q{q:06d}," + ("" if q % 3 == 0 else f"R{((q * 20 + 3) * 7919 + q) % 1_000_000:06d}") + "\n"
                       for q in range(-(-rows // 20)))


def measure_score(rows_list: list[int]) -> list[dict]:
    """Peak of the whole ``score copy-detection`` over the interpreter's, per file size."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "VSBENCH_RESAMPLES": "1000", "VSBENCH_DEFAULT_STORE": "off"}
    with tempfile.TemporaryDirectory() as tmp:  # the interpreter's own: the same command on 20 predictions
        tiny, tiny_gt = Path(tmp) / "preds.csv", Path(tmp) / "gt.csv"
        write_predictions(tiny, 20)
        write_score_ground_truth(tiny_gt, 20)
        done = subprocess.run([sys.executable, "-c", _SCORE_CHILD, "--predictions", str(tiny), "--gt", str(tiny_gt),
                               "--output", str(Path(tmp) / "metrics.csv"), "--no-track"],
                              capture_output=True, text=True, env=env)
        baseline = int(done.stderr.split()[-1])
    print(f"interpreter: the same command on 20 predictions peaks at {baseline / 2**20:.0f} MiB")
    print(f"{'rows':>11} {'file MB':>8} {'peak MiB':>9} {'over interpreter / file':>24} {'seconds':>8}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for rows in rows_list:
            preds, gt = folder / "preds.csv", folder / "gt.csv"
            write_predictions(preds, rows)
            write_score_ground_truth(gt, rows)
            size = preds.stat().st_size
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-c", _SCORE_CHILD, "--predictions", str(preds), "--gt", str(gt),
                                   "--output", str(folder / "metrics.csv"), "--no-track"],
                                  capture_output=True, text=True, env=env)
            seconds = time.perf_counter() - started
            if not (folder / "metrics.csv").exists():
                raise SystemExit(f"score copy-detection failed at {rows:,} rows:\n{done.stderr[-2000:]}")
            peak = int(done.stderr.split()[-1])
            row = {"rows": rows, "file_bytes": size, "peak_bytes": peak, "baseline_bytes": baseline,
                   "ratio": (peak - baseline) / size, "seconds": seconds}
            results.append(row)
            print(f"{rows:>11,} {size / 1e6:>8.1f} {peak / 2**20:>9.0f} {row['ratio']:>23.2f}x {seconds:>8.1f}",
                  flush=True)
            (folder / "metrics.csv").unlink()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_500_000)
    parser.add_argument("--old-ref", default="c8c45c9", help="git commit whose readers are 'old'")
    parser.add_argument("--score", default="", help="comma-separated prediction rows: measure the whole command")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.score:
        results = measure_score([int(n) for n in args.score.split(",")])
        if args.json:
            args.json.write_text(json.dumps(results, indent=2) + "\n")
        return
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        old = old_source(args.old_ref, folder)
        tables = {"predictions": (folder / "preds.csv", write_predictions, "read_copy_detection_predictions"),
                  "ground truth": (folder / "gt.csv", write_ground_truth, "read_copy_detection_ground_truth")}
        print(f"{'table':<13} {'rows':>10} {'file MB':>8} {'old rows/s':>11} {'new rows/s':>11} "
              f"{'old peak/file':>14} {'new peak/file':>14}")
        for name, (path, write, reader) in tables.items():
            write(path, args.rows)
            size = path.stat().st_size
            before, after = measure(old, path, reader), measure(REPO / "src", path, reader)
            if before["digest"] != after["digest"]:
                raise SystemExit(f"{name}: the two readers returned different tables")
            row = {"table": name, "rows": args.rows, "file_bytes": size,
                   "old_rows_per_s": args.rows / before["seconds"], "new_rows_per_s": args.rows / after["seconds"],
                   "old_peak_ratio": before["peak"] / size, "new_peak_ratio": after["peak"] / size}
            results.append(row)
            print(f"{name:<13} {args.rows:>10,} {size / 1e6:>8.1f} {row['old_rows_per_s']:>11,.0f} "
                  f"{row['new_rows_per_s']:>11,.0f} {row['old_peak_ratio']:>13.1f}x {row['new_peak_ratio']:>13.1f}x",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
