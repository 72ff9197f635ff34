"""Bench: what keying resize outputs on content costs, on a first run and on an unchanged re-run.

Why: since issue 37 each resize output is kept on the sha256 of its source's bytes. A first run
hashes every source from the bytes it already read for decoding, and records two stat records and
a digest per output; an unchanged re-run must still only ``stat`` two files per input, but reads a
manifest about 2.5x as long. This bench measures both against another checkout's ``src`` (the code
before the change: ``--src``), on the same inputs, in one run.

Inputs, under ``--workdir``:

* ``--images`` ABID-sized synthetic photos (~460x360, ~50 kB; the bench datasets' generator), copied
  (not hard-linked: a link moves the original's ctime) and left alone for more than
  :data:`vsbench.io.digests.RACY_NS`, so that no source counts as written just before it was read;
* ``--tiny`` 64x48 photos: a first run is quick, so the re-run, whose cost is per input and not
  per pixel, is measured at a larger count (the manifest's share grows with it).

Each measurement is ``resize_abid`` in a fresh Python process with the side's ``src`` on
``PYTHONPATH`` (imports untimed, each call timed inside the process): a first run into an empty
folder, then ``--reruns`` unchanged re-runs of the same folder in another process. The sides take
turns, each going first every other round, ``--repeat`` rounds; the median and the minimum of each
side's times are reported, wall and CPU (the process's and its pool's user + system time). On a
shared machine the minimum is the figure to compare: contention only ever adds. It also
times sha256 alone over the photos' bytes in memory (what hashing adds per image) and reads each
side's manifest size.

Run: ``python bench/resize_rerun.py --src /path/to/old/src [--images 2000] [--tiny 20000]
[--workers 2] [--repeat 5] [--reruns 10] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR, cached_abid, canonical_files, format_table, log, machine_info, write_json

HERE_SRC = Path(__file__).resolve().parents[1] / "src"
RACY_WAIT_S = 2.5  # > vsbench.io.digests.RACY_NS

# Runs in the child: imports (untimed), one resize_abid call (timed). Prints one JSON line.
CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from vsbench.abid.resize import resize_abid
def cpu():
    return sum(u.ru_utime + u.ru_stime for u in (resource.getrusage(resource.RUSAGE_SELF),
                                                 resource.getrusage(resource.RUSAGE_CHILDREN)))
runs = []
for _ in range(int(sys.argv[4])):
    started, cpu_started = time.perf_counter(), cpu()
    summary = resize_abid(Path(sys.argv[1]), Path(sys.argv[2]), workers=int(sys.argv[3]), progress=False)
    seconds, cpu_seconds = time.perf_counter() - started, cpu() - cpu_started
    runs.append({"seconds": seconds, "cpu_seconds": cpu_seconds, "resized": summary.resized, "kept": summary.kept,
                 "failed": summary.failed, "hashed": getattr(summary, "hashed", None)})
print(json.dumps(runs))
"""


def stage(photos: list[Path], folder: Path) -> Path:
    """Copy ``photos`` as ``folder/bin-images/<n>.jpg``; returns ``folder``."""
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "bin-images").mkdir(parents=True)
    for number, photo in enumerate(photos, 1):
        shutil.copyfile(photo, folder / "bin-images" / f"{number}.jpg")
    return folder


def tiny_photos(folder: Path, count: int) -> Path:
    """``count`` distinct 64x48 JPEGs under ``folder/bin-images`` (made once, kept)."""
    import numpy as np
    from PIL import Image

    marker = folder / ".complete"
    if marker.exists() and marker.read_text() == str(count):
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "bin-images").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for number in range(1, count + 1):
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)).save(buffer, format="JPEG", quality=90)
        (folder / "bin-images" / f"{number}.jpg").write_bytes(buffer.getvalue())
    marker.write_text(str(count))
    return folder


