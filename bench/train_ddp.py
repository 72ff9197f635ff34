"""Data-parallel training throughput: 1 process against N processes (DDP) at the same global batch.

Each rank runs the real distributed path (vsbench.abid.distributed: DDP, global BatchNorm,
gradient all-reduce) on random uint8 batches through the trainer's device transform, so the
figure is the model's and the communication's, not the JPEG decoder's. Reported per run: images
per second (global batch / median step wall time), and CPU seconds per image summed over the
ranks (what the machine spent; on a shared machine it moves less than wall time).

    python bench/train_ddp.py --nproc 1               # one process, all cores
    python bench/train_ddp.py --nproc 2               # torchrun, 2 ranks (gloo on the CPU)
    python bench/train_ddp.py --nproc 2 --device cuda  # nccl, one GPU per rank

On the CPU, torchrun gives each rank OMP_NUM_THREADS=1 unless set; the one-process run keeps
torch's default (all cores), so both use the whole machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from torch.nn import functional as F


def run_rank(args: argparse.Namespace) -> None:
    from vsbench.abid import distributed
    from vsbench.abid.data import BatchTransform
    from vsbench.abid.models import SiameseNetwork, counting_network

    with distributed.session(args.device, amp=True) as (context, setup):
        per_rank = context.per_rank_batch(args.batch, args.batch)
        torch.manual_seed(0)
        siamese = args.task == "siamese"
        model = (SiameseNetwork() if siamese else counting_network()).to(setup.device)
        model = model.to(memory_format=torch.channels_last)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        trained = context.wrap(model, setup)
        trained.train()
        transform = BatchTransform(setup.device)
        images_per_sample = 2 if siamese else 1
        timings, cpu = [], 0.0
        for step in range(args.warmup + args.steps):
            generator = torch.Generator().manual_seed(step)
            batch = torch.randint(0, 256, (args.batch * images_per_sample, 3, args.size, args.size),
                                  dtype=torch.uint8, generator=generator)
            labels = torch.randint(0, 6, (args.batch,), generator=generator)
            mine = slice(context.rank * per_rank, (context.rank + 1) * per_rank)
            if setup.is_cuda:
                torch.cuda.synchronize()
            context.barrier()
            started, cpu_started = time.perf_counter(), time.process_time()
            optimizer.zero_grad(set_to_none=True)
            with setup.autocast():
                if siamese:
                    pairs = batch.view(args.batch, 2, 3, args.size, args.size)[mine]
                    logits = trained(transform(pairs[:, 0]), transform(pairs[:, 1]))
                    loss = F.binary_cross_entropy_with_logits(logits.float(), (labels[mine] % 2).float().to(setup.device))
                else:
                    loss = F.cross_entropy(trained(transform(batch[mine])).float(), labels[mine].to(setup.device))
            loss.backward()
            optimizer.step()
            if setup.is_cuda:
                torch.cuda.synchronize()
            context.barrier()
            if step >= args.warmup:
                timings.append(time.perf_counter() - started)
                cpu += time.process_time() - cpu_started
        (cpu_total,) = context.sum([cpu])
        if context.is_main:
            median = statistics.median(timings)
            print(json.dumps({
                "task": args.task, "size": args.size, "global_batch": args.batch, "world_size": context.world_size,
                "threads_per_rank": torch.get_num_threads(), "device": str(setup.device),
                "images_per_second": round(args.batch * images_per_sample / median, 2),
                "cpu_seconds_per_image": round(cpu_total / (args.steps * args.batch * images_per_sample), 4),
                "median_step_seconds": round(median, 4)}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--task", choices=("counting", "siamese"), default="counting")
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16, help="global batch (split over the ranks)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    if args.nproc > 1 and int(os.environ.get("WORLD_SIZE", "1")) == 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.nproc}",
                   __file__, f"--task={args.task}", f"--size={args.size}", f"--batch={args.batch}",
                   f"--steps={args.steps}", f"--warmup={args.warmup}", f"--device={args.device}"]
        raise SystemExit(subprocess.run(command, check=False).returncode)
    run_rank(args)


if __name__ == "__main__":
    main()
