"""Bench: embedding throughput — images per second, and how much of the hardware it uses.

Why: embedding is the step that scales with the dataset (ABID alone is ~536k images, DISC 1M+),
so its images/s decides how many shards and nodes a run needs. Two figures per model:

* **end to end**: ``vsbench.retrieval.embed.embed_image_set`` on JPEG files (decode + resize in DataLoader
  workers, uint8 to the device, normalize there, forward, write the shard) — what a step gets;
* **model only**: the same batches already decoded and resident in memory, so only the transfer,
  normalization and forward pass are timed — what the network could do if loading kept up.

The gap between the two says whether loading (CPU cores for decoding) or compute limits a run.
Each model's FLOPs per image come from ``torch.utils.flop_counter.FlopCounterMode`` (a
multiply-add counts as 2 FLOPs) at its own input size, so images/s turns into achieved GFLOP/s,
comparable with the device's peak.

Inputs are ABID-like synthetic photos (~460x360 JPEGs from ``vsbench.abid.synth``, cached).
Run: ``python bench/embed.py [--images 256] [--batch-size 32] [--device cpu|cuda|auto] [--threads N]
[--json out.json]``

``--worker-hashing`` measures instead what issue 46 costs a first run (an unchanged re-run keeps
its shards and decodes nothing: unaffected): the workers now read each file once, take the
sha256 of that buffer and decode from it, where they decoded from the path before. Per image, in
one process: decode from the path (before), from bytes read (the decode alone), and read + sha256
+ decode (now); the device path's worker (read + header + completeness check) without and with
the sha256. End to end: ``embed_image_set``'s first run (cache off) with the old worker (decode
from the path, digest taken from the key) and the new one, rounds interleaved, on a tiny network
so that loading, not compute, bounds the run (the GPU's case, where the workers are the bottleneck).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_WORKDIR, cached_abid, canonical_files, format_table, log, machine_info, write_json

from vsbench.io.features import ImageSet
from vsbench.models.registry import Embedder, build_model
from vsbench.retrieval.embed import embed_image_set, load_image, normalizer
from vsbench.runtime.device import DeviceSetup, setup_device

MODELS: dict[str, dict[str, Any]] = {
    "efficientnet_lite0": {},
    "resnet50": {"weights": "random"},  # same FLOPs as the ImageNet weights, and no download
}


@dataclass
class Measured:
    model: str
    options: dict[str, Any]
    input_size: int
    dim: int
    gflops_per_image: float
    images: int
    end_to_end_images_per_second: float
    end_to_end_gflops_per_second: float
    model_only_images_per_second: float
    model_only_gflops_per_second: float
    amp_dtype: str | None


def gflops_per_image(model: Embedder) -> float:
    """FLOPs of one forward pass at the model's input size, in GFLOP (multiply-add = 2)."""
    from torch.utils.flop_counter import FlopCounterMode

    side = model.preprocessing.input_size
    counter = FlopCounterMode(display=False)
    with torch.inference_mode(), counter:
        model.cpu()(torch.zeros(1, 3, side, side))
    return counter.get_total_flops() / 1e9


def model_only(model: Embedder, images: ImageSet, setup: DeviceSetup, batch_size: int,
               use_amp: bool) -> float:
    """Images/s of transfer + normalize + forward on batches decoded beforehand (untimed)."""
    batches = []
    for start in range(0, len(images.paths), batch_size):
        arrays = [load_image(p, model.preprocessing) for p in images.paths[start:start + batch_size]]
        batch = torch.from_numpy(np.stack(arrays))
        batches.append(batch.pin_memory() if setup.is_cuda else batch)
    network = model.to(setup.device, memory_format=torch.channels_last).eval()
    scale, shift = normalizer(model.preprocessing, setup.device)
    autocast = setup.autocast() if use_amp else contextlib.nullcontext()

    def run_all() -> None:
        for batch in batches:
            x = batch.to(setup.device, non_blocking=True).permute(0, 3, 1, 2).float()
            network(x.mul_(scale).add_(shift)).float()
        if setup.is_cuda:
            torch.cuda.synchronize(setup.device)

    with torch.inference_mode(), autocast:
        run_all()  # warm-up: oneDNN / cuDNN pick their kernels on the first batches
        started = time.perf_counter()
        run_all()
        seconds = time.perf_counter() - started
    return len(images.paths) / seconds


