"""Training and inference throughput of the ABID baselines, with FLOPs and fraction of peak.

Measures the counting network (ResNet-34) and the siamese network (two ResNet-34 passes + head)
on random uint8 batches through the same device transform the trainer uses, so the figures are
the model's, not the JPEG decoder's. FLOPs per image come from torch's FlopCounterMode (a
training step counts forward + backward). The machine's peak is estimated as
cores x clock x FP32 FLOPs per cycle: 64 with AVX-512 (two 512-bit FMA pipes, as on Zen 5 and
Xeon; an upper bound on cores that split 512-bit work in two), 32 with AVX2 only. Pass
--peak-gflops to use a known figure, e.g. an H100's dense BF16 peak.

    python bench/train.py                       # CPU, 64 px (demo) and 224 px (full)
    python bench/train.py --device cuda --sizes 224 --batch 128
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
from torch.nn import functional as F
from torch.utils.flop_counter import FlopCounterMode

from vsbench.abid.data import BatchTransform
from vsbench.abid.models import SiameseNetwork, counting_network
from vsbench.runtime.device import setup_device


def cpu_peak_gflops() -> float:
    mhz, avx512 = 0.0, False
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("cpu MHz"):
                mhz = max(mhz, float(line.split(":")[1]))
            elif line.startswith("flags"):
                avx512 = avx512 or " avx512f" in line
    return (os.cpu_count() or 1) * mhz / 1000 * (64 if avx512 else 32)


def _step(model, batch, labels, siamese: bool):
    if siamese:
        half = batch.shape[0] // 2
        logits = model(batch[:half], batch[half:])
        return F.binary_cross_entropy_with_logits(logits.float(), labels[:half].float())
    return F.cross_entropy(model(batch).float(), labels % 6)


def flops_per_image(model, batch, labels, siamese: bool, train: bool) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        if train:
            _step(model, batch, labels, siamese).backward()
        else:
            with torch.no_grad():
                _step(model, batch, labels, siamese)
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch.shape[0]


def measure(kind: str, size: int, batch_size: int, steps: int, device_name: str) -> dict[str, float]:
    setup = setup_device(device_name)
    siamese = kind == "siamese"
    model = (SiameseNetwork() if siamese else counting_network()).to(setup.device).to(memory_format=torch.channels_last)
    transform = BatchTransform(setup.device)
    images = torch.randint(0, 256, (batch_size, 3, size, size), dtype=torch.uint8)
    labels = torch.randint(0, 2, (batch_size,), device=setup.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = transform(images)
    result = {"train_flops_per_image": flops_per_image(model, batch, labels, siamese, True),
              "infer_flops_per_image": flops_per_image(model, batch, labels, siamese, False)}

    def sync() -> None:
        if setup.is_cuda:
            torch.cuda.synchronize()

    for mode in ("train", "infer"):
        model.train(mode == "train")
        timings = []
        for index in range(steps + 1):  # the first step warms up (allocator, cudnn autotune)
            sync()
            started = time.perf_counter()
            batch = transform(images)
            with setup.autocast():
                if mode == "train":
                    optimizer.zero_grad(set_to_none=True)
                    _step(model, batch, labels, siamese).backward()
                    optimizer.step()
                else:
                    with torch.no_grad():
                        _step(model, batch, labels, siamese)
            sync()
            if index:
                timings.append(time.perf_counter() - started)
        result[f"{mode}_images_per_second"] = batch_size / min(timings)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--sizes", default="64,224")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--peak-gflops", type=float, default=0.0)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    setup = setup_device(args.device)
    peak = args.peak_gflops or (cpu_peak_gflops() if not setup.is_cuda else 0.0)
    where = torch.cuda.get_device_name() if setup.is_cuda else f"CPU, {os.cpu_count()} cores, {torch.get_num_threads()} threads"
    print(f"device: {where}; peak used for the fraction: {peak:.0f} GFLOP/s; batch {args.batch}")
    header = f"{'model':<10} {'px':>4} {'mode':<6} {'img/s':>8} {'GFLOP/img':>10} {'GFLOP/s':>9} {'of peak':>8}"
    print(header)
    print("-" * len(header))
    rows = []
    for size in [int(s) for s in args.sizes.split(",")]:
        for kind in ("counting", "siamese"):
            figures = measure(kind, size, args.batch, args.steps, args.device)
            for mode in ("train", "infer"):
                rate = figures[f"{mode}_images_per_second"]
                gflop = figures[f"{mode}_flops_per_image"] / 1e9
                achieved = rate * gflop
                share = f"{achieved / peak:8.1%}" if peak else "     n/a"
                print(f"{kind:<10} {size:>4} {mode:<6} {rate:8.1f} {gflop:10.2f} {achieved:9.1f} {share}")
                rows.append({"model": kind, "size": size, "mode": mode, "images_per_second": rate,
                             "gflop_per_image": gflop, "gflops": achieved, "peak_gflops": peak})
    if args.json:
        args.json.write_text(json.dumps({"device": where, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
