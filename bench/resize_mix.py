"""Bench: the three resize decodes on a mix of photo sizes like real ABID's: accuracy and speed.

Why: ``fast`` and ``draft`` decode a photo that is at least twice the target on both sides
(>= 448 px for 224) at 1/2, 1/4 or 1/8 scale in the DCT domain, as Pillow's draft mode does, and
``fast`` resizes with torch's kernel (within a level of Pillow's) instead of Pillow's. How far
each lands from the challenge's pixels, and how fast each is, depends on the photo sizes: a run on
639 real ABID photos found a third >= 448 px on both sides (672x1054 among them), 196 portrait
photos with only their long side >= 448 (366x552), and the rest under 448 on both sides. So this
bench draws sizes in those shares and reports everything per size class.

The mix (``--photos``, default 639 as that run): generated bins (``vsbench.abid.synth``), each
resized (bicubic) to a size drawn by class and saved as JPEG q90 4:2:0 as a camera would:

* ``under_448`` (36%): width 300-447, height 250-447 (landscape and portrait);
* ``one_side_448`` (31%): portrait, width 300-447, height 448-620;
* ``both_448`` (33%): two thirds near the threshold (448-560 on both sides), one third large
  (672x1054, 1054x672, 640x480, 896x1200, 512x512).

Accuracy: each output JPEG decoded and compared with the challenge's output for the same photo,
mean absolute difference in 0..255 levels per photo; per class the mean and the largest per-photo
value, and how many photos came out byte-identical.

Speed, two ways, both interleaved so the machine's load falls on every mode alike:

* per photo: each mode on bytes in memory, one thread, the best of ``--repeat`` runs of each photo,
  summed per class (ms per photo); the challenge's one-process loop beside them;
* end to end: ``resize_abid`` over the whole mix in a fresh process per run (``--workers``), as a
  step runs it: this includes what a mode costs once per process (``fast`` imports torch, about
  two seconds on this machine's CUDA build), which decides whether a small job gains at all.

Run: ``python bench/resize_mix.py [--photos 639] [--seed 7] [--repeat 3] [--workers 2] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import io
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

CLASSES = ("under_448", "one_side_448", "both_448")
LARGE_SIZES: tuple[tuple[int, int], ...] = ((672, 1054), (1054, 672), (640, 480), (896, 1200), (512, 512))
MODES = ("full", "draft", "fast")


def challenge(data: bytes, size: int = 224) -> bytes:
    """The challenge's steps on bytes: open, convert, resize bilinear, save (Pillow's q75)."""
    buffer = io.BytesIO()
    Image.open(io.BytesIO(data)).convert("RGB").resize((size, size), Image.BILINEAR).save(buffer, format="JPEG")
    return buffer.getvalue()


def draw_size(rng: random.Random) -> tuple[str, tuple[int, int]]:
    """A size class in real ABID's shares and a (width, height) in it (module doc)."""
    draw = rng.random()
    if draw < 0.36:
        width, height = rng.randint(300, 447), rng.randint(250, 447)
        return "under_448", (width, height) if rng.random() < 0.7 else (height, width)
    if draw < 0.67:
        return "one_side_448", (rng.randint(300, 447), rng.randint(448, 620))
    if rng.random() < 2 / 3:
        return "both_448", (rng.randint(448, 560), rng.randint(448, 560))
    return "both_448", LARGE_SIZES[rng.randrange(len(LARGE_SIZES))]


def size_class(width: int, height: int, size: int = 224) -> str:
    low, high = sorted((width, height))
    return "both_448" if low >= 2 * size else "one_side_448" if high >= 2 * size else "under_448"


def photo_mix(count: int, seed: int) -> list[bytes]:
    """``count`` JPEG photos of generated bins at sizes drawn as real ABID's (module doc)."""
    from vsbench.abid.synth import plan_dataset, render_bin

    rng = random.Random(seed)
    plan = plan_dataset(count, seed=seed)
    photos = []
    for plan_bin in plan.bins:
        _, dims = draw_size(rng)
        buffer = io.BytesIO()
        render_bin(plan_bin, plan.catalog, seed).resize(dims, Image.Resampling.BICUBIC).save(
            buffer, format="JPEG", quality=90, subsampling="4:2:0")
        photos.append(buffer.getvalue())
    return photos


def _decoded(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.int16)


def accuracy(photos: list[bytes], size: int = 224) -> dict[str, Any]:
    """Per class: mean and largest per-photo mean absolute difference, byte-identical photos, per mode."""
    from vsbench.abid.resize import resize_image_bytes

    rows = []
    for data in photos:
        reference = challenge(data, size)
        width, height = Image.open(io.BytesIO(data)).size
        row: dict[str, Any] = {"class": size_class(width, height, size)}
        for mode in MODES:
            output = resize_image_bytes(data, size, decode=mode)
            row[f"{mode}_identical"] = output == reference
            row[f"{mode}_mad"] = 0.0 if output == reference else float(
                np.abs(_decoded(output) - _decoded(reference)).mean())
        rows.append(row)
    if not all(row["full_identical"] for row in rows):
        raise AssertionError("the default decode (full) is not byte-identical to the challenge's loop")
    result: dict[str, Any] = {}
    for name in (*CLASSES, "all"):
        group = rows if name == "all" else [r for r in rows if r["class"] == name]
        if not group:
            continue
        result[name] = {"photos": len(group)} | {
            f"{mode}_{stat}": value for mode in MODES for stat, value in (
                ("mean_mad", round(float(np.mean([r[f"{mode}_mad"] for r in group])), 3)),
                ("max_mad", round(float(np.max([r[f"{mode}_mad"] for r in group])), 3)),
                ("identical", int(sum(r[f"{mode}_identical"] for r in group))))}
    return result