def end_to_end(name: str, options: dict[str, Any], images: ImageSet, scratch: Path,
               args: argparse.Namespace) -> float:
    """Images/s of ``embed_image_set`` as its manifest reports it (model building excluded),
    after an untimed warm-up on one batch."""
    warm = ImageSet(images.ids[: args.batch_size], images.paths[: args.batch_size])
    embed_image_set(name, warm, scratch / "warm", set_name="bench", batch_size=args.batch_size,
                    device=args.device, workers=args.workers, model_options=options, progress=False)
    shutil.rmtree(scratch / "run", ignore_errors=True)
    path = embed_image_set(name, images, scratch / "run", set_name="bench", batch_size=args.batch_size,
                           device=args.device, workers=args.workers, model_options=options, progress=False)
    manifest = json.loads(path.with_suffix(".json").read_text())
    if manifest["failed"] or manifest["count"] != len(images.ids):
        raise RuntimeError(f"{name}: {len(manifest['failed'])} images failed: {manifest['failed'][:1]}")
    return len(images.ids) / manifest["seconds"]


def worker_hashing(images: ImageSet, args: argparse.Namespace) -> dict[str, Any]:
    """Issue 46's cost: see the module docstring. Medians over ``args.rounds`` interleaved rounds."""
    import statistics

    from vsbench.imaging import batched
    from vsbench.io.storage import file_sha256
    from vsbench.models.registry import Preprocessing
    from vsbench.retrieval import embed

    preprocessing = Preprocessing(224, 224, (0.5,) * 3, (0.5,) * 3)  # a resize follows: Pillow's path
    paths = list(images.paths)

    def from_bytes(path: Path) -> Any:
        return embed._load(path, preprocessing, fast=True, data=path.read_bytes())

    per_image = {
        "read, sha256 (no decode)": embed.read_image_file,
        "decode from the path (before)": lambda p: embed.load_image(p, preprocessing),
        "read, decode from bytes": from_bytes,
        "read, sha256, decode from bytes (now)": lambda p: embed.load_image_file(p, preprocessing),
        "device path: read, header, check": lambda p: batched.read_encoded(p, check_complete=True),
        "device path: read, sha256, header, check (now)": lambda p: embed.EncodedFiles([p])[0],
    }
    # Paired, image by image (each function on the same file in turn, ``rounds`` times): a shared
    # machine's load falls on all alike, and the ratios to the old worker are per image.
    times: dict[str, list[float]] = {name: [] for name in per_image}
    for _ in range(args.rounds):
        for path in paths:
            for name, function in per_image.items():
                started = time.perf_counter()
                function(path)
                times[name].append(time.perf_counter() - started)
    old = times["decode from the path (before)"]
    micros = {name: statistics.median(t) * 1e6 for name, t in times.items()}
    ratios = {name: statistics.median(a / b for a, b in zip(t, old)) for name, t in times.items()}

    scratch = args.workdir / "hashing-runs"
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    model = scratch / "tiny.pt"
    torch.manual_seed(0)
    tiny = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                               torch.nn.Flatten(), torch.nn.Linear(8, 6))
    torch.jit.script(tiny.eval()).save(str(model))
    options = {"path": str(model), "input_size": 224, "resize_size": 224, "preserve_aspect_ratio": False}
    digest_of = {str(p): file_sha256(p) for p in paths}
    now = embed.ImageFiles.__getitem__

    def before(self: Any, index: int) -> tuple[int, Any, str, str | None]:
        """The worker before issue 46: decode from the path; the digest is the one the key hashed."""
        try:
            return index, embed.load_image(self.paths[index], self.preprocessing), "", digest_of[str(self.paths[index])]
        except Exception as exc:  # noqa: BLE001 - as ImageFiles
            return index, None, f"{type(exc).__name__}: {exc}", digest_of[str(self.paths[index])]

    os.environ["VSBENCH_EMBED_CACHE"] = "off"  # a first run: everything is embedded
    seconds: dict[str, list[float]] = {"before": [], "now": []}
    for round_ in range(args.rounds + 1):
        for name, getitem in (("before", before), ("now", now)):
            embed.ImageFiles.__getitem__ = getitem  # type: ignore[method-assign]
            out = scratch / f"{name}-{round_}"
            path = embed_image_set("torchscript", images, out, set_name="bench", batch_size=args.batch_size,
                                   device=args.device, workers=args.workers, model_options=options, progress=False,
                                   decode="cpu")
            if round_:  # the first round warms the page cache and the workers' imports
                seconds[name].append(json.loads(path.with_suffix(".json").read_text())["seconds"])
            shutil.rmtree(out)
    embed.ImageFiles.__getitem__ = now  # type: ignore[method-assign]
    shutil.rmtree(scratch, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in seconds.items()}
    print(f"Issue 46: hashing in the workers, {len(paths)} ABID-like JPEGs (~460x360, "
          f"{sum(p.stat().st_size for p in paths) / len(paths) / 1024:.0f} kB), median of {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(format_table(["per image, one process", "us", "/ before"],
                       [[name, value, ratios[name]] for name, value in micros.items()]))
    print(format_table(["first run, embed_image_set (tiny network, decode cpu)", "seconds", "images/s"],
                       [[name, value, len(paths) / value] for name, value in median.items()]))
    print(f"first run: now / before = {median['now'] / median['before']:.3f}")
    return {"per_image_us": micros, "per_image_ratio_to_before": ratios, "first_run_s": median, "ratio": median["now"] / median["before"],
            "rounds": seconds}


