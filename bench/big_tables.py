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
import hashlib
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


def write_predictions(path: Path, rows: int, per_query: int = 20) -> None:
    rng = np.random.default_rng(0)
    queries = np.arange(rows) // per_query
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


def write_score_ground_truth(path: Path, rows: int, per_query: int = 20) -> None:
    """One row per query of :func:`write_predictions`' file: a third without a copy (query 0 among
    them, unless the file has a single query: then the one-row baseline's query has its copy), the
    others with their fourth prediction (the last, with fewer) as the copy."""
    n_queries, offset = -(-rows // per_query), min(3, per_query - 1)
    with path.open("w") as out:
        out.write("query_id,reference_id\n")
        out.writelines(f"Q{q:06d}," + ("" if q % 3 == 0 and n_queries > 1 else
                                        f"R{((q * per_query + offset) * 7919 + q) % 1_000_000:06d}") + "\n"
                       for q in range(n_queries))


def _score_once(src: Path, preds: Path, gt: Path, folder: Path) -> dict:
    """One ``score copy-detection`` with the package at ``src``: its peak, seconds and the sha256 of
    the metrics and unit files it wrote (removed after)."""
    env = {**os.environ, "PYTHONPATH": str(src), "VSBENCH_RESAMPLES": "1000", "VSBENCH_DEFAULT_STORE": "off"}
    metrics = folder / "metrics.json"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _SCORE_CHILD, "--predictions", str(preds), "--gt", str(gt),
                           "--output", str(metrics), "--no-track"], capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - started
    written = [metrics, metrics.with_name("metrics.units.parquet")]
    if not all(path.exists() for path in written):
        raise SystemExit(f"score copy-detection ({src}) failed on {preds}:\n{done.stderr[-2000:]}")
    digests = [hashlib.sha256(path.read_bytes()).hexdigest() for path in written]
    for path in written:
        path.unlink()
    return {"peak": int(done.stderr.split()[-1]), "seconds": seconds, "digests": digests}


def measure_score(rows_list: list[int], per_query: int, old_ref: str | None) -> list[dict]:
    """Peak of the whole ``score copy-detection`` over the same command's on one prediction, per file
    size, with ``old_ref``'s package (from git) and this checkout's side by side; both must write the
    same bytes."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        sources = {"new": REPO / "src"}
        if old_ref:
            (folder / "old").mkdir()
            sources = {"old": old_source(old_ref, folder / "old"), **sources}
        preds, gt = folder / "preds.csv", folder / "gt.csv"
        write_predictions(preds, 1, per_query)  # the baseline: every import, intervals and units on one row
        write_score_ground_truth(gt, 1, per_query)
        baseline = {name: _score_once(src, preds, gt, folder)["peak"] for name, src in sources.items()}
        print("one prediction (the baseline): " + ", ".join(f"{name} {peak / 2**20:.0f} MiB"
                                                             for name, peak in baseline.items()))
        print(f"{'rows':>11} {'queries':>10} {'file MB':>8} "
              + " ".join(f"{name + ' peak MiB':>13} {name + ' over base/file':>19}" for name in sources)
              + " " + " ".join(f"{name + ' s':>7}" for name in sources))
        for rows in rows_list:
            write_predictions(preds, rows, per_query)
            write_score_ground_truth(gt, rows, per_query)
            size = preds.stat().st_size
            row: dict = {"rows": rows, "queries": -(-rows // per_query), "file_bytes": size}
            for name, src in sources.items():
                run = _score_once(src, preds, gt, folder)
                row[name] = {"peak_bytes": run["peak"], "baseline_bytes": baseline[name], "seconds": run["seconds"],
                             "ratio": (run["peak"] - baseline[name]) / size, "digests": run["digests"]}
            if old_ref and row["old"]["digests"] != row["new"]["digests"]:
                raise SystemExit(f"{rows:,} rows: {old_ref} and this checkout wrote different metrics or unit files")
            results.append(row)
            print(f"{rows:>11,} {row['queries']:>10,} {size / 1e6:>8.1f} "
                  + " ".join(f"{row[n]['peak_bytes'] / 2**20:>13.0f} {row[n]['ratio']:>18.2f}x" for n in sources)
                  + " " + " ".join(f"{row[n]['seconds']:>7.1f}" for n in sources), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2_500_000)
    parser.add_argument("--old-ref", default="c8c45c9", help="git commit whose readers are 'old'")
    parser.add_argument("--score", default="", help="comma-separated prediction rows: measure the whole command")
    parser.add_argument("--per-query", type=int, default=20, help="--score: predictions a query (issue 54: 3)")
    parser.add_argument("--score-old-ref", default="",
                        help="--score: also run this git commit's package, side by side (same bytes required)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.score:
        results = measure_score([int(n) for n in args.score.split(",")], args.per_query, args.score_old_ref or None)
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