def per_photo_speed(photos: list[bytes], repeat: int, size: int = 224) -> dict[str, dict[str, float]]:
    """Milliseconds per photo, per class and mode (and the challenge's loop), one thread, in memory."""
    import torch

    from vsbench.abid.resize import resize_image_bytes

    torch.set_num_threads(1)
    methods = {mode: (lambda data, m=mode: resize_image_bytes(data, size, decode=m)) for mode in MODES}
    methods["challenge_loop"] = lambda data: challenge(data, size)
    totals: dict[str, dict[str, float]] = {name: {m: 0.0 for m in methods} for name in (*CLASSES, "all")}
    counts = dict.fromkeys((*CLASSES, "all"), 0)
    for index, data in enumerate(photos):
        width, height = Image.open(io.BytesIO(data)).size
        name = size_class(width, height, size)
        order = list(methods) if index % 2 == 0 else list(methods)[::-1]
        best = dict.fromkeys(methods, float("inf"))
        for _ in range(repeat):
            for method in order:
                started = time.perf_counter()
                methods[method](data)
                best[method] = min(best[method], time.perf_counter() - started)
        for group in (name, "all"):
            counts[group] += 1
            for method, seconds in best.items():
                totals[group][method] += seconds
    return {group: {m: round(1000 * s / counts[group], 3) for m, s in totals[group].items()}
            for group in totals if counts[group]}


END_TO_END = """
import sys, time
from pathlib import Path
started = time.perf_counter()
from vsbench.abid.resize import resize_abid
resize_abid(Path(sys.argv[1]), Path(sys.argv[2]), decode=sys.argv[3], workers=int(sys.argv[4]), progress=False)
print(time.perf_counter() - started)
"""


def end_to_end(photos: list[bytes], workers: int, rounds: int = 2) -> dict[str, list[float]]:
    """Seconds of ``resize_abid`` over the mix in a fresh process per run, modes interleaved."""
    seconds: dict[str, list[float]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        images = Path(tmp) / "data" / "bin-images"
        images.mkdir(parents=True)
        for index, data in enumerate(photos, start=1):
            (images / f"{index}.jpg").write_bytes(data)
        for round_ in range(rounds):
            for mode in (MODES if round_ % 2 == 0 else MODES[::-1]):
                out = Path(tmp) / f"out-{mode}"
                shutil.rmtree(out, ignore_errors=True)
                started = time.perf_counter()
                subprocess.run([sys.executable, "-c", END_TO_END, str(images.parent), str(out), mode, str(workers)],
                               check=True, capture_output=True, text=True)
                seconds[mode].append(round(time.perf_counter() - started, 2))
    return seconds


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--photos", type=int, default=639)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs of each photo per mode (best counts)")
    parser.add_argument("--workers", type=int, default=2, help="processes of the end-to-end runs")
    parser.add_argument("--no-end-to-end", action="store_true", help="skip the resize_abid runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    photos = photo_mix(args.photos, args.seed)
    result: dict[str, Any] = {"photos": len(photos), "accuracy": accuracy(photos),
                              "ms_per_photo": per_photo_speed(photos, args.repeat)}
    if not args.no_end_to_end:
        result["end_to_end_seconds"] = end_to_end(photos, args.workers)
        result["workers"] = args.workers
    print("decoded outputs vs the challenge's, mean absolute difference per photo (0..255 levels): "
          "mean / largest photo, byte-identical photos")
    for name, row in result["accuracy"].items():
        cells = "  ".join(f"{m} {row[f'{m}_mean_mad']:.3f} / {row[f'{m}_max_mad']:.3f}, "
                          f"{row[f'{m}_identical']}/{row['photos']}" for m in MODES)
        print(f"  {name:13} {row['photos']:4d} photos  {cells}")
    print("ms per photo, one thread, bytes in memory (best of --repeat)")
    for name, row in result["ms_per_photo"].items():
        ratios = ", ".join(f"{m} {row[m]:.2f} ({row['full'] / row[m]:.2f}x full)" for m in (*MODES, "challenge_loop"))
        print(f"  {name:13} {ratios}")
    if "end_to_end_seconds" in result:
        print(f"resize_abid over all {len(photos)} photos, {args.workers} workers, a fresh process each run "
              f"(seconds, per run): " + ", ".join(f"{m} {v}" for m, v in result["end_to_end_seconds"].items()))
    if args.json:
        from vsbench.io.storage import atomic_write_json

        atomic_write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