def stage_images(count: int, workdir: Path, seed: int) -> ImageSet:
    """The first ``count`` synthetic bin images (one spelling per id)."""
    from vsbench.abid.ids import IMAGES_DIR

    root = cached_abid(workdir, math.ceil(count * 1.06) + 10, seed)  # ~2% of bins have no image
    chosen = canonical_files(root / IMAGES_DIR, "image")
    if len(chosen) < count:
        raise RuntimeError(f"only {len(chosen)} images under {root}, need {count}")
    ids = sorted(chosen)[:count]
    return ImageSet(tuple(str(i) for i in ids), tuple(chosen[i] for i in ids))


def device_description(setup: DeviceSetup) -> str:
    if setup.is_cuda:
        return f"{torch.cuda.get_device_name(setup.device)} (CUDA {torch.version.cuda})"
    return f"CPU, {os.cpu_count()} cores visible, {torch.get_num_threads()} torch threads"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto (CUDA when present)")
    parser.add_argument("--workers", type=int, default=2, help="DataLoader decoding processes")
    parser.add_argument("--threads", type=int, default=0, help="torch intra-op threads on the CPU "
                        "(0: torch's default); on a shared machine 1 keeps threads from spinning")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, from {list(MODELS)}")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="cache and scratch folder")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    parser.add_argument("--worker-hashing", action="store_true", help="issue 46: what hashing the bytes the workers "
                        "decode costs a first run (see above)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --worker-hashing")
    args = parser.parse_args(argv)

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    images = stage_images(args.images, args.workdir, args.seed)
    if args.worker_hashing:
        write_json(args.json, {"bench": "embed --worker-hashing", "images": len(images.ids), "workers": args.workers,
                               **worker_hashing(images, args), "machine": machine_info()})
        return 0
    setup = setup_device(args.device)
    log(f"device: {device_description(setup)}; AMP dtype {setup.amp_dtype}")
    results = []
    for name in args.models.split(","):
        options = MODELS[name]
        model = build_model(name, **options)
        flops = gflops_per_image(model)
        use_amp = model.supports_autocast and setup.amp_dtype is not None
        log(f"{name}: {flops:.2f} GFLOP/image at {model.preprocessing.input_size}px; end to end ...")
        e2e = end_to_end(name, options, images, args.workdir / "embed-runs" / name, args)
        log(f"{name}: model only ...")
        only = model_only(model, images, setup, args.batch_size, use_amp)
        results.append(Measured(name, options, model.preprocessing.input_size, model.dim, flops,
                                len(images.ids), e2e, e2e * flops, only, only * flops,
                                str(setup.amp_dtype).removeprefix("torch.") if use_amp else None))
    shutil.rmtree(args.workdir / "embed-runs", ignore_errors=True)

    print(f"Embedding {len(images.ids)} ABID-like JPEGs (~460x360), batch {args.batch_size}, "
          f"{args.workers} decoding workers; device: {device_description(setup)}; "
          f"load average {os.getloadavg()[0]:.1f}")
    print(format_table(
        ["model", "input", "dim", "GFLOP/img", "e2e img/s", "e2e GFLOP/s", "model-only img/s",
         "model-only GFLOP/s", "AMP"],
        [[r.model + (" (random)" if r.options.get("weights") == "random" else ""), r.input_size, r.dim,
          r.gflops_per_image, r.end_to_end_images_per_second, r.end_to_end_gflops_per_second,
          r.model_only_images_per_second, r.model_only_gflops_per_second, r.amp_dtype or "fp32"]
         for r in results],
    ))
    print("e2e = embed_image_set on the JPEG files (decode, resize, transfer, forward, write); model-only = "
          "the same batches pre-decoded in memory. FLOPs: FlopCounterMode, multiply-add = 2.")
    write_json(args.json, {"bench": "embed", "device": device_description(setup),
                           "batch_size": args.batch_size, "workers": args.workers,
                           "results": [asdict(r) for r in results],
                           "machine": machine_info()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