def run_child(src: Path, data: Path, out: Path, workers: int, times: int = 1) -> list[dict[str, Any]]:
    """``times`` calls of ``resize_abid`` in one fresh process: each call's wall and CPU seconds."""
    result = subprocess.run([sys.executable, "-c", CHILD, str(data), str(out), str(workers), str(times)],
                            env=dict(os.environ, PYTHONPATH=str(src)), capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"resize_abid with {src} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(sides: list[tuple[str, Path]], data: Path, work: Path, workers: int, repeat: int,
            reruns: int) -> dict[str, dict[str, Any]]:
    """First-run and re-run times of each side, the sides taking turns (each first every other round)."""
    times: dict[str, dict[str, Any]] = {name: {"first": [], "rerun": [], "first_cpu": [], "rerun_cpu": [],
                                               "manifest_bytes": 0, "hashed_rerun": None} for name, _ in sides}
    for round_ in range(repeat):
        order = sides if round_ % 2 == 0 else sides[::-1]
        for name, src in order:
            out = work / f"out-{name}"
            if out.exists():
                shutil.rmtree(out)
            (first,) = run_child(src, data, out, workers)
            if first["failed"] or first["kept"]:
                raise RuntimeError(f"{name}: {first}")
            times[name]["first"].append(first["seconds"])
            times[name]["first_cpu"].append(first["cpu_seconds"])
        for name, src in order:
            for again in run_child(src, data, work / f"out-{name}", workers, reruns):
                if again["resized"] or again["failed"]:
                    raise RuntimeError(f"{name}: an unchanged re-run redid work: {again}")
                times[name]["rerun"].append(again["seconds"])
                times[name]["rerun_cpu"].append(again["cpu_seconds"])
                times[name]["hashed_rerun"] = again["hashed"]
        for name, _ in sides:
            times[name]["manifest_bytes"] = (work / f"out-{name}" / "_manifests" / "resize.json").stat().st_size
        log(f"  round {round_ + 1}/{repeat}: " + ", ".join(
            f"{name} first {times[name]['first'][-1]:.3f} s, re-run min {min(times[name]['rerun'][-reruns:]):.4f} s"
            for name, _ in sides))
    for entry in times.values():
        for key in ("first", "rerun", "first_cpu", "rerun_cpu"):
            entry[f"{key}_median"] = statistics.median(entry[key])
            entry[f"{key}_min"] = min(entry[key])
    return times


def hash_cost(data: Path) -> dict[str, float]:
    """sha256 alone over the photos' bytes in memory: what hashing adds to each resized image."""
    blobs = [p.read_bytes() for p in sorted((data / "bin-images").iterdir())]
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for blob in blobs:
            hashlib.sha256(blob).hexdigest()
        best = min(best, time.perf_counter() - started)
    total = sum(len(b) for b in blobs)
    return {"ms_per_image": 1000 * best / len(blobs), "mean_kb": total / len(blobs) / 1000,
            "gb_per_second": total / best / 1e9}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", type=Path, required=True, help="src/ of the checkout to compare with (before)")
    parser.add_argument("--images", type=int, default=2000, help="ABID-sized photos")
    parser.add_argument("--tiny", type=int, default=20000, help="64x48 photos for the re-run at scale (0: skip)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reruns", type=int, default=10,
                        help="unchanged re-runs after each first run, in one process (the first pays lazy imports)")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    sides = [("before", args.src.resolve()), ("after", HERE_SRC)]
    work = args.workdir / "resize-rerun"
    abid = cached_abid(args.workdir, max(args.images + args.images // 20, 100))
    photos = sorted(canonical_files(abid / "bin-images", "image").values())[:args.images]
    sets = [("abid-sized", stage(photos, work / "abid-sized"))]
    if args.tiny:
        sets.append(("64x48", tiny_photos(args.workdir / f"tiny-{args.tiny}", args.tiny)))
    time.sleep(RACY_WAIT_S)
    results: dict[str, Any] = {"machine": machine_info(), "workers": args.workers, "sets": {}}
    rows = []
    for label, data in sets:
        count = len(list((data / "bin-images").iterdir()))
        log(f"{label}: {count} photos, {args.repeat} rounds ...")
        measured = measure(sides, data, work / label, args.workers, args.repeat, args.reruns)
        results["sets"][label] = {"photos": count, **measured}
        before, after = measured["before"], measured["after"]
        for key, what in (("first", "first run"), ("first_cpu", "first run, CPU"),
                          ("rerun", "unchanged re-run"), ("rerun_cpu", "unchanged re-run, CPU")):
            for stat in ("median", "min"):
                rows.append([f"{label}, {count:,} photos" if (key, stat) == ("first", "median") else "",
                             f"{what}, {stat}", before[f"{key}_{stat}"], after[f"{key}_{stat}"],
                             after[f"{key}_{stat}"] / before[f"{key}_{stat}"]])
        rows.append(["", "re-run per input, min (us)", 1e6 * before["rerun_min"] / count,
                     1e6 * after["rerun_min"] / count, None])
        rows.append(["", "manifest (kB)", before["manifest_bytes"] / 1000, after["manifest_bytes"] / 1000,
                     after["manifest_bytes"] / before["manifest_bytes"]])
    results["sha256_in_memory"] = hash_cost(sets[0][1])
    print(format_table(["set", "what", "before (s)", "after (s)", "after/before"], rows))
    cost = results["sha256_in_memory"]
    print(f"\nsha256 alone: {cost['ms_per_image']:.3f} ms per {cost['mean_kb']:.0f} kB photo "
          f"({cost['gb_per_second']:.2f} GB/s); re-run sources hashed (after): "
          f"{results['sets'][sets[0][0]]['after']['hashed_rerun']}")
    write_json(args.json, results)


if __name__ == "__main__":
    main()
