"""A TrainJob against the other ways to train one baseline, side by side in one run.

Generated bins (vsbench's ABID generator, resized to --size), the counting baseline, the same
global batch everywhere; taking turns over --rounds, medians reported:

* ``pod``: `vsbench abid train` in one process (all cores);
* ``torchrun``: `--nproc 2` on this machine;
* ``trainjob-1`` / ``trainjob-2``: a Trainer v2 TrainJob through the Kubeflow SDK on 1 or 2 nodes
  (--engine podman: one container of the CPU image per node; --engine process: torchrun processes).

Per run: wall time of the command, the TrainJob's startup (submission to every node running), the
median epoch time rank 0 measured, and the ratio of wall times to ``pod``. On a 2-core machine two
nodes cannot beat one process using both cores: the figures say what a TrainJob costs around the
training (containers, rendezvous, logs), not what a cluster gains.

    python bench/trainjob.py                       # 200 bins, 3 epochs, podman, 1 round
    python bench/trainjob.py --bins 400 --rounds 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vsbench.abid.prepare import prepare_abid
from vsbench.abid.resize import resize_abid
from vsbench.abid.synth import generate_abid
from vsbench.abid.trainer import LAST, load_state


def make_data(root: Path, bins: int, size: int) -> tuple[Path, Path]:
    generate_abid(root / "raw", bins, seed=3, progress=False)
    prepare_abid(root / "raw", root / "tasks", seed=1, val_fraction=0.25, progress=False)
    resize_abid(root / "raw", root / "images", size=size, workers=1, progress=False)
    return root / "tasks", root / "images"


def run(kind: str, tasks: Path, images: Path, out: Path, overrides: dict, engine: str) -> dict[str, float]:
    command = [sys.executable, "-m", "vsbench", "abid", "train", "counting", "--tasks", str(tasks), "--images",
               str(images), "--out", str(out), "--device", "cpu", "--overrides", json.dumps(overrides)]
    if kind == "torchrun":
        command += ["--nproc", "2"]
    elif kind.startswith("trainjob"):
        command += ["--backend", "trainjob", "--engine", engine, "--nodes", kind.split("-")[1]]
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RANK", "WORLD_SIZE")}
    env["VSBENCH_DEFAULT_STORE"] = "off"
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{kind} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    state = load_state(out / "checkpoints" / LAST)
    manifest = json.loads((out / "train_counting.json").read_text())
    return {"wall_s": wall, "epoch_s": statistics.median(h["epoch_seconds"] for h in state["history"]),
            "startup_s": float(manifest.get("trainjob_startup_seconds", 0.0))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bins", type=int, default=200)
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16, help="the global batch")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--engine", default="podman", choices=("podman", "process"))
    parser.add_argument("--kinds", default="pod,torchrun,trainjob-1,trainjob-2")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    overrides = {"epochs": args.epochs, "batch_size": args.batch, "image_size": args.size, "workers": 0}
    kinds = args.kinds.split(",")
    results: dict[str, list[dict[str, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="vsbench-trainjob-bench-") as folder:
        root = Path(folder)
        tasks, images = make_data(root / "data", args.bins, args.size)
        rows = len(json.loads((tasks / "counting_train.json").read_text()))
        print(f"{rows} training bins at {args.size} px, {args.epochs} epochs, global batch {args.batch}, "
              f"engine {args.engine}, {args.rounds} round(s), {os.cpu_count()} cores")
        for round_ in range(args.rounds):
            for kind in kinds:
                results[kind].append(run(kind, tasks, images, root / f"{kind}-{round_}", overrides, args.engine))
    medians = {kind: {key: statistics.median(r[key] for r in runs) for key in runs[0]} for kind, runs in results.items()}
    base = medians.get("pod", next(iter(medians.values())))["wall_s"]
    print(f"{'run':<12} {'wall s':>8} {'startup s':>10} {'epoch s':>8} {'wall / pod':>11}")
    for kind, figures in medians.items():
        print(f"{kind:<12} {figures['wall_s']:>8.1f} {figures['startup_s']:>10.1f} {figures['epoch_s']:>8.2f} "
              f"{figures['wall_s'] / base:>10.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"settings": vars(args) | {"json": str(args.json)}, "medians": medians,
                                         "runs": results}, indent=2))


if __name__ == "__main__":
    main()
