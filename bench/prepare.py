"""Bench: ``prepare`` (split and the 13 task files) on ABID-sized metadata: wall time and peak memory.

Why: on a pod the prepare step's memory, not its time, decides whether full ABID (535,234 bins)
fits. docs/scale.md quotes this script: time and peak resident memory at several sizes, the
per-bin slope, and the extrapolation to full ABID.

Data: metadata files in the real format from ``vsbench.abid.synth`` (its catalog, names,
dimensions, 0 to ~10 asins a bin with real ABID's spread, some keys that are not the asin), one
empty ``.jpg`` per bin (prepare reads image names only). Generated once per size under
``--workdir`` and reused (keyed on the generator's source).

Each size runs ``vsbench.abid.prepare.prepare_abid`` in a fresh Python process that reports its
own peak resident set (Linux ``VmHWM``); the same process measured after its imports alone gives
the baseline, so ``(peak - baseline) / bins`` is what prepare holds per bin. ``--src`` runs
another checkout's ``src`` (say, the code before a change) on the same data, and the task files'
digests are compared, so a memory change is shown to leave every byte as it was.

Run: ``python bench/prepare.py [--bins 25000,100000,200000] [--json out.json]`` (generation
~1 min per 100k bins once; each prepare run seconds to a minute).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR, format_table, generator_fingerprint, log, machine_info, write_json

FULL_ABID_BINS = 535_234

# Runs in the child: imports, baseline RSS, prepare, peak RSS. Prints one JSON line.
CHILD = r"""
import json, sys, time
from pathlib import Path
from vsbench.abid.prepare import prepare_abid

def high_water_kib():  # this process's own peak RSS (VmHWM; ru_maxrss would include the parent's at fork)
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

base = high_water_kib()
started = time.perf_counter()
summary = prepare_abid(Path(sys.argv[1]), Path(sys.argv[2]), seed=0, progress=False)
seconds = time.perf_counter() - started
print(json.dumps({"seconds": seconds, "baseline_kib": base, "peak_kib": high_water_kib(),
                  "eligible": summary.eligible,
                  "sha256": {name: info["sha256"] for name, info in summary.files.items()}}))
"""


def generate_metadata(workdir: Path, bins: int, seed: int = 0) -> Path:
    """Real-format metadata and empty images for ``bins`` bins (cached; a marker is written last)."""
    from vsbench.abid.ids import IMAGES_DIR, METADATA_DIR
    from vsbench.abid.synth import bin_metadata, plan_dataset

    root = workdir / f"prepare-{bins}-s{seed}-{generator_fingerprint()}"
    marker = root / ".complete.json"
    if marker.exists():
        return root
    started = time.perf_counter()
    log(f"generating metadata for {bins:,} bins into {root} ...")
    plan = plan_dataset(bins, seed)
    images, metadata = root / IMAGES_DIR, root / METADATA_DIR
    images.mkdir(parents=True, exist_ok=True)
    metadata.mkdir(parents=True, exist_ok=True)
    for plan_bin in plan.bins:
        stem = plan_bin.stems[0]
        if plan_bin.has_image:
            (images / f"{stem}.jpg").touch()
        if plan_bin.has_metadata:
            (metadata / f"{stem}.json").write_text(json.dumps(bin_metadata(plan_bin, plan.catalog)))
    marker.write_text(json.dumps({"bins": bins, "seed": seed}) + "\n")
    log(f"  generated in {time.perf_counter() - started:.1f} s")
    return root


def directory_mb(folder: Path) -> float:
    return sum(entry.stat().st_size for entry in os.scandir(folder)) / 1e6


def run_prepare(data: Path, out: Path, src: Path | None = None) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=str(src)) if src else None
    result = subprocess.run([sys.executable, "-c", CHILD, str(data), str(out)], check=True, capture_output=True,
                            text=True, env=env)
    return json.loads(result.stdout.strip().splitlines()[-1])


def measure(data: Path, out: Path, bins: int, src: Path | None) -> dict[str, Any]:
    measured = run_prepare(data, out, src)
    peak_mb, base_mb = measured["peak_kib"] / 1024, measured["baseline_kib"] / 1024
    return {
        "bins": bins, "eligible": measured["eligible"], "metadata_mb": directory_mb(data / "metadata"),
        "task_files_mb": sum(p.stat().st_size for p in out.iterdir() if p.is_file()) / 1e6,
        "seconds": measured["seconds"], "peak_mb": peak_mb, "baseline_mb": base_mb,
        "held_kb_per_bin": (peak_mb - base_mb) * 1024 / bins, "sha256": measured["sha256"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bins", default="25000,100000,200000",
                        help="Comma-separated dataset sizes, in bins (default: 25000,100000,200000).")
    parser.add_argument("--src", type=Path, default=None,
                        help="Also run the src/ folder of another checkout on the same data, alternating "
                             "which goes first, and compare the task files' digests.")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    sizes = sorted({int(value) for value in args.bins.split(",") if value.strip()})
    sides: list[tuple[str, Path | None]] = [("this checkout", None)]
    if args.src:
        sides.append((f"--src {args.src}", args.src.resolve()))

    rows: list[dict[str, Any]] = []
    for index, bins in enumerate(sizes):
        data = generate_metadata(args.workdir, bins)
        order = sides if index % 2 == 0 else sides[::-1]
        for label, src in order:
            log(f"prepare on {bins:,} bins ({label}) ...")
            rows.append({"code": label, **measure(data, args.workdir / f"prepare-out-{bins}", bins, src)})
    rows.sort(key=lambda r: (r["bins"], r["code"] != "this checkout"))

    print(format_table(
        ["code", "bins", "metadata MB", "task files MB", "seconds", "peak MB", "baseline MB", "held KB/bin"],
        [[r["code"], f"{r['bins']:,}", f"{r['metadata_mb']:.0f}", f"{r['task_files_mb']:.0f}",
          f"{r['seconds']:.1f}", f"{r['peak_mb']:.0f}", f"{r['baseline_mb']:.0f}", f"{r['held_kb_per_bin']:.2f}"]
         for r in rows]))
    if args.src:
        for bins in sizes:
            pair = [r for r in rows if r["bins"] == bins]
            same = pair[0]["sha256"] == pair[1]["sha256"]
            print(f"{bins:,} bins: peak {pair[0]['peak_mb'] / pair[1]['peak_mb']:.2f}x, time "
                  f"{pair[0]['seconds'] / pair[1]['seconds']:.2f}x of --src; task files "
                  f"{'identical' if same else 'DIFFERENT'}")
    ours = [r for r in rows if r["code"] == "this checkout"]
    largest = ours[-1]
    full_seconds = largest["seconds"] / largest["bins"] * FULL_ABID_BINS
    full_mb = largest["baseline_mb"] + largest["held_kb_per_bin"] * FULL_ABID_BINS / 1024
    print(f"full ABID ({FULL_ABID_BINS:,} bins), from the {largest['bins']:,}-bin run's per-bin rates: "
          f"~{full_seconds:.0f} s, peak ~{full_mb / 1024:.2f} GB")
    write_json(args.json, {"machine": machine_info(), "sizes": rows,
                           "full_abid": {"bins": FULL_ABID_BINS, "seconds": full_seconds, "peak_mb": full_mb}})


if __name__ == "__main__":
    main()
